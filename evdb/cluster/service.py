"""One node's part in the cluster: gossip, elections, leading, following, replication.

Roles (the ``state`` of KurrentDB's gossip): ``Unknown`` (no leader known), ``PreLeader`` (won an
election, writing its epoch), ``Leader``, ``ResigningLeader``, ``CatchingUp`` then ``Follower`` (a
voting member copying the leader's log), ``PreReadOnlyReplica`` then ``ReadOnlyReplica``.

Node-to-node traffic (votes, the replication stream, forwarded writes) goes to a separate listener,
the replication endpoint; with TLS it accepts only clients presenting a certificate that chains to
the trusted roots and whose common name matches CertificateReservedNodeCommonName. Gossip uses the
public HTTP API (``GET /gossip``), as KurrentDB's does.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import ssl
import struct
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import aiohttp
from aiohttp import web

from evdb.cluster.election import LogStanding, VoteRequest, grant_vote, majority
from evdb.cluster.forwarding import RemoteWriter, decode_write, encode_error, encode_result
from evdb.errors import EvdbError, InvalidOption, NotLeader

if TYPE_CHECKING:
    from evdb.node import Node

__all__ = ["ClusterService", "parse_gossip_seeds"]

_POSITION = struct.Struct("<q")
_MAX_SEND = 1 << 20


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

    def alive(self, now: float, timeout: float) -> bool:
        return self.last_seen >= 0 and now - self.last_seen <= timeout

    @property
    def replication_endpoint(self) -> tuple[str, int] | None:
        port = self.info.get("internalSecureTcpPort") or self.info.get("internalTcpPort")
        host = self.info.get("internalTcpIp") or self.seed[0]
        return (host, int(port)) if port else None


@dataclass
class _FollowerLink:
    voting: bool
    acked: int


class ClusterService:
    def __init__(self, node: Node) -> None:
        o = node.options
        self.node = node
        self.logger = node.logger
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
        self._leader_seen = time.monotonic()
        self._no_candidacy_until = 0.0
        self._followers: dict[str, _FollowerLink] = {}
        self._gate: list[tuple[int, list]] = []
        self._gate_lock = threading.Lock()
        self._committed = asyncio.Event()
        self._follow_task: asyncio.Task | None = None
        self._tasks: list[asyncio.Task] = []
        self._session: aiohttp.ClientSession | None = None
        self._session_made = 0.0
        self._runner: web.AppRunner | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._election_lock = asyncio.Lock()
        self.replication_host = o.replication_ip or node.host
        self.replication_port = o.replication_port

    # -- facts -----------------------------------------------------------------------------------------
    @property
    def db(self):
        return self.node.db

    @property
    def is_leader(self) -> bool:
        return self.state == "Leader"

    def standing(self) -> LogStanding:
        epochs = self.db.epochs(1)
        return LogStanding(epochs[0]["epochNumber"] if epochs else -1, self.db.committed_position)

    @property
    def term(self) -> int:
        return self.db.log.checkpoints.proposal.value

    def leader_peer(self) -> Peer | None:
        for peer in self.peers.values():
            if peer.info.get("instanceId") == self.leader_id:
                return peer
        return None

    def leader_http_endpoint(self) -> tuple[str, int] | None:
        if self.is_leader:
            return (self.node.advertised_host, self.node.port)
        peer = self.leader_peer()
        if peer is None:
            return None
        return (
            peer.info.get("httpEndPointIp", peer.seed[0]),
            int(peer.info.get("httpEndPointPort", peer.seed[1])),
        )

    def own_member(self) -> dict:
        from evdb.node import VERSION

        db = self.db
        chk = db.log.checkpoints
        epochs = db.epochs(1)
        secure = self.node.tls is not None
        return {
            "instanceId": str(self.node.instance_id),
            "timeStamp": self.node.clock.time(),
            "state": self.state,
            "isAlive": True,
            "internalTcpIp": self.replication_host,
            "internalTcpPort": 0 if secure else self.replication_port,
            "internalSecureTcpPort": self.replication_port if secure else 0,
            "externalTcpIp": self.node.advertised_host,
            "externalTcpPort": 0,
            "externalSecureTcpPort": 0,
            "httpEndPointIp": self.node.advertised_host,
            "httpEndPointPort": self.node.port,
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

    def members(self) -> list[dict]:
        """This node's view of the cluster, in KurrentDB's gossip member shape."""
        now = time.monotonic()
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
        self.db.add_commit_listener(self._on_commit)
        await self._start_listener()
        self.db.remote_writer = RemoteWriter(self._loop, None, self._wait_for_position)
        if self.cluster_size == 1 and not self.read_only:
            await self._become_leader(self.term + 1)
        self._tasks.append(asyncio.create_task(self._gossip_loop(), name=f"{self.node.name}-gossip"))

    async def stop(self) -> None:
        for task in [*self._tasks, *([self._follow_task] if self._follow_task else [])]:
            task.cancel()
        for task in [*self._tasks, *([self._follow_task] if self._follow_task else [])]:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        self._follow_task = None
        self._fail_gate(NotLeader())
        if self.node.db is not None:
            self.db.remove_commit_listener(self._on_commit)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def detach_database(self) -> None:
        """Before the node closes its database (truncation): stop replicating into it."""
        self.db.remove_commit_listener(self._on_commit)

    def attach_database(self) -> None:
        """After the node reopened its database."""
        self.db.add_commit_listener(self._on_commit)
        self.db.remote_writer = RemoteWriter(self._loop, self._send_to_leader, self._wait_for_position)  # type: ignore[arg-type]

    def _on_commit(self, committed: int) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._notify_commit)

    def _notify_commit(self) -> None:
        self._committed.set()
        self._committed = asyncio.Event()
        self._release_gate()

    async def _wait_for_commit(self, timeout: float) -> None:
        event = self._committed
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(event.wait(), timeout)

    async def _wait_for_position(self, position: int, timeout: float = 10.0) -> None:
        """Wait until the record at ``position`` is committed in this node's log."""
        deadline = time.monotonic() + timeout
        while self.db.committed_position <= position:
            left = deadline - time.monotonic()
            if left <= 0:
                raise EvdbError(
                    f"The write is on the leader but this node has not received position {position} yet."
                )
            await self._wait_for_commit(min(left, 0.5))

    # -- the node-to-node listener ---------------------------------------------------------------------
    async def _start_listener(self) -> None:
        app = web.Application(
            middlewares=[self._peer_certificate_middleware], client_max_size=64 * 1024 * 1024
        )
        app.router.add_post("/internal/vote", self._vote_handler)
        app.router.add_post("/internal/write", self._write_handler)
        app.router.add_get("/internal/replicate", self._replicate_handler)
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await self._runner.setup()
        context = self.node.tls.server_context(require_client_cert=True) if self.node.tls else None
        site = web.TCPSite(self._runner, self.replication_host, self.replication_port, ssl_context=context)
        await site.start()
        sock = site._server.sockets[0]  # type: ignore[union-attr]
        self.replication_port = sock.getsockname()[1]
        self.logger.info(
            "Node-to-node listener on %s:%d (%s)",
            self.replication_host,
            self.replication_port,
            "TLS with client certificates" if context else "plain TCP",
        )

    @web.middleware
    async def _peer_certificate_middleware(self, request: web.Request, handler):
        if self.node.tls is not None:
            from evdb.tls.loading import CertificateError, check_peer_node_certificate

            ssl_object = request.transport.get_extra_info("ssl_object") if request.transport else None
            der = ssl_object.getpeercert(binary_form=True) if ssl_object else None
            try:
                if not der:
                    raise CertificateError("The peer presented no client certificate.")
                check_peer_node_certificate(der, self.node.options.certificate_reserved_node_common_name)
            except CertificateError as exc:
                self.logger.error("Refused a node-to-node connection from %s: %s", request.remote, exc)
                return web.Response(status=403, text=str(exc))
        return await handler(request)

    def _client_ssl(self) -> ssl.SSLContext | bool:
        if self.node.tls is None:
            return False
        return self.node.tls.client_context(check_hostname=False)

    async def _client(self) -> aiohttp.ClientSession:
        """The session for node-to-node calls; remade every ConnectionResetInterval (new connections,
        and the certificates loaded at that moment)."""
        now = time.monotonic()
        if self._session is not None and now - self._session_made > self.reset_interval:
            self.logger.info("Resetting node-to-node connections (ConnectionResetInterval)")
            await self._session.close()
            self._session = None
        if self._session is None:
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=self._client_ssl()))
            self._session_made = now
        return self._session

    def _url(self, endpoint: tuple[str, int], path: str, *, internal: bool) -> str:
        host, port = endpoint
        host = f"[{host}]" if ":" in host else host
        scheme = "https" if self.node.tls is not None else "http"
        if internal and path.startswith("/internal/replicate"):
            scheme = "wss" if self.node.tls is not None else "ws"
        return f"{scheme}://{host}:{port}{path}"

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
        session = await self._client()
        await asyncio.gather(*(self._gossip_with(session, peer) for peer in self.peers.values()))

    async def _gossip_with(self, session: aiohttp.ClientSession, peer: Peer) -> None:
        url = self._url(peer.seed, "/gossip", internal=False)
        try:
            timeout = aiohttp.ClientTimeout(total=max(self.gossip_interval, 0.5))
            async with session.get(url, timeout=timeout) as response:
                body = await response.json()
        except ssl.SSLError as exc:
            if peer.alive(time.monotonic(), self.gossip_timeout) or peer.last_seen < 0:
                self.logger.error(
                    "Gossip with %s:%d failed: certificate validation error: %s", *peer.seed, exc
                )
            peer.last_seen = min(peer.last_seen, time.monotonic() - self.gossip_timeout - 1)
            return
        except (TimeoutError, aiohttp.ClientError, OSError, ValueError) as exc:
            if peer.alive(time.monotonic(), self.gossip_timeout):
                self.logger.warning("Gossip with %s:%d failed: %s", *peer.seed, exc or type(exc).__name__)
            return
        own = next(
            (
                m
                for m in body.get("members", [])
                if (m.get("httpEndPointIp"), m.get("httpEndPointPort"))
                == (body.get("serverIp"), body.get("serverPort"))
            ),
            None,
        )
        if own is None or own.get("instanceId") == str(self.node.instance_id):
            return
        if not peer.alive(time.monotonic(), self.gossip_timeout):
            self.logger.info("Member %s:%d is alive (%s)", *peer.seed, own.get("state"))
        peer.info = own
        peer.last_seen = time.monotonic()

    def _alive_peers(self) -> list[Peer]:
        now = time.monotonic()
        return [p for p in self.peers.values() if p.alive(now, self.gossip_timeout)]

    async def _evaluate(self) -> None:
        now = time.monotonic()
        alive = self._alive_peers()
        leaders = [p for p in alive if p.info.get("state") == "Leader"]
        if self.is_leader:
            newer = [p for p in leaders if p.info.get("epochNumber", -1) > self.standing().epoch_number]
            if newer:
                self.logger.warning(
                    "Another leader with a newer epoch exists (%s); stepping down", newer[0].seed
                )
                await self._step_down()
            elif self.cluster_size > 1 and 1 + sum(
                1 for p in alive if not p.info.get("isReadOnlyReplica")
            ) < majority(self.cluster_size):
                self.logger.warning("The leader cannot see a majority of the cluster; stepping down")
                await self._step_down()
            return
        if self.state == "ResigningLeader":
            return
        if leaders:
            leader = max(leaders, key=lambda p: p.info.get("epochNumber", -1))
            self._leader_seen = now
            if (
                self.leader_id != leader.info.get("instanceId")
                or self._follow_task is None
                or self._follow_task.done()
            ):
                await self._follow(leader)
            return
        if self.leader_id is not None:
            self.logger.warning("Lost the leader %s; no leader is known", self.leader_id)
            await self._stop_following()
            self._leader_seen = now
        if self.read_only or now < self._no_candidacy_until:
            return
        delay = self.election_timeout * (1 + random.random())
        if now - self._leader_seen >= max(self.gossip_timeout, delay) or self.cluster_size == 1:
            await self._run_election()

    # -- elections -------------------------------------------------------------------------------------
    async def _run_election(self) -> None:
        async with self._election_lock:
            started = time.monotonic()
            await self._stop_following()
            known_terms = [
                max(p.info.get("epochNumber", -1), p.info.get("proposalNumber", -1))
                for p in self.peers.values()
                if p.info
            ]
            term = max([self.term, *known_terms]) + 1
            self.db.log.checkpoints.proposal.write(term)
            self.voted_for = str(self.node.instance_id)
            self.election_count += 1
            request = VoteRequest(term, str(self.node.instance_id), self.standing(), self.priority)
            self.logger.info(
                "Starting an election for term %d (epoch %d, position %d, priority %d)",
                term,
                request.standing.epoch_number,
                request.standing.writer_position,
                self.priority,
            )
            voters = [
                p
                for p in self._alive_peers()
                if not p.info.get("isReadOnlyReplica") and p.replication_endpoint
            ]
            session = await self._client()
            answers = await asyncio.gather(*(self._ask_vote(session, p, request) for p in voters))
            votes = 1 + sum(answers)
            if votes >= majority(self.cluster_size) and self.state not in ("Leader", "ResigningLeader"):
                self.logger.info(
                    "Won the election for term %d with %d of %d votes", term, votes, self.cluster_size
                )
                await self._become_leader(term)
                self.last_election_seconds = time.monotonic() - started
            else:
                self.logger.info(
                    "Lost the election for term %d (%d of %d votes)", term, votes, self.cluster_size
                )
                self._leader_seen = time.monotonic()  # wait a new random delay before trying again

    async def _ask_vote(self, session: aiohttp.ClientSession, peer: Peer, request: VoteRequest) -> bool:
        assert peer.replication_endpoint is not None
        url = self._url(peer.replication_endpoint, "/internal/vote", internal=True)
        try:
            timeout = aiohttp.ClientTimeout(total=self.election_timeout)
            async with session.post(url, json=request.to_json(), timeout=timeout) as response:
                body = await response.json()
        except (TimeoutError, aiohttp.ClientError, OSError, ValueError) as exc:
            self.logger.info("No vote from %s:%d: %s", *peer.seed, exc or type(exc).__name__)
            return False
        if not body.get("granted"):
            self.logger.info("%s:%d refused its vote: %s", *peer.seed, body.get("reason"))
        return bool(body.get("granted"))

    async def _vote_handler(self, request: web.Request) -> web.Response:
        try:
            vote = VoteRequest.from_json(await request.json())
        except (ValueError, KeyError, TypeError) as exc:
            return web.json_response({"granted": False, "reason": f"bad request: {exc}"}, status=400)
        now = time.monotonic()
        leader = self.leader_peer()
        follows_live_leader = self.is_leader or (
            leader is not None
            and leader.alive(now, self.gossip_timeout)
            and leader.info.get("state") == "Leader"
            and leader.info.get("instanceId") != vote.candidate_id
        )
        granted, reason = grant_vote(
            vote,
            voted_term=self.term,
            voted_for=self.voted_for,
            own=self.standing(),
            own_priority=self.priority,
            follows_live_leader=follows_live_leader,
            eligible=not self.read_only and now >= self._no_candidacy_until,
        )
        if self.read_only:
            granted, reason = False, "read-only replicas do not vote"
        if granted:
            # a voter in a new term takes nothing more from an older leader (its acks could confirm writes
            # the new leader does not have)
            await self._stop_following()
            self.db.log.checkpoints.proposal.write(vote.term)
            self.voted_for = vote.candidate_id
            self._leader_seen = now  # give the candidate time to take office
        self.logger.info(
            "Vote for %s in term %d: %s",
            vote.candidate_id,
            vote.term,
            "granted" if granted else f"refused ({reason})",
        )
        return web.json_response({"granted": granted, "reason": reason, "term": self.term})

    # -- leading ---------------------------------------------------------------------------------------
    async def _become_leader(self, term: int) -> None:
        await self._stop_following()
        self.state = "PreLeader"
        self.db.remote_writer = None
        await asyncio.to_thread(self.db.forget_stream_states)
        await asyncio.to_thread(self.db.write_epoch, term, self.node.instance_id)
        if self.cluster_size > 1:
            self.db.replication_gate = self._hold_answers
        self.leader_id = str(self.node.instance_id)
        self.state = "Leader"
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
        self.db.replication_gate = None
        self.db.remote_writer = RemoteWriter(self._loop, None, self._wait_for_position)  # type: ignore[arg-type]
        self._fail_gate(NotLeader())
        self.leader_id = None
        self.state = "Unknown"
        self._leader_seen = time.monotonic()
        if resigning:
            self._no_candidacy_until = time.monotonic() + max(3 * self.gossip_timeout, 5.0)
        self.logger.info("This node is no longer the leader")

    def _hold_answers(self, position: int, answers: list) -> None:
        """The database's replication gate (writer thread): answer once a majority has ``position``."""
        with self._gate_lock:
            self._gate.append((position, answers))
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._release_gate)

    def majority_position(self) -> int:
        positions = [self.db.committed_position]
        positions += [link.acked for link in self._followers.values() if link.voting]
        positions.sort(reverse=True)
        needed = majority(self.cluster_size)
        return positions[needed - 1] if len(positions) >= needed else -1

    def _release_gate(self) -> None:
        if not self._gate:
            return
        confirmed = self.majority_position()
        ready = []
        with self._gate_lock:
            while self._gate and self._gate[0][0] <= confirmed:
                ready.append(self._gate.pop(0))
        for _, answers in ready:
            for future, result in answers:
                if not future.done():
                    future.set_result(result)

    def _fail_gate(self, exc: Exception) -> None:
        with self._gate_lock:
            held, self._gate = self._gate, []
        for _, answers in held:
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
        deadline = time.monotonic() + 5
        end = self.db.committed_position
        while time.monotonic() < deadline and any(
            link.acked < end for link in self._followers.values() if link.voting
        ):
            await self._wait_for_commit(0.1)
        await self._step_down(resigning=True)
        return True

    def _common_point(self, follower_epochs: list[dict], follower_end: int) -> tuple[str, int]:
        """Where a follower's log stops agreeing with ours: ("ok", from) or ("truncate", position) or
        ("refuse", 0) when it shares no epoch with this log."""
        ours = self.db.epochs(64)
        committed = self.db.committed_position
        if not follower_epochs:
            return ("ok", 0) if follower_end == 0 else ("refuse", 0)
        by_key = {(e["epochId"], e["position"]): i for i, e in enumerate(ours)}
        for epoch in follower_epochs:
            index = by_key.get((epoch.get("epochId"), epoch.get("position")))
            if index is None:
                continue
            agreed_until = committed if index == 0 else ours[index - 1]["position"]
            if follower_end > agreed_until:
                return "truncate", agreed_until
            return "ok", follower_end
        return "refuse", 0

    async def _replicate_handler(self, request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse(heartbeat=max(self.gossip_timeout, 1.0), max_msg_size=0)
        await ws.prepare(request)
        try:
            hello = await ws.receive_json(timeout=10)
        except (TimeoutError, TypeError, ValueError):
            await ws.close()
            return ws
        follower = str(hello.get("instanceId"))
        if not self.is_leader:
            await ws.send_json({"error": "not the leader"})
            await ws.close()
            return ws
        verdict, position = self._common_point(hello.get("epochs") or [], int(hello.get("writer", 0)))
        if verdict != "ok":
            self.logger.warning(
                "Follower %s: %s",
                follower,
                f"must truncate its log to {position}"
                if verdict == "truncate"
                else "its database shares no history with this cluster; refused",
            )
            await ws.send_json({verdict: position})
            await ws.close()
            return ws
        self.logger.info("Follower %s subscribed from position %d", follower, position)
        link = self._followers[follower] = _FollowerLink(bool(hello.get("voting")), position)
        await ws.send_json({"ok": True, "from": position, "epoch": self.standing().epoch_number})
        sender = asyncio.create_task(self._send_log(ws, position))
        try:
            async for message in ws:
                if message.type != aiohttp.WSMsgType.TEXT:
                    break
                body = json.loads(message.data)
                if "ack" in body:
                    link.acked = max(link.acked, int(body["ack"]))
                    self._release_gate()
        finally:
            sender.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await sender
            if self._followers.get(follower) is link:
                del self._followers[follower]
            self.logger.info("Follower %s disconnected", follower)
        return ws

    async def _send_log(self, ws: web.WebSocketResponse, position: int) -> None:
        idle_sent = -1
        while not ws.closed and self.state in ("Leader", "ResigningLeader"):
            waiter = self._committed
            start, frames, completed = self.db.read_raw(position, _MAX_SEND)
            if completed is not None:
                await ws.send_json({"complete": completed})
                position = start
            elif frames:
                await ws.send_bytes(_POSITION.pack(start) + frames)
                position = start + len(frames)
            else:
                if idle_sent != position:
                    await ws.send_json({"caughtUp": position})
                    idle_sent = position
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(waiter.wait(), 1.0)
        await ws.close()

    async def _write_handler(self, request: web.Request) -> web.Response:
        if not self.is_leader:
            return web.json_response({"error": "NotLeader", "message": "This node is not the leader."})
        try:
            op, args = decode_write(await request.json())
            if op == "append":
                result = await asyncio.wrap_future(self.db.append_async(**args))
            elif op == "delete":
                result = await asyncio.wrap_future(self.db.delete_stream_async(**args))
            else:
                from evdb.scavenge.point import write_point

                point = await asyncio.to_thread(write_point, self.db, args["threshold"])
                return web.json_response({"position": point.position})
        except EvdbError as exc:
            return web.json_response(encode_error(exc))
        except (ValueError, KeyError, TypeError) as exc:
            return web.json_response({"error": "InvalidInput", "message": f"Bad forwarded write: {exc}"})
        return web.json_response(encode_result(result))

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
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self.leader_id = None
        if not self.is_leader:
            self.db.remote_writer = RemoteWriter(self._loop, None, self._wait_for_position)  # type: ignore[arg-type]
            if self.state != "ResigningLeader":
                self.state = "PreReadOnlyReplica" if self.read_only else "Unknown"

    async def _send_to_leader(self, body: dict) -> dict:
        peer = self.leader_peer()
        if peer is None or peer.replication_endpoint is None:
            raise NotLeader()
        session = await self._client()
        url = self._url(peer.replication_endpoint, "/internal/write", internal=True)
        try:
            async with session.post(url, json=body, timeout=aiohttp.ClientTimeout(total=30)) as response:
                return await response.json()
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise NotLeader() from exc

    async def _replicate_from(self, leader: Peer) -> None:
        backoff = 0.2
        while True:
            endpoint = leader.replication_endpoint
            try:
                if endpoint is None:
                    raise OSError("the leader advertises no replication endpoint")
                await self._replication_session(endpoint)
                backoff = 0.2
            except asyncio.CancelledError:
                raise
            except ssl.SSLError as exc:
                self.logger.error("Replication from the leader failed: certificate validation error: %s", exc)
            except (TimeoutError, aiohttp.ClientError, OSError, EvdbError, ValueError) as exc:
                self.logger.warning("Replication from the leader stopped: %s", exc or type(exc).__name__)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 2.0)

    async def _replication_session(self, endpoint: tuple[str, int]) -> None:
        session = await self._client()
        url = self._url(endpoint, "/internal/replicate", internal=True)
        async with session.ws_connect(url, heartbeat=max(self.gossip_timeout, 1.0), max_msg_size=0) as ws:
            await ws.send_json(
                {
                    "instanceId": str(self.node.instance_id),
                    "voting": not self.read_only,
                    "writer": self.db.committed_position,
                    "epochs": [
                        {"epochId": e["epochId"], "position": e["position"], "epochNumber": e["epochNumber"]}
                        for e in self.db.epochs(64)
                    ],
                }
            )
            first = await ws.receive_json(timeout=10)
            if "truncate" in first:
                await ws.close()
                await self.node.truncate_and_reopen(int(first["truncate"]))
                return
            if "ok" not in first:
                raise EvdbError(f"the leader refused to replicate: {first}")
            resets_at = time.monotonic() + self.reset_interval
            async for message in ws:
                if message.type == aiohttp.WSMsgType.BINARY:
                    (position,) = _POSITION.unpack_from(message.data)
                    committed = await asyncio.to_thread(
                        self.db.apply_replicated, position, bytes(memoryview(message.data)[_POSITION.size :])
                    )
                    await ws.send_json({"ack": committed})
                elif message.type == aiohttp.WSMsgType.TEXT:
                    body = json.loads(message.data)
                    if "complete" in body:
                        await asyncio.to_thread(self.db.complete_replicated_chunk, int(body["complete"]))
                        await ws.send_json({"ack": self.db.committed_position})
                    elif (
                        "caughtUp" in body
                        and self.db.committed_position >= int(body["caughtUp"])
                        and self.state in ("CatchingUp", "PreReadOnlyReplica")
                    ):
                        self.state = "ReadOnlyReplica" if self.read_only else "Follower"
                        self.logger.info(
                            "Caught up with the leader at position %d: now %s", body["caughtUp"], self.state
                        )
                else:
                    break
                if time.monotonic() > resets_at:
                    self.logger.info("Resetting the replication connection (ConnectionResetInterval)")
                    await ws.close()
                    if self._session is not None:
                        await self._session.close()
                        self._session = None
                    return

    def describe(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "leaderId": self.leader_id,
            "term": self.term,
            "followers": {k: {"voting": v.voting, "acked": v.acked} for k, v in self._followers.items()},
            "elections": self.election_count,
            "lastElectionSeconds": self.last_election_seconds,
            "nodeId": str(uuid.UUID(str(self.node.instance_id))),
        }
