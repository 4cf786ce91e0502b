"""What a simulated cluster is at each moment: its nodes, the network's state (partitions, cuts,
pauses, loss, certificate splits) and what the checker has recorded."""

from __future__ import annotations

import asyncio
import logging
import math
import random
import sys
import uuid
from itertools import combinations

from evdb.cluster.election import majority
from evdb.cluster.sim.disk import ANY
from evdb.cluster.sim.loop import SimLoop
from evdb.cluster.sim.nodes import SimNode
from evdb.cluster.sim.records import SimRecord
from evdb.cluster.transport import PeerError
from evdb.errors import EvdbError
from evdb.streams import AppendResult, NewEvent


class SimulationState:
    """The state of one simulated cluster, what its network carries (link_up, reaches, both_ways) and
    its writes through a node (_append). The checker (checks.py), the faults (faults.py) and the run
    (simulation.py) build on it, in that order."""

    def __init__(self, seed: int, nodes: int = 3, *, verbose: bool = False) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.loop = SimLoop()
        self.size = nodes
        self.verbose = verbose
        self.nodes: list[SimNode] = []
        self.by_port: dict[int, SimNode] = {}
        self.partition: dict[int, int] = {}  # node index -> side; nodes on different sides cannot talk
        self.cuts: set[tuple[int, int]] = set()  # (a, b): messages from node a to node b are lost
        #: a certificate split: node index -> (when it reloaded new certificates, when the connections
        #: opened before then are reset); the others trust only the old ones
        self.reloaded: dict[int, tuple[float, float]] = {}
        self.paused: set[int] = set()
        #: the liveness check (check_liveness): majority -> since when it has been connected both ways;
        #: node index -> when a fault last disturbed it; majority -> the (leader, epoch) it must keep
        self._connected_since: dict[frozenset[int], float] = {}
        self._disturbed: dict[int, float] = {}
        self._kept_leader: dict[frozenset[int], tuple[str, int]] = {}
        self._linked: set[frozenset[int]] = set()
        self._probing = False
        self._checking_liveness = False
        self.liveness_checks = 0  # how many times a majority was required to have its one leader
        self.loss = 0.0
        self.slow = 0.0
        self.violations: list[str] = []
        self.acknowledged: dict[str, tuple[int, int]] = {}  # event id -> (position, acknowledged at)
        self._streams: dict[str, str] = {}  # event id -> the stream a client wrote it to
        self.writers_by_epoch: dict[int, set[str]] = {}
        self.written_by: dict[str, tuple[str, int]] = {}  # event id -> (node, epoch) that wrote it first
        self.reads: list[tuple[str, int, str]] = []  # (node, position, event id)
        self.history: dict[int, SimRecord] = {}  # what nodes served at each position (one history)
        self._served_up_to: dict[str, int] = {}
        self.faults: list[str] = []
        self.elections = 0
        self.chunk_files = 0  # chunk files followers installed
        #: sign-in leases (evdb/cluster/lease.py): the end of the last write of a user stream acknowledged,
        #: when a node's clock last jumped (leases assume clocks that run steadily: check_sign_ins), and
        #: how many times a node's sign-in decision was checked against the acknowledged user changes
        self.security_acked = 0
        self._clock_jumped_at = -math.inf
        self.sign_in_checks = 0
        for i in range(nodes):
            node = SimNode(self, i, f"node{i + 1}", uuid.UUID(int=self.rng.getrandbits(128)))
            self.nodes.append(node)
            self.by_port[node.port] = node
        self._pairs = list(combinations(self.nodes, 2))
        self._majorities = [
            frozenset(members)
            for k in range(majority(nodes), nodes + 1)
            for members in combinations(range(nodes), k)
        ]
        self._probe_due = 0.0

    def link_up(self, a: SimNode, b: SimNode) -> bool:
        """Whether the wire carries ``a``'s messages to ``b`` (partitions, one-way cuts, pauses)."""
        if a.index in self.paused or b.index in self.paused:
            return False
        if self.partition.get(a.index, 0) != self.partition.get(b.index, 0):
            return False
        return (a.index, b.index) not in self.cuts

    def trusted(self, a: SimNode, b: SimNode) -> bool:
        """Whether ``a`` and ``b`` accept each other's certificates now (a certificate split: the nodes
        that reloaded trust only the new CA, the others only the old one)."""
        return (a.index in self.reloaded) == (b.index in self.reloaded)

    def reaches(self, a: SimNode, b: SimNode, *, opener: SimNode, opened_at: float | None = None) -> bool:
        """Whether a message from ``a`` reaches ``b`` on a connection ``opener`` opened at ``opened_at``
        (None: a pooled connection of ``opener``'s peer client, as gossip and votes use). Across a
        certificate split no new connection is made; one opened before the reload lingers until its
        ConnectionResetInterval-like reset, and a node that did not reload keeps using its pooled
        connections until then (a node that reloaded makes new ones, which the others refuse)."""
        if not self.link_up(a, b):
            return False
        if self.trusted(a, b):
            return True
        reloaded = a if a.index in self.reloaded else b
        started, linger_until = self.reloaded[reloaded.index]
        if self.loop.time() >= linger_until:
            return False
        if opened_at is not None:
            return opened_at < started
        return opener.index not in self.reloaded

    def both_ways(self, a: SimNode, b: SimNode) -> bool:
        """Connected both ways with nothing lingering: what the liveness check counts as connected."""
        return (
            a.alive
            and b.alive
            and not self.loss
            and not self.slow
            and self.link_up(a, b)
            and self.link_up(b, a)
            and self.trusted(a, b)
        )

    def disturb(self, node: SimNode) -> None:
        """A fault that may rightly cost an election: ``node`` crashed, paused, its clock jumped, it
        resigned or its sync failed. The liveness check gives every majority with ``node`` in it (all
        of them, when ``node`` leads) a fresh grace period."""
        now = self.loop.time()
        if node.service is not None and node.service.state in ("Leader", "ResigningLeader", "PreLeader"):
            for other in self.nodes:
                self._disturbed[other.index] = now
        self._disturbed[node.index] = now

    def delay(self, a: SimNode | None, b: SimNode | None) -> float:
        base = self.rng.uniform(0.0002, 0.003)
        if self.rng.random() < self.slow:
            base += self.rng.uniform(0.01, 0.3)  # a late message: reordered behind later ones
        return base

    def violation(self, text: str) -> None:
        line = f"t={self.loop.time():.3f}s {text}"
        if line not in self.violations:
            self.violations.append(line)

    def log(self, text: str) -> None:
        self.faults.append(f"t={self.loop.time():.3f}s {text}")
        if self.verbose:
            print(self.faults[-1], file=sys.stderr)

    def _stamp(self, record: logging.LogRecord) -> bool:
        """(--verbose) Each node's log line starts with the simulated time."""
        record.msg = f"t={self.loop.time():.3f}s {record.msg}"
        return True

    async def _append(
        self, node: SimNode, stream: str, event_id: str, *, timeout: float = 2.0
    ) -> AppendResult | None:
        if not node.alive or node.index in self.paused:
            await asyncio.sleep(0.05)
            return None
        try:
            event = NewEvent("E", b"{}", b"", uuid.UUID(event_id), True)
            future = node.db.append_async(stream, [event], ANY)
            async with asyncio.timeout(timeout):
                return await asyncio.wrap_future(future)
        except (EvdbError, TimeoutError, PeerError, asyncio.CancelledError):
            return None

    async def blocking(self, fn, *args):  # type: ignore[no-untyped-def]
        """A blocking call (a thread in a real node) takes a little time, and other work of the node
        goes on meanwhile: a node taking office may meet client writes while it writes its epoch."""
        await asyncio.sleep(self.rng.uniform(0.0, 0.003))
        return fn(*args)
