"""One simulated cluster under a seed: its nodes, clients and reader, and the run."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Coroutine
from typing import Any

from evdb.cluster.sim.checks import LIVENESS_GRACE, PROBE_EVERY
from evdb.cluster.sim.faults import Faults

Schedule = Callable[["Simulation", float], Coroutine[Any, Any, None]]


class Simulation(Faults):
    """One simulated cluster under a seed: three clients that append with client event ids (retrying
    the same ids on other nodes), a reader that samples what nodes serve, the seed's faults (or a
    given schedule), then healing and the final checks (:meth:`run`)."""

    async def client(self, k: int, until: float) -> None:
        n = 0
        while self.loop.time() < until:
            await asyncio.sleep(self.rng.uniform(0.002, 0.05))
            event_id = str(uuid.UUID(int=self.rng.getrandbits(128)))
            # one write in five changes a user (the leases hold its answer: check_sign_ins)
            stream = f"$user-c{k}" if n % 5 == 4 else f"s{k}-{n % 3}"
            self._streams[event_id] = stream
            n += 1
            for _attempt in range(6):
                node = self.rng.choice(self.nodes)
                result = await self._append(node, stream, event_id)
                if result is not None:
                    self._acknowledge(node, event_id, result)
                    break
                await asyncio.sleep(self.rng.uniform(0.01, 0.1))

    async def reader(self, until: float) -> None:
        while self.loop.time() < until:
            await asyncio.sleep(self.rng.uniform(0.01, 0.1))
            node = self.rng.choice(self.nodes)
            if not node.alive or node.index in self.paused or node.db is None:
                continue
            for record in node.db.visible()[-5:]:
                if record.kind == "event":
                    self.reads.append((node.name, record.position, record.event_id))

    async def run(self, seconds: float, clients: int, schedule: Schedule | None = None) -> None:
        for node in self.nodes:
            await self.start_node(node)
        until = self.loop.time() + seconds
        tasks = [self.loop.create_task(self.client(k, until)) for k in range(clients)]
        tasks.append(self.loop.create_task(self.reader(until)))
        faults = self.faults_loop(until) if schedule is None else schedule(self, until)
        tasks.append(self.loop.create_task(faults))
        liveness = self.loop.create_task(self.liveness_loop())
        await asyncio.gather(*tasks)
        # heal: everyone up and connected, then wait (bounded) for the logs to agree
        self.partition, self.paused, self.loss, self.slow = {}, set(), 0.0, 0.0
        self.cuts, self.reloaded = set(), {}
        self._reset_lingering()
        healed = self.loop.time()
        for node in self.nodes:
            if not node.alive:
                await self.start_node(node)
        # one more write after healing: a leader commits its predecessors' records only with one of its own
        for _ in range(100):
            node = self.rng.choice(self.nodes)
            event_id = str(uuid.UUID(int=self.rng.getrandbits(128)))
            result = await self._append(node, "final", event_id)
            if result is not None:
                self._acknowledge(node, event_id, result)
                break
            await asyncio.sleep(0.2)
        else:
            self.violation("no write was acknowledged in 20 s after healing")
        # the healed cluster is a majority connected both ways: the liveness check must see its one
        # leader stay and acknowledge writes for a while; then no probe write is left in flight
        await asyncio.sleep(max(0.0, healed + LIVENESS_GRACE + 2 * PROBE_EVERY - self.loop.time()))
        liveness.cancel()
        while self._probing:
            await asyncio.sleep(0.05)
        deadline = self.loop.time() + 30
        while self.loop.time() < deadline:
            logs = [n.db.records[: n.db.synced] for n in self.nodes]
            limits = [n.db.readable_position for n in self.nodes]
            if all(log == logs[0] for log in logs) and len(set(limits)) == 1:
                break
            await asyncio.sleep(0.1)
        else:
            ends = {
                n.name: (n.db.committed_position, n.db.readable_position, n.service.state) for n in self.nodes
            }
            self.violation(f"the logs did not converge within 30 s of healing: {ends}")
        self.elections = sum(n.service.election_count for n in self.nodes)
        self.final_check()
        for node in self.nodes:
            await self.crash(node)
