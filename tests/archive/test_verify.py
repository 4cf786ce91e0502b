"""``evdb archive verify``: every archived chunk checked against its checksum and the checkpoint."""

from __future__ import annotations

import json

from archive_helpers import archiver, database, drain

from evdb.archive.archiver import chunk_object_name
from evdb.archive.filesystem import FileSystemStore
from evdb.cli import main

RETAIN = ["--archive-retain-at-least-days", "1", "--archive-retain-at-least-logical-bytes", "1"]


def _verify(folder, capsys, *extra) -> tuple[int, str]:
    argv = ["archive", "verify", "--archive-enabled", "true", "--archive-storage-type", "FileSystem"]
    code = main([*argv, "--archive-file-system-path", str(folder), *RETAIN, *extra])
    out = capsys.readouterr()
    return code, out.out + out.err


def test_a_whole_archive_verifies_and_a_damaged_chunk_is_named(tmp_path, clock, capsys):
    (tmp_path / "archive").mkdir()
    store = FileSystemStore(str(tmp_path / "archive"))
    db = database(tmp_path / "db", clock)
    try:
        assert drain(archiver(store, db)) == 3
    finally:
        db.close()
    code, out = _verify(tmp_path / "archive", capsys, "--json")
    found = json.loads(out)
    assert code == 0 and found["verified"] == 3 and found["problems"] == [] and found["pending"] == []
    data = bytearray(store.get_bytes(chunk_object_name(1)))
    data[500] ^= 1
    store.put_bytes(chunk_object_name(1), bytes(data))
    store.delete(chunk_object_name(2))
    store.put_bytes(chunk_object_name(3), b"an upload not yet recorded")
    code, out = _verify(tmp_path / "archive", capsys)
    assert code == 1
    assert "checkpoint 196608, 1 chunk(s) verified" in out
    assert "PROBLEM chunk 1: The archived chunk-000001.000001" in out and "chunk checksum mismatch" in out
    assert "PROBLEM chunk 2: The archive" in out and "holds no object chunk-000002.000001" in out
    assert "after the checkpoint: chunk-000003.000001" in out


def test_a_configuration_without_the_archive_exits_2(tmp_path, capsys):
    assert main(["archive", "verify"]) == 2
    assert "does not enable the archive" in capsys.readouterr().err
