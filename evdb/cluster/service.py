"""One node's part in the cluster: gossip, elections, leading, following, replication.

Roles (the ``state`` of KurrentDB's gossip): ``Unknown`` (no leader known), ``PreLeader`` (won an
election, writing its epoch), ``Leader``, ``ResigningLeader``, ``CatchingUp`` then ``Follower`` (a
voting member copying the leader's log), ``PreReadOnlyReplica`` then ``ReadOnlyReplica``.

This module decides; it does no I/O of its own. Everything it needs from outside comes through
narrow ports, so the deterministic simulator (evdb/cluster/sim.py) runs this same code under a seed:

- ``host`` (:class:`ClusterHost`): the node's identity, options, logger and database, and the two
  things the node does for the cluster (take office, truncate and reopen its database);
- ``transport`` (evdb/cluster/transport.py): gossip, votes, forwarded writes, replication streams;
- ``monotonic``: the clock its timeouts are measured on; ``rng``: the random source of election waits;
- ``run_blocking``: how a blocking database call is run (a thread in a node; inline in the simulator).

Node-to-node traffic (votes, the replication stream, forwarded writes) goes to a separate listener,
the replication endpoint; with TLS it accepts only clients presenting a certificate that chains to
the trusted roots and whose common name matches CertificateReservedNodeCommonName. Gossip uses the
public HTTP API (``GET /gossip``), as KurrentDB's does.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import os
import random
import struct
import threading
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from evdb.cluster.advertising import CLIENT_HOST, CLIENT_PORT, cluster_member
from evdb.cluster.catchup import common_point, shared_end
from evdb.cluster.election import LogStanding, VoteRequest
from evdb.cluster.elector import Elector, Follow, LeaderLost, Member, Own, Stand, StepDown
from evdb.cluster.following import (
    MAX_BATCH,
    RECORDS,
    ChunkTransfer,
    FollowerStream,
    catch_up_verdict,
    records_batch,
    subscription,
)
from evdb.cluster.forwarding import RemoteWriter, decode_write, encode_error, encode_result
from evdb.cluster.leadership import Leadership, Progress, unacked_window
from evdb.cluster.lease import LeaseGrantor, LeaseHolder, SecurityWatch
from evdb.cluster.replica import ChunkLogReplication, ReplicationLog
from evdb.cluster.transport import Channel, HttpTransport, Message, PeerError, Transport
from evdb.errors import CorruptedFile, DatabaseReopening, EvdbError, InvalidOption, NotLeader
from evdb.storage.chunk import Chunk
from evdb.streams import AppendResult

if TYPE_CHECKING:
    import logging

    from evdb.database import Database

__all__ = [
    "ChunkFileReceiver",
    "ClusterHost",
    "ClusterService",
    "chunk_file_header",
    "chunk_file_pieces",
    "parse_gossip_seeds",
    "resolve_common_point",
    "shared_end",
]

_T = TypeVar("_T")

#: how many record checks one verification message carries (see _verify_common_point)
_CHECKS_PER_MESSAGE = 2048

_POSITION = struct.Struct("<q")
#: a records message: ``int64 position | int64 the leader's commit position | framed records``
_RECORDS = RECORDS
#: a commit message: ``int64 the leader's commit position`` alone: the only binary message of exactly 8
#: bytes from a leader (a records message has a 16-byte head, a chunk piece an 8-byte offset and at least
#: one byte of the file), which is how a follower's reader tells it apart
_COMMIT = struct.Struct("<q")
#: the replication stream's wire format: 4 since followers and replicas ask for sign-in leases
#: (``{"lease": n, "held": m}``, answered ``{"grant": n, "security": S, "for": F}``:
#: evdb/cluster/lease.py; a leader of 3 would grant none, so no member of it could sign anyone in);
#: 3 since a leader sends each new commit position to every follower as an 8-byte binary message
#: written before it answers the write's client, and a follower acknowledges each records write with
#: its durable end in 8 bytes the same way (2: records carry the commit position, ``<qq``
#: position|commit then frames, and a leader ships records before its own sync). A leader and a
#: follower of different protocols refuse each other, each saying why, instead of misreading bytes.
REPLICATION_PROTOCOL = 4
_MAX_SEND = 1 << 20
_MAX_BATCH = MAX_BATCH  # bytes of records messages a follower writes under one sync
_CHUNK_PIECE = 1 << 20  # bytes of a chunk file per WebSocket message
# Read your writes on followers (the rule): once the leader has answered a write, every follower that
# held a durable copy of it when the leader answered shows it to any read that reaches it after the
# leader's commit message does. The leader writes each new commit position to every follower's stream
# in the loop step that releases the answers, ahead of them (ClusterService._post_commit), and a
# follower applies a commit message the moment its stream's reader takes it, never behind a records
# write in progress (_Inbox.fill). A follower still syncing the write when the leader answered shows it
# as its sync ends (it keeps the leader's newest commit position). On one host the leader's message is
# in the follower's socket before the client has its answer. KurrentDB's followers learn the
# replication checkpoint from the leader's ReplicatedTo messages, sent with no order against the
# client's answer, and index records only then: they promise no more than eventual visibility.
#: records messages a leader has out to a follower unacknowledged: one being synced there, one waiting
#: behind it. What the leader writes meanwhile goes in the next message, when an acknowledgement comes
#: (the follower would have written it under one sync anyway: one message instead of one per group).
SEND_WINDOW = 2


# -- whole chunk files (a follower behind by a completed chunk) --------------------------------------
# The leader sends {"chunkFile": {...}} then the file's exact bytes in binary messages of
# ``int64 offset in the file | bytes``; the follower writes them to a temporary file, and installs it
# once all ``size`` bytes are there and verified (ChunkLogReplication.install_replicated_chunk).


def chunk_file_header(chunk: Chunk) -> dict:
    """The JSON message announcing a completed chunk file to a follower."""
    assert chunk.footer is not None
    return {
        "chunkFile": {
            "fileName": chunk.file_name,
            "startNumber": chunk.start_number,
            "endNumber": chunk.end_number,
            "size": chunk.file_size,
            "checksum": chunk.footer.checksum.hex(),  # xxh3-128 of the file before its last 16 bytes
            "endPosition": chunk.end_position,
        }
    }


def chunk_file_pieces(chunk: Chunk, piece_size: int = _CHUNK_PIECE) -> Iterator[bytes]:
    """The binary messages carrying a completed chunk file's exact bytes."""
    size = chunk.file_size
    view = memoryview(chunk.buffer)
    for offset in range(0, size, piece_size):
        yield _POSITION.pack(offset) + bytes(view[offset : min(offset + piece_size, size)])


class ChunkFileReceiver:
    """The follower's side of one chunk file transfer: the pieces go to a temporary file in the
    database folder (or memory, for an in-memory database) until all have come."""

    def __init__(self, db: Database, header: dict, replica: ReplicationLog | None = None) -> None:
        self.transfer = transfer = ChunkTransfer(header, db.config.chunk_size)
        self.file_name, self.size, self.checksum = transfer.file_name, transfer.size, transfer.checksum
        self.start_number, self.end_number = transfer.start_number, transfer.end_number
        self.db = db
        self.replica: ReplicationLog = replica if replica is not None else ChunkLogReplication(db)
        self.path: str | None = None
        self._file = None
        self._memory = bytearray()
        if db.config.db_dir is not None:
            self.path = os.path.join(db.config.db_dir, f"{uuid.uuid4().hex}.replica.tmp")
            self._file = open(self.path, "xb")  # noqa: SIM115 - closed by install/abort

    @property
    def received(self) -> int:
        return self.transfer.received

    @property
    def done(self) -> bool:
        return self.transfer.done

    def add(self, message: bytes) -> None:
        (offset,) = _POSITION.unpack_from(message)
        data = memoryview(message)[_POSITION.size :]
        self.transfer.piece(offset, len(data))
        if self._file is not None:
            self._file.write(data)
        else:
            self._memory += data

    def install(self) -> int:
        """Make the file durable, then verify and install it; returns the new committed end."""
        self.transfer.must_be_done()
        source: str | bytes
        if self._file is not None:
            file, self._file = self._file, None
            try:
                file.flush()
                os.fsync(file.fileno())
            finally:
                file.close()
            assert self.path is not None
            source = self.path
        else:
            source = bytes(self._memory)
        return self.replica.install_replicated_chunk(
            source, start_number=self.start_number, end_number=self.end_number, checksum=self.checksum
        )

    def abort(self) -> None:
        file, self._file = self._file, None
        if file is not None:
            with contextlib.suppress(OSError):
                file.close()
        if self.path is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)


