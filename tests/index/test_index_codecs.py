"""Property tests for every index codec: PTables, bloom sidecars, indexmap, sorting and merging."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evdb.errors import CorruptedFile
from evdb.index.bloom import BloomSidecar, build_bloom, decode_sidecar, encode_sidecar, read_sidecar
from evdb.index.hashing import stream_hash
from evdb.index.indexmap import IndexMap, IndexMapEntry
from evdb.index.merge import is_sorted, merge_sorted, sort_entries
from evdb.index.ptable import ENTRY_SIZE, FOOTER_SIZE, HEADER_SIZE, PTable, TableWriter, write_table

wide_entries = st.lists(
    st.tuples(st.integers(0, 2**64 - 1), st.integers(0, 2**63 - 1), st.integers(0, 2**63 - 1)), max_size=120
)
# few distinct hashes and numbers: many runs of one hash, duplicate numbers
narrow_entries = st.lists(
    st.tuples(st.integers(0, 6), st.integers(0, 12), st.integers(0, 10**6)), max_size=120
)


def columns(entries: list[tuple[int, int, int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return (
        np.array([e[0] for e in entries], dtype=np.uint64),
        np.array([e[1] for e in entries], dtype=np.int64),
        np.array([e[2] for e in entries], dtype=np.int64),
    )


def rows(hashes: np.ndarray, numbers: np.ndarray, positions: np.ndarray) -> list[tuple[int, int, int]]:
    return list(zip(hashes.tolist(), numbers.tolist(), positions.tolist(), strict=True))


# -- stream hash ---------------------------------------------------------------------------------------
def test_stream_hash_is_pinned():
    """xxHash32 high, MurmurHash3 x86_32 low: the hash is part of the on-disk format."""
    assert stream_hash("orders-1") == 0x0D7A910B469821FA
    assert stream_hash("$all") == 0xCB7CECD698860A9D
    assert stream_hash("ünïcödé-stream") == 0x803E1DA174C36E54
    assert stream_hash("") == 0x02CC5D0500000000


@given(st.text(max_size=40))
def test_stream_hash_is_64_bit_and_stable(name):
    assert 0 <= stream_hash(name) < 2**64
    assert stream_hash(name) == stream_hash(str(name))


# -- PTable --------------------------------------------------------------------------------------------
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(entries=wide_entries, level=st.integers(0, 7))
def test_ptable_round_trip(tmp_path_factory, entries, level):
    entries = sorted(entries)
    directory = str(tmp_path_factory.mktemp("pt"))
    written = write_table(directory, level, *columns(entries))
    path = os.path.join(directory, written.name)
    assert os.path.getsize(path) == HEADER_SIZE + ENTRY_SIZE * len(entries) + FOOTER_SIZE
    loaded = PTable.open(directory, written.name)
    in_memory = write_table(None, level, *columns(entries))
    for table in (written, loaded, in_memory):
        assert table.level == level and len(table) == len(entries)
        assert rows(*table.entries) == entries
    assert loaded.digest == written.digest == in_memory.digest  # the same bytes either way


@settings(max_examples=60, deadline=None)
@given(entries=narrow_entries, h=st.integers(0, 7), n=st.integers(-1, 13))
def test_ptable_lookups_match_a_model(entries, h, n):
    table = write_table(None, 0, *sort_entries(*columns(entries)))
    mine = sorted((e[1], e[2]) for e in entries if e[0] == h)
    assert list(table.iter_forward(h, n) or []) == [x for x in mine if x[0] >= n]
    assert list(table.iter_backward(h, n) or []) == sorted((x for x in mine if x[0] < n), reverse=True)
    assert list(table.iter_backward(h, None) or []) == mine[::-1]
    assert table.get(h, n) == sorted(p for num, p in mine if num == n)


def test_ptable_columns_are_views_of_the_mapped_file(tmp_path):
    """searchsorted runs on the mapping: nothing is copied when a table is opened."""
    hashes = np.arange(0, 3000, 3, dtype=np.uint64)
    table = write_table(str(tmp_path), 0, hashes, np.zeros(1000, np.int64), np.arange(1000, dtype=np.int64))
    opened = PTable.open(str(tmp_path), table.name)
    for column in opened.entries:
        assert not column.flags.owndata and not column.flags.writeable
    assert opened.range_of(300) == (100, 101)
    assert opened.range_of(301) == (0, 0)


def test_long_stream_is_read_lazily(tmp_path):
    """The last entry of a long stream comes without converting the whole range."""
    n = 200_000
    table = write_table(
        None, 0, np.full(n, 5, np.uint64), np.arange(n, dtype=np.int64), np.arange(n, dtype=np.int64)
    )
    assert next(table.iter_backward(5, None)) == (n - 1, n - 1)
    assert next(table.iter_forward(5, n - 3)) == (n - 3, n - 3)


def test_table_writer_refuses_unsorted_or_miscounted_entries(tmp_path):
    with pytest.raises(ValueError, match="order"), TableWriter(str(tmp_path), 0, 2) as writer:
        writer.append(*columns([(5, 0, 0), (4, 0, 1)]))
    assert os.listdir(tmp_path) == []  # the temporary file went with the failure
    writer = TableWriter(str(tmp_path), 0, 3)
    writer.append(*columns([(1, 0, 0)]))
    with pytest.raises(ValueError, match="1 of 3"):
        writer.finish()
    writer.abort()
    assert os.listdir(tmp_path) == []


def test_a_failed_write_leaves_no_file_under_a_final_name(tmp_path, monkeypatch):
    def failing_fsync(fd: int) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(OSError, match="disk gone"):
        write_table(str(tmp_path), 0, *columns([(1, 0, 0), (2, 0, 1)]))
    assert os.listdir(tmp_path) == []


# -- bloom sidecar -------------------------------------------------------------------------------------
@settings(max_examples=50, deadline=None)
@given(hashes=st.lists(st.integers(0, 2**64 - 1), max_size=300), digest=st.binary(min_size=16, max_size=16))
def test_bloom_sidecar_round_trip_has_no_false_negatives(hashes, digest):
    column = np.array(sorted(hashes), dtype=np.uint64)
    bloom, count = build_bloom(column)
    assert count == len(set(hashes))
    decoded = decode_sidecar(encode_sidecar(BloomSidecar(bloom, count, digest)))
    assert decoded is not None
    assert decoded.hash_count == count and decoded.table_digest == digest
    assert decoded.bloom == bloom
    assert all(h in decoded.bloom for h in hashes)


def test_bloom_filter_rejects_most_absent_hashes():
    present = np.array(sorted(stream_hash(f"in-{i}") for i in range(20_000)), dtype=np.uint64)
    bloom, _ = build_bloom(present)
    false_positives = sum(stream_hash(f"out-{i}") in bloom for i in range(20_000))
    assert false_positives < 20_000 * 0.02  # built for 1%


@settings(max_examples=50, deadline=None)
@given(damage=st.integers(0, 10_000), cut=st.booleans())
def test_damaged_bloom_sidecar_is_refused(damage, cut):
    bloom, count = build_bloom(np.arange(100, dtype=np.uint64))
    raw = bytearray(encode_sidecar(BloomSidecar(bloom, count, b"\1" * 16)))
    if cut:
        del raw[damage % len(raw) :]
    else:
        raw[damage % len(raw)] ^= 0x10
    assert decode_sidecar(bytes(raw)) is None


@pytest.mark.parametrize("damage", ["missing", "flipped", "other table's"])
def test_bloom_sidecar_is_rebuilt_not_trusted(tmp_path, damage):
    entries = sorted((stream_hash(f"s-{i}"), 0, i) for i in range(300))
    table = write_table(str(tmp_path), 0, *columns(entries))
    sidecar = tmp_path / f"{table.name}.bloomfilter"
    if damage == "missing":
        sidecar.unlink()
    elif damage == "flipped":
        raw = bytearray(sidecar.read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        sidecar.write_bytes(bytes(raw))
    else:
        other = write_table(str(tmp_path), 0, *columns([(1, 0, 0)]))
        sidecar.write_bytes((tmp_path / f"{other.name}.bloomfilter").read_bytes())
    loaded = PTable.open(str(tmp_path), table.name)
    assert read_sidecar(str(tmp_path / table.name)).table_digest == loaded.digest  # rewritten, and right
    for h, _, position in entries:
        assert loaded.get(h, 0) == [position]


# -- indexmap ------------------------------------------------------------------------------------------
indexmaps = st.builds(
    lambda checkpoint, level_sizes, max_level, uuids: IndexMap(
        checkpoint,
        max_level,
        tuple(
            IndexMapEntry(level, index, uuids.pop())
            for level, size in enumerate(level_sizes)
            for index in range(size)
        ),
    ),
    st.integers(-1, 2**63 - 1),
    st.lists(st.integers(0, 4), max_size=5),
    st.integers(0, 2**31 - 1),
    st.lists(st.uuids().map(str), min_size=20, max_size=20, unique=True),
)


@settings(max_examples=80, deadline=None)
@given(indexmap=indexmaps)
def test_indexmap_round_trip(indexmap):
    raw = indexmap.encode()
    assert IndexMap.decode(raw) == indexmap
    lines = raw.decode().splitlines()
    assert len(lines) == 4 + len(indexmap.tables) and len(lines[0]) == 32


@settings(max_examples=80, deadline=None)
@given(indexmap=indexmaps, where=st.integers(0, 10_000), bit=st.integers(0, 7))
def test_indexmap_with_any_flipped_bit_is_refused(indexmap, where, bit):
    raw = bytearray(indexmap.encode())
    raw[where % len(raw)] ^= 1 << bit
    with pytest.raises(CorruptedFile) as failure:
        IndexMap.decode(bytes(raw), "/idx/indexmap")
    assert failure.value.path == "/idx/indexmap"


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("2\n-1\n5\n", "version"),
        ("1\n-1\n", "header"),
        ("1\n-1\n5\n0,0,../../etc/passwd\n", "not a table name"),
        ("1\n-1\n5\n0,1,0f8fad5b-d9cb-469f-a165-70867728950e\n", "order"),
        (
            "1\n-1\n5\n0,0,0f8fad5b-d9cb-469f-a165-70867728950e\n1,0,0f8fad5b-d9cb-469f-a165-70867728950e\n",
            "twice",
        ),
        ("1\n-2\n5\n", "range"),
    ],
)
def test_indexmap_that_checks_out_but_makes_no_sense_is_refused(body, reason):
    import xxhash

    raw = xxhash.xxh3_128_hexdigest(body.encode()).encode() + b"\n" + body.encode()
    with pytest.raises(CorruptedFile, match=reason):
        IndexMap.decode(raw)


def test_indexmap_write_replaces_atomically(tmp_path):
    IndexMap(5).write(str(tmp_path))
    IndexMap(9).write(str(tmp_path))
    assert os.listdir(tmp_path) == ["indexmap"]
    assert IndexMap.read(str(tmp_path)) == IndexMap(9)
    assert IndexMap.read(str(tmp_path / "nowhere")) is None


# -- sorting and merging -------------------------------------------------------------------------------
@settings(max_examples=80, deadline=None)
@given(entries=narrow_entries)
def test_sort_entries_orders_by_hash_number_position(entries):
    got = rows(*sort_entries(*columns(entries)))
    assert got == sorted(entries)
    assert is_sorted(*columns(got))
    assert is_sorted(*columns(entries)) == (entries == sorted(entries))


@settings(max_examples=80, deadline=None)
@given(sources=st.lists(narrow_entries, max_size=5), block=st.integers(1, 9))
def test_merge_sorted_matches_sorting_everything(sources, block):
    slices: list[list[tuple[int, int, int]]] = []
    merge_sorted([columns(sorted(s)) for s in sources], lambda *c: slices.append(rows(*c)), block=block)
    merged = [e for s in slices for e in s]
    assert merged == sorted(e for s in sources for e in s)
    assert all(slices)  # no empty slice handed on
