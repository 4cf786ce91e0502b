"""One node's part in the cluster: gossip, elections, leading, following, replication.

Roles (the ``state`` of KurrentDB's gossip): ``Unknown`` (no leader known), ``PreLeader`` (won an
election, writing its epoch), ``Leader``, ``ResigningLeader``, ``CatchingUp`` then ``Follower`` (a
voting member copying the leader's log), ``PreReadOnlyReplica`` then ``ReadOnlyReplica``.

This module is the shell around the cluster's decisions, which are pure machines: the election
(evdb/cluster/elector.py), the leader's (evdb/cluster/leadership.py), a follower's replication stream
(evdb/cluster/following.py), the gossip view (evdb/cluster/gossip.py) and the catch-up and commit
functions (catchup.py, commit.py). :class:`ClusterService` holds the node's role and runs them with
three helpers of its own: gossip rounds and elections (membership.py), the leader's side of
replication (sending.py) and the follower's (receiving.py). It does no I/O of its own: everything it
needs from outside comes through narrow ports, so the deterministic simulator (evdb/cluster/sim.py)
runs this same code under a seed:

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
import contextlib
import functools
import random
import threading
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from evdb.cluster.advertising import CLIENT_HOST, CLIENT_PORT
from evdb.cluster.election import LogStanding
from evdb.cluster.elector import Elector
from evdb.cluster.following import FollowerStream
from evdb.cluster.forwarding import RemoteWriter
from evdb.cluster.gossip import GossipView, Peer, parse_gossip_seeds
from evdb.cluster.leadership import Leadership
from evdb.cluster.lease import LeaseGrantor, LeaseHolder, SecurityWatch
from evdb.cluster.membership import Membership
from evdb.cluster.receiving import ChunkFileReceiver, ReplicationSink
from evdb.cluster.replica import ReplicationLog
from evdb.cluster.sending import ReplicationSource, chunk_file_header, chunk_file_pieces, resolve_common_point
from evdb.cluster.shell import ClusterHost
from evdb.cluster.transport import Channel, HttpTransport, PeerError, Transport
from evdb.cluster.wire import COMMIT
from evdb.errors import DatabaseReopening, EvdbError, InvalidOption, NotLeader
from evdb.streams import AppendResult

if TYPE_CHECKING:
    from evdb.database import Database

#: also here, where they were before the shell was split (callers may import them from either place)
__all__ = [
    "ChunkFileReceiver",
    "ClusterHost",
    "ClusterService",
    "chunk_file_header",
    "chunk_file_pieces",
    "parse_gossip_seeds",
    "resolve_common_point",
]

_T = TypeVar("_T")

# Read your writes on followers (the rule): once the leader has answered a write, every follower that
# held a durable copy of it when the leader answered shows it to any read that reaches it after the
# leader's commit message does. The leader writes each new commit position to every follower's stream
# in the loop step that releases the answers, ahead of them (ClusterService._post_commit), and a
# follower applies a commit message the moment its stream's reader takes it, never behind a records
# write in progress (evdb/cluster/receiving.py Inbox.fill). A follower still syncing the write when
# the leader answered shows it as its sync ends (it keeps the leader's newest commit position). On one
# host the leader's message is in the follower's socket before the client has its answer. KurrentDB's
# followers learn the replication checkpoint from the leader's ReplicatedTo messages, sent with no
# order against the client's answer, and index records only then: they promise no more than eventual
# visibility.


async def _to_thread(fn: Callable[..., _T], *args: Any) -> _T:
    return await asyncio.to_thread(fn, *args)


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
        self.state = "PreReadOnlyReplica" if self.read_only else "Unknown"
        #: what gossip says of the other members (evdb/cluster/gossip.py)
        self.gossip = GossipView(self.seeds, self.gossip_timeout)
        self.peers = self.gossip.peers
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
        #: the I/O shells around the machines: gossip and elections, the leader's side of replication,
        #: the follower's (evdb/cluster/membership.py, sending.py, receiving.py)
        self.membership = Membership(self)
        self.look_again_soon = self.membership.look_again_soon
        self.source = ReplicationSource(self)
        self.sink = ReplicationSink(self)
        self._reopening: asyncio.Future | None = None  # a truncate-and-reopen under way

    # -- facts -----------------------------------------------------------------------------------------
    @property
    def reset_interval(self) -> float:
        """ConnectionResetInterval in effect (a reload may change it): a replication stream is remade
        that often. Read from the host's settings at each use."""
        return float(self.node.options.connection_reset_interval)

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
        return self.membership.election_lock.locked()

    @property
    def term(self) -> int:
        return self.db.log.checkpoints.proposal.value

    def leader_peer(self) -> Peer | None:
        return self.gossip.by_instance(self.leader_id)  # None while no leader is known

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
        """This node's own entry of its ``/gossip`` answer (evdb/cluster/membership.py)."""
        return self.membership.own_member()

    @property
    def replication_host_advertised(self) -> str:
        return str(self._replication_host_as or self.replication_host)

    @property
    def replication_port_advertised(self) -> int:
        return int(self._replication_port_as or self.replication_port)

    def members(self) -> list[dict]:
        """This node's view of the cluster, in KurrentDB's gossip member shape."""
        return [self.own_member(), *self.gossip.answer(self._now())]

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
        self._tasks.append(
            asyncio.create_task(self.membership._gossip_loop(), name=f"{self.node.name}-gossip")
        )

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
        db.remote_writer = RemoteWriter(self._loop, self.sink.send_to_leader, self._wait_for_position)  # type: ignore[arg-type]

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
        message = COMMIT.pack(position)
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
        successor = self.leadership.successor() if resigning else None
        streams = self.source.open_streams()  # (left_office forgets them)
        self.leadership.left_office()
        self.db.remote_writer = RemoteWriter(self._loop, None, self._wait_for_position)  # type: ignore[arg-type]
        if self.cluster_size == 1:
            self.db.replication_gate = None
        self._fail_gate(NotLeader())
        self.leader_id = None
        if resigning:
            self.elector.resigned(self._now(), successor)
            if successor is not None:
                self.logger.info(
                    "Handing over to %s, the most up-to-date follower: it stands at once", successor
                )
                await self.source.announce_hand_over(streams, successor)
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

    async def handle_vote(self, body: dict) -> dict:
        """``/internal/vote``: a candidate asks for this node's vote (evdb/cluster/membership.py)."""
        return await self.membership.handle_vote(body)

    async def handle_replication(self, channel: Channel) -> None:
        """``/internal/replicate``: a follower subscribes to this leader's log (evdb/cluster/sending.py)."""
        await self.source.handle_replication(channel)

    async def handle_write(self, body: dict) -> dict:
        """``/internal/write``: a follower forwards a client's write (evdb/cluster/sending.py)."""
        return await self.source.handle_write(body)

    # -- following -------------------------------------------------------------------------------------
    async def _follow(self, leader: Peer) -> None:
        await self._stop_following()
        self.leader_id = leader.info.get("instanceId")
        self.state = "PreReadOnlyReplica" if self.read_only else "CatchingUp"
        self.db.remote_writer = RemoteWriter(self._loop, self.sink.send_to_leader, self._wait_for_position)  # type: ignore[arg-type]
        self.logger.info("Following the leader %s at %s:%d", self.leader_id, *leader.seed)
        self._follow_task = asyncio.create_task(
            self.sink._replicate_from(leader), name=f"{self.node.name}-follow"
        )

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
            "peerErrors": self.gossip.errors(),
        }
