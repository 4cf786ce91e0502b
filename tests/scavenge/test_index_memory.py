"""Index execution, merges and calculation read the index tables in bounded slices and let each
slice's pages go behind them: the process's RSS does not hold the index (issue 23, 20 GiB below
500 MiB). Measured as the bytes of the table files mapped and resident in this process."""

from __future__ import annotations

import tracemalloc

import numpy as np

from evdb.index.bloom import read_sidecar
from evdb.index.indexmap import IndexMap, IndexMapEntry
from evdb.index.ptable import PTable, TableWriter, write_table
from evdb.index.table_index import TableIndex

MIB = 2**20
STREAMS = 1000


def resident(paths: set[str]) -> int:
    """Bytes of the files at ``paths`` mapped and resident in this process (/proc/self/smaps)."""
    total, current = 0, ""
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            head = line.split()
            if head and not head[0].endswith(":"):
                current = head[-1] if len(head) >= 6 else ""
            elif current in paths and head[0] == "Rss:":
                total += int(head[1]) * 1024
    return total


def table_paths(index: TableIndex) -> set[str]:
    return {t.path for t in index.tables() if t.path is not None}


def big_index(directory: str, tables: int, per_table: int) -> TableIndex:
    """An index of ``tables`` level-0 tables of ``per_table`` entries each (24 bytes an entry), over
    ``STREAMS`` hashes (1..STREAMS), entry k of the whole index at log position k."""
    names = []
    for t in range(tables):
        position = np.arange(t * per_table, (t + 1) * per_table, dtype=np.int64)
        hashes = (position % STREAMS + 1).astype(np.uint64)
        numbers = position // STREAMS
        order = np.argsort(hashes, kind="stable")
        names.append(write_table(directory, 0, hashes[order], numbers[order], position[order]).name)
    entries = tuple(IndexMapEntry(0, i, name) for i, name in enumerate(names))
    IndexMap(tables * per_table, 0, entries).write(directory)
    return TableIndex.open(directory, max_auto_merge_level=0)


def test_index_execution_holds_a_few_slices_of_the_table_it_rewrites(tmp_path):
    index = big_index(str(tmp_path), tables=1, per_table=3_000_000)  # 69 MiB
    before = table_paths(index)
    assert resident(before) < MIB  # opened: the checksum's pages were let go
    most = 0

    def keep(hashes, numbers, positions):
        nonlocal most
        most = max(most, resident(before))
        return (hashes % 2 == 0) | (numbers >= 1000)

    result = index.scavenge(keep)
    assert result.entries_deleted == STREAMS // 2 * 1000
    assert most < 16 * MIB  # a slice of each column and the page-cache folios around it
    assert resident(before | table_paths(index)) < MIB  # the new table: written, never read back
    assert [n for n, _ in index.iter_forward(3)][:2] == [1000, 1001]
    assert len(list(index.iter_forward(4))) == 3000
    index.close()


def test_a_merge_lets_the_pages_of_its_sources_go_behind_it(tmp_path, monkeypatch):
    index = big_index(str(tmp_path), tables=4, per_table=1_000_000)  # 4 x 23 MiB
    sources = table_paths(index)
    most = 0
    real_append = TableWriter.append

    def append(self, hashes, numbers, positions):
        nonlocal most
        most = max(most, resident(sources))
        real_append(self, hashes, numbers, positions)

    monkeypatch.setattr(TableWriter, "append", append)
    index.merge_indexes()
    assert len(index.tables()) == 1 and index.entry_count() == 4_000_000
    assert most < 48 * MIB  # a block of each source and the folios around it, not the 92 MiB
    assert resident(table_paths(index)) < MIB
    assert [n for n, _ in index.iter_forward(7)] == list(range(4000))
    index.close()


def test_release_pages_lets_a_calculation_s_reads_go(tmp_path):
    index = big_index(str(tmp_path), tables=2, per_table=200_000)
    paths = table_paths(index)
    numbers, _ = index.entry_arrays(5)  # 400 entries, one in every 1,000: spread over the table
    assert len(numbers) == 400
    index.release_pages()
    assert resident(paths) < MIB
    again, _ = index.entry_arrays(5)
    assert np.array_equal(np.sort(again), np.sort(numbers))
    index.close()


def test_a_table_written_in_slices_gets_the_bloom_filter_of_its_distinct_hashes(tmp_path):
    hashes = np.repeat(np.arange(1, 1001, dtype=np.uint64) * np.uint64(2654435761), 7)  # runs of 7
    numbers = np.tile(np.arange(7, dtype=np.int64), 1000)
    positions = np.arange(7000, dtype=np.int64)
    with TableWriter(str(tmp_path), 0, 7000) as writer:
        for start in range(0, 7000, 500):  # 500 is not a multiple of 7: runs cross slices
            stop = start + 500
            writer.append(hashes[start:stop], numbers[start:stop], positions[start:stop])
        table = writer.finish()
    assert table.path is not None
    sidecar = read_sidecar(table.path)
    assert sidecar is not None and sidecar.hash_count == 1000
    reopened = PTable.open(str(tmp_path), table.name)  # the sidecar is taken as written
    assert reopened.bloom_size == table.bloom_size
    for h in hashes[::7].tolist():
        assert table.get(h, 6) == reopened.get(h, 6) != []


def test_a_memtable_is_scavenged_a_slice_at_a_time(tmp_path):
    index = TableIndex.open(str(tmp_path), max_memtable_entries=10_000_000)
    count = 200_000
    index.add([(k % STREAMS + 1, k // STREAMS, k) for k in range(count)], count)
    tracemalloc.start()
    try:
        result = index.scavenge(lambda hashes, numbers, positions: hashes % 2 == 0)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert result.memtable_entries_deleted == count // 2
    # the kept half's new memtable (24 bytes an entry and its per-stream lists), not 200,000 tuples
    assert peak < 12 * MIB  # 27 MiB before
    assert [n for n, _ in index.iter_forward(2)] == list(range(200))
    assert index.get(3, 5) == []
    index.close()
