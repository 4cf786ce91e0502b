"""TableIndex.scavenge: exactly the rejected entries go, tables are swapped atomically, reports add up."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

from evdb.index.indexmap import IndexMap
from evdb.index.table_index import TableIndex


def built(directory: str | None, count: int = 100, memtable: int = 16) -> TableIndex:
    index = TableIndex.open(directory, max_memtable_entries=memtable)
    for i in range(count):
        index.add([(i % 5, i // 5, i)], i + 1)
    index.wait_idle()
    return index


def test_removes_exactly_what_keep_rejects_in_tables_and_memtable(tmp_path):
    index = built(str(tmp_path))  # 6 tables of 16 (a level-1 table and two level-0 ones) + 4 in memory
    seen: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    def keep(hashes, numbers, positions):
        seen.append((hashes, numbers, positions))
        return ~((hashes == 2) & (numbers < 10))

    result = index.scavenge(keep)
    assert result.entries_deleted == 10
    assert [n for n, _ in index.iter_forward(2)] == list(range(10, 20))
    assert [n for n, _ in index.iter_forward(3)] == list(range(20))
    assert index.entry_count() == 90
    assert sum(r.entries_kept + r.entries_deleted for r in result.tables) == 96
    assert all(not h.flags.writeable for h, _, _ in seen[: len(result.tables)])  # tables are read-only
    index.close()


def test_reports_and_files_of_rewritten_kept_and_emptied_tables(tmp_path):
    index = TableIndex.open(str(tmp_path), max_memtable_entries=10, max_auto_merge_level=0)
    for table in range(3):  # three level-0 tables: hash 1, 2, 3 respectively
        index.add([(table + 1, n, table * 100 + n) for n in range(10)], table * 100 + 10)
    index.wait_idle()
    before = index.tables()
    result = index.scavenge(lambda h, n, p: (h == 2) | ((h == 3) & (n >= 4)))
    reports = {r.index: r for r in result.tables}
    assert [(r.level, r.entries_kept, r.entries_deleted) for r in result.tables] == [
        (0, 0, 10),
        (0, 10, 0),
        (0, 6, 4),
    ]
    assert reports[0].space_saved == before[0].size  # dropped whole
    assert reports[1].space_saved == 0  # nothing to remove: left as it is
    assert 0 < reports[2].space_saved < before[2].size
    after = index.tables()
    assert after[0] is before[1] and after[1].name != before[2].name
    names = {t.name for t in after}
    assert {e.name for e in IndexMap.read(str(tmp_path)).tables} == names
    assert set(os.listdir(tmp_path)) == {"indexmap"} | names | {f"{n}.bloomfilter" for n in names}
    index.close()
    reopened = TableIndex.open(str(tmp_path))
    assert list(reopened.iter_forward(1)) == []
    assert [n for n, _ in reopened.iter_forward(3)] == [4, 5, 6, 7, 8, 9]
    reopened.close()


def test_keep_is_called_on_slices_and_must_answer_each_entry(tmp_path, monkeypatch):
    import evdb.index.table_index as module

    monkeypatch.setattr(module, "_SCAVENGE_SLICE", 7)
    index = built(str(tmp_path), count=40, memtable=40)
    sizes: list[int] = []

    def keep(hashes, numbers, positions):
        sizes.append(len(hashes))
        return positions % 2 == 0

    index.scavenge(keep)
    assert sizes[:6] == [7, 7, 7, 7, 7, 5]
    assert [p for _, p in index.iter_forward(0)] == [0, 10, 20, 30]
    with pytest.raises(ValueError, match="one bool per entry"):
        index.scavenge(lambda h, n, p: np.ones(1, dtype=bool))
    index.close()


def test_entries_added_while_the_memtable_is_filtered_are_judged_too(tmp_path):
    index = built(str(tmp_path), count=50, memtable=100)  # all in the live memtable
    in_keep = threading.Event()
    more_added = threading.Event()

    def keep(hashes, numbers, positions):
        if not in_keep.is_set():
            in_keep.set()
            assert more_added.wait(30)
        return positions % 2 == 0

    def writer() -> None:
        assert in_keep.wait(30)
        for i in range(50, 57):  # while keep judges the first 50: the writer does not wait for it
            index.add([(i % 5, i // 5, i)], i + 1)
        more_added.set()

    thread = threading.Thread(target=writer)
    thread.start()
    index.scavenge(keep)
    thread.join()
    index.add([(0, 99, 1001)], 1002)
    for h in range(5):
        got = [p for _, p in index.iter_forward(h)]
        assert got == [p for p in range(h, 57, 5) if p % 2 == 0] + ([1001] if h == 0 else [])
    index.close()


def test_a_writer_filling_memtables_during_a_scavenge_loses_nothing(tmp_path):
    index = built(str(tmp_path), count=40, memtable=4)
    started = threading.Event()
    done = threading.Event()

    def writer() -> None:
        started.wait(30)
        for i in range(40, 400):
            index.add([(7, i, 10_000 + i)], 10_001 + i)
        done.set()

    thread = threading.Thread(target=writer)
    thread.start()

    def keep(hashes, numbers, positions):
        started.set()
        return hashes != 3

    result = index.scavenge(keep)
    thread.join()
    assert done.is_set()
    index.wait_idle()
    assert [n for n, _ in index.iter_forward(7)] == list(range(40, 400))
    assert list(index.iter_forward(3)) == []
    assert result.entries_deleted == 8
    index.close()


def test_memdb_scavenge():
    index = built(None, count=30, memtable=8)
    result = index.scavenge(lambda h, n, p: n != 0)
    assert result.entries_deleted == 5
    assert all(n != 0 for h in range(5) for n, _ in index.iter_forward(h))
    index.close()
