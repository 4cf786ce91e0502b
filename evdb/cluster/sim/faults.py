"""The simulation's faults: the network's state (partitions, one-way cuts, pauses, loss, certificate
splits) and the seed's schedule of faults."""

from __future__ import annotations

import asyncio
import logging
import random
from types import SimpleNamespace
from typing import Any

from evdb.cluster.service import ClusterService
from evdb.cluster.sim.checks import GOSSIP_TIMEOUT, Checks
from evdb.cluster.sim.disk import SimDatabase
from evdb.cluster.sim.network import SimTransport
from evdb.cluster.sim.nodes import SimNode, _Host
from evdb.errors import NotLeader


class Faults(Checks):
    """The fault schedule's part of :class:`~evdb.cluster.sim.simulation.Simulation`: the nodes' lives
    (starts, crashes) and every fault the seed draws."""

    def _options(self, node: SimNode) -> Any:
        seeds = ",".join(f"127.0.0.1:{n.port}" for n in self.nodes if n is not node)
        return SimpleNamespace(
            cluster_size=self.size,
            read_only_replica=False,
            node_priority=0,
            gossip_seed=seeds,
            gossip_interval_ms=100,
            gossip_timeout_ms=int(GOSSIP_TIMEOUT * 1000),
            leader_election_timeout_ms=300,
            connection_reset_interval=1_000_000,
            replication_ip="127.0.0.1",
            replication_port=node.replication_port,
            replication_host_advertise_as=None,
            replication_tcp_port_advertise_as=0,
            certificate_reserved_node_common_name="eventstoredb-node",
        )

    async def start_node(self, node: SimNode) -> None:
        node.incarnation += 1
        node.alive = True
        node.db = SimDatabase(self, node, node.durable)
        node.transport = SimTransport(self, node)
        logger = logging.getLogger(f"evdb.sim.{node.name}")
        logger.disabled = not self.verbose
        if self.verbose and not logger.filters:
            logger.addFilter(self._stamp)
        host = _Host(node, self._options(node), logger)
        node.service = ClusterService(
            # ClusterHost.db is typed as the real Database, not yet as its port (evdb/cluster/ports.py
            # ClusterDatabase, which tests/contracts holds SimDatabase to)
            host,  # type: ignore[arg-type]
            transport=node.transport,
            monotonic=node.monotonic,
            rng=random.Random(self.rng.getrandbits(64)),
            run_blocking=self.blocking,
        )
        await node.service.start()

    async def crash(self, node: SimNode) -> None:
        """kill -9 (or a power cut): every task of the node stops where it is; of what was written and
        not yet synced, a random prefix survives."""
        if not node.alive:
            return
        self.disturb(node)
        node.alive = False
        service = node.service
        tasks = [*service._tasks, *([service._follow_task] if service._follow_task else [])]
        tasks += list(node.transport.handler_tasks)
        for channel in node.transport.channels:
            channel.break_now()
            if channel.peer is not None:
                self.loop.call_soon(channel.peer.break_now)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=1.0)
        stuck = [t for t in tasks if not t.done()]
        if stuck:
            chain, coro = [], stuck[0].get_coro()
            while coro is not None:
                frame = getattr(coro, "cr_frame", None) or getattr(coro, "ag_frame", None)
                if frame is not None:
                    chain.append(f"{frame.f_code.co_name}:{frame.f_lineno}")
                coro = getattr(coro, "cr_await", None) or getattr(coro, "ag_await", None)
            self.violation(
                f"{node.name}: {len(stuck)} task(s) did not stop when cancelled: {' > '.join(chain)}"
            )
        service._fail_gate(NotLeader())
        db = node.db
        db.closed = True
        unsynced = db.records[db.synced :]
        keep = self.rng.randrange(len(unsynced) + 1) if unsynced else 0
        node.durable.records = db.records[: db.synced] + unsynced[:keep]
        self.check_truncation(node, unsynced[keep:])
        node.durable.read_limit = min(node.durable.read_limit, db.committed_position)
        node.incarnation += 1

    def _reload(self, nodes: list[SimNode], linger: float) -> None:
        now = self.loop.time()
        for node in nodes:
            self.reloaded[node.index] = (now, now + linger)
        self.loop.call_at(now + linger + 1e-6, self._reset_lingering)

    def _reset_lingering(self) -> None:
        """The ConnectionResetInterval-like reset: streams across the certificate split break."""
        for node in self.nodes:
            if node.transport is None:
                continue
            for channel in list(node.transport.channels):
                peer = channel.peer
                if peer is not None and not self.reaches(
                    channel.owner, peer.owner, opener=channel.opener, opened_at=channel.opened_at
                ):
                    channel.break_now()
                    self.loop.call_soon(peer.break_now)

    async def certificate_split(self) -> None:
        """Some nodes reload new certificates (from another CA): they and the others refuse each
        other's new connections; connections opened before linger until a reset. Either the rest
        reload later all at once, or one by one (a rolling update)."""
        rng = self.rng
        linger = rng.uniform(0.3, 3.0)
        order = rng.sample(self.nodes, len(self.nodes))
        first = rng.randrange(1, len(self.nodes))
        self._reload(order[:first], linger)
        self.log(
            f"certificate split: {[n.name for n in order[:first]]} reload new certificates "
            f"(old connections linger {linger:.2f}s)"
        )
        if rng.random() < 0.5:
            for node in order[first:-1]:
                await asyncio.sleep(rng.uniform(0.5, 3.0))
                self._reload([node], linger)
                self.log(f"certificate split: {node.name} reloads too")
            await asyncio.sleep(rng.uniform(0.5, 3.0))
        else:
            await asyncio.sleep(rng.uniform(1.0, 5.0))
        self.reloaded = {}
        self.log("certificate split ends: every node trusts the same certificates")

    async def wait_for_leader(self, within: float) -> SimNode | None:
        deadline = self.loop.time() + within
        while self.loop.time() < deadline:
            for node in self.nodes:
                if node.alive and node.service.state == "Leader":
                    return node
            await asyncio.sleep(0.01)
        return None

    async def wait_for_candidate(self, within: float) -> SimNode | None:
        deadline = self.loop.time() + within
        while self.loop.time() < deadline:
            for node in self.nodes:
                if node.alive and node.service.campaigning:
                    return node
            await asyncio.sleep(0.002)
        return None

    async def wait_for_shipped_unsynced(self, node: SimNode, within: float, *, held: bool) -> bool:
        """Wait (at most ``within`` simulated seconds) for ``node`` to have shipped records it has not
        synced yet (``held``: and another node to have synced some of them); whether it did."""
        deadline = self.loop.time() + within
        while self.loop.time() < deadline:
            db = node.db
            shipped = node.alive and not db.closed and db.committed_position < db.shipped <= db.end
            if shipped and (
                not held
                or any(
                    n is not node and n.durable.records and n.durable.records[-1].end > db.committed_position
                    for n in self.nodes
                )
            ):
                return True
            await asyncio.sleep(0.0002)
        return False

    async def crash_shipped(self, leader: SimNode, rng: random.Random) -> None:
        """A power cut of the leader after it shipped records to followers and before its own sync of
        them: followers hold records its log may lose (a random part survives); or, instead, its sync
        of them fails (an I/O error) and they are rolled back on the leader. Nothing happens when it
        shipped nothing unsynced in a moment."""
        shipped = await self.wait_for_shipped_unsynced(leader, rng.uniform(0.1, 1.0), held=rng.random() < 0.7)
        if shipped and leader.alive and rng.random() < 0.3:
            self.log(f"the sync of {leader.name}'s records shipped up to {leader.db.shipped} fails")
            self.disturb(leader)
            leader.db.fail_next_sync = True
        elif shipped and leader.alive:
            sent = leader.db.shipped
            await self.crash(leader)
            kept = leader.durable.records[-1].end if leader.durable.records else 0
            held = max(n.durable.records[-1].end if n.durable.records else 0 for n in self.nodes)
            self.log(
                f"crash {leader.name} between shipping and syncing: it shipped up to {sent}, "
                f"its disk kept up to {kept}, a follower's disk holds up to {held}"
            )
            await asyncio.sleep(rng.uniform(0.05, 1.0))
            if not leader.alive:
                self.log(f"restart {leader.name}")
                await self.start_node(leader)

    async def faults_loop(self, until: float) -> None:
        rng = self.rng
        while self.loop.time() < until:
            await asyncio.sleep(rng.uniform(0.2, 1.5))
            kind = rng.choice(
                [
                    "crash",
                    "crash",
                    "crash-leader",
                    "crash-shipped",
                    "partition",
                    "pause",
                    "clock",
                    "loss",
                    "resign",
                    "double",
                    "one-way",
                    "asymmetric",
                    "certificate-split",
                    "flap",
                    "restart-in-election",
                ]
            )
            alive = [n for n in self.nodes if n.alive]
            leader = next((n for n in alive if n.service.state == "Leader"), None)
            if kind == "crash-shipped" and leader is not None:
                await self.crash_shipped(leader, rng)
                continue
            if kind in ("crash", "crash-leader", "double"):
                victims = [leader] if kind == "crash-leader" and leader else [rng.choice(self.nodes)]
                if kind == "double":
                    victims = rng.sample(self.nodes, 2)
                for victim in victims:
                    if victim.alive:
                        self.log(f"crash {victim.name} ({victim.service.state})")
                        await self.crash(victim)
                await asyncio.sleep(rng.uniform(0.05, 1.0))
                for victim in victims:
                    if not victim.alive:
                        self.log(f"restart {victim.name}")
                        await self.start_node(victim)
            elif kind == "partition":
                sides = {n.index: rng.randrange(2) for n in self.nodes}
                self.partition = sides
                self.log(f"partition {sides}")
                await asyncio.sleep(rng.uniform(0.2, 2.0))
                self.partition = {}
                self.log("heal partition")
            elif kind == "pause":
                victim = leader or rng.choice(self.nodes)
                self.disturb(victim)
                self.paused.add(victim.index)
                self.log(f"pause {victim.name}")
                pause = rng.uniform(0.2, 2.0)
                await asyncio.sleep(pause)
                self.paused.discard(victim.index)
                victim.clock_offset += 0.0  # its monotonic clock ran on meanwhile, as a real one does
                self.log(f"resume {victim.name}")
            elif kind == "clock":
                victim = rng.choice(self.nodes)
                jump = rng.uniform(0.1, 2.0)
                victim.clock_offset += jump
                self._clock_jumped_at = self.loop.time()
                self.disturb(victim)
                self.log(f"clock of {victim.name} jumps {jump:.2f}s")
            elif kind == "loss":
                self.loss, self.slow = rng.uniform(0.0, 0.3), rng.uniform(0.0, 0.3)
                self.log(f"loss {self.loss:.2f} slow {self.slow:.2f}")
                await asyncio.sleep(rng.uniform(0.2, 1.5))
                self.loss = self.slow = 0.0
            elif kind == "resign" and leader is not None:
                self.log(f"resign {leader.name}")
                self.disturb(leader)
                self.loop.create_task(leader.service.resign())
            elif kind == "one-way":
                a, b = rng.sample(self.nodes, 2)
                self.cuts.add((a.index, b.index))
                self.log(f"cut {a.name} -> {b.name} (one way)")
                await asyncio.sleep(rng.uniform(0.5, 4.0))
                self.cuts.discard((a.index, b.index))
                self.log(f"heal {a.name} -> {b.name}")
            elif kind == "asymmetric":
                x = rng.choice(self.nodes)
                others = [n for n in self.nodes if n is not x]
                shape = rng.choice(["hears nobody", "reaches nobody", "cut from one"])
                if shape == "hears nobody":
                    cuts = {(o.index, x.index) for o in others}
                elif shape == "reaches nobody":
                    cuts = {(x.index, o.index) for o in others}
                else:  # the others still reach both ends
                    y = rng.choice(others)
                    cuts = {(x.index, y.index), (y.index, x.index)}
                    shape = f"cut from {y.name}"
                self.cuts |= cuts
                self.log(f"asymmetric partition: {x.name} {shape}")
                await asyncio.sleep(rng.uniform(0.5, 4.0))
                self.cuts -= cuts
                self.log(f"heal {x.name}")
            elif kind == "certificate-split":
                await self.certificate_split()
            elif kind == "flap":
                a, b = rng.sample(self.nodes, 2)
                pair = {(a.index, b.index), (b.index, a.index)}
                self.log(f"the link {a.name} <-> {b.name} flaps")
                end = self.loop.time() + rng.uniform(1.0, 4.0)
                while self.loop.time() < end:
                    self.cuts ^= pair
                    await asyncio.sleep(rng.uniform(0.05, 0.5))
                self.cuts -= pair
                self.log(f"the link {a.name} <-> {b.name} is steady")
            elif kind == "restart-in-election":
                # kill the leader, then the first node that stands for election, mid-election
                if leader is not None:
                    self.log(f"crash {leader.name} ({leader.service.state})")
                    await self.crash(leader)
                candidate = await self.wait_for_candidate(rng.uniform(0.5, 3.0))
                if candidate is not None:
                    self.log(f"crash {candidate.name} in its election")
                    await self.crash(candidate)
                    await asyncio.sleep(rng.uniform(0.0, 0.3))
                    self.log(f"restart {candidate.name}")
                    await self.start_node(candidate)
                await asyncio.sleep(rng.uniform(0.05, 1.0))
                if leader is not None and not leader.alive:
                    self.log(f"restart {leader.name}")
                    await self.start_node(leader)
