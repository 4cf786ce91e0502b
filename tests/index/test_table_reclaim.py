"""Old index tables' blocks are freed a step at a time (``disk.Reclaimer``), as switched-out chunk files'
are: a table file only once the last map of it is gone (a reader of the old view reads it whole), its
bloom filter at once; the folder is fsynced once for all the deleted files."""

from __future__ import annotations

import gc
import os

import numpy as np
from reclaiming import RecordingReclaimer
from waiting import wait_until

from evdb.index.bloom import sidecar_path
from evdb.index.merge import sort_entries
from evdb.index.ptable import PTable, write_table
from evdb.index.table_index import TableIndex
from evdb.storage import disk


class _CountingDisk(disk.OsDisk):
    def __init__(self) -> None:
        self.unlinked: list[str] = []
        self.folder_syncs: list[str] = []

    def unlink(self, path: str | os.PathLike[str], *, dir_fd: int | None = None) -> None:  # type: ignore[override]
        self.unlinked.append(os.fspath(path))
        os.unlink(path, dir_fd=dir_fd)

    def fsync_dir(self, directory: str) -> None:
        self.folder_syncs.append(directory)
        disk.OsDisk.fsync_dir(directory)


def _table(directory: str, count: int, seed: int) -> PTable:
    rng = np.random.default_rng(seed)
    hashes = rng.integers(0, 1 << 62, count, dtype=np.int64).astype(np.uint64)
    numbers = np.arange(count, dtype=np.int64)
    positions = np.arange(count, dtype=np.int64) * 100
    return write_table(directory, 0, *sort_entries(hashes, numbers, positions))


def test_a_deleted_table_is_cut_only_once_no_map_of_it_is_left(tmp_path, monkeypatch):
    reclaimer = RecordingReclaimer()
    monkeypatch.setattr(disk, "reclaimer", reclaimer)
    counting = _CountingDisk()
    first, second = _table(str(tmp_path), 20_000, 1), _table(str(tmp_path), 15_000, 2)
    assert first.path is not None and second.path is not None
    paths: list[str] = [first.path, second.path]
    blooms = [sidecar_path(p) for p in paths]
    assert min(first.bloom_size, second.bloom_size) > reclaimer.step  # (worth cutting too)
    before = (first.hashes.copy(), first.numbers.copy(), first.positions.copy())
    with disk.use_disk(counting):
        PTable.delete_all([first, second])
    assert counting.unlinked == [paths[0], blooms[0], paths[1], blooms[1]]
    assert counting.folder_syncs == [str(tmp_path)]  # one folder fsync for all of them
    assert not any(os.path.exists(p) for p in [*paths, *blooms])
    del second
    gc.collect()
    wait_until(lambda: paths[1] in reclaimer.done, 10, "the unmapped table was cut", interval=0.01)
    assert paths[0] not in reclaimer.done  # a reader still holds it: read whole
    for column, expected in zip(first.entries, before, strict=True):
        assert np.array_equal(column, expected)
    assert first.range_of(int(before[0][7]))[1] > 0
    del first, column
    gc.collect()
    wait_until(lambda: paths[0] in reclaimer.done, 10, "the last table was cut once let go", interval=0.01)
    wait_until(lambda: all(b in reclaimer.done for b in blooms), 10, "the bloom filters were cut")
    size = 20_000 * 24 + 64 + 32
    assert reclaimer.sizes[paths[0]][0] == size - 4096 and reclaimer.sizes[paths[0]][-1] == size % 4096


def test_merged_tables_go_through_the_reclaimer(tmp_path, monkeypatch):
    reclaimer = RecordingReclaimer()
    monkeypatch.setattr(disk, "reclaimer", reclaimer)
    index = TableIndex.open(str(tmp_path), max_memtable_entries=400)
    try:
        for i in range(1700):
            index.add([(i % 7, i // 7, i * 100)], i * 100 + 50)
        index.wait_idle()
        assert [(t.level, len(t)) for t in index.tables()] == [(1, 1600)]
        live = {t.path for t in index.tables()}
        gc.collect()
        # the four level-0 tables merged into the level-1 one: each cut down once let go
        wait_until(lambda: len(reclaimer.done) >= 4, 10, "the merged tables were cut", interval=0.01)
        assert not live & set(reclaimer.done)
        assert all(not os.path.exists(p) for p in reclaimer.done)
        assert [n for n, _ in index.iter_forward(3)] == list(range(len(range(3, 1700, 7))))
    finally:
        index.close()
