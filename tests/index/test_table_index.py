"""TableIndex levels and merges (the dict-model comparison is test_table_index_model.py); the writer never
waits for background work but the memory bound; concurrent readers; MemDb; shutdown and failures."""

from __future__ import annotations

import os
import threading

import pytest
from index_model import IndexModel, assert_matches, keep_by_position

import evdb.index.table_index as table_index_module
from evdb.errors import DatabaseClosed, StorageError
from evdb.index.indexmap import IndexMap
from evdb.index.table_index import TableIndex


def add_singles(index: TableIndex, count: int, start: int = 0, streams: int = 7) -> None:
    for i in range(start, start + count):
        index.add([(i % streams, i // streams, i * 100)], i * 100 + 50)


def test_levels_merge_in_fours_and_merged_tables_are_deleted(tmp_path):
    index = TableIndex.open(str(tmp_path), max_memtable_entries=10)
    add_singles(index, 170)
    index.wait_idle()
    # 17 dumps: 16 merged four by four into four level-1 tables, those into one level-2 table
    assert [(t.level, len(t)) for t in index.tables()] == [(0, 10), (2, 160)]
    assert index.checkpoint == 169 * 100 + 50
    assert index.entry_count() == 170
    on_disk = set(os.listdir(tmp_path))
    names = {t.name for t in index.tables()}
    assert on_disk == {"indexmap"} | names | {f"{n}.bloomfilter" for n in names}
    indexmap = IndexMap.read(str(tmp_path))
    assert [(e.level, e.index, e.name) for e in indexmap.tables] == [
        (t.level, 0, t.name) for t in index.tables()
    ]
    assert indexmap.checkpoint == index.checkpoint
    index.close()


def test_max_auto_merge_level_stops_merging_and_is_kept_in_indexmap(tmp_path):
    index = TableIndex.open(str(tmp_path), max_memtable_entries=10, max_auto_merge_level=1)
    add_singles(index, 170)
    index.wait_idle()
    assert sorted(t.level for t in index.tables()) == [0, 1, 1, 1, 1]
    index.close()
    assert IndexMap.read(str(tmp_path)).max_auto_merge_level == 1
    reopened = TableIndex.open(str(tmp_path), max_memtable_entries=10)
    assert reopened.max_auto_merge_level == 1
    reopened.merge_indexes()
    assert [(t.level, len(t)) for t in reopened.tables()] == [(1, 170)]
    assert [n for n, _ in reopened.iter_forward(3)] == list(range(len(range(3, 170, 7))))
    reopened.close()


def test_merge_indexes_leaves_the_live_memtable_alone(tmp_path):
    index = TableIndex.open(str(tmp_path), max_memtable_entries=10)
    add_singles(index, 65)
    index.merge_indexes()
    assert [len(t) for t in index.tables()] == [60]
    assert index.entry_count() == 65
    assert [n for n, _ in index.iter_backward(1)][:3] == [9, 8, 7]
    index.close()


def test_a_new_folder_starts_empty_with_an_indexmap(tmp_path):
    index = TableIndex.open(str(tmp_path / "index"))
    assert index.checkpoint == -1 and index.entry_count() == 0 and index.tables() == []
    assert os.listdir(tmp_path / "index") == ["indexmap"]  # the backup finds one from the start
    assert list(index.iter_backward(5)) == [] and index.get(5, 0) == []
    index.close()


def test_without_indexmap_the_index_is_rebuilt_from_scratch(tmp_path):
    index = TableIndex.open(str(tmp_path), max_memtable_entries=5)
    add_singles(index, 30)
    index.close()
    os.unlink(tmp_path / "indexmap")
    rebuilt = TableIndex.open(str(tmp_path), max_memtable_entries=5)
    assert rebuilt.checkpoint == -1 and rebuilt.entry_count() == 0
    assert os.listdir(tmp_path) == ["indexmap"]  # the old tables went with it
    rebuilt.close()


def test_out_of_range_numbers_are_answered_not_refused():
    index = TableIndex.open(None)
    tombstone = 2**63 - 1
    index.add([(1, 0, 10), (1, tombstone, 20)], 30)
    assert list(index.iter_backward(1, 2**64)) == [(tombstone, 20), (0, 10)]
    assert list(index.iter_backward(1, -(2**70))) == []
    assert list(index.iter_forward(1, -(2**70))) == [(0, 10), (tombstone, 20)]
    assert list(index.iter_forward(1, 2**64)) == []
    assert index.get(1, 2**64) == [] and index.get(1, tombstone) == [20]
    index.close()


def test_duplicates_come_newest_position_first(tmp_path):
    """The same (hash, number) twice: a collision, or an entry re-added after a rewrite."""
    index = TableIndex.open(str(tmp_path), max_memtable_entries=2)
    index.add([(9, 0, 100), (9, 1, 200)], 300)  # dumped
    index.add([(9, 0, 400)], 500)  # another stream with the same hash, in the memtable
    index.wait_idle()
    assert list(index.iter_backward(9)) == [(1, 200), (0, 400), (0, 100)]
    assert list(index.iter_forward(9)) == [(0, 100), (0, 400), (1, 200)]
    assert index.get(9, 0) == [400, 100]
    index.close()


# -- the writer and the background thread --------------------------------------------------------------
class DumpGate:
    """Holds the background thread inside the table writes until released."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        real = table_index_module._write

        def gated(*args, **kwargs):
            self.entered.set()
            assert self.release.wait(30), "test did not release the dump"
            return real(*args, **kwargs)

        monkeypatch.setattr(table_index_module, "_write", gated)


def test_the_writer_waits_for_a_dump_only_when_a_second_memtable_is_full(tmp_path, monkeypatch):
    gate = DumpGate(monkeypatch)
    index = TableIndex.open(str(tmp_path), max_memtable_entries=4)
    add_singles(index, 4)  # full: frozen, its dump starts and is held
    assert gate.entered.wait(30)
    add_singles(index, 3, start=4)  # the next memtable fills meanwhile: no waiting
    assert index.entry_count() == 7
    writer = threading.Thread(target=add_singles, args=(index, 1, 7))
    writer.start()
    writer.join(0.2)
    assert writer.is_alive(), "a second full memtable must wait for the first one's dump"
    assert [n for n, _ in index.iter_forward(0)] == [0, 1]  # readers are not held up meanwhile
    gate.release.set()
    writer.join(30)
    assert not writer.is_alive()
    index.wait_idle()
    assert [len(t) for t in index.tables()] == [4, 4]
    assert index.checkpoint == 7 * 100 + 50
    index.close()


def test_readers_see_consistent_streams_during_dumps_and_merges(tmp_path):
    index = TableIndex.open(str(tmp_path), max_memtable_entries=20)
    streams, per_stream = 3, 400
    written = [0] * streams  # entries of each stream acknowledged by add()
    stop = threading.Event()
    failures: list[BaseException] = []

    def reader(s: int) -> None:
        try:
            while not stop.is_set():
                acknowledged = written[s]
                forward = [n for n, _ in index.iter_forward(s)]
                assert forward == list(range(len(forward))) and len(forward) >= acknowledged
                last = next(iter(index.iter_backward(s)), None)
                assert last is None or last[0] >= acknowledged - 1
                if acknowledged:
                    assert index.get(s, acknowledged - 1) == [(acknowledged - 1) * streams * 10 + s * 10]
        except BaseException as exc:  # reported by the main thread
            failures.append(exc)

    readers = [threading.Thread(target=reader, args=(s,)) for s in range(streams)]
    for r in readers:
        r.start()
    for i in range(per_stream):
        for s in range(streams):
            position = (i * streams + s) * 10
            index.add([(s, i, position)], position + 5)
            written[s] = i + 1
    stop.set()
    for r in readers:
        r.join()
    assert failures == []
    index.wait_idle()
    assert {t.level for t in index.tables()} >= {1, 2}  # merges happened while readers read
    for s in range(streams):
        assert [n for n, _ in index.iter_forward(s)] == list(range(per_stream))
    index.close()


def test_memdb_has_the_same_semantics_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    index = TableIndex.open(None, max_memtable_entries=3)
    model = IndexModel()
    for streams in ([0, 1, 2], [3, 3, 3, 3], [1, 4], [5] * 9, [0] * 30):
        index.add(*model.batch(streams))
    index.wait_idle()
    assert index.tables() and all(t.path is None for t in index.tables())
    assert index.checkpoint == model.position  # the last batch filled a memtable: all in PTables
    assert_matches(index, model)
    index.merge_indexes()
    keep, rule = keep_by_position(3, 1)
    index.scavenge(keep)
    model.keep_only(rule)
    assert_matches(index, model)
    index.close()
    assert os.listdir(tmp_path) == []


def test_close_dumps_a_frozen_memtable_and_refuses_more_entries(tmp_path):
    index = TableIndex.open(str(tmp_path), max_memtable_entries=4)
    add_singles(index, 6)
    index.close()
    index.close()  # twice is fine
    with pytest.raises(DatabaseClosed):
        index.add([(1, 0, 0)], 1)
    with pytest.raises(DatabaseClosed):
        index.merge_indexes()
    assert [n for n, _ in index.iter_forward(1)] == [0]  # reads still answer
    reopened = TableIndex.open(str(tmp_path), max_memtable_entries=4)
    assert reopened.entry_count() == 4 and reopened.checkpoint == 3 * 100 + 50
    reopened.close()


def test_a_background_failure_is_reported_to_the_writer(tmp_path, monkeypatch):
    def failing_write(*args, **kwargs):
        raise OSError("no space left on device")

    monkeypatch.setattr(table_index_module, "_write", failing_write)
    index = TableIndex.open(str(tmp_path), max_memtable_entries=2)
    add_singles(index, 2)
    with pytest.raises(StorageError, match="no space left"):
        index.wait_idle()
    with pytest.raises(StorageError):
        add_singles(index, 3, start=2)
    assert [n for n, _ in index.iter_forward(1)] == [0]  # the frozen entries are still readable
    index.close()
    assert os.listdir(tmp_path) == ["indexmap"]
