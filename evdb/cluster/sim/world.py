"""What a simulated node's disk and network need of the simulation they run in, as protocols: the
checker and the network's state (evdb/cluster/sim/checks.py, state.py) are above them."""

from __future__ import annotations

import random
from typing import Any, Protocol

from evdb.cluster.sim.loop import SimLoop
from evdb.cluster.sim.records import SimRecord


class DiskNode(Protocol):
    """The node a simulated database belongs to (SimNode)."""

    name: str
    #: raised at each start and crash: a sync scheduled by an earlier life does nothing
    incarnation: int


class DiskWorld(Protocol):
    """What SimDatabase tells the checker (Checks), and the time and randomness it draws on."""

    rng: random.Random
    loop: SimLoop
    chunk_files: int

    def violation(self, text: str) -> None: ...

    def check_visible(self, node: Any) -> None: ...

    def check_truncation(self, node: Any, cut: list[SimRecord]) -> None: ...

    def check_cut_below_served(self, node: Any, position: int) -> None: ...

    def find_in_log(self, db: Any, stream: str, ids: list[str]) -> SimRecord | None: ...

    def note_write(self, node: Any, epoch: int, records: list[SimRecord]) -> None: ...

    async def blocking(self, fn: Any, *args: Any) -> Any:
        """A blocking call of a node (a thread in a real one), as the simulation runs it."""


class NetWorld(Protocol):
    """What the simulated network asks of the simulation: where each port is, which links carry what
    (SimulationState.reaches), the delay and loss of a message, and the time and randomness."""

    rng: random.Random
    loop: SimLoop
    loss: float
    by_port: dict[int, Any]

    def reaches(self, a: Any, b: Any, *, opener: Any, opened_at: float | None = None) -> bool: ...

    def delay(self, a: Any, b: Any) -> float: ...
