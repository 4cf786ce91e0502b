"""TableIndex against a dict model, across dumps, merges, reopen, scavenge; concurrency; MemDb."""

from __future__ import annotations

import threading

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evdb.index.table_index import TableIndex

ops = st.lists(st.tuples(st.integers(0, 8), st.integers(1, 4)), min_size=1, max_size=60)


def run_ops(
    index: TableIndex, model: dict[int, list[tuple[int, int]]], operations, position: list[int]
) -> None:
    for h, count in operations:
        entries = []
        for _ in range(count):
            number = len(model.setdefault(h, []))
            entries.append((h, number, position[0]))
            model[h].append((number, position[0]))
            position[0] += 10
        index.add(entries, position[0])


def check(index: TableIndex, model: dict[int, list[tuple[int, int]]]) -> None:
    for h, entries in model.items():
        assert list(index.iter_forward(h, 0)) == entries
        assert list(index.iter_backward(h)) == list(reversed(entries))
        for number, position in entries:
            assert index.get(h, number) == [position]
        middle = len(entries) // 2
        assert list(index.iter_forward(h, middle)) == entries[middle:]
        assert list(index.iter_backward(h, middle)) == list(reversed(entries[:middle]))
    assert list(index.iter_forward(999, 0)) == []


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(operations=ops, memtable=st.integers(1, 8))
def test_matches_a_model_across_dumps_merges_and_reopen(tmp_path_factory, operations, memtable):
    directory = str(tmp_path_factory.mktemp("idx"))
    index = TableIndex.open(directory, max_memtable_entries=memtable)
    model: dict[int, list[tuple[int, int]]] = {}
    position = [0]
    run_ops(index, model, operations, position)
    check(index, model)
    index.wait_idle()
    checkpoint = index.checkpoint
    index.close()
    reopened = TableIndex.open(directory, max_memtable_entries=memtable)
    assert reopened.checkpoint == checkpoint
    # what was not in a PTable yet is re-added from the log by the database; the model plays the log
    missing = sorted((n, h, p) for h, es in model.items() for n, p in es if p >= checkpoint)
    missing.sort(key=lambda e: e[2])
    if missing:
        reopened.add([(h, n, p) for n, h, p in missing], position[0])
    check(reopened, model)
    reopened.merge_indexes()
    assert len(reopened.tables()) <= 1
    check(reopened, model)
    reopened.close()


def test_levels_merge_in_fours(tmp_path):
    index = TableIndex.open(str(tmp_path), max_memtable_entries=10)
    for i in range(170):
        index.add([(i % 7, i // 7, i * 100)], i * 100 + 50)
    index.wait_idle()
    levels = [t.level for t in index.tables()]
    # 17 dumps: 16 merged four by four into level 1, those four into one level-2 table
    assert sorted(levels) == [0, 2]
    assert sum(len(t) for t in index.tables()) == 170
    names = {t.name for t in index.tables()}
    on_disk = {n for n in (p.name for p in tmp_path.iterdir()) if len(n) == 36}
    assert on_disk == names  # merged-away tables are deleted
    index.close()


def test_scavenge_removes_exactly_what_keep_rejects(tmp_path):
    index = TableIndex.open(str(tmp_path), max_memtable_entries=16)
    for i in range(100):
        index.add([(i % 5, i // 5, i)], i + 1)
    index.wait_idle()
    result = index.scavenge(lambda h, n, p: ~((h == 2) & (n < 10)))
    assert result.entries_deleted == 10
    assert [n for n, _ in index.iter_forward(2, 0)] == list(range(10, 20))
    assert [n for n, _ in index.iter_forward(3, 0)] == list(range(20))
    assert sum(t.entries_kept for t in result.tables) + len(index._memtable) == 90
    index.close()
    reopened = TableIndex.open(str(tmp_path), max_memtable_entries=16)
    assert [n for n, _ in reopened.iter_forward(2, 0)][:1] in ([10], [])  # memtable part re-added by the db
    reopened.close()


def test_memdb_mode_has_the_same_semantics():
    index = TableIndex.open(None, max_memtable_entries=4)
    model: dict[int, list[tuple[int, int]]] = {}
    run_ops(index, model, [(1, 3), (2, 4), (1, 4), (3, 2), (2, 2)], [0])
    index.wait_idle()
    check(index, model)
    index.close()


def test_readers_during_dumps_and_merges(tmp_path):
    index = TableIndex.open(str(tmp_path), max_memtable_entries=20)
    stop = threading.Event()
    errors: list[BaseException] = []
    written = [0]

    def reader() -> None:
        try:
            while not stop.is_set():
                seen_before = written[0]
                numbers = [n for n, _ in index.iter_forward(1, 0)]
                assert numbers == sorted(numbers)
                assert len(numbers) >= seen_before
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    for i in range(2000):
        index.add([(1, i, i * 10)], i * 10 + 5)
        written[0] = i + 1
    stop.set()
    for t in threads:
        t.join()
    assert errors == []
    index.wait_idle()
    assert [n for n, _ in index.iter_forward(1, 0)] == list(range(2000))
    assert index.entry_count() == 2000
    index.close()


def test_entry_arrays_are_sorted_for_dumps():
    from evdb.index.memtable import MemTable

    m = MemTable()
    m.add([(5, 2, 30), (1, 0, 10), (5, 1, 20), (1, 1, 40)], 50)
    hashes, numbers, positions = m.to_arrays()
    assert hashes.tolist() == [1, 1, 5, 5] and numbers.tolist() == [0, 1, 1, 2]
    assert np.all(np.diff(positions[:2]) > 0)
