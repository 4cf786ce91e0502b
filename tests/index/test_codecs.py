"""Property tests of the index codecs: PTable write/load, lookups against a plain model, IndexMap
encode/decode, the bloom sidecar (never trusted), and the 64-bit stream hash."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import mmh3
import numpy as np
import pytest
import xxhash
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evdb.index.bloom import (
    BloomSidecar,
    decode_sidecar,
    encode_sidecar,
    read_sidecar,
    sidecar_path,
    sidecar_size,
)
from evdb.index.hashing import stream_hash
from evdb.index.indexmap import IndexMap, IndexMapEntry
from evdb.index.merge import sort_entries
from evdb.index.ptable import PTable, write_table

SETTINGS = settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

# a few hashes, so that runs of one hash are long; the extremes of uint64 included
HASH_POOL = (0, 1, 7, 2**32, 2**63 - 1, 2**63, 2**64 - 2, 2**64 - 1)
ABSENT = (2, 8, 2**62, 2**64 - 3)
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

entry = st.tuples(
    st.sampled_from(HASH_POOL),
    st.one_of(st.integers(0, 6), st.sampled_from((INT64_MIN, -1, INT64_MAX))),
    st.integers(INT64_MIN, INT64_MAX),
)
entry_lists = st.lists(entry, min_size=0, max_size=60)


def columns(entries: list[tuple[int, int, int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return (
        np.array([e[0] for e in entries], dtype=np.uint64),
        np.array([e[1] for e in entries], dtype=np.int64),
        np.array([e[2] for e in entries], dtype=np.int64),
    )


def rows(table: PTable) -> list[tuple[int, int, int]]:
    return list(zip(table.hashes.tolist(), table.numbers.tolist(), table.positions.tolist(), strict=True))


def make_table(directory: str | None, entries: list[tuple[int, int, int]], level: int = 0) -> PTable:
    return write_table(directory, level, *sort_entries(*columns(entries)))


# -- a plain Python model of one table's lookups ------------------------------------------------------
def model_forward(entries, h, from_number):
    return sorted((n, p) for eh, n, p in entries if eh == h and n >= from_number)


def model_backward(entries, h, before):
    return sorted(
        ((n, p) for eh, n, p in entries if eh == h and (before is None or n < before)), reverse=True
    )


def model_get(entries, h, number):
    return sorted(p for eh, n, p in entries if eh == h and n == number)


def assert_lookups_match(table: PTable, entries: list[tuple[int, int, int]]) -> None:
    for h in HASH_POOL + ABSENT:
        numbers = sorted({n for eh, n, _ in entries if eh == h})
        probes = {INT64_MIN, -1, 0, 3, INT64_MAX, *numbers, *(n + 1 for n in numbers if n < INT64_MAX)}
        assert list(table.iter_forward(h, INT64_MIN) or ()) == model_forward(entries, h, INT64_MIN)
        assert list(table.iter_backward(h, None) or ()) == model_backward(entries, h, None)
        for n in probes:
            assert list(table.iter_forward(h, n) or ()) == model_forward(entries, h, n), (h, n)
            assert list(table.iter_backward(h, n) or ()) == model_backward(entries, h, n), (h, n)
            assert table.get(h, n) == model_get(entries, h, n), (h, n)


# -- PTable -------------------------------------------------------------------------------------------
@SETTINGS
@given(entries=entry_lists, level=st.integers(0, 2**16 - 1), on_disk=st.booleans())
def test_ptable_round_trip_sorted_and_lookups_match_a_model(tmp_path_factory, entries, level, on_disk):
    directory = str(tmp_path_factory.mktemp("pt")) if on_disk else None
    written = make_table(directory, entries, level)
    expected = sorted(entries)  # (hash, number, position): the hash compares as an unsigned int
    assert rows(written) == expected
    assert written.level == level and len(written) == len(entries)
    tables = [written]
    if on_disk:
        assert written.path == os.path.join(directory, written.name)
        assert os.path.getsize(written.path) == 96 + 24 * len(entries)
        assert sorted(os.listdir(directory)) == sorted([written.name, written.name + ".bloomfilter"])
        loaded = PTable.open(directory, written.name)
        assert rows(loaded) == expected
        assert (loaded.level, loaded.digest, loaded.size) == (level, written.digest, written.size)
        tables.append(loaded)
    else:
        assert written.path is None
    for table in tables:
        assert_lookups_match(table, entries)


@SETTINGS
@given(entries=entry_lists)
def test_memory_and_disk_tables_have_the_same_checksum_and_size(tmp_path_factory, entries):
    directory = str(tmp_path_factory.mktemp("pt"))
    on_disk, in_memory = make_table(directory, entries), make_table(None, entries)
    assert on_disk.digest == in_memory.digest
    with open(on_disk.path, "rb") as f:
        raw = f.read()
    assert raw[-16:] == on_disk.digest == xxhash.xxh3_128_digest(raw[:-16])
    assert on_disk.size == in_memory.size == len(raw) + os.path.getsize(sidecar_path(on_disk.path))


def test_ptable_bytes_are_laid_out_as_documented(tmp_path):
    entries = [(5, 1, 100), (2**64 - 1, 0, 7), (5, 0, 50)]
    table = make_table(str(tmp_path), entries, level=3)
    raw = (tmp_path / table.name).read_bytes()
    n = 3
    assert raw[:8] == b"EVDBPTBL"
    assert int.from_bytes(raw[8:10], "little") == 1
    assert int.from_bytes(raw[10:12], "little") == 3
    assert raw[12:16] == bytes(4) and raw[24:64] == bytes(40)
    assert int.from_bytes(raw[16:24], "little") == n
    assert np.frombuffer(raw, "<u8", n, 64).tolist() == [5, 5, 2**64 - 1]
    assert np.frombuffer(raw, "<i8", n, 64 + 8 * n).tolist() == [0, 1, 0]
    assert np.frombuffer(raw, "<i8", n, 64 + 16 * n).tolist() == [50, 100, 7]
    assert raw[64 + 24 * n : 72 + 24 * n] == b"EVDBPEND"
    assert int.from_bytes(raw[72 + 24 * n : 80 + 24 * n], "little") == n
    assert len(raw) == 96 + 24 * n


# -- IndexMap -----------------------------------------------------------------------------------------
@st.composite
def indexmaps(draw):
    per_level = draw(st.lists(st.integers(0, 3), max_size=5))
    tables = tuple(
        IndexMapEntry(level, index, str(uuid.UUID(int=draw(st.integers(0, 2**128 - 1)), version=4)))
        for level, count in enumerate(per_level)
        for index in range(count)
    )
    if len({t.name for t in tables}) != len(tables):
        tables = ()
    return IndexMap(draw(st.integers(-1, 2**63 - 1)), draw(st.integers(0, 2**31 - 1)), tables)


@SETTINGS
@given(indexmap=indexmaps())
def test_indexmap_encode_decode_round_trip(tmp_path_factory, indexmap):
    raw = indexmap.encode()
    assert IndexMap.decode(raw) == indexmap
    lines = raw.decode("ascii").split("\n")
    assert lines[-1] == ""  # every line ends with \n
    assert lines[0] == xxhash.xxh3_128_hexdigest(raw[len(lines[0]) + 1 :])
    assert lines[1:4] == ["1", str(indexmap.checkpoint), str(indexmap.max_auto_merge_level)]
    assert lines[4:-1] == [f"{t.level},{t.index},{t.name}" for t in indexmap.tables]
    directory = str(tmp_path_factory.mktemp("map"))
    indexmap.write(directory)
    assert IndexMap.read(directory) == indexmap
    assert os.listdir(directory) == ["indexmap"]


def test_indexmap_encode_sorts_tables_by_level_then_index():
    names = [str(uuid.uuid4()) for _ in range(3)]
    shuffled = (IndexMapEntry(1, 0, names[0]), IndexMapEntry(0, 1, names[1]), IndexMapEntry(0, 0, names[2]))
    decoded = IndexMap.decode(IndexMap(5, 2, shuffled).encode())
    assert [(t.level, t.index) for t in decoded.tables] == [(0, 0), (0, 1), (1, 0)]


# -- the bloom sidecar --------------------------------------------------------------------------------
SIDECAR_ENTRIES = [(h, n, 10 * i + n) for i, h in enumerate(HASH_POOL) for n in range(3)]


@SETTINGS
@given(offset=st.integers(0, 10_000), xor=st.integers(1, 255))
def test_a_corrupted_sidecar_is_rebuilt_and_lookups_stay_right(tmp_path_factory, offset, xor):
    directory = str(tmp_path_factory.mktemp("bloom"))
    table = make_table(directory, SIDECAR_ENTRIES)
    path = sidecar_path(table.path)
    with open(path, "rb") as f:
        good = bytearray(f.read())
    bad = bytearray(good)
    bad[offset % len(bad)] ^= xor
    with open(path, "wb") as f:
        f.write(bad)
    assert decode_sidecar(bytes(bad)) is None  # a damaged sidecar is never decoded as valid
    reopened = PTable.open(directory, table.name)
    rebuilt = read_sidecar(table.path)
    assert rebuilt is not None and rebuilt.table_digest == table.digest
    assert all(h in reopened.bloom for h in HASH_POOL)
    assert_lookups_match(reopened, SIDECAR_ENTRIES)
    assert sorted(os.listdir(directory)) == sorted([table.name, table.name + ".bloomfilter"])


@pytest.mark.parametrize("damage", ["deleted", "truncated", "empty", "another_tables", "garbage"])
def test_a_missing_or_foreign_sidecar_is_rebuilt_not_trusted(tmp_path, damage):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    table = make_table(str(tmp_path / "a"), SIDECAR_ENTRIES)
    # a table with other hashes: its sidecar is intact but says "no" to this table's hashes
    other = make_table(str(tmp_path / "b"), [(3, 0, 0), (4, 0, 1)])
    path = sidecar_path(table.path)
    good = Path(path).read_bytes()
    if damage == "deleted":
        os.unlink(path)
    elif damage == "truncated":
        Path(path).write_bytes(good[:-1])
    elif damage == "empty":
        Path(path).write_bytes(b"")
    elif damage == "another_tables":
        Path(path).write_bytes(Path(sidecar_path(other.path)).read_bytes())
    else:
        Path(path).write_bytes(os.urandom(len(good)))
    reopened = PTable.open(str(tmp_path / "a"), table.name)
    assert_lookups_match(reopened, SIDECAR_ENTRIES)
    assert Path(path).read_bytes() == good  # rebuilt: the filter is a function of the table
    assert reopened.size == table.size


@SETTINGS
@given(hashes=st.lists(st.integers(0, 2**64 - 1), max_size=300), digest=st.binary(min_size=16, max_size=16))
def test_sidecar_size_is_the_encoded_size_and_has_no_false_negatives(hashes, digest):
    table = write_table(None, 0, *sort_entries(*columns([(h, 0, 0) for h in hashes])))
    sidecar = BloomSidecar(table.bloom, len(set(hashes)), digest)
    raw = encode_sidecar(sidecar)
    assert sidecar_size(sidecar) == len(raw) == table.bloom_size
    decoded = decode_sidecar(raw)
    assert decoded is not None and decoded.table_digest == digest and decoded.hash_count == len(set(hashes))
    assert all(h in decoded.bloom for h in hashes)


# -- the stream hash ----------------------------------------------------------------------------------
@settings(max_examples=200, deadline=None)
@given(name=st.text(max_size=40))
def test_stream_hash_is_64_bit_and_made_of_two_32_bit_hashes(name):
    h = stream_hash(name)
    assert 0 <= h < 2**64
    assert h == stream_hash(name)
    data = name.encode()
    assert h >> 32 == xxhash.xxh32_intdigest(data)
    assert h & 0xFFFFFFFF == mmh3.hash(data, signed=False)


def test_stream_hash_uses_all_64_bits():
    hashes = [stream_hash(f"stream-{i}") for i in range(2000)]
    assert len(set(hashes)) == 2000
    assert any(h >= 2**63 for h in hashes) and any(h < 2**32 for h in [h >> 32 for h in hashes])
    assert any(h & 0xFFFFFFFF >= 2**31 for h in hashes)


def test_stream_hash_is_the_same_in_another_process():
    names = ["orders-1", "", "$all", "ünïcode-流", "a" * 1000]
    code = (
        "import sys; from evdb.index.hashing import stream_hash; "
        "print(' '.join(str(stream_hash(n)) for n in sys.argv[1:]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, *names],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONHASHSEED": "12345"},
    ).stdout.split()
    assert [int(v) for v in out] == [stream_hash(n) for n in names]
    assert stream_hash("orders-1") == 0x0D7A910B469821FA  # the value docs/storage-format-index.md gives


@pytest.mark.parametrize("on_disk", [True, False])
def test_long_runs_read_whole_in_both_directions(tmp_path, on_disk):
    # 9,000 entries of one hash between two others: the readers' growing blocks (8, 32, ... 4096) all used
    entries = [(5, n, 3 * n) for n in range(9000)] + [(4, 0, 1), (6, 0, 2), (5, 4500, 1)]
    table = make_table(str(tmp_path) if on_disk else None, entries)
    mine = sorted((n, p) for h, n, p in entries if h == 5)
    assert list(table.iter_forward(5, 0)) == mine
    assert list(table.iter_backward(5, None)) == mine[::-1]
    assert list(table.iter_forward(5, 4500)) == mine[4500:]
    assert list(table.iter_backward(5, 4501)) == mine[:4502][::-1]
    assert table.get(5, 4500) == [1, 13500]