def parse_gossip_seeds(text: str) -> list[tuple[str, int]]:
    """``host:port,host:port`` (IPv6 as ``[::1]:2113``) → a list of endpoints; clear errors otherwise."""
    seeds = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        host, sep, port = item.rpartition(":")
        host = host.strip("[]")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise InvalidOption(f"GossipSeed: {item!r} is not host:port (for example 127.0.0.1:2113).")
        seeds.append((host, int(port)))
    return seeds


@dataclass
class Peer:
    """What gossip last said about another member (its own entry of its /gossip answer)."""

    seed: tuple[str, int]
    info: dict = field(default_factory=dict)
    last_seen: float = -1.0  # monotonic seconds; -1 = never
    last_error: str | None = None  # why the last call to it failed (names the peer; shown in /cluster/info)

    def alive(self, now: float, timeout: float) -> bool:
        return self.last_seen >= 0 and now - self.last_seen <= timeout

    @property
    def replication_endpoint(self) -> tuple[str, int] | None:
        port = self.info.get("internalSecureTcpPort") or self.info.get("internalTcpPort")
        host = self.info.get("internalTcpIp") or self.seed[0]
        return (host, int(port)) if port else None


class ClusterHost(Protocol):
    """What the cluster needs of its node (evdb.node.Node is one; the simulator has its own)."""

    logger: logging.Logger
    instance_id: uuid.UUID
    host: str
    port: int
    name: str
    clock: Any

    @property
    def options(self) -> Any: ...

    @property
    def tls(self) -> Any: ...

    @property
    def advertised_host(self) -> str: ...

    @property
    def advertised_port(self) -> int: ...

    @property
    def client_endpoint(self) -> tuple[str, int]: ...

    @property
    def db(self) -> Database | None: ...

    def replication_log(self) -> ReplicationLog:
        """The replication side of the database open now (evdb/cluster/replica.py)."""

    async def on_became_leader(self) -> None: ...

    async def truncate_and_reopen(self, position: int) -> None: ...


async def _to_thread(fn: Callable[..., _T], *args: Any) -> _T:
    return await asyncio.to_thread(fn, *args)


def resolve_common_point(leader: Database, follower: Database) -> tuple[str, int]:
    """The whole handshake between two databases in one process (tests and tools; the cluster runs the
    same steps over its transport): ``("ok", end)`` when the follower's log is a prefix of the
    leader's, ``("truncate", position)`` when it must be cut there first, ``("refuse", 0)``."""
    hello = [
        {k: e.get(k, -1) for k in ("epochId", "position", "epochNumber", "previousEpochPosition")}
        for e in follower.epochs(64)
    ]
    verdict, point, floor = ClusterService._common_point(leader, hello, follower.committed_position)
    if verdict == "refuse":
        return "refuse", 0
    before = point
    sender, receiver = ChunkLogReplication(leader), ChunkLogReplication(follower)
    chunk_ends = dict(sender.completed_chunk_ends(floor, point))
    while True:
        checks = sender.record_checks(before, floor, _CHECKS_PER_MESSAGE)
        page = {"point": point, "floor": floor, "records": checks}
        found = shared_end(page, receiver.has_record, receiver.chunk_end_after, chunk_ends)
        if found is not None:
            end = follower.committed_position
            return ("truncate", found) if found < end else ("ok", end)
        if len(checks) < _CHECKS_PER_MESSAGE:
            return "refuse", 0
        before = checks[-1][0]


class _Inbox:
    """The messages of a replication stream that arrived and are not yet handled, in order; None once
    the stream is over. Filled by its own task (:meth:`fill`) so that what arrives while the follower
    writes is there to be taken in one go (:func:`_records_batch`)."""

    def __init__(
        self,
        on_commit: Callable[[int], None] | None = None,
        on_grant: Callable[[dict], None] | None = None,
    ) -> None:
        self.messages: collections.deque[Message | None] = collections.deque()
        self.error: Exception | None = None  # why the stream broke, when it did not just end
        self._arrived = asyncio.Event()
        #: takes each commit message as it arrives (never queued behind a records write in progress)
        self._on_commit = on_commit
        #: takes each lease grant as it arrives (evdb/cluster/lease.py)
        self._on_grant = on_grant

    async def fill(self, channel: Channel) -> None:
        on_commit = self._on_commit
        try:
            while (message := await channel.receive()) is not None:
                binary = message.binary
                if on_commit is not None and binary is not None and len(binary) == _COMMIT.size:
                    on_commit(_COMMIT.unpack(binary)[0])
                    continue
                text = message.text
                if self._on_grant is not None and isinstance(text, dict) and "grant" in text:
                    self._on_grant(text)
                    continue
                self.messages.append(message)
                self._arrived.set()
        except Exception as exc:  # the stream broke: handled as its end, and raised by the follower
            self.error = exc
        finally:
            self.messages.append(None)
            self._arrived.set()

    async def get(self) -> Message | None:
        while not self.messages:
            self._arrived.clear()
            await self._arrived.wait()
        return self.messages.popleft()


def _records_batch(first: bytes, inbox: _Inbox) -> tuple[list[tuple[int, bytes]], int]:
    """The records messages to write under one sync: ``first`` and those queued right behind it
    (evdb/cluster/following.py ``records_batch``). (Commit messages never queue: the inbox's reader
    takes them as they arrive.)"""
    return records_batch(first, inbox.messages)


@dataclass
class _FollowerLink(Progress):
    """A subscribed follower: its progress (the leadership machine's) and its stream."""

    #: set at each acknowledgement: wakes a sender whose SEND_WINDOW is full
    ack_arrived: asyncio.Event = field(default_factory=asyncio.Event)
    #: the stream, once the follower was told it is subscribed (commit messages go to it from then on)
    channel: Channel | None = None


