"""TableIndex against a dict model: many dumps and level merges, reopen, merge_indexes, scavenge,
MemDb, and readers on other threads while the writer adds and the background thread dumps and merges.
"""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evdb.index.hashing import stream_hash
from evdb.index.indexmap import IndexMap
from evdb.index.table_index import MERGE_FANOUT, TableIndex

# stream ids 0 and 1 collide on purpose (same hash); the others are real stream hashes and extremes
HASHES = (stream_hash("orders-1"), stream_hash("orders-1"), stream_hash("$all"), 0, 2**64 - 1, 2**63)
ABSENT = (stream_hash("never-written"), 1, 2**64 - 2)


class Model:
    """Every entry added, per hash, as (number, position); positions grow by 10 an entry."""

    def __init__(self) -> None:
        self.entries: dict[int, list[tuple[int, int]]] = {}
        self.next_number = [0] * len(HASHES)
        self.position = 0

    def batch(self, streams: list[int]) -> tuple[list[tuple[int, int, int]], int]:
        out = []
        for s in streams:
            h, n = HASHES[s], self.next_number[s]
            self.next_number[s] += 1
            out.append((h, n, self.position))
            self.entries.setdefault(h, []).append((n, self.position))
            self.position += 10
        return out, self.position

    def all(self) -> list[tuple[int, int, int]]:
        return sorted((h, n, p) for h, es in self.entries.items() for n, p in es)

    def count(self, where=lambda h, n, p: True) -> int:
        return sum(1 for e in self.all() if where(*e))

    def after(self, position: int) -> list[tuple[int, int, int]]:
        return sorted(((h, n, p) for h, n, p in self.all() if p >= position), key=lambda e: e[2])

    def keep_only(self, rule) -> None:
        self.entries = {h: [(n, p) for n, p in es if rule(h, n, p)] for h, es in self.entries.items()}


def index_entries(index: TableIndex) -> list[tuple[int, int, int]]:
    return sorted((h, n, p) for h in set(HASHES) | set(ABSENT) for n, p in index.iter_forward(h, -(2**63)))


def assert_matches(index: TableIndex, model: Model, where=lambda h, n, p: True) -> None:
    expected = [e for e in model.all() if where(*e)]
    assert index_entries(index) == expected
    assert index.entry_count() == len(expected)
    for h in set(HASHES) | set(ABSENT):
        mine = sorted((n, p) for eh, n, p in expected if eh == h)
        assert list(index.iter_backward(h)) == mine[::-1]
        numbers = sorted({n for n, _ in mine})
        for n in {0, 1, *(numbers[-1:]), *(x + 1 for x in numbers[-1:])}:
            assert list(index.iter_forward(h, n)) == [e for e in mine if e[0] >= n], (h, n)
            assert list(index.iter_backward(h, n)) == [e for e in mine[::-1] if e[0] < n], (h, n)
            assert index.get(h, n) == sorted((p for m, p in mine if m == n), reverse=True), (h, n)


def assert_persisted(index: TableIndex, model: Model) -> None:
    """After wait_idle: indexmap names exactly the tables, the folder holds nothing else, levels are merged."""
    tables = index.tables()
    assert sum(len(t) for t in tables) == model.count(lambda h, n, p: p < index.checkpoint)
    by_level: dict[int, int] = {}
    for t in tables:
        by_level[t.level] = by_level.get(t.level, 0) + 1
    assert all(count < MERGE_FANOUT for count in by_level.values()), by_level
    if index.directory is None:
        return
    indexmap = IndexMap.read(index.directory)
    assert indexmap is not None and indexmap.checkpoint == index.checkpoint
    assert [(e.level, e.name) for e in indexmap.tables] == [(t.level, t.name) for t in tables]
    expected_files = {"indexmap"} | {t.name for t in tables} | {t.name + ".bloomfilter" for t in tables}
    assert set(os.listdir(index.directory)) == expected_files


