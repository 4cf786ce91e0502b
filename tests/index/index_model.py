"""A plain-dict model of the index, and the strategies the index tests draw entries from."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
from hypothesis import strategies as st

from evdb.index.table_index import TableIndex

# Stream ids 0 and 1 share a hash (a collision: their numbers interleave under one hash); the
# extreme hashes check the uint64 handling at both ends.
STREAM_HASHES = (7, 7, 0, 2**64 - 1, 2**63, 12345678901234567)
ABSENT_HASHES = (8, 2**63 - 1, 2**64 - 2)

batches = st.lists(
    st.lists(st.integers(0, len(STREAM_HASHES) - 1), min_size=0, max_size=6),
    min_size=1,
    max_size=40,
)


class IndexModel:
    """What the index must answer: every entry ever added, per hash."""

    def __init__(self) -> None:
        self.entries: dict[int, list[tuple[int, int]]] = {}
        self.next_number = [0] * len(STREAM_HASHES)
        self.position = 0

    def batch(self, streams: Iterable[int]) -> tuple[list[tuple[int, int, int]], int]:
        """Entries for one append per stream id (log positions grow by 10), and the position after them."""
        out = []
        for stream in streams:
            h = STREAM_HASHES[stream]
            number = self.next_number[stream]
            self.next_number[stream] += 1
            out.append((h, number, self.position))
            self.entries.setdefault(h, []).append((number, self.position))
            self.position += 10
        return out, self.position

    def forward(self, h: int, from_number: int = 0) -> list[tuple[int, int]]:
        return sorted(e for e in self.entries.get(h, []) if e[0] >= from_number)

    def backward(self, h: int, before: int | None = None) -> list[tuple[int, int]]:
        return sorted((e for e in self.entries.get(h, []) if before is None or e[0] < before), reverse=True)

    def get(self, h: int, number: int) -> list[int]:
        return sorted((p for n, p in self.entries.get(h, []) if n == number), reverse=True)

    def count(self) -> int:
        return sum(len(v) for v in self.entries.values())

    def keep_only(self, keep: Callable[[int, int, int], bool]) -> None:
        self.entries = {h: [(n, p) for n, p in es if keep(h, n, p)] for h, es in self.entries.items()}

    def before(self, position: int) -> dict[int, list[tuple[int, int]]]:
        return {h: [(n, p) for n, p in es if p < position] for h, es in self.entries.items()}

    def after(self, position: int) -> list[tuple[int, int, int]]:
        """The entries at or after ``position``, in log order: what the database re-adds at start."""
        found = [(p, h, n) for h, es in self.entries.items() for n, p in es if p >= position]
        return [(h, n, p) for p, h, n in sorted(found)]


def assert_matches(index: TableIndex, model: IndexModel) -> None:
    """Every lookup the database makes answers as the model does."""
    for h in set(STREAM_HASHES) | set(ABSENT_HASHES):
        expected = model.forward(h)
        assert list(index.iter_forward(h)) == expected, h
        assert list(index.iter_backward(h)) == expected[::-1], h
        numbers = sorted({n for n, _ in expected})
        probes = {0, 1, numbers[len(numbers) // 2] if numbers else 0, (numbers[-1] + 1) if numbers else 5}
        for n in probes:
            assert list(index.iter_forward(h, n)) == model.forward(h, n), (h, n)
            assert list(index.iter_backward(h, n)) == model.backward(h, n), (h, n)
            assert index.get(h, n) == model.get(h, n), (h, n)
    assert index.entry_count() == model.count()


def keep_by_position(modulus: int, remainder: int) -> tuple[Callable, Callable[[int, int, int], bool]]:
    """A scavenge keep function (numpy) and the same rule for the model (Python)."""

    def keep(hashes: np.ndarray, numbers: np.ndarray, positions: np.ndarray) -> np.ndarray:
        return (positions // 10) % modulus != remainder

    return keep, lambda h, n, p: (p // 10) % modulus != remainder
