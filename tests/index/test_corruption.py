"""Damaged index files: PTables and indexmap are refused with CorruptedFile naming the file; leftovers of
an interrupted change are deleted at open; the stream existence filter is rebuilt, never trusted."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evdb.errors import CorruptedFile
from evdb.index.existence import CHK_NAME, DAT_NAME, StreamExistenceFilter
from evdb.index.hashing import stream_hash
from evdb.index.indexmap import IndexMap
from evdb.index.ptable import PTable
from evdb.index.table_index import TableIndex

SETTINGS = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
STREAMS = [f"stream-{i}" for i in range(7)]


def build_index(directory: str) -> tuple[list[str], int]:
    """An index with two level-0 tables of 6 entries and 2 entries left in the memtable (not persisted)."""
    index = TableIndex.open(directory, max_memtable_entries=6)
    position = 0
    for i in range(14):
        index.add([(stream_hash(STREAMS[i % 7]), i // 7, position)], position + 10)
        position += 10
    index.wait_idle()
    names = [t.name for t in index.tables()]
    checkpoint = index.checkpoint
    index.close()
    assert len(names) == 2 and checkpoint == 120
    return names, checkpoint


def snapshot(directory: str) -> dict[str, bytes]:
    return {n: Path(os.path.join(directory, n)).read_bytes() for n in sorted(os.listdir(directory))}


def assert_intact(directory: str) -> None:
    index = TableIndex.open(directory)
    try:
        for i, name in enumerate(STREAMS):
            expected = [(0, 10 * i)] + ([(1, 10 * (i + 7))] if i + 7 < 12 else [])
            assert list(index.iter_forward(stream_hash(name))) == expected
    finally:
        index.close()


# -- PTables ------------------------------------------------------------------------------------------
@SETTINGS
@given(offset=st.integers(0, 2**20), xor=st.integers(1, 255), which=st.integers(0, 1))
def test_a_flipped_byte_in_a_ptable_is_named_at_open(tmp_path_factory, offset, xor, which):
    directory = str(tmp_path_factory.mktemp("flip"))
    names = build_index(directory)[0]
    path = os.path.join(directory, names[which])
    raw = bytearray(Path(path).read_bytes())
    raw[offset % len(raw)] ^= xor
    Path(path).write_bytes(raw)
    with pytest.raises(CorruptedFile) as caught:
        TableIndex.open(directory)
    assert caught.value.path == path
    assert names[which] in str(caught.value)
    with pytest.raises(CorruptedFile):
        PTable.open(directory, names[which])


@pytest.mark.parametrize("size", [0, 1, 63, 64, 95, 96, 96 + 24 * 6 - 1, "plus_one", "plus_24"])
def test_a_truncated_or_extended_ptable_is_named_at_open(tmp_path, size):
    names = build_index(str(tmp_path))[0]
    path = os.path.join(tmp_path, names[1])
    raw = Path(path).read_bytes()
    assert len(raw) == 96 + 24 * 6
    if size == "plus_one":
        raw += b"\0"
    elif size == "plus_24":
        raw += bytes(24)
    else:
        raw = raw[:size]
    Path(path).write_bytes(raw)
    with pytest.raises(CorruptedFile) as caught:
        TableIndex.open(str(tmp_path))
    assert caught.value.path == path


def test_a_missing_ptable_named_by_indexmap_is_named(tmp_path):
    names = build_index(str(tmp_path))[0]
    os.unlink(os.path.join(tmp_path, names[0]))
    with pytest.raises(CorruptedFile) as caught:
        TableIndex.open(str(tmp_path))
    assert caught.value.path == os.path.join(tmp_path, names[0])
    assert "missing" in caught.value.reason


def test_a_ptable_at_another_level_than_indexmap_says_is_refused(tmp_path):
    names, checkpoint = build_index(str(tmp_path))
    indexmap = IndexMap.read(str(tmp_path))
    assert indexmap is not None
    swapped = tuple(type(t)(1 if t.name == names[1] else 0, 0, t.name) for t in indexmap.tables)
    IndexMap(checkpoint, indexmap.max_auto_merge_level, swapped).write(str(tmp_path))
    with pytest.raises(CorruptedFile) as caught:
        TableIndex.open(str(tmp_path))
    assert caught.value.path == os.path.join(tmp_path, names[1])


# -- indexmap -----------------------------------------------------------------------------------------
@SETTINGS
@given(offset=st.integers(0, 10_000), xor=st.integers(1, 255), cut=st.booleans())
def test_a_corrupt_indexmap_is_named_and_nothing_is_touched(tmp_path_factory, offset, xor, cut):
    directory = str(tmp_path_factory.mktemp("map"))
    build_index(directory)
    stray = os.path.join(directory, str(uuid.uuid4()) + ".tmp")
    Path(stray).write_bytes(b"half a table")
    path = os.path.join(directory, "indexmap")
    raw = bytearray(Path(path).read_bytes())
    if cut:
        raw = raw[: offset % len(raw)]
    else:
        raw[offset % len(raw)] ^= xor
    Path(path).write_bytes(raw)
    before = snapshot(directory)
    with pytest.raises(CorruptedFile) as caught:
        TableIndex.open(directory)
    assert caught.value.path == path
    assert "indexmap" in str(caught.value)
    assert snapshot(directory) == before  # no leftover removed, no sidecar rebuilt, nothing written


# -- leftovers ----------------------------------------------------------------------------------------
def test_unnamed_ptables_and_temporary_files_are_deleted_at_open(tmp_path):
    names, _ = build_index(str(tmp_path))
    keep = set(os.listdir(tmp_path))
    orphan = str(uuid.uuid4())
    leftovers = [
        orphan,
        orphan + ".bloomfilter",
        str(uuid.uuid4()) + ".bloomfilter",
        str(uuid.uuid4()) + ".tmp",
        str(uuid.uuid4()) + ".bloomfilter.tmp",
        names[0] + ".tmp",
        names[0] + ".bloomfilter.tmp",
        "indexmap.tmp",
    ]
    # copy a real table under an unnamed GUID: a complete table the indexmap never named
    Path(tmp_path / orphan).write_bytes(Path(tmp_path / names[0]).read_bytes())
    for name in leftovers[1:]:
        Path(tmp_path / name).write_bytes(b"x")
    unrelated = ["notes.txt", "INDEXMAP", str(uuid.uuid4()).upper()]
    for name in unrelated:
        Path(tmp_path / name).write_bytes(b"y")
    (tmp_path / "stream-existence").mkdir()
    assert_intact(str(tmp_path))
    assert set(os.listdir(tmp_path)) == keep | set(unrelated) | {"stream-existence"}


# -- the stream existence filter ----------------------------------------------------------------------
names_lists = st.lists(st.text(min_size=0, max_size=20), min_size=1, max_size=40)


@SETTINGS
@given(first=names_lists, second=names_lists, position=st.integers(0, 2**62))
def test_existence_filter_round_trip_never_says_no_to_an_added_name(
    tmp_path_factory, first, second, position
):
    directory = str(tmp_path_factory.mktemp("exist"))
    memdb = StreamExistenceFilter.open(None, capacity=1000)
    f = StreamExistenceFilter.open(directory, capacity=1000)
    assert f.checkpoint == -1
    for name in first:
        f.add(name)
        memdb.add(name)
    assert all(f.might_exist(n) and memdb.might_exist(n) for n in first)
    f.flush(position)
    assert f.checkpoint == position
    f.close()
    f = StreamExistenceFilter.open(directory, capacity=1000)
    assert f.checkpoint == position
    assert all(f.might_exist(n) for n in first)
    for name in second:
        f.add(name)
    f.flush(position + 1)
    f = StreamExistenceFilter.open(directory, capacity=1000)
    assert f.checkpoint == position + 1
    assert all(f.might_exist(n) for n in first + second)
    assert sorted(os.listdir(directory)) == [CHK_NAME, DAT_NAME]


@SETTINGS
@given(offset=st.integers(0, 2**20), xor=st.integers(1, 255), cut=st.booleans())
def test_a_corrupt_dat_is_rebuilt_empty_with_checkpoint_minus_one(tmp_path_factory, offset, xor, cut):
    directory = str(tmp_path_factory.mktemp("exist"))
    f = StreamExistenceFilter.open(directory, capacity=500)
    names = [f"s-{i}" for i in range(50)]
    for name in names:
        f.add(name)
    f.flush(777)
    path = os.path.join(directory, DAT_NAME)
    raw = bytearray(Path(path).read_bytes())
    if cut:
        raw = raw[: offset % len(raw)]
    else:
        raw[offset % len(raw)] ^= xor
    Path(path).write_bytes(raw)
    rebuilt = StreamExistenceFilter.open(directory, capacity=500)  # no exception
    assert rebuilt.checkpoint == -1
    assert not any(rebuilt.might_exist(n) for n in names)  # empty: nothing from the damaged file is trusted
    for name in names[:10]:  # the database adds the names of the whole log again
        rebuilt.add(name)
    rebuilt.flush(778)
    again = StreamExistenceFilter.open(directory, capacity=500)
    assert again.checkpoint == 778
    assert all(again.might_exist(n) for n in names[:10])


def test_a_corrupt_dat_flushed_before_any_name_is_added_again_is_not_trusted(tmp_path):
    f = StreamExistenceFilter.open(str(tmp_path), capacity=500)
    f.add("a")
    f.flush(100)
    path = tmp_path / DAT_NAME
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    path.write_bytes(raw)
    rebuilt = StreamExistenceFilter.open(str(tmp_path), capacity=500)
    assert rebuilt.checkpoint == -1
    rebuilt.flush(50)  # nothing added yet: the checkpoint moves, the filter must still not be trusted later
    reopened = StreamExistenceFilter.open(str(tmp_path), capacity=500)
    assert reopened.checkpoint == -1 or reopened.might_exist("a")