class ClusterService:
    def __init__(
        self,
        node: ClusterHost,
        *,
        transport: Transport | None = None,
        monotonic: Callable[[], float] | None = None,
        rng: random.Random | None = None,
        run_blocking: Callable[..., Awaitable[Any]] = _to_thread,
    ) -> None:
        o = node.options
        self.node = node
        self.logger = node.logger
        self._now = monotonic if monotonic is not None else node.clock.monotonic  # the host's clock
        self.rng = rng if rng is not None else random.Random()
        self._blocking = run_blocking
        self.cluster_size = o.cluster_size
        self.read_only = o.read_only_replica
        self.priority = o.node_priority
        self.seeds = parse_gossip_seeds(o.gossip_seed)
        if self.cluster_size > 1 and not self.seeds:
            raise InvalidOption("ClusterSize is above 1 but GossipSeed names no other node.")
        if self.read_only and not self.seeds:
            raise InvalidOption("A read-only replica needs GossipSeed to find the cluster's leader.")
        self.gossip_interval = o.gossip_interval_ms / 1000
        self.gossip_timeout = o.gossip_timeout_ms / 1000
        self.election_timeout = o.leader_election_timeout_ms / 1000
        self.reset_interval = float(o.connection_reset_interval)
        self.state = "PreReadOnlyReplica" if self.read_only else "Unknown"
        self.peers = {seed: Peer(seed) for seed in self.seeds}
        self.leader_id: str | None = None
        self.voted_for: str | None = None
        self.election_count = 0
        self.last_election_seconds: float | None = None
        #: the election decisions (pure: messages and time in, what to do out)
        self.elector = Elector(
            cluster_size=self.cluster_size,
            read_only=self.read_only,
            priority=self.priority,
            gossip_timeout=self.gossip_timeout,
            election_timeout=self.election_timeout,
            rng=self.rng,
            now=self._now(),
        )
        #: sign-in leases (evdb/cluster/lease.py): those this node grants as leader, the one it holds
        #: from its leader, and the gate's security writes (found by the database's visibility watch)
        self.leases = LeaseGrantor(self.gossip_timeout, self.cluster_size)
        self.lease = LeaseHolder(self.gossip_timeout)
        self._security_watch = SecurityWatch()
        self._lease_timer: asyncio.TimerHandle | None = None
        #: the leader's decisions (pure): followers' progress, the write gate, the commit position,
        #: shipping before the sync (evdb/cluster/leadership.py)
        self.leadership = Leadership(self.cluster_size, self.leases)
        self._readable_heard = -1  # the readable position the commit listener last passed on
        self._notify_pending = False  # a _notify_commit is scheduled and has not started
        #: held around the leadership machine's gate (the writer thread and the event loop use it)
        self._gate_lock = threading.Lock()
        self._committed = asyncio.Event()
        self._follow_task: asyncio.Task | None = None
        self._tasks: list[asyncio.Task] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._election_lock = asyncio.Lock()
        self.replication_host = o.replication_ip or node.host
        self.replication_port = o.replication_port
        #: what other nodes are told (ReplicationHostAdvertiseAs, ReplicationTcpPortAdvertiseAs)
        self._replication_host_as = o.replication_host_advertise_as
        self._replication_port_as = o.replication_tcp_port_advertise_as
        #: the cluster-wide commit position as this node knows it (a leader: what a majority holds
        #: since its epoch; a follower: what its leader said); reads never go past it
        self.commit_position = -1
        if transport is None:
            from evdb.cluster.peers import PeerClient

            client = getattr(node, "peer_client", None) or PeerClient(
                node, logger=self.logger, clock=node.clock
            )
            transport = HttpTransport(
                host=self.replication_host,
                port=self.replication_port,
                settings=node,
                clock=node.clock,
                logger=self.logger,
                client=client,
            )
        self.transport: Transport = transport
        self._receiver: ChunkFileReceiver | None = None  # a chunk file being received from the leader
        self._reopening: asyncio.Future | None = None  # a truncate-and-reopen under way

    # -- facts -----------------------------------------------------------------------------------------
    @property
    def _followers(self) -> dict[str, Any]:
        """The subscribed followers' links by instance id (the leadership machine's)."""
        return self.leadership.followers

    @property
    def _own_epoch_position(self) -> int:
        return self.leadership.own_epoch_position

    @_own_epoch_position.setter
    def _own_epoch_position(self, position: int) -> None:
        self.leadership.own_epoch_position = position

    @property
    def _leading(self) -> bool:
        return self.state in ("Leader", "ResigningLeader")

    @property
    def db(self) -> Database:
        db = self.node.db
        if db is None:  # between a truncation's close and reopen: callers see a moment's unavailability
            raise DatabaseReopening()
        return db

    @property
    def replica(self) -> ReplicationLog:
        """The replication side of the node's log now (evdb/cluster/replica.py)."""
        return self.node.replication_log()

    @property
    def listener_tls(self) -> Any:
        """The node-to-node listener's swappable ssl context (a reload swaps it: evdb/tls/reload.py)."""
        return getattr(self.transport, "listener_tls", None)

    @property
    def is_leader(self) -> bool:
        return self.state == "Leader"

    def standing(self) -> LogStanding:
        epochs = self.db.epochs(1)
        return LogStanding(epochs[0]["epochNumber"] if epochs else -1, self.db.committed_position)

    @property
    def campaigning(self) -> bool:
        """Whether this node is standing for election now (the simulator kills nodes mid-election)."""
        return self._election_lock.locked()

    @property
    def term(self) -> int:
        return self.db.log.checkpoints.proposal.value

    def leader_peer(self) -> Peer | None:
        if self.leader_id is None:  # no leader known (else a never-seen peer, with no info, would match)
            return None
        for peer in self.peers.values():
            if peer.info.get("instanceId") == self.leader_id:
                return peer
        return None

    def leader_http_endpoint(self) -> tuple[str, int] | None:
        if self.is_leader:
            return (self.node.advertised_host, self.node.advertised_port)
        peer = self.leader_peer()
        if peer is None:
            return None
        return (
            peer.info.get("httpEndPointIp", peer.seed[0]),
            int(peer.info.get("httpEndPointPort", peer.seed[1])),
        )

    def leader_client_endpoint(self) -> tuple[str, int] | None:
        """Where clients are sent to reach the leader (not-leader redirects): its client endpoint
        (AdvertiseHostToClientAs, evdb/cluster/advertising.py), as KurrentDB."""
        if self.is_leader:
            return self.node.client_endpoint
        endpoint = self.leader_http_endpoint()
        peer = self.leader_peer()
        if endpoint is None or peer is None:
            return endpoint
        return (
            str(peer.info.get(CLIENT_HOST) or endpoint[0]),
            int(peer.info.get(CLIENT_PORT) or endpoint[1]),
        )

    def own_member(self) -> dict:
        from evdb.version import VERSION

        db = self.db
        chk = db.log.checkpoints
        epochs = db.epochs(1)
        secure = self.node.tls is not None
        return {
            "instanceId": str(self.node.instance_id),
            "timeStamp": self.node.clock.time(),
            "state": self.state,
            "isAlive": True,
            "internalTcpIp": self.replication_host_advertised,
            "internalTcpPort": 0 if secure else self.replication_port_advertised,
            "internalSecureTcpPort": self.replication_port_advertised if secure else 0,
            "externalTcpIp": self.node.advertised_host,
            "externalTcpPort": 0,
            "externalSecureTcpPort": 0,
            "httpEndPointIp": self.node.advertised_host,
            "httpEndPointPort": self.node.advertised_port,
            CLIENT_HOST: self.node.client_endpoint[0],
            CLIENT_PORT: self.node.client_endpoint[1],
            "lastCommitPosition": db.committed_position,
            "writerCheckpoint": db.committed_position,
            "chaserCheckpoint": chk.chaser.value,
            "epochPosition": epochs[0]["position"] if epochs else -1,
            "epochNumber": epochs[0]["epochNumber"] if epochs else -1,
            "epochId": epochs[0]["epochId"] if epochs else "00000000-0000-0000-0000-000000000000",
            "nodePriority": self.priority,
            "proposalNumber": self.term,
            "isReadOnlyReplica": self.read_only,
            "esVersion": VERSION,
        }

    @property
    def replication_host_advertised(self) -> str:
        return str(self._replication_host_as or self.replication_host)

    @property
    def replication_port_advertised(self) -> int:
        return int(self._replication_port_as or self.replication_port)

    def members(self) -> list[dict]:
        """This node's view of the cluster, in KurrentDB's gossip member shape."""
        now = self._now()
        out = [self.own_member()]
        for peer in self.peers.values():
            if peer.info:
                info = dict(peer.info)
                info["isAlive"] = peer.alive(now, self.gossip_timeout)
                if not info["isAlive"]:
                    info["state"] = "Unknown" if info.get("state") != "Shutdown" else "Shutdown"
                out.append(info)
            else:
                host, port = peer.seed
                out.append(
                    {
                        "instanceId": "00000000-0000-0000-0000-000000000000",
                        "state": "Unknown",
                        "isAlive": False,
                        "httpEndPointIp": host,
                        "httpEndPointPort": port,
                    }
                )
        return out

    # -- lifecycle -------------------------------------------------------------------------------------
    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._notify_pending = False
        self.leadership.closed = False
        self.replication_port = await self.transport.start(self)
        self._attach()
        self.db.remote_writer = RemoteWriter(self._loop, None, self._wait_for_position)
        if self.cluster_size == 1 and not self.read_only:
            await self._become_leader(self.term + 1)
        self._tasks.append(asyncio.create_task(self._gossip_loop(), name=f"{self.node.name}-gossip"))

    def _attach(self, db: Database | None = None) -> None:
        """Hook this service into ``db`` (the node's database, or one being reopened before the node
        publishes it: no request may see it without the write permit, forwarding and read limit)."""
        db = db if db is not None else self.db
        db.add_commit_listener(self._on_commit)
        # only a leader under its own epoch writes a client's records (never a node taking office),
        # and not after a failed sync of records it shipped (see _before_sync)
        db.write_permit = lambda: self.leadership.may_write(self._leading)
        if self.cluster_size > 1:
            db.replication_gate = self._gate_answers
            db.add_visibility_watch(self._security_watch)  # which gated groups wrote a security stream
            db.before_sync = functools.partial(self._before_sync, db)
            # reads stop at what the cluster committed (never a tail a new leader may cut)
            self.commit_position = min(db.commit_limit_at_open(), db.committed_position)
            db.set_read_limit(max(self.commit_position, 0))
        else:  # a single node: all it has made durable is committed (kept, should it join a cluster)
            db.record_commit_position(db.committed_position)

    async def stop(self) -> None:
        for task in [*self._tasks, *([self._follow_task] if self._follow_task else [])]:
            task.cancel()
        for task in [*self._tasks, *([self._follow_task] if self._follow_task else [])]:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        self._follow_task = None
        with self._gate_lock:
            self.leadership.closed = True
        self._fail_gate(NotLeader())
        if self.node.db is not None:
            self.db.remove_commit_listener(self._on_commit)
        await self.transport.stop()

    async def detach_database(self) -> None:
        """Before the node closes its database (truncation): stop replicating into it."""
        self.db.remove_commit_listener(self._on_commit)

    def attach_database(self, db: Database) -> None:
        """A reopened database, before the node publishes it."""
        self._attach(db)
        db.remote_writer = RemoteWriter(self._loop, self._send_to_leader, self._wait_for_position)  # type: ignore[arg-type]

    def _on_commit(self, readable: int) -> None:
        """The database's commit listener (writer thread, or the loop's own for set_read_limit). A
        follower's readers move only with its leader's commit position (on the loop), so its writer's
        commits, which leave what readers see unchanged, wake nothing."""
        if readable == self._readable_heard and self.state not in ("Leader", "ResigningLeader"):
            return
        self._readable_heard = readable
        self._schedule_notify()

    def _schedule_notify(self) -> None:
        """(any thread) Have :meth:`_notify_commit` run on the event loop. One run serves every call
        made before it starts (it reads the newest state): a commit group's gate and its commit listener
        cost the loop one wake-up, and a commit on the loop's own thread (set_read_limit) none."""
        loop = self._loop
        if self._notify_pending or loop is None or loop.is_closed():
            return
        self._notify_pending = True
        try:
            if asyncio._get_running_loop() is loop:
                loop.call_soon(self._notify_commit)
            else:
                loop.call_soon_threadsafe(self._notify_commit)
        except RuntimeError:  # closed under us: nothing is left to notify
            self._notify_pending = False

    def _before_sync(self, db: Database, end: int) -> None:
        """The database's before_sync hook (writer thread): a leader's records up to ``end`` are written
        and about to be synced; the senders ship them now, in parallel with the leader's fdatasync. The
        leader still counts itself only once they are durable (majority_position), so a write is
        acknowledged only when a majority holds durable copies. ``end`` -1: that sync failed and the
        records are being rolled back, so followers may hold records this log no longer has: this node
        writes nothing more in this office (write_permit) and steps down; the election that follows
        keeps whatever a majority holds (a voter refuses a candidate whose log is behind its own)."""
        loop = self._loop
        if end < 0:
            self.leadership.shipped_sync_failed()
            if loop is not None and not loop.is_closed():
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(self._after_failed_sync)
            return
        if not self.leadership.written(db, end, self._leading):
            return
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._wake_senders)

    def _after_failed_sync(self) -> None:
        if self.state in ("Leader", "ResigningLeader"):
            self.logger.error(
                "A sync of records already sent to followers failed in %s: this node steps down and "
                "writes nothing more until it is elected again",
                getattr(self.db.config, "db_dir", None) or "the in-memory database",
            )
            task = asyncio.ensure_future(self._step_down())
            self._tasks.append(task)

    def _wake_senders(self) -> None:
        self._committed.set()
        self._committed = asyncio.Event()

    def _notify_commit(self) -> None:
        self._notify_pending = False  # first: a commit from now on schedules another run
        db = self.node.db
        if db is None or not self.leadership.senders_wait_for(db, db.committed_position, self._leading):
            self._wake_senders()
        # else a leader's sync ended of records its senders were woken for before it (_before_sync):
        # waking them again would find nothing new to ship
        if self.cluster_size == 1 and self.node.db is not None:
            self.node.db.record_commit_position(self.node.db.committed_position)
        self._release_gate()

    async def _wait_for_commit(self, timeout: float) -> None:
        event = self._committed
        # asyncio.timeout, not wait_for: on Python 3.11 wait_for can lose a cancellation that arrives
        # as the awaited thing completes, and a cancelled task must stop
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await event.wait()

    async def _wait_for_position(self, position: int, timeout: float = 10.0) -> None:
        """Wait until the record at ``position`` is in this node's log and its readers see it (the
        cluster committed it), so a client reads its own write on the node it wrote through."""
        deadline = self._now() + timeout
        while self.db.readable_position <= position:
            left = deadline - self._now()
            if left <= 0:
                raise EvdbError(
                    f"The write is on the leader but this node has not received position {position} yet."
                )
            await self._wait_for_commit(min(left, 0.5))

    def _advance_commit(self, position: int) -> None:
        """The cluster committed everything before ``position``: reads may now see it."""
        if position > self.commit_position:
            self.commit_position = position
            db = self.node.db
            if db is not None and self.cluster_size > 1:  # a single node's reads see all it has
                db.set_read_limit(position)
            if self.state in ("Leader", "ResigningLeader"):
                self._post_commit(position)

    def _post_commit(self, position: int) -> None:
        """(leader, event loop) Write the new commit position to every follower's stream now, in this
        loop step: before the answers it releases reach their clients (read your writes on followers:
        see the rule at the top), and with no sender woken for it: one 8-byte message per follower per
        commit position (records messages carry it too, for the follower's own bookkeeping)."""
        if position < 0:
            return
        message = _COMMIT.pack(position)
        for link in self._followers.values():
            channel = link.channel
            if channel is None or not self.leadership.commit_due(link, position) or channel.closed:
                continue
            try:
                channel.post_bytes(message)
            except PeerError:
                continue  # the stream is closing: its session ends and the follower subscribes again
            link.commit_sent = position

    def _take_commit(self, stream: FollowerStream, commit: int) -> None:
        """(follower, event loop) The leader's commit position ``commit`` arrived: reads here see up to
        it, as far as this log holds it durably; the rest when this node's write of it ends."""
        db = self.node.db
        readable = stream.commit(commit, db.committed_position if db is not None else -1)
        if db is not None:
            self._advance_commit(readable)

    # -- gossip ----------------------------------------------------------------------------------------
    async def _gossip_loop(self) -> None:
        while True:
            try:
                await self._gossip_round()
                await self._evaluate()
            except asyncio.CancelledError:
                raise
            except Exception:
                self.logger.exception("Cluster gossip round failed")
            await asyncio.sleep(self.gossip_interval)

    async def _gossip_round(self) -> None:
        if not self.peers:
            return
        await asyncio.gather(*(self._gossip_with(peer) for peer in self.peers.values()))

    async def _gossip_with(self, peer: Peer) -> None:
        try:
            body = await self.transport.gossip(peer.seed, max(self.gossip_interval, 0.5))
        except PeerError as exc:
            peer.last_error = str(exc)
            if exc.certificate:  # logged by the peer client, naming the peer (evdb/cluster/peers.py)
                peer.last_seen = min(peer.last_seen, self._now() - self.gossip_timeout - 1)
            elif peer.alive(self._now(), self.gossip_timeout):
                self.logger.warning("Gossip with %s:%d failed: %s", *peer.seed, exc)
            return
        if not isinstance(body, dict):
            return
        own = next(
            (
                m
                for m in body.get("members", [])
                if isinstance(m, dict)
                and (m.get("httpEndPointIp"), m.get("httpEndPointPort"))
                == (body.get("serverIp"), body.get("serverPort"))
            ),
            None,
        )
        if own is None or own.get("instanceId") == str(self.node.instance_id):
            return
        own = cluster_member(own)  # the addresses nodes use, not those clients are told
        if not peer.alive(self._now(), self.gossip_timeout):
            self.logger.info("Member %s:%d is alive (%s)", *peer.seed, own.get("state"))
        peer.info = own
        peer.last_seen = self._now()
        peer.last_error = None

    def _alive_peers(self) -> list[Peer]:
        now = self._now()
        return [p for p in self.peers.values() if p.alive(now, self.gossip_timeout)]

    def _members(self) -> list[Member]:
        now = self._now()
        return [
            Member.from_gossip(
                f"{p.seed[0]}:{p.seed[1]}",
                p.alive(now, self.gossip_timeout),
                p.info,
                can_vote=p.replication_endpoint is not None,
            )
            for p in self.peers.values()
            if p.info
        ]

    def _own(self) -> Own:
        return Own(
            str(self.node.instance_id),
            self.state,
            self.term,
            self.voted_for,
            self.standing(),
            self.leader_id,
            self._follow_task is not None and not self._follow_task.done(),
        )

    async def _evaluate(self) -> None:
        """Do what the election machine (evdb/cluster/elector.py) decides after a gossip round."""
        decision = self.elector.evaluate(self._now(), self._own(), self._members())
        if isinstance(decision, StepDown):
            self.logger.warning("%s", decision.reason)
            await self._step_down()
        elif isinstance(decision, Follow):
            peer = next(
                p for p in self.peers.values() if p.info.get("instanceId") == decision.leader.instance_id
            )
            await self._follow(peer)
        elif isinstance(decision, LeaderLost):
            self.logger.warning("Lost the leader %s; no leader is known", decision.leader_id)
            await self._stop_following()
        elif isinstance(decision, Stand):
            await self._run_election()

    # -- elections (the decisions: evdb/cluster/elector.py) ---------------------------------------------
    def _voters(self) -> list[Peer]:
        return [
            p for p in self._alive_peers() if not p.info.get("isReadOnlyReplica") and p.replication_endpoint
        ]

    async def _pre_vote(self) -> bool:
        """Raft's pre-vote: whether a majority would grant this node its vote in the next term. Nothing
        is recorded on either side, so a node that cannot win (cut off, or refused by members that hear
        a live leader) never raises its term, and no leader ever sees a term it would step down for."""
        request = self.elector.request(self._own(), self._members(), pre_vote=True)
        answers = await asyncio.gather(*(self._ask_vote(p, request) for p in self._voters()))
        grants = 1 + sum(answers)
        if self.elector.elected(grants):
            return True
        self.logger.info(
            "Pre-vote for term %d: %d of %d would grant it; not standing",
            request.term,
            grants,
            self.cluster_size,
        )
        return False

    async def _run_election(self) -> None:
        async with self._election_lock:
            started = self._now()
            voted_in = self.term
            if self.cluster_size > 1 and not await self._pre_vote():
                self.elector.round_over(self._now())
                return
            if self.term != voted_in or self.leader_id is not None or self.state != "Unknown":
                return  # during the pre-vote this node voted for another, or found a leader
            await self._stop_following()
            term = self.elector.next_term(self._own(), self._members())
            self.db.log.checkpoints.proposal.write(term)
            self.voted_for = str(self.node.instance_id)
            self.election_count += 1
            request = self.elector.request(self._own(), self._members(), pre_vote=False)
            self.logger.info(
                "Starting an election for term %d (epoch %d, position %d, priority %d)",
                term,
                request.standing.epoch_number,
                request.standing.writer_position,
                self.priority,
            )
            answers = await asyncio.gather(*(self._ask_vote(p, request) for p in self._voters()))
            votes = 1 + sum(answers)
            if self.term != term or self.voted_for != str(self.node.instance_id):
                # while the votes came in, this node granted its own vote in a newer term: that
                # candidate may win too, so this election must not count
                self.logger.info(
                    "Abandoned the election for term %d: this node voted in term %d meanwhile",
                    term,
                    self.term,
                )
                return
            if self.elector.elected(votes) and self.state not in ("Leader", "ResigningLeader"):
                self.logger.info(
                    "Won the election for term %d with %d of %d votes", term, votes, self.cluster_size
                )
                await self._become_leader(term)
                self.last_election_seconds = self._now() - started
            else:
                self.logger.info(
                    "Lost the election for term %d (%d of %d votes)", term, votes, self.cluster_size
                )
                self.elector.round_over(self._now())

    async def _ask_vote(self, peer: Peer, request: VoteRequest) -> bool:
        assert peer.replication_endpoint is not None
        try:
            body = await self.transport.vote(
                peer.replication_endpoint, request.to_json(), self.election_timeout
            )
        except PeerError as exc:
            self.logger.info("No vote from %s:%d: %s", *peer.seed, exc)
            return False
        if not isinstance(body, dict):
            return False
        if not body.get("granted"):
            self.logger.info(
                "%s:%d refused its %s: %s",
                *peer.seed,
                "pre-vote" if request.pre_vote else "vote",
                body.get("reason"),
            )
        return bool(body.get("granted"))

    async def handle_vote(self, body: dict) -> dict:
        """``/internal/vote``: a candidate asks for this node's vote."""
        try:
            vote = VoteRequest.from_json(body)
        except (ValueError, KeyError, TypeError) as exc:
            return {"granted": False, "reason": f"bad request: {exc}"}
        leader = self.leader_peer()
        answer = self.elector.answer(
            self._now(),
            vote,
            self._own(),
            None
            if leader is None
            else Member.from_gossip(
                f"{leader.seed[0]}:{leader.seed[1]}",
                leader.alive(self._now(), self.gossip_timeout),
                leader.info,
                can_vote=True,
            ),
        )
        granted, reason = answer.granted, answer.reason
        if answer.record and not vote.pre_vote:  # a pre-vote changes nothing here
            # a voter in a new term takes nothing more from an older leader (its acks could confirm writes
            # the new leader does not have): the term is recorded first, so the gossip loop cannot
            # start following the old leader again while the replication session is being stopped
            self.db.log.checkpoints.proposal.write(vote.term)
            self.voted_for = vote.candidate_id
            await self._stop_following()
        self.logger.info(
            "%s for %s in term %d: %s",
            "Pre-vote" if vote.pre_vote else "Vote",
            vote.candidate_id,
            vote.term,
            "granted" if granted else f"refused ({reason})",
        )
        return {"granted": granted, "reason": reason, "term": self.term}

    # -- leading ---------------------------------------------------------------------------------------
    async def _become_leader(self, term: int) -> None:
        # before any await: votes asked from now on are refused (see handle_vote), and the writer
        # refuses client writes (write_permit) until the epoch record is in the log: a record written
        # before it would sit between the previous epoch's records and this one, where no follower's
        # log has it, and the common point would be computed wrong
        self.state = "PreLeader"
        self.leadership.taking_office()
        try:
            await self._stop_following()
            self.db.remote_writer = RemoteWriter(self._loop, None, self._wait_for_position)  # type: ignore[arg-type]
            await self._blocking(functools.partial(self.db.forget_stream_states, recent_appends=False))
            self._own_epoch_position = await self._blocking(self.db.write_epoch, term, self.node.instance_id)
        except (EvdbError, OSError) as exc:
            # a node that cannot write its epoch (a full disk, a failed database) does not lead, and
            # must not stay PreLeader either: it would never vote, follow or stand again
            self.logger.error("Could not take office in term %d: %s; this node stays a follower", term, exc)
            self.state = "Unknown"
            self.elector.round_over(self._now())
            return
        if self.state != "PreLeader":  # stepped down while the epoch was being written
            return
        if self.cluster_size > 1:
            self.db.replication_gate = self._gate_answers
        self.leader_id = str(self.node.instance_id)
        # leases granted by earlier leaders end before this one answers a security write
        self.leases.take_office(self._now(), self.db.committed_position)
        self.state = "Leader"
        self.db.remote_writer = None
        self.logger.info(
            "This node is now the LEADER (epoch %d, position %d)", term, self.db.committed_position
        )
        # in the background: its writes wait for a majority, and the gossip loop must go on meanwhile
        # (or a leader that lost its majority could never notice and step down)
        if self.cluster_size == 1:  # no majority to wait for: the node is ready when start() returns
            await self._after_taking_office()
        else:
            task = asyncio.create_task(self._after_taking_office(), name=f"{self.node.name}-took-office")
            self._tasks.append(task)

    async def _after_taking_office(self) -> None:
        try:
            await self.node.on_became_leader()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.logger.warning("Could not finish taking office (default users): %s", exc)

    async def _step_down(self, *, resigning: bool = False) -> None:
        # the state first: from here on the gate refuses the writes still in the writer's pipeline,
        # and _fail_gate refuses those it holds (see _gate_answers)
        self.state = "Unknown"
        self.leadership.left_office()
        self.db.remote_writer = RemoteWriter(self._loop, None, self._wait_for_position)  # type: ignore[arg-type]
        if self.cluster_size == 1:
            self.db.replication_gate = None
        self._fail_gate(NotLeader())
        self.leader_id = None
        if resigning:
            self.elector.resigned(self._now())
        else:
            self.elector.round_over(self._now())
        self.logger.info("This node is no longer the leader")

    def _gate_answers(self, position: int, answers: list) -> None:
        """The database's replication gate (writer thread) on every node of a cluster.

        While this node leads, answers wait until a majority has ``position``. Otherwise a client's
        write that was already in the writer's pipeline when the node stepped down is refused with
        NotLeader (answering it would acknowledge a write no majority holds); other results (records
        replicated from the leader) are answered at once."""
        with self._gate_lock:
            leading = self._leading and not self.leadership.closed
            security = self._security_watch.take()  # answered once the leases allow it too
            if leading:
                self.leadership.hold(position, answers, security)
        if leading:
            self._schedule_notify()  # releases the gate (one wake-up with the commit listener's)
            return
        for future, result in answers:
            if future.done():
                continue
            if isinstance(result, AppendResult):
                future.set_exception(NotLeader())
            else:
                future.set_result(result)

    def majority_position(self) -> int:
        return self.leadership.majority_position(self.db.committed_position)

    def _release_gate(self) -> None:
        """Give the answers a majority (and the leases) now allow, after telling the followers the new
        commit position (read your writes on followers: see the rule at the top)."""
        if not self._leading:
            return
        with self._gate_lock:
            release = self.leadership.release(self.db.committed_position, self._now())
        if release.commit is not None:
            self._advance_commit(release.commit)
        for answers in release.answers:
            for future, result in answers:
                if not future.done():
                    future.set_result(result)
        if release.leases_checked:
            self._cancel_lease_timer()
        if release.recheck_in is not None and self._loop is not None:
            self._lease_timer = self._loop.call_later(release.recheck_in, self._release_gate)

    def _cancel_lease_timer(self) -> None:
        if self._lease_timer is not None:
            self._lease_timer.cancel()
            self._lease_timer = None

    def _fail_gate(self, exc: Exception) -> None:
        with self._gate_lock:
            held = self.leadership.fail()
        self._cancel_lease_timer()
        for answers in held:
            for future, _ in answers:
                if not future.done():
                    future.set_exception(
                        NotLeader()
                        if isinstance(exc, NotLeader)
                        else EvdbError(f"The write is not confirmed: {exc}")
                    )

    async def resign(self) -> bool:
        """``POST /admin/node/resign``: the leader stops taking writes, lets its followers catch up,
        steps down and stays out of the next election. False when this node is not the leader."""
        if not self.is_leader:
            return False
        self.logger.info("Resigning as leader")
        self.state = "ResigningLeader"
        self.db.remote_writer = RemoteWriter(self._loop, None, self._wait_for_position)  # type: ignore[arg-type]
        deadline = self._now() + 5
        end = self.db.committed_position
        while self._now() < deadline and self.leadership.followers_behind(end):
            await self._wait_for_commit(0.1)
        await self._step_down(resigning=True)
        return True

    # -- the common point ------------------------------------------------------------------------------
    @staticmethod
    def _common_point(db: Database, follower_epochs: list[dict], follower_end: int) -> tuple[str, int, int]:
        """Where a follower's log may stop agreeing with ours, from the epochs alone
        (evdb/cluster/catchup.py common_point)."""
        return common_point(db.epochs(64), db.committed_position, follower_epochs, follower_end)

    async def _verify_common_point(self, channel: Channel, point: int, floor: int) -> int | None:
        """The leader's side: send the follower our records' checks, newest first from ``point`` down to
        ``floor``, a page at a time, until it answers where it goes on from. None when it went away."""
        before = point
        chunk_ends = await self._blocking(self.replica.completed_chunk_ends, floor, point)
        while True:
            checks = await self._blocking(self.replica.record_checks, before, floor, _CHECKS_PER_MESSAGE)
            await channel.send_json(
                {
                    "verify": {
                        "point": point,
                        "floor": floor,
                        "records": checks,
                        "last": len(checks) < _CHECKS_PER_MESSAGE,
                        "chunkEnds": chunk_ends,
                    }
                }
            )
            chunk_ends = []  # sent once
            reply = await channel.receive(timeout=30)
            body = reply.text if reply is not None else None
            if not isinstance(body, dict):
                return None
            if "more" in body and checks:
                before = int(checks[-1][0])
                continue
            if "from" in body:
                position = int(body["from"])
                if not 0 <= position <= point:
                    raise EvdbError(
                        f"the follower answered position {position}, beyond the common point {point}"
                    )
                return position
            return None

    async def _find_common_point(self, channel: Channel, verify: dict) -> int | None:
        """The follower's side: the end of the newest record both logs hold at the same position (the
        leader's records are listed newest first); None when none is found back to the shared epoch."""
        chunk_ends = {int(a): int(b) for a, b in verify.get("chunkEnds") or []}
        while True:
            found = await self._blocking(
                shared_end, verify, self.replica.has_record, self.replica.chunk_end_after, chunk_ends
            )
            if found is not None:
                return found
            if verify.get("last") or not verify.get("records"):
                return None
            await channel.send_json({"more": True})
            reply = await channel.receive(timeout=30)
            body = reply.text if reply is not None else None
            if not isinstance(body, dict) or "verify" not in body:
                raise EvdbError("the leader stopped while the common point was being found")
            verify = body["verify"]

    # -- replication: the leader's side ----------------------------------------------------------------
    async def handle_replication(self, channel: Channel) -> None:
        """``/internal/replicate``: a follower subscribes to this leader's log."""
        try:
            await self._serve_follower(channel)
        except PeerError as exc:  # the follower went away mid-handshake: it connects again
            self.logger.info("A replication stream ended early: %s", exc)
        except (EvdbError, TimeoutError, ValueError, TypeError, KeyError) as exc:
            self.logger.warning("A replication stream from a follower failed: %s", exc)

    async def _serve_follower(self, channel: Channel) -> None:
        hello_message = await channel.receive(timeout=10)
        hello = hello_message.text if hello_message is not None else None
        if not isinstance(hello, dict):
            return
        follower = str(hello.get("instanceId"))
        if hello.get("protocol") != REPLICATION_PROTOCOL:
            self.logger.warning(
                "Follower %s speaks replication protocol %s, this leader %d: refused (run one evdb version "
                "in a cluster; a rolling upgrade goes node by node within one protocol)",
                follower,
                hello.get("protocol", 1),
                REPLICATION_PROTOCOL,
            )
            await channel.send_json(
                {
                    "error": f"replication protocol {hello.get('protocol', 1)}; this leader speaks {REPLICATION_PROTOCOL}"
                }
            )
            return
        if not self.is_leader:
            await channel.send_json({"error": "not the leader"})
            return
        try:
            verdict, point, floor = self._common_point(
                self.db, hello.get("epochs") or [], int(hello.get("writer", 0))
            )
        except (TypeError, ValueError) as exc:
            await channel.send_json({"error": f"bad hello: {exc}"})
            return
        epoch = self.standing().epoch_number
        if verdict == "refuse":
            self.logger.warning(
                "Follower %s: its database shares no history with this cluster; refused", follower
            )
            await channel.send_json({"refuse": 0})
            return
        position = await self._verify_common_point(channel, point, floor)
        if position is None:
            return
        if not self.is_leader or self.standing().epoch_number != epoch:  # no longer the same leader
            await channel.send_json({"error": "not the leader"})
            return
        self.logger.info("Follower %s subscribed from position %d", follower, position)
        link = _FollowerLink(bool(hello.get("voting")), position, name=follower)
        self.leadership.subscribed(link)
        await channel.send_json(
            {
                "ok": True,
                "from": position,
                "epoch": self.standing().epoch_number,
                "protocol": REPLICATION_PROTOCOL,
            }
        )
        link.channel = channel  # every commit position from now on goes to it (_post_commit)
        self._post_commit(self.commit_position)
        sender = asyncio.create_task(self._send_log(channel, position, follower, link))
        acks = asyncio.create_task(self._receive_acks(channel, link))
        try:
            # whichever ends first ends the session: a follower that went away, or a send that failed
            await asyncio.wait((sender, acks), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (sender, acks):
                task.cancel()
            # asyncio.wait, not await task: a cancellation of this handler itself must go on upwards
            await asyncio.wait((sender, acks))
            for task in (sender, acks):
                if not task.cancelled() and task.exception() is not None:
                    self.logger.warning("Replication to follower %s failed: %s", follower, task.exception())
            await channel.close()
            self.leadership.gone(link)
            self.logger.info("Follower %s disconnected", follower)

    async def _receive_acks(self, channel: Channel, link: _FollowerLink) -> None:
        while True:
            message = await channel.receive()
            if message is None:
                return
            binary = message.binary
            if binary is not None and len(binary) == _POSITION.size:  # a records write's acknowledgement
                acked = _POSITION.unpack(binary)[0]
            elif isinstance(message.text, dict) and "ack" in message.text:
                acked = int(message.text["ack"])
            elif isinstance(message.text, dict):
                if "lease" in message.text:
                    await self._grant_lease(channel, link, message.text)
                continue
            else:
                return
            self.leadership.acknowledged(link, acked)
            link.ack_arrived.set()
            self._release_gate()

    async def _grant_lease(self, channel: Channel, link: _FollowerLink, request: dict) -> None:
        """A member asks for a sign-in lease (evdb/cluster/lease.py): granted while this node leads and
        holds one itself, and the member holds every security write whose answer waits for it."""
        if self.state not in ("Leader", "ResigningLeader"):
            return
        await channel.send_json(self.leadership.grant_lease(link, request, self._now()))

    def admits_sign_in(self, unseen_user_records: bool) -> bool:
        """Whether this node may judge credentials now (evdb/cluster/lease.py): a leader while it holds
        a lease from a majority and shows its log as of taking office; any other member while its lease
        from its leader runs, it shows the leader's last security write, and it holds no user record its
        readers cannot see yet (``unseen_user_records``). Never blocks."""
        db = self.node.db
        if db is None:
            return False
        now = self._now()
        if self.state in ("Leader", "ResigningLeader"):
            return self.leases.admits(now, db.readable_position)
        return self.lease.admits(now, db.readable_position, unseen_user_records)

    async def wait_sign_in(self, ready: Callable[[], bool]) -> bool:
        """Wait until ``ready()`` (at most a lease: a member catching up, or a leader that has just
        taken office); False if it never was."""
        deadline = self._now() + self.gossip_timeout
        while not ready():
            left = deadline - self._now()
            if left <= 0:
                return False
            await self._wait_for_commit(min(left, 0.05))
        return True

    async def _send_log(self, channel: Channel, position: int, follower: str, link: _FollowerLink) -> None:
        caught_up_sent = False
        unacked: collections.deque[int] = collections.deque()  # ends of the records messages out
        leadership = self.leadership
        while not channel.closed and leadership.may_write(self._leading):
            waiter = self._committed
            if unacked_window(unacked, link.acked, SEND_WINDOW):
                # the follower has enough to write: what comes meanwhile goes in one message at its
                # next acknowledgement (after a second without one, it goes anyway)
                link.ack_arrived.clear()
                try:
                    async with asyncio.timeout(1.0):
                        await link.ack_arrived.wait()
                except TimeoutError:
                    unacked.clear()
                continue
            chunk = self.replica.replication_chunk(position)
            if chunk is not None:
                await self._send_chunk_file(channel, chunk, follower, position)
                position = chunk.end_position
                continue
            # what the writer has written and is syncing goes too (see _before_sync)
            failures, upto = leadership.sync_failures, leadership.ship_limit(self.node.db)
            start, frames, completed = self.replica.read_raw(position, _MAX_SEND, upto)
            if leadership.sync_failures != failures:
                break  # a sync failed while the records were read: they may be being rolled back
            if completed is not None:
                await channel.send_json({"complete": completed})
                position = start
            elif frames:
                # the records of every commit group since the last send, in one message that also
                # carries the commit position
                await channel.send_bytes(_RECORDS.pack(start, self.commit_position) + frames)
                position = start + len(frames)
                unacked.append(position)
            else:
                if not caught_up_sent:
                    # the follower has every record: once per stream it is told so (it stops
                    # CatchingUp); each later commit position goes by _post_commit
                    await channel.send_json({"caughtUp": position, "commit": self.commit_position})
                    caught_up_sent = True
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(1.0):
                        await waiter.wait()
        await channel.close()

    async def _send_chunk_file(self, channel: Channel, chunk: Chunk, follower: str, position: int) -> None:
        """A follower behind by a completed chunk gets the whole file (see ChunkLogReplication.replication_chunk)."""
        self.logger.info(
            "Sending chunk file %s to follower %s (chunks %d-%d, %d bytes%s; the follower is at %d)",
            chunk.file_name,
            follower,
            chunk.start_number,
            chunk.end_number,
            chunk.file_size,
            ", scavenged" if chunk.is_scavenged else "",
            position,
        )
        await channel.send_json(chunk_file_header(chunk))
        for piece in chunk_file_pieces(chunk):
            await channel.send_bytes(piece)

    async def handle_write(self, body: dict) -> dict:
        """``/internal/write``: a follower forwards a client's write to this leader."""
        if not self.is_leader:
            return {"error": "NotLeader", "message": "This node is not the leader."}
        try:
            op, args = decode_write(body)
            if op == "append":
                result = await asyncio.wrap_future(self.db.append_async(**args))
            elif op == "delete":
                result = await asyncio.wrap_future(self.db.delete_stream_async(**args))
            else:
                from evdb.scavenge.point import write_point

                point = await self._blocking(write_point, self.db, args["threshold"])
                return {"position": point.position}
        except EvdbError as exc:
            return encode_error(exc)
        except (ValueError, KeyError, TypeError) as exc:
            return {"error": "InvalidInput", "message": f"Bad forwarded write: {exc}"}
        return encode_result(result)

    # -- following -------------------------------------------------------------------------------------
    async def _follow(self, leader: Peer) -> None:
        await self._stop_following()
        self.leader_id = leader.info.get("instanceId")
        self.state = "PreReadOnlyReplica" if self.read_only else "CatchingUp"
        self.db.remote_writer = RemoteWriter(self._loop, self._send_to_leader, self._wait_for_position)  # type: ignore[arg-type]
        self.logger.info("Following the leader %s at %s:%d", self.leader_id, *leader.seed)
        self._follow_task = asyncio.create_task(self._replicate_from(leader), name=f"{self.node.name}-follow")

    async def _stop_following(self) -> None:
        task, self._follow_task = self._follow_task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            await asyncio.wait((task,))  # the caller's own cancellation still propagates
        reopening = self._reopening
        if reopening is not None and not reopening.done():
            await asyncio.wait((reopening,))  # the database is being reopened: let it finish
        self.leader_id = None
        if not self.is_leader:
            self.db.remote_writer = RemoteWriter(self._loop, None, self._wait_for_position)  # type: ignore[arg-type]
            if self.state not in ("ResigningLeader", "PreLeader"):
                self.state = "PreReadOnlyReplica" if self.read_only else "Unknown"

    async def _send_to_leader(self, body: dict) -> dict:
        peer = self.leader_peer()
        if peer is None or peer.replication_endpoint is None:
            raise NotLeader()
        try:
            return await self.transport.write(peer.replication_endpoint, body, 30)
        except PeerError as exc:
            raise NotLeader() from exc

    async def _replicate_from(self, leader: Peer) -> None:
        backoff = 0.2
        while True:
            endpoint = leader.replication_endpoint
            try:
                if endpoint is None:
                    raise PeerError("the leader advertises no replication endpoint")
                await self._replication_session(endpoint)
                backoff = 0.2
            except asyncio.CancelledError:
                raise
            except PeerError as exc:
                leader.last_error = str(exc)
                if not exc.certificate:  # a certificate failure is logged by the peer client
                    self.logger.warning("Replication from the leader stopped: %s", exc)
            except (TimeoutError, OSError, EvdbError, ValueError, KeyError, TypeError) as exc:
                self.logger.warning("Replication from the leader stopped: %s", exc or type(exc).__name__)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 2.0)

    def _hello(self) -> dict:
        return {
            "instanceId": str(self.node.instance_id),
            "protocol": REPLICATION_PROTOCOL,
            "voting": not self.read_only,
            "writer": self.db.committed_position,
            "epochs": [
                {
                    "epochId": e["epochId"],
                    "position": e["position"],
                    "epochNumber": e["epochNumber"],
                    "previousEpochPosition": e.get("previousEpochPosition", -1),
                }
                for e in self.db.epochs(64)
            ],
        }

    async def _replication_session(self, endpoint: tuple[str, int]) -> None:
        heartbeat = max(self.gossip_timeout, 1.0)
        async with self.transport.replicate(endpoint, heartbeat) as channel:
            await channel.send_json(self._hello())
            first = await channel.receive(timeout=10)
            body = first.text if first is not None else None
            if isinstance(body, dict) and "verify" in body:
                common = await self._find_common_point(channel, body["verify"])
                end = self.db.committed_position
                verdict = catch_up_verdict(common, end, self.commit_position)
                if verdict == "unrelated":
                    self.logger.error(
                        "This node's log (ending at %d) shares no record with the leader's back to their "
                        "common epoch at %d: it is not replicating, and it will not take this leader's "
                        "records until an operator restores it from a backup or another node",
                        end,
                        int(body["verify"].get("floor", -1)),
                    )
                    await channel.close()
                    raise EvdbError("no common record with the leader's log")
                if verdict == "diverged":
                    await channel.close()
                    # never cut what the cluster committed: something is wrong, say so and wait
                    self.logger.error(
                        "The leader's log and this node's differ at %d, below the commit position %d "
                        "this node knows: not truncating; it takes nothing from this leader",
                        common,
                        self.commit_position,
                    )
                    raise EvdbError("the logs differ below the commit position")
                if verdict == "truncate":
                    assert common is not None
                    await channel.close()
                    # shielded: a cancelled follower still finishes reopening its database (else the
                    # node would be left without one); _stop_following waits for it
                    self._reopening = asyncio.ensure_future(self.node.truncate_and_reopen(common))
                    await asyncio.shield(self._reopening)
                    return
                await channel.send_json({"from": end})
                first = await channel.receive(timeout=10)
                body = first.text if first is not None else None
            accepted = subscription(body, REPLICATION_PROTOCOL, endpoint)
            if accepted.refused is not None:
                if accepted.protocol:
                    await channel.close()
                raise EvdbError(accepted.refused)
            stream = FollowerStream(
                leader_epoch=accepted.epoch,
                read_only=self.read_only,
                resets_at=self._now() + self.reset_interval,
            )
            try:
                await self._receive_log(channel, stream)
            finally:
                receiver = self._receiver
                self._receiver = None
                if receiver is not None:
                    await self._blocking(receiver.abort)

    async def _receive_chunk_piece(self, channel: Channel, stream: FollowerStream, data: bytes) -> None:
        receiver = self._receiver
        assert receiver is not None
        await self._blocking(receiver.add, data)
        if not receiver.done:
            return
        self._receiver = None
        stream.receiving = None
        try:
            committed = await self._blocking(receiver.install)
        except (EvdbError, ValueError, OSError) as exc:
            reason = exc.reason if isinstance(exc, CorruptedFile) else str(exc)
            self.logger.error(
                "Refused chunk file %s (chunks %d-%d) from the leader: %s",
                receiver.file_name,
                receiver.start_number,
                receiver.end_number,
                reason,
            )
            await self._blocking(receiver.abort)
            raise
        self.logger.info(
            "Installed chunk file %s (chunks %d-%d, %d bytes) from the leader; the log now ends at %d",
            receiver.file_name,
            receiver.start_number,
            receiver.end_number,
            receiver.size,
            committed,
        )
        await channel.send_json({"ack": committed})

    async def _receive_log(self, channel: Channel, stream: FollowerStream) -> None:
        """Take the leader's messages in order. The stream is read by its own task into an inbox, so
        the records messages that arrive while this node writes and syncs the previous ones are written
        next together: one writer call and one fdatasync for all of them, acknowledged once with the
        highest durable position. The leader's commit messages are taken as they arrive, ahead of
        the records queued or being written (read your writes on followers: see the rule at the top)."""

        def take_commit(commit: int) -> None:
            if not stream.past_leader(self.term):  # else _apply_log stops the stream
                self._take_commit(stream, commit)

        def take_grant(grant: dict) -> None:
            if not stream.past_leader(self.term):
                self.lease.granted(grant)
                self._wake_senders()  # sign-ins waiting for it go on (wait_sign_in)

        self.lease.new_stream()
        inbox = _Inbox(take_commit, take_grant)
        reader = asyncio.create_task(inbox.fill(channel))
        asker = asyncio.create_task(self._ask_leases(channel, stream))
        try:
            await self._apply_log(channel, inbox, stream)
        finally:
            reader.cancel()
            asker.cancel()
            await asyncio.wait((reader, asker))  # the caller's own cancellation still propagates
        if inbox.error is not None and not inbox.messages:
            raise inbox.error

    async def _ask_leases(self, channel: Channel, stream: FollowerStream) -> None:
        """Ask the leader for a sign-in lease every quarter of one, while this node follows it (a voter
        in a newer term asks no more: see evdb/cluster/lease.py)."""
        with contextlib.suppress(PeerError):
            while not channel.closed:
                if not stream.past_leader(self.term):
                    await channel.send_json(self.lease.ask(self._now()))
                await asyncio.sleep(self.lease.interval)

    async def _apply_log(self, channel: Channel, inbox: _Inbox, stream: FollowerStream) -> None:
        """Do what the stream's machine (evdb/cluster/following.py) says with each message."""
        while True:
            message = await inbox.get()
            if message is None:
                break
            route = stream.route(message.binary is not None, message.text, self.term)
            if route == "past leader":
                self.logger.warning(
                    "This node is in term %d, newer than the leader's epoch %d: "
                    "no longer replicating from it",
                    self.term,
                    stream.leader_epoch,
                )
                await channel.close()
                return
            if route == "piece":
                assert message.binary is not None
                await self._receive_chunk_piece(channel, stream, message.binary)
            elif route == "records":
                assert message.binary is not None
                pieces, commit = _records_batch(message.binary, inbox)
                committed = await self._blocking(self.replica.apply_replicated_batch, pieces)
                channel.post_bytes(_POSITION.pack(committed))  # the acknowledgement: 8 bytes
                # what the leader's majority holds: reads here go no further (nor past this log)
                self._take_commit(stream, commit)
            elif route == "text":
                body = message.text
                assert isinstance(body, dict)
                step = stream.text(body)
                if step.chunk_file is not None:
                    self._receiver = await self._blocking(ChunkFileReceiver, self.db, body, self.replica)
                    stream.receiving = self._receiver.file_name
                elif step.complete is not None:
                    await self._blocking(self.replica.complete_replicated_chunk, step.complete)
                    await channel.send_json({"ack": self.db.committed_position})
                readable, caught_up = stream.settled(body, self.db.committed_position, self.state)
                if readable is not None:
                    # what the leader's majority holds: reads here go no further (nor past this log)
                    self._advance_commit(readable)
                if caught_up is not None:
                    self.state = caught_up
                    self.logger.info(
                        "Caught up with the leader at position %d: now %s", body["caughtUp"], self.state
                    )
            else:
                break
            # records this node made durable since the leader's commit position arrived (a chunk
            # file installed, a chunk completed): readers see them now, not at the next commit
            db = self.node.db
            readable = (
                None if db is None else stream.after_message(self.commit_position, db.committed_position)
            )
            if readable is not None:
                self._advance_commit(readable)
            if stream.resets(self._now()):
                self.logger.info("Resetting the replication connection (ConnectionResetInterval)")
                await channel.close()
                await self.transport.reset()
                return

    def describe(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "leaderId": self.leader_id,
            "term": self.term,
            "commitPosition": self.commit_position,
            "followers": self.leadership.describe(),
            "elections": self.election_count,
            "lastElectionSeconds": self.last_election_seconds,
            "nodeId": str(uuid.UUID(str(self.node.instance_id))),
            "peerErrors": {
                f"{h}:{p}": peer.last_error for (h, p), peer in self.peers.items() if peer.last_error
            },
        }
