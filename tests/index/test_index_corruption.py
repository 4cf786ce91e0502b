"""Damaged index files are detected and named; the leftovers of an interrupted change are cleaned up."""

from __future__ import annotations

import os

import pytest

import evdb.index.table_index as table_index_module
from evdb.errors import CorruptedFile, StorageError
from evdb.index.bloom import read_sidecar
from evdb.index.indexmap import IndexMap
from evdb.index.ptable import FOOTER_SIZE, HEADER_SIZE, PTable
from evdb.index.table_index import TableIndex

GUID = "6f1c8a7e-1d2b-4c3d-9e8f-0a1b2c3d4e5f"


def built(tmp_path, count: int = 40) -> list[PTable]:
    """An index folder with a few tables; returns them (the index is closed)."""
    index = TableIndex.open(str(tmp_path), max_memtable_entries=10)
    for i in range(count):
        index.add([(i % 3, i // 3, i)], i + 1)
    index.close()
    return index.tables()


def region_offsets(entries: int) -> dict[str, int]:
    column = 8 * entries
    return {
        "header": 9,
        "hashes": HEADER_SIZE + 3,
        "numbers": HEADER_SIZE + column + 1,
        "positions": HEADER_SIZE + 2 * column + 5,
        "footer count": HEADER_SIZE + 3 * column + 8,
        "checksum": HEADER_SIZE + 3 * column + FOOTER_SIZE - 1,
    }


@pytest.mark.parametrize("region", list(region_offsets(1)))
def test_a_flipped_byte_anywhere_in_a_ptable_is_named(tmp_path, region):
    tables = built(tmp_path)
    path = tables[0].path
    offset = region_offsets(len(tables[0]))[region]
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0x04]))
    with pytest.raises(CorruptedFile) as failure:
        TableIndex.open(str(tmp_path))
    assert failure.value.path == path


@pytest.mark.parametrize("keep", [0, 50, HEADER_SIZE + 100, -1])
def test_a_truncated_ptable_is_named(tmp_path, keep):
    tables = built(tmp_path)
    path = tables[0].path
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(keep % size)
    with pytest.raises(CorruptedFile, match=r"truncated|holds") as failure:
        TableIndex.open(str(tmp_path))
    assert failure.value.path == path


def test_a_missing_ptable_is_named(tmp_path):
    tables = built(tmp_path)
    os.unlink(tables[-1].path)
    with pytest.raises(CorruptedFile, match="missing") as failure:
        TableIndex.open(str(tmp_path))
    assert failure.value.path == tables[-1].path


@pytest.mark.parametrize("edit", ["checksum", "version", "line", "truncated"])
def test_a_corrupt_indexmap_is_named(tmp_path, edit):
    built(tmp_path)
    path = tmp_path / "indexmap"
    raw = path.read_bytes()
    if edit == "checksum":
        raw = (b"1" if raw[:1] == b"0" else b"0") + raw[1:]  # always a different first digit
    elif edit == "version":
        raw = raw.replace(b"\n1\n", b"\n2\n", 1)
    elif edit == "line":
        raw = raw.replace(b"-", b"_", 1)
    else:
        raw = raw[: len(raw) - 10]
    path.write_bytes(raw)
    with pytest.raises(CorruptedFile, match="indexmap") as failure:
        TableIndex.open(str(tmp_path))
    assert failure.value.path == str(path)
    assert len(os.listdir(tmp_path)) > 1  # nothing was cleaned up on the word of a bad indexmap


def test_leftovers_are_removed_and_other_files_left_alone(tmp_path):
    tables = built(tmp_path)
    leftovers = [
        GUID,  # a table written, but the crash came before indexmap named it
        f"{GUID}.bloomfilter",
        f"{GUID}.tmp",  # a table being written
        f"{tables[0].name}.bloomfilter.tmp",  # a sidecar being rewritten
        "indexmap.tmp",
    ]
    for name in leftovers:
        (tmp_path / name).write_bytes(b"half")
    foreign = [
        "notes.txt",
        "something.tmp",
        "scavenging/scavenging.db",
        "stream-existence/streamExistenceFilter.chk",
    ]
    for name in foreign:
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_bytes(b"not ours")
    index = TableIndex.open(str(tmp_path))
    assert not any((tmp_path / name).exists() for name in leftovers)
    assert all((tmp_path / name).exists() for name in foreign)
    assert {t.name for t in index.tables()} == {t.name for t in tables}
    index.close()