def keep_rule(modulus: int, remainder: int):
    def keep(hashes: np.ndarray, numbers: np.ndarray, positions: np.ndarray) -> np.ndarray:
        return (positions // 10) % modulus != remainder

    return keep, lambda h, n, p: (p // 10) % modulus != remainder


operations = st.lists(
    st.one_of(
        st.tuples(
            st.just("add"), st.lists(st.lists(st.integers(0, len(HASHES) - 1), max_size=7), max_size=12)
        ),
        st.just(("idle",)),
        st.just(("check",)),
        st.just(("reopen",)),
        st.just(("merge_indexes",)),
        st.tuples(st.just("scavenge"), st.integers(2, 5), st.integers(0, 4)),
    ),
    min_size=1,
    max_size=10,
)


@settings(max_examples=35, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=operations, memtable=st.integers(3, 10), on_disk=st.booleans())
def test_table_index_matches_a_dict_model(tmp_path_factory, ops, memtable, on_disk):
    directory = str(tmp_path_factory.mktemp("ti")) if on_disk else None
    index = TableIndex.open(directory, max_memtable_entries=memtable)
    model = Model()
    try:
        for op in ops:
            if op[0] == "add":
                for streams in op[1]:
                    index.add(*model.batch(streams))
            elif op[0] == "idle":
                index.wait_idle()
                assert_persisted(index, model)
                assert_matches(index, model)
            elif op[0] == "check":
                assert_matches(index, model)  # whatever the background thread is doing
            elif op[0] == "reopen" and directory is not None:
                index.close()
                checkpoint = index.checkpoint
                index = TableIndex.open(directory, max_memtable_entries=memtable)
                assert index.checkpoint == checkpoint
                # exactly the entries before the checkpoint survive; the database adds the rest again
                assert_matches(index, model, lambda h, n, p, c=checkpoint: p < c)
                index.add(model.after(checkpoint), model.position)
            elif op[0] == "merge_indexes":
                checkpoint = index.checkpoint
                index.merge_indexes()
                tables = index.tables()
                assert len(tables) <= 1
                # merge_indexes dumps a frozen memtable first: the checkpoint may move, never back
                new_checkpoint = index.checkpoint
                assert new_checkpoint >= checkpoint
                assert sum(map(len, tables)) == model.count(lambda h, n, p, c=new_checkpoint: p < c)
            elif op[0] == "scavenge":
                index.wait_idle()
                keep, rule = keep_rule(op[1], op[2])
                checkpoint = index.checkpoint
                sizes = [len(t) for t in index.tables()]
                rejected = [e for e in model.all() if not rule(*e)]
                result = index.scavenge(keep)
                model.keep_only(rule)
                in_tables = sum(1 for e in rejected if e[2] < checkpoint)
                assert result.memtable_entries_deleted == len(rejected) - in_tables
                assert sum(r.entries_deleted for r in result.tables) == in_tables
                assert result.entries_deleted == len(rejected)
                assert [r.entries_kept + r.entries_deleted for r in result.tables] == sizes
                assert len(index.tables()) == sum(1 for r in result.tables if r.entries_kept)
                assert_matches(index, model)
                index.wait_idle()
                assert_persisted(index, model)
        index.wait_idle()
        assert_persisted(index, model)
        assert_matches(index, model)
    finally:
        index.close()


@pytest.mark.parametrize("on_disk", [True, False])
def test_levels_after_many_dumps(tmp_path, on_disk):
    index = TableIndex.open(str(tmp_path) if on_disk else None, max_memtable_entries=3)
    model = Model()
    for i in range(21 * 3):  # 21 dumps: 21 = 16 + 4 + 1 -> one table on each of levels 2, 1 and 0
        index.add(*model.batch([i % len(HASHES)]))
    index.wait_idle()
    assert [t.level for t in index.tables()] == [0, 1, 2]
    assert [len(t) for t in index.tables()] == [3, 12, 48]
    assert index.checkpoint == model.position
    assert_persisted(index, model)
    assert_matches(index, model)
    index.merge_indexes()
    assert [(t.level, len(t)) for t in index.tables()] == [(2, 63)]
    assert_persisted(index, model)
    assert_matches(index, model)
    index.close()


def test_reopen_keeps_everything_up_to_the_checkpoint(tmp_path):
    model = Model()
    index = TableIndex.open(str(tmp_path), max_memtable_entries=5)
    for i in range(23):
        index.add(*model.batch([i % 3, (i + 1) % 6]))
    index.wait_idle()
    checkpoint = index.checkpoint
    assert checkpoint == 420  # batches of 2: a memtable holds 6 when it is full; 7 dumps of 6 entries
    index.close()
    index = TableIndex.open(str(tmp_path), max_memtable_entries=5)
    assert index.checkpoint == checkpoint
    assert_matches(index, model, lambda h, n, p: p < checkpoint)
    index.add(model.after(checkpoint), model.position)
    assert_matches(index, model)
    index.close()


@pytest.mark.parametrize("on_disk", [True, False])
def test_scavenge_removes_exactly_what_the_mask_rejects_including_the_memtable(tmp_path, on_disk):
    index = TableIndex.open(str(tmp_path) if on_disk else None, max_memtable_entries=4)
    model = Model()
    for i in range(30):
        index.add(*model.batch([i % len(HASHES)]))
    index.wait_idle()
    assert len(index.tables()) >= 2 and index.entry_count() > sum(len(t) for t in index.tables())
    keep, rule = keep_rule(3, 1)
    result = index.scavenge(keep)
    rejected = model.count(lambda h, n, p: not rule(h, n, p))
    model.keep_only(rule)
    assert result.entries_deleted == rejected == 10
    assert result.memtable_entries_deleted == 1  # entries at 280, 290 stay in memory; 280 // 10 % 3 == 1
    assert_matches(index, model)
    # a keep that keeps everything rewrites nothing; one that keeps nothing empties the index
    names = [t.name for t in index.tables()]
    nothing = index.scavenge(lambda h, n, p: np.ones(len(h), dtype=bool))
    assert nothing.entries_deleted == 0 and nothing.space_saved == 0
    assert [t.name for t in index.tables()] == names
    everything = index.scavenge(lambda h, n, p: np.zeros(len(h), dtype=bool))
    assert everything.entries_deleted == model.count()
    assert index.tables() == [] and index.entry_count() == 0
    assert all(list(index.iter_forward(h)) == [] for h in HASHES)
    if on_disk:
        assert set(os.listdir(tmp_path)) == {"indexmap"}
    index.close()


@pytest.mark.parametrize("on_disk", [True, False])
def test_readers_on_threads_see_a_growing_superset_while_dumps_and_merges_run(tmp_path, on_disk):
    index = TableIndex.open(str(tmp_path) if on_disk else None, max_memtable_entries=40)
    streams = (stream_hash("a"), stream_hash("b"), stream_hash("c"))
    total = 1200
    full = {h: [] for h in streams}  # what the writer will add, per hash, in order
    for i in range(total):
        full[streams[i % 3]].append((i // 3, 10 * i))
    published = {h: 0 for h in streams}  # entries of each hash whose add has returned
    done = threading.Event()
    errors: list[BaseException] = []
    reads = [0]

    def reader(h: int) -> None:
        try:
            while not done.is_set() or reads[0] < 50:
                before = published[h]
                seen = list(index.iter_forward(h))
                assert len(seen) >= before and seen == full[h][: len(seen)]
                back = list(index.iter_backward(h))
                assert len(back) >= before and back == full[h][: len(back)][::-1]
                if before:
                    n, p = full[h][before - 1]
                    assert index.get(h, n) == [p]
                    assert next(index.iter_backward(h, n + 1)) == (n, p)
                reads[0] += 1
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=reader, args=(h,)) for h in streams]
    for t in threads:
        t.start()
    try:
        for i in range(0, total, 3):
            batch = [(streams[k % 3], k // 3, 10 * k) for k in range(i, i + 3)]
            index.add(batch, 10 * (i + 3))
            for h, _, _ in batch:
                published[h] += 1
    finally:
        done.set()
        for t in threads:
            t.join()
    assert errors == []
    index.wait_idle()
    assert max(t.level for t in index.tables()) >= 2  # 30 dumps: merges ran while readers read
    for h in streams:
        assert list(index.iter_forward(h)) == full[h]
    index.close()
