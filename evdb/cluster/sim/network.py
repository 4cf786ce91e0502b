"""The simulated network: calls between nodes and replication streams, with delay, loss, cuts,
partitions, paused processes and certificate splits (Simulation.reaches)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

from evdb.cluster.sim.nodes import SimNode
from evdb.cluster.sim.world import NetWorld
from evdb.cluster.transport import Message, PeerError


class SimChannel:
    """One end of a replication stream; messages arrive after the network's delay, in order."""

    def __init__(self, sim: NetWorld, owner: SimNode, opener: SimNode) -> None:
        self.sim = sim
        self.owner = owner
        #: the node that opened the connection, and when (a certificate split lets connections opened
        #: before it linger until the connection reset: Simulation.reaches)
        self.opener = opener
        self.opened_at = sim.loop.time()
        self.peer: SimChannel | None = None
        self._inbox: asyncio.Queue = asyncio.Queue()
        self._closed = False
        self._last_arrival = 0.0
        #: (commit position, arrival time) of each commit message sent on this end, in order
        self.commits: list[tuple[int, float]] = []
        #: a message sent on this end was lost: the other end was closed, or the link cut (the stream is
        #: breaking; the follower takes nothing more from it)
        self.lost = False

    @property
    def closed(self) -> bool:
        return self._closed

    def _deliver(self, message: Message | None) -> None:
        target = self.peer
        if target is None or target._closed:
            self.lost = True
            return
        if message is not None and not self.sim.reaches(
            self.owner, target.owner, opener=self.opener, opened_at=self.opened_at
        ):
            # a link that is cut loses what is on it, and the connection breaks at both ends (the
            # WebSocket heartbeat notices on either side)
            self.lost = True
            self.sim.loop.call_soon(target.break_now)
            self.sim.loop.call_soon(self.break_now)
            return
        # strictly after the previous message: timers due at the same instant may run in any order
        arrival = max(
            self.sim.loop.time() + self.sim.delay(self.owner, target.owner), self._last_arrival + 1e-7
        )
        self._last_arrival = arrival
        if message is not None and message.binary is not None and len(message.binary) == 8:
            self.commits.append((int.from_bytes(message.binary, "little", signed=True), arrival))
        self.sim.loop.call_at(arrival, target._inbox.put_nowait, message)

    def commit_arrival(self, end: int) -> float | None:
        """When the first commit message sent on this end that covers ``end`` reaches the other end."""
        for commit, arrival in self.commits:
            if commit >= end:
                return arrival
        return None

    async def send_json(self, value: Any) -> None:
        if self._closed:
            raise PeerError("the replication stream is closed")
        self._deliver(Message(text=json.loads(json.dumps(value))))

    async def send_bytes(self, data: bytes) -> None:
        self.post_bytes(data)

    def post_bytes(self, data: bytes) -> None:
        if self._closed:
            raise PeerError("the replication stream is closed")
        self._deliver(Message(binary=bytes(data)))

    async def receive(self, timeout: float | None = None) -> Message | None:
        if self._closed:
            return None
        try:
            async with asyncio.timeout(timeout):
                message = await self._inbox.get()
        except TimeoutError:
            return None
        if message is None:
            self._closed = True
        return message

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._deliver(None)

    def break_now(self) -> None:
        if not self._closed:
            self._closed = True
            self._inbox.put_nowait(None)


class SimTransport:
    def __init__(self, sim: NetWorld, node: SimNode) -> None:
        self.sim = sim
        self.node = node
        self.channels: list[SimChannel] = []
        # a dict, not a set: a crash cancels them in the order they started, not in the order of their
        # addresses in memory (which differ from run to run in one process)
        self.handler_tasks: dict[asyncio.Task, None] = {}

    def forget_handler(self, task: asyncio.Task) -> None:
        self.handler_tasks.pop(task, None)

    async def start(self, handlers: Any) -> int:
        return self.node.replication_port

    async def stop(self) -> None:
        pass

    async def reset(self) -> None:
        pass

    async def _call(self, target_port: int, timeout: float, call) -> Any:  # type: ignore[no-untyped-def]
        target = self.sim.by_port.get(target_port)
        loop = self.sim.loop
        if (
            target is None
            or not self.sim.reaches(self.node, target, opener=self.node)
            or self.sim.rng.random() < self.sim.loss
        ):
            await asyncio.sleep(min(timeout, self.sim.rng.uniform(0.001, timeout)))
            raise PeerError(f"no answer from port {target_port}")
        await asyncio.sleep(self.sim.delay(self.node, target))
        if not target.alive or not self.alive_self():
            raise PeerError(f"port {target_port} is down")
        task = loop.create_task(call(target))
        target.transport.handler_tasks[task] = None
        task.add_done_callback(target.transport.forget_handler)
        try:
            async with asyncio.timeout(timeout):
                answer = await asyncio.shield(task)
        except TimeoutError as exc:
            raise PeerError(f"timed out calling port {target_port}") from exc
        except asyncio.CancelledError:
            if not task.cancelled():
                raise
            raise PeerError(f"port {target_port} went down during the call") from None
        await asyncio.sleep(self.sim.delay(target, self.node))
        if not self.sim.reaches(target, self.node, opener=self.node):
            raise PeerError(f"the answer from port {target_port} was lost")
        return answer

    def alive_self(self) -> bool:
        return self.node.alive

    async def gossip(self, seed: tuple[str, int], timeout: float) -> dict:
        async def call(target: SimNode) -> dict:
            return target.gossip_answer()

        return await self._call(seed[1], timeout, call)

    async def vote(self, endpoint: tuple[str, int], body: dict, timeout: float) -> dict:
        async def call(target: SimNode) -> dict:
            return await target.service.handle_vote(json.loads(json.dumps(body)))

        return await self._call(endpoint[1] - 1000, timeout, call)

    async def write(self, endpoint: tuple[str, int], body: dict, timeout: float) -> dict:
        async def call(target: SimNode) -> dict:
            return await target.service.handle_write(json.loads(json.dumps(body)))

        return await self._call(endpoint[1] - 1000, timeout, call)

    @contextlib.asynccontextmanager
    async def replicate(self, endpoint: tuple[str, int], heartbeat: float) -> AsyncIterator[SimChannel]:
        target = self.sim.by_port.get(endpoint[1] - 1000)
        await asyncio.sleep(self.sim.delay(self.node, target) if target else 0.01)
        if (
            target is None
            or not target.alive
            or not self.sim.reaches(self.node, target, opener=self.node, opened_at=self.sim.loop.time())
            or not self.sim.reaches(target, self.node, opener=self.node, opened_at=self.sim.loop.time())
        ):
            raise PeerError(f"cannot connect to port {endpoint[1]}")
        mine, theirs = SimChannel(self.sim, self.node, self.node), SimChannel(self.sim, target, self.node)
        mine.peer, theirs.peer = theirs, mine
        self.channels.append(mine)
        target.transport.channels.append(theirs)
        task = self.sim.loop.create_task(target.service.handle_replication(theirs))
        target.transport.handler_tasks[task] = None
        task.add_done_callback(target.transport.forget_handler)
        task.add_done_callback(lambda _t: self.sim.loop.create_task(theirs.close()))
        try:
            yield mine
        finally:
            await mine.close()
            with contextlib.suppress(ValueError):
                self.channels.remove(mine)
