"""An index table opened (its checksum reads every page) leaves no pages of its file mapped in the
process: RSS at a node's open does not hold the whole index; lookups map what they read again."""

from __future__ import annotations

import gc
import os

import numpy as np

from evdb.index.merge import sort_entries
from evdb.index.ptable import PTable, write_table


def resident(path: str) -> int:
    """Bytes of the file at ``path`` mapped and resident in this process (/proc/self/smaps)."""
    total, current = 0, ""
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            head = line.split()
            if head and not head[0].endswith(":"):  # a mapping's first line: its range, ..., its path
                current = head[-1] if len(head) >= 6 else ""
            elif current == path and head[0] == "Rss:":
                total += int(head[1]) * 1024
    return total


def test_an_opened_table_keeps_no_pages_mapped_and_still_answers(tmp_path):
    count = 200_000  # 4.6 MiB of entries
    hashes = np.arange(count, dtype=np.uint64) * np.uint64(7919)
    numbers = np.zeros(count, dtype=np.int64)
    positions = np.arange(count, dtype=np.int64) * 100
    written = write_table(str(tmp_path), 0, *sort_entries(hashes, numbers, positions))
    name = written.name
    path = os.path.join(str(tmp_path), name)
    del written  # the writer's own map of the file
    gc.collect()
    table = PTable.open(str(tmp_path), name)
    assert os.path.getsize(path) > 4 * 2**20
    assert resident(path) < 2**20
    h = int(hashes[123_456])
    lo, hi = table.range_of(h)
    assert hi - lo == 1 and int(table.positions[lo]) == 123_456 * 100
