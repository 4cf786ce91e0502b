"""MemTable.add_arrays (the scavenge's rebuilt memtables) and MemTable.entry_arrays (its calculation's
reads) in bulk give what the entry-at-a-time paths give: the same per-hash lists, the same hashes
marked unordered, the same entries."""

from __future__ import annotations

import random

import numpy as np

from evdb.index.memtable import MemTable


def _entries(rng: random.Random, count: int, start: int) -> list[tuple[int, int, int]]:
    """Appends of runs of one stream, some numbers going back (colliding streams), a few huge hashes."""
    out: list[tuple[int, int, int]] = []
    position = start
    while len(out) < count:
        h = rng.choice([1, 2, 3, 7, 2**64 - 1, rng.randrange(2**64)])
        first = rng.randrange(0, 50)
        for k in range(rng.randrange(1, 6)):
            number = first + k if rng.random() < 0.9 else rng.randrange(0, 50)
            out.append((h, number, position))
            position += 100
    return out[:count]


def _state(table: MemTable) -> tuple:
    streams = {h: (slot if isinstance(slot, int) else list(slot)) for h, slot in table._streams.items()}
    return (list(table._hashes), list(table._numbers), list(table._positions), streams, set(table._unordered))


def test_add_arrays_builds_what_add_builds():
    rng = random.Random(38)
    for _ in range(30):
        one, bulk = MemTable(), MemTable()
        start = 0
        for _ in range(rng.randrange(1, 4)):  # onto hashes already there, too
            batch = _entries(rng, rng.randrange(1, 40), start)
            start = batch[-1][2] + 100
            one.add(batch, one.last_position)
            columns = np.array(batch, dtype=object).T
            bulk.add_arrays(
                np.array(columns[0].tolist(), dtype=np.uint64),
                np.array(columns[1].tolist(), dtype=np.int64),
                np.array(columns[2].tolist(), dtype=np.int64),
            )
        assert _state(bulk) == _state(one)
        for h in list(one._streams):
            assert list(bulk.iter_forward(h, 0) or []) == list(one.iter_forward(h, 0) or [])


def test_entry_arrays_holds_every_entry_of_the_hash():
    rng = random.Random(3838)
    table = MemTable()
    table.add(_entries(rng, 500, 0), 10**6)
    for h in list(table._streams):
        numbers, positions = table.entry_arrays(h)
        assert numbers.dtype == positions.dtype == np.int64
        got = sorted(zip(numbers.tolist(), positions.tolist(), strict=True))
        assert got == sorted(table.iter_forward(h, -(2**63)))
    assert table.entry_arrays(12345) is None
