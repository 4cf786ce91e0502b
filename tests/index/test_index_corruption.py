"""Damaged index files are detected and named; crash leftovers are cleaned up."""

from __future__ import annotations

import pytest

from evdb.errors import CorruptedFile
from evdb.index.existence import StreamExistenceFilter
from evdb.index.table_index import TableIndex


def built(tmp_path) -> tuple[TableIndex, list]:
    index = TableIndex.open(str(tmp_path), max_memtable_entries=10)
    for i in range(40):
        index.add([(i % 3, i // 3, i)], i + 1)
    index.wait_idle()
    tables = index.tables()
    index.close()
    return index, tables


def test_flipped_byte_in_a_ptable_is_named(tmp_path):
    _, tables = built(tmp_path)
    path = tables[0].path
    with open(path, "r+b") as f:
        f.seek(80)
        b = f.read(1)
        f.seek(80)
        f.write(bytes([b[0] ^ 1]))
    with pytest.raises(CorruptedFile) as err:
        TableIndex.open(str(tmp_path))
    assert path in str(err.value)


def test_truncated_ptable_is_named(tmp_path):
    _, tables = built(tmp_path)
    with open(tables[0].path, "r+b") as f:
        f.truncate(100)
    with pytest.raises(CorruptedFile, match=tables[0].name):
        TableIndex.open(str(tmp_path))


def test_missing_ptable_is_named(tmp_path):
    _, tables = built(tmp_path)
    (tmp_path / tables[0].name).unlink()
    with pytest.raises(CorruptedFile, match="missing"):
        TableIndex.open(str(tmp_path))


def test_corrupt_indexmap_is_named(tmp_path):
    built(tmp_path)
    imap = tmp_path / "indexmap"
    imap.write_text(imap.read_text().replace("\n1\n", "\n2\n", 1))
    with pytest.raises(CorruptedFile, match="indexmap"):
        TableIndex.open(str(tmp_path))


def test_leftovers_are_removed(tmp_path):
    built(tmp_path)
    stray = tmp_path / "6f1c8a7e-1d2b-4c3d-9e8f-0a1b2c3d4e5f"
    stray.write_bytes(b"half a table")
    (tmp_path / "6f1c8a7e-1d2b-4c3d-9e8f-0a1b2c3d4e5f.bloomfilter").write_bytes(b"x")
    (tmp_path / "something.tmp").write_bytes(b"x")
    index = TableIndex.open(str(tmp_path))
    assert not stray.exists() and not (tmp_path / "something.tmp").exists()
    index.close()


def test_existence_filter_round_trip_and_rebuild(tmp_path):
    f = StreamExistenceFilter.open(str(tmp_path), capacity=10_000)
    names = [f"stream-{i}" for i in range(500)]
    for n in names:
        f.add(n)
    f.flush(1234)
    f.close()
    g = StreamExistenceFilter.open(str(tmp_path), capacity=10_000)
    assert g.checkpoint == 1234 and all(g.might_exist(n) for n in names)
    absent = sum(g.might_exist(f"other-{i}") for i in range(1000))
    assert absent < 50  # about 1% false positives
    dat = tmp_path / "streamExistenceFilter.dat"
    raw = bytearray(dat.read_bytes())
    raw[100] ^= 0xFF
    dat.write_bytes(bytes(raw))
    h = StreamExistenceFilter.open(str(tmp_path), capacity=10_000)
    assert h.checkpoint == -1  # rebuilt from the log by the database
