"""The auto-scavenge service of one node: runs the process while the node leads, hands over when it
does not, and forwards the endpoints' requests to the leader.

Every node (leader, followers, read-only replicas) has one. Only the leader's does anything: every
``AutoScavengeAssessIntervalMs`` it reads the streams if it has just become the leader (once it can
read its whole log: :class:`~evdb.autoscavenge.machine.TakingOffice`), then assesses
(:meth:`AutoScavengeMachine.assess`). A command (configure, pause, resume) wakes it at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from evdb.autoscavenge.enabling import Enabling, decide
from evdb.autoscavenge.machine import AutoScavengeMachine, Member, StoredStreams, TakingOffice
from evdb.autoscavenge.nodeauth import NODE_SCHEME, current_token, ensure_node_token
from evdb.autoscavenge.scavenger import HttpNodeScavenger, NodeUnreachable
from evdb.autoscavenge.state import CONFIGURATION_STREAM, EVENTS_STREAM
from evdb.errors import DatabaseReopening, NotLeader, StreamNotFound
from evdb.streams import NewEvent

if TYPE_CHECKING:
    from evdb.clock import Clock
    from evdb.cluster.peers import PeerClient
    from evdb.database import Database
    from evdb.licensing import License
    from evdb.options import Options

__all__ = [
    "AutoScavengeService",
    "AutoScavengeSettings",
    "ClusterMembership",
    "DatabaseStore",
    "MembershipView",
    "create_auto_scavenge",
]


def _endpoint(host: str, port: int | str) -> str:
    host = str(host)
    return f"[{host}]:{int(port)}" if ":" in host else f"{host}:{int(port)}"


class ClusterMembership(Protocol):
    """What auto-scavenge needs of the node's cluster membership (evdb.cluster.ClusterService is one)."""

    @property
    def is_leader(self) -> bool: ...

    cluster_size: int

    def members(self) -> list[dict[str, Any]]:
        """The gossip's members (``httpEndPointIp``, ``state``, ``isAlive``, ...)."""

    async def resign(self) -> bool:
        """Step down as leader (False when this node does not lead)."""

    def leader_http_endpoint(self) -> tuple[str, int] | None: ...


@dataclass(frozen=True)
class AutoScavengeSettings:
    """The node options auto-scavenge reads (AutoScavenge*)."""

    assess_interval: float  # seconds
    allow_seconds: bool  # a six-field schedule with seconds (AutoScavengeScheduleSeconds)
    node_timeout: float  # seconds

    @classmethod
    def from_options(cls, o: Options) -> AutoScavengeSettings:
        return cls(
            assess_interval=o.auto_scavenge_assess_interval_ms / 1000,
            allow_seconds=bool(o.auto_scavenge_schedule_seconds),
            node_timeout=float(o.auto_scavenge_node_timeout_sec),
        )


class MembershipView:
    """The machine's view of the cluster (:class:`ClusterView`), from the node's gossip; a single node
    (no cluster) is a leader of one."""

    def __init__(self, cluster: Callable[[], ClusterMembership | None], self_endpoint: Callable[[], str]):
        self._cluster = cluster
        self._self_endpoint = self_endpoint

    @property
    def is_leader(self) -> bool:
        cluster = self._cluster()
        return cluster is not None and cluster.is_leader

    @property
    def self_endpoint(self) -> str:
        return self._self_endpoint()

    @property
    def cluster_size(self) -> int:
        cluster = self._cluster()
        return cluster.cluster_size if cluster is not None else 1

    def leader_http_endpoint(self) -> tuple[str, int] | None:
        cluster = self._cluster()
        return cluster.leader_http_endpoint() if cluster is not None else None

    def members(self) -> list[Member]:
        cluster = self._cluster()
        if cluster is None:
            return []
        out = []
        for m in cluster.members():
            if "httpEndPointIp" not in m or "httpEndPointPort" not in m:
                continue
            out.append(
                Member(
                    endpoint=_endpoint(m["httpEndPointIp"], m["httpEndPointPort"]),
                    state=str(m.get("state", "Unknown")),
                    alive=bool(m.get("isAlive")),
                    read_only=bool(m.get("isReadOnlyReplica")),
                    writer=int(m.get("writerCheckpoint", -1)),
                )
            )
        return out

    async def resign(self) -> None:
        cluster = self._cluster()
        if cluster is not None:
            await cluster.resign()


