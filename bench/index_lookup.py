"""Index figures quoted in docs/storage-format.md: memtable bytes per entry, adding 1M entries with
dumps and merges, and the cost of finding a stream's newest entry.

    .venv/bin/python bench/index_lookup.py
"""

from __future__ import annotations

import tempfile
import time

import psutil

from evdb.index.hashing import stream_hash
from evdb.index.table_index import TableIndex

ENTRIES = 1_000_000
STREAMS = 10_000


def main() -> None:
    hashes = [stream_hash(f"s-{i}") for i in range(STREAMS)]
    process = psutil.Process()
    memtable = TableIndex.open(None, max_memtable_entries=10 * ENTRIES)
    before = process.memory_info().rss
    for i in range(0, ENTRIES, 1000):
        memtable.add(
            [(hashes[(i + k) % STREAMS], (i + k) // STREAMS, (i + k) * 300) for k in range(1000)],
            (i + 1000) * 300,
        )
    print(
        f"memtable: {(process.memory_info().rss - before) / ENTRIES:.1f} bytes per entry ({STREAMS} streams)"
    )
    memtable.close()
    for directory in (tempfile.mkdtemp(), None):
        index = TableIndex.open(directory, max_memtable_entries=ENTRIES // 4)
        started = time.perf_counter()
        for i in range(0, ENTRIES, 1000):
            index.add(
                [(hashes[(i + k) % STREAMS], (i + k) // STREAMS, (i + k) * 300) for k in range(1000)],
                (i + 1000) * 300,
            )
        index.wait_idle()
        took = time.perf_counter() - started
        started = time.perf_counter()
        for k in range(5000):
            next(index.iter_backward(hashes[k % STREAMS]))
        lookup = (time.perf_counter() - started) / 5000 * 1e6
        where = "on disk" if directory else "in memory"
        print(
            f"{where}: adding {ENTRIES} entries took {took:.2f} s; newest entry of a stream: {lookup:.1f} us"
        )
        index.close()


if __name__ == "__main__":
    main()