def test_a_crash_before_indexmap_names_a_new_table(tmp_path, monkeypatch):
    """The table is on disk, indexmap was not replaced: the table is a leftover, the checkpoint stays."""
    tables = built(tmp_path, count=20)
    real_write = IndexMap.write

    def crash(self, directory):
        raise OSError("power cut")

    index = TableIndex.open(str(tmp_path), max_memtable_entries=10)
    monkeypatch.setattr(IndexMap, "write", crash)
    real_delete = PTable.delete
    monkeypatch.setattr(PTable, "delete", lambda self: None)  # a crash does not clean up after itself
    for i in range(20, 30):
        index.add([(i % 3, i // 3, i)], i + 1)
    with pytest.raises(StorageError, match="power cut"):
        index.wait_idle()
    index.close()
    monkeypatch.setattr(IndexMap, "write", real_write)
    monkeypatch.setattr(PTable, "delete", real_delete)
    stray = {n for n in os.listdir(tmp_path) if len(n) == 36} - {t.name for t in tables}
    assert len(stray) == 1
    reopened = TableIndex.open(str(tmp_path), max_memtable_entries=10)
    assert reopened.checkpoint == 20 and reopened.entry_count() == 20
    assert not (tmp_path / stray.pop()).exists()
    reopened.close()


def test_a_crash_after_indexmap_before_deleting_merged_tables(tmp_path, monkeypatch):
    monkeypatch.setattr(PTable, "delete", lambda self: None)
    monkeypatch.setattr(PTable, "delete_all", lambda tables: None)
    index = TableIndex.open(str(tmp_path), max_memtable_entries=5)
    for i in range(20):
        index.add([(1, i, i)], i + 1)
    index.close()
    assert len([n for n in os.listdir(tmp_path) if len(n) == 36]) == 5  # 4 merged-away ones remain
    monkeypatch.undo()
    reopened = TableIndex.open(str(tmp_path), max_memtable_entries=5)
    assert [n for n in os.listdir(tmp_path) if len(n) == 36] == [reopened.tables()[0].name]
    assert [n for n, _ in reopened.iter_forward(1)] == list(range(20))
    reopened.close()


def test_a_damaged_bloom_filter_is_rebuilt_when_the_index_opens(tmp_path, caplog):
    tables = built(tmp_path)
    sidecar = tmp_path / f"{tables[0].name}.bloomfilter"
    sidecar.write_bytes(b"garbage")
    index = TableIndex.open(str(tmp_path))
    assert "Bloom filter" in caplog.text and tables[0].name in caplog.text
    assert [n for n, _ in index.iter_forward(0)] == list(range(14))
    assert read_sidecar(tables[0].path).table_digest == tables[0].digest  # written back, whole
    index.close()


def test_background_work_fails_loudly_not_silently(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("bug")

    monkeypatch.setattr(table_index_module, "_merge_tables", broken)
    index = TableIndex.open(str(tmp_path), max_memtable_entries=1)
    for i in range(4):
        index.add([(1, i, i)], i + 1)
    with pytest.raises(StorageError, match="bug"):
        index.wait_idle()
    index.close()
    monkeypatch.undo()
    reopened = TableIndex.open(str(tmp_path), max_memtable_entries=1)  # four level-0 tables: merged now
    reopened.wait_idle()
    assert [(t.level, len(t)) for t in reopened.tables()] == [(1, 4)]
    reopened.close()


def test_a_failed_indexmap_write_removes_the_table_it_would_have_named(tmp_path, monkeypatch):
    """Without a crash, the table the indexmap could not name is deleted at once (not left for the next
    start): a dump retried on a full disk does not pile up unnamed tables."""
    tables = built(tmp_path, count=20)
    index = TableIndex.open(str(tmp_path), max_memtable_entries=10)
    monkeypatch.setattr(IndexMap, "write", lambda self, directory: (_ for _ in ()).throw(OSError("io")))
    for i in range(20, 30):
        index.add([(i % 3, i // 3, i)], i + 1)
    with pytest.raises(StorageError, match="io"):
        index.wait_idle()
    index.close()
    assert {n for n in os.listdir(tmp_path) if len(n) == 36} == {t.name for t in tables}
