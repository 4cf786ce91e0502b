"""The auto-scavenge service of one node: runs the process while the node leads, hands over when it
does not, and forwards the endpoints' requests to the leader.

Every node (leader, followers, read-only replicas) has one. Only the leader's does anything: every
``AutoScavengeAssessIntervalMs`` it reads the streams if it has just become the leader, then assesses
(:meth:`AutoScavengeMachine.assess`). A command (configure, pause, resume) wakes it at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import aiohttp

from evdb.autoscavenge.enabling import Enabling, decide
from evdb.autoscavenge.machine import AutoScavengeMachine, Member
from evdb.autoscavenge.nodeauth import NODE_SCHEME, current_token, ensure_node_token
from evdb.autoscavenge.scavenger import HttpNodeScavenger, NodeUnreachable
from evdb.autoscavenge.state import CONFIGURATION_STREAM, EVENTS_STREAM
from evdb.errors import StreamNotFound
from evdb.streams import NewEvent

if TYPE_CHECKING:
    from evdb.node import Node

__all__ = ["AutoScavengeService", "create_auto_scavenge"]


def _endpoint(host: str, port: int | str) -> str:
    host = str(host)
    return f"[{host}]:{int(port)}" if ":" in host else f"{host}:{int(port)}"


class NodeClusterView:
    """The machine's view of the cluster, from the node's gossip."""

    def __init__(self, node: Node) -> None:
        self.node = node

    @property
    def is_leader(self) -> bool:
        cluster = self.node.cluster
        return cluster is not None and cluster.is_leader

    @property
    def self_endpoint(self) -> str:
        return _endpoint(self.node.advertised_host, self.node.port)

    @property
    def cluster_size(self) -> int:
        return self.node.cluster.cluster_size if self.node.cluster else 1

    def members(self) -> list[Member]:
        cluster = self.node.cluster
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
        if self.node.cluster is not None:
            await self.node.cluster.resign()


class DatabaseStore:
    """The two system streams in the node's database (writes go through the leader's writer)."""

    def __init__(self, node: Node) -> None:
        self.node = node

    async def load(self) -> tuple[list[tuple[str, dict]], list[tuple[str, dict]], int]:
        def read() -> tuple[list[tuple[str, dict]], list[tuple[str, dict]], int]:
            db = self.node.db
            assert db is not None
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
            return config, events, version

        return await asyncio.to_thread(read)

    async def append(self, stream: str, event_type: str, data: dict, expected_version: int) -> int:
        db = self.node.db
        assert db is not None
        event = NewEvent(event_type, json.dumps(data, separators=(",", ":")).encode(), is_json=True)
        result = await asyncio.wrap_future(db.append_async(stream, [event], expected_version))
        return result.next_expected_version


class AutoScavengeService:
    def __init__(self, node: Node, enabling: Enabling) -> None:
        o = node.options
        self.node = node
        self.enabling = enabling
        self.active = enabling.active
        self.logger = node.logger
        self.interval = o.auto_scavenge_assess_interval_ms / 1000
        self.allow_seconds = bool(o.auto_scavenge_schedule_seconds)
        # every call to another node goes through the node's one peer client (evdb/cluster/peers.py):
        # a certificate reload reaches the forwarder and the node scavenges too
        self.peers = node.peer_client
        self._token: str | None = None
        self.scavenger = HttpNodeScavenger(
            peers=self.peers, authorization=self._authorization, db=lambda: node.db
        )
        self.cluster = NodeClusterView(node)
        self.machine = AutoScavengeMachine(
            clock=node.clock,
            store=DatabaseStore(node),
            scavenger=self.scavenger,
            cluster=self.cluster,
            logger=node.logger,
            node_timeout=float(o.auto_scavenge_node_timeout_sec),
        )
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None

    # -- lifecycle ---------------------------------------------------------------------------------
    async def start(self) -> None:
        if self.active:
            self._task = asyncio.create_task(self._run(), name=f"{self.node.name}-auto-scavenge")

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
        sleeper = asyncio.ensure_future(self.node.clock.sleep(self.interval))
        waker = asyncio.ensure_future(self._wake.wait())
        try:
            await asyncio.wait({sleeper, waker}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (sleeper, waker):
                task.cancel()
            self._wake.clear()

    def _licensed(self) -> bool:
        lic = self.node.license
        if lic is not None and lic.allows("AUTO_SCAVENGE", self.node.clock.time()):
            return True
        if self.active:
            why = (
                "the licence has expired"
                if lic is not None and lic.is_expired(self.node.clock.time())
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
            await self._ensure_loaded()
            await self.machine.assess()

    async def _ensure_loaded(self) -> None:
        if not self.machine.loaded:
            self._token = await asyncio.to_thread(ensure_node_token, self.node.db)
            await self.machine.load()

    @contextlib.asynccontextmanager
    async def leading(self) -> AsyncIterator[AutoScavengeMachine]:
        """The loaded machine, for one command on the leader (under the lock)."""
        async with self.machine.lock:
            await self._ensure_loaded()
            yield self.machine
        self.wake()

    async def _authorization(self) -> str:
        token = self._token
        if token is None:
            token = await asyncio.to_thread(current_token, self.node.db)
            if token is None:
                raise NodeUnreachable("the cluster has no node token yet")
            self._token = token
        return f"{NODE_SCHEME} {token}"

    # -- forwarding --------------------------------------------------------------------------------
    async def forward(
        self, endpoint: tuple[str, int], method: str, path: str, body: bytes, headers: dict[str, str]
    ) -> tuple[int, bytes, str]:
        """Send a request to the leader with the caller's credentials; (status, body, content type)."""
        session = await self.peers.session()
        url = f"{self.peers.scheme}://{_endpoint(*endpoint)}{path}"
        async with session.request(
            method, url, data=body or None, headers=headers, timeout=aiohttp.ClientTimeout(total=30)
        ) as response:
            data = await response.read()
            return response.status, data, response.headers.get("Content-Type", "")


def create_auto_scavenge(node: Node) -> AutoScavengeService:
    """Decide (and log) whether auto-scavenge runs on ``node``; the service (not started yet).

    Raises AutoScavengeNotLicensed when the earlier plugin form is enabled without a valid licence."""
    from evdb.version import VERSION

    enabling = decide(node.options, node.license, node.clock.time(), node.logger, VERSION)
    return AutoScavengeService(node, enabling)
