"""The differential backup brings the chunk it renamed to ``.old`` up to date from that file instead of
copying the source's chunk whole (evdb/backup/copying.py ``_update_to_temp``): only what follows the
first block that differs is written, and whatever the ``.old`` holds the result is byte for byte the
source's file."""

from __future__ import annotations

import os
import shutil

import pytest
from backup_helpers import append_events, open_db

from evdb.backup import copying, run_backup, verify_backup
from evdb.backup.layout import chunk_files


def same_files(a: str, b: str) -> bool:
    with open(a, "rb") as x, open(b, "rb") as y:
        return x.read() == y.read()


def written_ranges(monkeypatch) -> list[tuple[str, int, int]]:
    """(file written, offset, length) of every range the copies write."""
    ranges: list[tuple[str, int, int]] = []
    real = copying._copy_range

    def copy_range(src, dst, offset, length, progress, source, *rest):
        ranges.append((os.readlink(f"/proc/self/fd/{dst}"), offset, length))
        return real(src, dst, offset, length, progress, source, *rest)

    monkeypatch.setattr(copying, "_copy_range", copy_range)
    return ranges


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """One database folder (db, index) for the whole module; each test works on its own copy."""
    root = tmp_path_factory.mktemp("differential-source")
    with open_db(str(root / "db"), str(root / "index")) as db:
        append_events(db, 600)
    return root


@pytest.fixture
def source(template, tmp_path):
    shutil.copytree(template, tmp_path / "node")
    return str(tmp_path / "node" / "db"), str(tmp_path / "node" / "index")


@pytest.fixture
def big_blocks(monkeypatch):
    """Blocks of 4 KiB, so that the test chunks (64 KiB) span several."""
    monkeypatch.setattr(copying, "_COMPARE", 4096)


def test_the_last_chunk_is_updated_from_the_old_copy(source, tmp_path, monkeypatch, big_blocks):
    db_dir, index_dir = source
    dest = str(tmp_path / "bk")
    with open_db(db_dir, index_dir) as db:
        append_events(db, 20)  # the last chunk holds some records ...
    run_backup(db_dir, index_dir, dest)
    last = chunk_files(db_dir)[-1]
    held = os.path.getsize(os.path.join(dest, "db", last))
    with open_db(db_dir, index_dir) as db:
        append_events(db, 40)  # ... and more after the first backup
    assert chunk_files(db_dir)[-1] == last
    ranges = written_ranges(monkeypatch)
    run_backup(db_dir, index_dir, dest, differential=True)
    assert same_files(os.path.join(db_dir, last), os.path.join(dest, "db", last))
    chunk_ranges = [(offset, length) for path, offset, length in ranges if f"/.{last}." in path]
    assert chunk_ranges and min(offset for offset, _ in chunk_ranges) > 0  # its start was not written again
    assert not [n for n in os.listdir(os.path.join(dest, "db")) if n.endswith((".old", ".tmp"))]
    assert verify_backup(dest).ok
    assert held  # (the earlier copy was there to start from)


@pytest.mark.parametrize("change", ["header", "middle", "longer", "empty"])
def test_whatever_the_old_copy_holds_the_result_is_the_sources_file(source, tmp_path, change, big_blocks):
    db_dir, index_dir = source
    dest = str(tmp_path / "bk")
    with open_db(db_dir, index_dir) as db:
        append_events(db, 30)
    run_backup(db_dir, index_dir, dest)
    last = chunk_files(db_dir)[-1]
    ours = os.path.join(dest, "db", last)
    with open(ours, "r+b") as f:  # the backup's copy no longer matches the source's
        if change == "header":
            f.write(b"\xff" * 16)
        elif change == "middle":
            f.seek(9000)
            f.write(b"\xff" * 100)
        elif change == "longer":
            f.seek(0, os.SEEK_END)
            f.write(b"\xff" * 70_000)
        else:
            f.truncate(0)
    with open_db(db_dir, index_dir) as db:
        append_events(db, 10)
    run_backup(db_dir, index_dir, dest, differential=True)
    assert same_files(os.path.join(db_dir, last), ours)
    assert verify_backup(dest).ok


def test_a_run_killed_while_updating_leaves_a_backup_the_next_run_completes(
    source, tmp_path, monkeypatch, big_blocks
):
    db_dir, index_dir = source
    dest = str(tmp_path / "bk")
    run_backup(db_dir, index_dir, dest)
    with open_db(db_dir, index_dir) as db:
        append_events(db, 30)

    def killed(*args):
        raise OSError(5, "simulated failure midway through the update")

    with monkeypatch.context() as m:
        m.setattr(copying, "_copy_range", killed)
        with pytest.raises(OSError):
            run_backup(db_dir, index_dir, dest, differential=True)
    assert not verify_backup(dest).ok  # unfinished: no completion marker
    run_backup(db_dir, index_dir, dest, differential=True)
    for name in chunk_files(db_dir):
        assert same_files(os.path.join(db_dir, name), os.path.join(dest, "db", name))
    assert verify_backup(dest).ok


def test_files_the_backup_already_holds_are_not_written_again(source, tmp_path):
    db_dir, index_dir = source
    dest = str(tmp_path / "bk")
    run_backup(db_dir, index_dir, dest)
    run_backup(db_dir, index_dir, dest, differential=True)
    small = ["db/epoch.chk", "db/writer.chk", "index/indexmap"]
    inodes = {name: os.stat(os.path.join(dest, name)).st_ino for name in small}
    run_backup(db_dir, index_dir, dest, differential=True)  # nothing changed in the source
    for name in small:
        assert os.stat(os.path.join(dest, name)).st_ino == inodes[name], f"{name} was written again"
    with open_db(db_dir, index_dir) as db:
        append_events(db, 10)
    run_backup(db_dir, index_dir, dest, differential=True)
    writer = os.path.join(dest, "db", "writer.chk")
    assert same_files(os.path.join(db_dir, "writer.chk"), writer)
    assert verify_backup(dest).ok
