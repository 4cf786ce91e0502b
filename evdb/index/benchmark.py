"""Measures the index: adds, dumps, merges, lookups, memory. ``python -m evdb.index.benchmark [folder]``.

The figures in docs/storage-format-index.md come from this script.
"""

from __future__ import annotations

import gc
import random
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from functools import partial

from evdb.index.hashing import stream_hash
from evdb.index.memtable import MemTable
from evdb.index.ptable import PTable
from evdb.index.table_index import TableIndex

__all__ = ["main"]

BATCH = 100


def workload(entries: int, streams: int, seed: int = 1) -> list[list[tuple[int, int, int]]]:
    """Batches of ``BATCH`` entries: events of ``streams`` random streams, in log order."""
    rng = random.Random(seed)
    hashes = [stream_hash(f"stream-{i}") for i in range(streams)]
    next_number = [0] * streams
    out = []
    for i in range(entries):
        s = rng.randrange(streams)
        out.append((hashes[s], next_number[s], i * 100))
        next_number[s] += 1
    return [out[i : i + BATCH] for i in range(0, entries, BATCH)]


def timed(label: str, action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    took = time.perf_counter() - started
    print(f"  {label}: {took:.3f} s")
    return took


def add_batches(index: TableIndex, batches: list[list[tuple[int, int, int]]]) -> None:
    for batch in batches:
        index.add(batch, batch[-1][2] + 1)


def memtable_memory(batches: list[list[tuple[int, int, int]]]) -> float:
    gc.collect()
    tracemalloc.start()
    table = MemTable()
    for batch in batches:
        table.add(batch, batch[-1][2] + 1)
    used, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return used / len(table)


def lookup_cost(index: TableIndex, hashes: list[int]) -> float:
    """Microseconds per lookup, after one pass that maps the pages in."""
    for h in hashes:
        next(iter(index.iter_backward(h)), None)
    started = time.perf_counter()
    for h in hashes:
        next(iter(index.iter_backward(h)), None)
    return (time.perf_counter() - started) / len(hashes) * 1e6


def main(folder: str) -> None:
    print(f"index benchmark in {folder}")
    for streams, label in ((1_000_000, "1M streams (~1.6 events each)"), (1000, "1000 streams (~1000 each)")):
        batches = workload(1_000_000, streams)
        print(f"1M entries, batches of {BATCH}, {label}")
        with tempfile.TemporaryDirectory(dir=folder) as directory:
            index = TableIndex.open(directory)
            timed(
                "add 1M (memtable 1M: one dump, after)",
                partial(add_batches, index, batches),
            )
            timed("dump 1M entries to a PTable (background)", index.wait_idle)
            index.close()
            index = TableIndex.open(directory, max_memtable_entries=100_000)
            timed(
                "add 1M (memtable 100k: dumps and merges meanwhile)",
                partial(add_batches, index, batches),
            )
            timed("then wait for the background work", index.wait_idle)
            index.close()
        print(f"  memtable: {memtable_memory(batches):.1f} bytes/entry")

    print("lookups of a stream's last entry (iter_backward, first item), µs each")
    for total in (100_000, 1_000_000, 4_000_000, 16_000_000):
        batches = workload(total, total // 10, seed=total)
        with tempfile.TemporaryDirectory(dir=folder) as directory:
            index = TableIndex.open(directory, max_memtable_entries=1_000_000)
            for batch in batches:
                index.add(batch, batch[-1][2] + 1)
            index.add([], total * 100)
            index.merge_indexes()
            present = [b[0][0] for b in batches[:: max(1, len(batches) // 2000)]]
            absent = [stream_hash(f"absent-{i}") for i in range(2000)]
            tables = index.tables()
            in_memory = index.entry_count() - sum(len(t) for t in tables)
            print(
                f"  {len(tables)} table(s), {sum(len(t) for t in tables):>9,} entries (+{in_memory:,} in memory):"
                f" present {lookup_cost(index, present):.1f}, absent {lookup_cost(index, absent):.1f}"
            )
            index.close()
            if len(tables) == 1 and len(tables[0]) >= 1_000_000:
                name = tables[0].name
                timed(
                    f"open (map + verify xxh3-128) a {len(tables[0]):,}-entry table",
                    partial(PTable.open, directory, name),
                )

    print("merge of four 1M-entry level-0 tables into a level-1 table")
    with tempfile.TemporaryDirectory(dir=folder) as directory:
        index = TableIndex.open(directory, max_memtable_entries=1_000_000, max_auto_merge_level=0)
        for batch in workload(4_000_000, 400_000, seed=7):
            index.add(batch, batch[-1][2] + 1)
        index.wait_idle()
        index.close()
        index = TableIndex.open(directory, max_memtable_entries=1_000_000, max_auto_merge_level=2**31 - 1)
        timed("merge 4 x 1M -> 4M (background, wait_idle)", index.wait_idle)
        assert [len(t) for t in index.tables()] == [4_000_000]
        index.close()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else tempfile.gettempdir())