class DatabaseStore:
    """The two system streams in the node's database, written only while this node leads (through its
    own writer: never sent on to another node, as a follower's writes are)."""

    def __init__(self, db: Callable[[], Database | None], is_leader: Callable[[], bool]) -> None:
        self._db = db
        self._is_leader = is_leader

    def db(self) -> Database:
        db = self._db()
        if db is None:
            raise NodeUnreachable("the node's database is not open")
        return db

    def term(self) -> int:
        db = self._db()
        if db is None:  # closed for a moment (never on a leader but while it stops)
            raise DatabaseReopening()
        epochs = db.epochs(1)
        return int(epochs[0]["epochNumber"]) if epochs else -1

    async def load(self) -> StoredStreams:
        def read() -> StoredStreams:
            db = self.db()
            epochs = db.epochs(1)
            term = int(epochs[0]["epochNumber"]) if epochs else -1
            readable = db.readable_position
            if epochs and readable < int(epochs[0]["position"]):
                # a leader that has just taken office: the records before its epoch record (the last
                # ones of the previous leader among them) are all readable once a majority holds it
                raise TakingOffice(
                    f"its log is readable up to position {readable}, the previous leader's records end "
                    f"at its epoch {term} record at {epochs[0]['position']} (readable once a majority "
                    "holds that record)"
                )
            config: list[tuple[str, dict]] = []
            try:
                for e in db.read_stream_backward(CONFIGURATION_STREAM, None, 1).events:
                    config.append((e.event_type, json.loads(e.data)))
            except StreamNotFound:
                pass
            events: list[tuple[str, dict]] = []
            version = -1
            start = 0
            while True:
                try:
                    page = db.read_stream_forward(EVENTS_STREAM, start, 1000)
                except StreamNotFound:
                    break
                events += [(e.event_type, json.loads(e.data)) for e in page.events]
                version = page.last_event_number
                if page.is_end_of_stream or not page.events:
                    break
                start = page.next_event_number
            return StoredStreams(config, events, version, term)

        return await asyncio.to_thread(read)

    async def append(self, stream: str, event_type: str, data: dict, expected_version: int) -> int:
        event = NewEvent(event_type, json.dumps(data, separators=(",", ":")).encode(), is_json=True)
        db = self.db()
        # checked and submitted with no await between: a node that stepped down (its writes go to the
        # leader) never writes the auto-scavenge's decisions, made from its own state, into the next
        # leader's streams
        if not self._is_leader():
            raise NotLeader()
        result = await asyncio.wrap_future(db.append_async(stream, [event], expected_version))
        return result.next_expected_version


