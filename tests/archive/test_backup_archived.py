"""Backups of a node with ``archived.chk`` (issue 37): the backup copies the marker (never the archive's
read cache), its manifest says the chunks before it are in the archive and which; ``evdb backup
verify`` accepts it; ``evdb restore`` of it refuses a target whose configuration names no archive (or
another cluster's) and otherwise gives a node that reads those chunks from the archive. In process,
with the file-system store."""

from __future__ import annotations

import json
import logging
import os

import pytest
from archive_helpers import CHUNK, archiver, database, drain

from evdb.archive.filesystem import FileSystemStore
from evdb.archive.reads import CACHE_FOLDER, ArchiveReads
from evdb.backup import layout as L
from evdb.backup.errors import InvalidBackupFolder
from evdb.backup.procedures import run_backup
from evdb.backup.restore import restore_backup
from evdb.backup.verify import verify_backup
from evdb.cli import main
from evdb.database import Database
from evdb.storage.log import ARCHIVED_CHECKPOINT
from evdb.streams import NewEvent

LOGGER = logging.getLogger("test.archive.backup")


def _events(db: Database) -> list[tuple]:
    return [(e.log_position, e.stream, e.event_number, e.event_id, e.data) for e in db.iter_all(0)]


def _open(path, clock, store) -> tuple[Database, ArchiveReads]:
    reads = ArchiveReads.for_database(store, str(path), chunk_size=CHUNK, logger=LOGGER)
    db = Database.open(
        str(path), clock=clock, chunk_size=CHUNK, existence_filter_capacity=10_000, archive=reads
    )
    return db, reads


@pytest.fixture
def node(tmp_path, clock):
    """A stopped node's folder whose chunks 0-2 are in the archive only (and in its read cache), with
    the events it serves: (db folder, store, events)."""
    (tmp_path / "archive").mkdir()
    store = FileSystemStore(str(tmp_path / "archive"))
    db = database(tmp_path / "db", clock, max_memtable_entries=64)
    assert drain(archiver(store, db)) == 3
    db.index.wait_idle()
    with db.log.chunk_lock:
        db.log.leave_to_archive(3)
    db.close()
    db, reads = _open(tmp_path / "db", clock, store)
    try:
        events = _events(db)  # reads chunks into <db>/archive-cache
    finally:
        db.close()
        reads.close()
    assert os.listdir(tmp_path / "db" / CACHE_FOLDER)
    return str(tmp_path / "db"), store, events


def test_the_backup_copies_archived_chk_not_the_cache_and_names_the_archive(node, tmp_path, clock):
    db_dir, store, events = node
    dest = str(tmp_path / "backup")
    run_backup(db_dir, None, dest, archive=store)
    manifest = L.Manifest.read(dest)
    assert manifest is not None
    assert (manifest.archived_before, manifest.archive) == (3 * CHUNK, store.description)
    assert manifest.archive_log is not None
    assert L.read_checkpoint(os.path.join(dest, "db", ARCHIVED_CHECKPOINT)) == 3 * CHUNK
    assert not os.path.exists(os.path.join(dest, "db", CACHE_FOLDER))
    assert L.chunk_files(os.path.join(dest, "db"))[0] == "chunk-000003.000000"
    report = verify_backup(dest)
    assert report.ok, report.problems
    assert (report.archived_before, report.archive) == (3 * CHUNK, store.description)

    # more written, a differential backup: the marker still there, the chunks after it brought up to date
    db, reads = _open(db_dir, clock, store)
    for i in range(60):  # streams of their own: an append to one last written in an archived chunk waits
        db.append(f"more-{i}", [NewEvent("More", data=b"m" * 1000)])
    db.close()
    reads.close()
    run_backup(db_dir, None, dest, differential=True, archive=store)
    assert verify_backup(dest).ok

    # restored where the configuration names the archive: the node reads the archived chunks from it
    target = tmp_path / "restored"
    result = restore_backup(dest, str(target / "db"), archive=store)
    assert (result.archived_before, result.archive) == (3 * CHUNK, store.description)
    restored, reads = _open(target / "db", clock, store)
    try:
        db, source_reads = _open(db_dir, clock, store)
        try:
            assert _events(restored) == _events(db)
            assert _events(restored)[: len(events)] == events
        finally:
            db.close()
            source_reads.close()
    finally:
        restored.close()
        reads.close()


def test_a_restore_without_the_archive_or_with_another_refuses_and_touches_nothing(node, tmp_path, clock):
    db_dir, store, _ = node
    dest = str(tmp_path / "backup")
    run_backup(db_dir, None, dest, archive=store)
    target = tmp_path / "restored" / "db"
    with pytest.raises(
        InvalidBackupFolder, match=r"Give the node.s configuration \(--config\) with Archive: Enabled"
    ):
        restore_backup(dest, str(target))
    assert not target.exists()
    (tmp_path / "other").mkdir()
    other = FileSystemStore(str(tmp_path / "other"))
    stranger = database(tmp_path / "stranger", clock)  # another cluster, archived further
    drain(archiver(other, stranger))
    stranger.close()
    with pytest.raises(InvalidBackupFolder, match="another cluster's archive"):
        restore_backup(dest, str(target), archive=other)
    assert not target.exists()

    # the command line: exit 2 and the reason without a configuration; done with one
    assert main(["restore", "--from", dest, "--db", str(target)]) == 2
    config = tmp_path / "node.yaml"
    archive = {
        "Enabled": True,
        "StorageType": "FileSystem",
        "FileSystem": {"Path": str(tmp_path / "archive")},
        "RetainAtLeast": {"Days": 1, "LogicalBytes": CHUNK},
    }
    config.write_text(json.dumps({"Archive": archive, "ChunkSize": CHUNK}))
    assert main(["restore", "--from", dest, "--db", str(target), "--config", str(config)]) == 0
    assert L.read_checkpoint(str(target / ARCHIVED_CHECKPOINT)) == 3 * CHUNK


def test_a_backup_not_told_the_archive_still_verifies_and_says_so(node, tmp_path, capsys):
    db_dir, _, _ = node
    dest = str(tmp_path / "backup")
    assert main(["backup", "--db", db_dir, "--to", dest]) == 0
    manifest = L.Manifest.read(dest)
    assert manifest is not None and (manifest.archived_before, manifest.archive) == (3 * CHUNK, None)
    assert main(["backup", "verify", dest]) == 0
    assert f"the chunks before position {3 * CHUNK} are in the archive (not named" in capsys.readouterr().out