class AutoScavengeService:
    """One node's auto-scavenge. Its ports: the settings, the clock, the licence in force, the database
    (reopened after a truncation: a getter), the cluster membership and the node's one peer client."""

    def __init__(
        self,
        *,
        enabling: Enabling,
        settings: AutoScavengeSettings,
        clock: Clock,
        logger: logging.Logger,
        name: str,
        license: Callable[[], License | None],
        db: Callable[[], Database | None],
        cluster: MembershipView,
        peers: PeerClient,
    ) -> None:
        self.enabling = enabling
        self.active = enabling.active
        self.logger = logger
        self.name = name
        self.clock = clock
        self._license = license
        self.store = DatabaseStore(db, lambda: cluster.is_leader)
        self.interval = settings.assess_interval
        self.allow_seconds = settings.allow_seconds
        # every call to another node goes through the node's one peer client (evdb/cluster/peers.py):
        # a certificate reload reaches the forwarder and the node scavenges too
        self.peers = peers
        self._token: str | None = None
        self.scavenger = HttpNodeScavenger(peers=peers, authorization=self._authorization, db=db)
        self.cluster = cluster
        self.machine = AutoScavengeMachine(
            clock=clock,
            store=self.store,
            scavenger=self.scavenger,
            cluster=cluster,
            logger=logger,
            node_timeout=settings.node_timeout,
            prepare=self._ensure_token,
        )
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None

    # -- lifecycle ---------------------------------------------------------------------------------
    async def start(self) -> None:
        if self.active:
            self._task = asyncio.create_task(self._run(), name=f"{self.name}-auto-scavenge")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self.machine.close()
        await self.scavenger.close()

    def wake(self) -> None:
        self._wake.set()

    async def _run(self) -> None:
        while True:
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception:
                self.logger.exception("Auto-scavenge assessment failed; retrying at the next one")
            if not self.active:
                return
            await self._sleep()

    async def _sleep(self) -> None:
        sleeper = asyncio.ensure_future(self.clock.sleep(self.interval))
        waker = asyncio.ensure_future(self._wake.wait())
        try:
            await asyncio.wait({sleeper, waker}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (sleeper, waker):
                task.cancel()
            self._wake.clear()

    def _licensed(self) -> bool:
        lic = self._license()
        if lic is not None and lic.allows("AUTO_SCAVENGE", self.clock.time()):
            return True
        if self.active:
            why = (
                "the licence has expired"
                if lic is not None and lic.is_expired(self.clock.time())
                else ("no valid licence with the AUTO_SCAVENGE entitlement")
            )
            self.logger.error("AutoScavenge is not licensed, stopping. %s", why.capitalize())
            self.active = False
            self.machine.unload()
        return False

    async def tick(self) -> None:
        """One round: hand over if not leading, else (load and) assess."""
        if not self._licensed():
            return
        if not self.cluster.is_leader:
            if self.machine.loaded:
                async with self.machine.lock:
                    self.machine.unload()
                self.logger.info(
                    "This node is no longer the leader: auto-scavenge hands over to the next leader, which "
                    "carries on from %s",
                    EVENTS_STREAM,
                )
            return
        async with self.machine.lock:
            try:
                await self.machine.ensure_loaded()
                await self.machine.assess()
            except TakingOffice:
                return  # logged once by the machine; the next round looks again
            except NotLeader:
                return  # the state was dropped (logged): the next round reads the streams, if it leads

    async def _ensure_token(self) -> None:
        self._token = await asyncio.to_thread(ensure_node_token, self.store.db())

    @contextlib.asynccontextmanager
    async def leading(self) -> AsyncIterator[AutoScavengeMachine]:
        """The loaded machine, for one command on the leader (under the lock). NotLeader when this
        node does not lead (any more: the request waited for the lock), or is taking office."""
        async with self.machine.lock:
            if not self.cluster.is_leader:
                raise NotLeader()
            await self.machine.ensure_loaded()
            yield self.machine
        self.wake()

    async def _authorization(self) -> str:
        token = self._token
        if token is None:
            token = await asyncio.to_thread(current_token, self.store.db())
            if token is None:
                raise NodeUnreachable("the cluster has no node token yet")
            self._token = token
        return f"{NODE_SCHEME} {token}"

    # -- forwarding --------------------------------------------------------------------------------
    async def forward(
        self, endpoint: tuple[str, int], method: str, path: str, body: bytes, headers: dict[str, str]
    ) -> tuple[int, bytes, str]:
        """Send a request to the leader with the caller's credentials; (status, body, content type).
        PeerError (naming the leader and the reason) when the leader does not answer."""
        answer = await self.peers.request(
            method,
            endpoint,
            path,
            data=body or None,
            headers=headers,
            timeout=30,
            what=f"forwarding {method} {path} to the leader {_endpoint(*endpoint)}",
        )
        return answer.status, answer.body, answer.content_type


def create_auto_scavenge(
    options: Options,
    *,
    license: Callable[[], License | None],
    clock: Clock,
    logger: logging.Logger,
    name: str,
    db: Callable[[], Database | None],
    cluster: MembershipView,
    peers: PeerClient,
) -> AutoScavengeService:
    """Decide (and log) whether auto-scavenge runs on this node; the service (not started yet).

    Raises AutoScavengeNotLicensed when the earlier plugin form is enabled without a valid licence."""
    from evdb.version import VERSION

    enabling = decide(options, license(), clock.time(), logger, VERSION)
    return AutoScavengeService(
        enabling=enabling,
        settings=AutoScavengeSettings.from_options(options),
        clock=clock,
        logger=logger,
        name=name,
        license=license,
        db=db,
        cluster=cluster,
        peers=peers,
    )
