"""``evdb restore --from-archive`` (evdb/archive/restore.py): a node's database made from the archive
alone, archived by the real Archiver, into both stores; refusals that write nothing; kill -9 points
(a forked child ends with ``os._exit``: no cleanup runs, as after a kill) that leave the old database
or the whole restored one."""

from __future__ import annotations

import json
import logging
import os

import pytest
from archive_helpers import CHUNK, REGION, archiver, database, drain

from evdb.archive.archiver import CLAIM, chunk_object_name
from evdb.archive.filesystem import FileSystemStore
from evdb.archive.restore import exchange_folders, restore_from_archive, staging_folder
from evdb.archive.s3 import S3Store
from evdb.backup.errors import BackupError, BackupIncomplete, InvalidBackupFolder, NodeRunning
from evdb.cli import main
from evdb.database import Database
from evdb.errors import StreamNotFound
from evdb.streams import NewEvent

ARCHIVED = 3 * CHUNK  # database() writes 3.5 chunks: chunks 0-2 are archived


def _archive(store, folder, clock) -> list:
    """Archive a 3.5-chunk database into ``store``; its ``$all`` before the archive checkpoint."""
    db = database(folder, clock)
    try:
        assert drain(archiver(store, db)) == 3
        return [r for r in db.iter_all(0) if r.log_position < ARCHIVED]
    finally:
        db.close()


def _all(folder, clock) -> tuple[list, int, int]:
    """A database's ``$all``, its end and how many events ``order-0`` reads (through the index)."""
    db = Database.open(str(folder), clock=clock, chunk_size=CHUNK, existence_filter_capacity=10_000)
    try:
        try:
            order_0 = len(db.read_stream_forward("order-0", 0, 4096).events)
        except StreamNotFound:
            order_0 = 0
        if db.committed_position == ARCHIVED:  # restored: all of it committed cluster-wide
            assert db.commit_limit_at_open() == ARCHIVED
        return list(db.iter_all(0)), db.committed_position, order_0
    finally:
        db.close()


def _old_database(folder, clock) -> list:
    db = Database.open(str(folder), clock=clock, chunk_size=CHUNK, existence_filter_capacity=10_000)
    try:
        db.append("old", [NewEvent("Kept", data=b"the old database")])
        return list(db.iter_all(0))
    finally:
        db.close()


@pytest.fixture(autouse=True)
def _backup_log_handlers():
    """The CLI's console handler writes to the stderr of its test (capsys): gone after it."""
    log = logging.getLogger("evdb.backup")
    handlers, propagate = list(log.handlers), log.propagate
    yield
    log.handlers[:] = handlers
    log.propagate = propagate


@pytest.fixture
def archived(tmp_path, clock):
    (tmp_path / "archive").mkdir()
    store = FileSystemStore(str(tmp_path / "archive"))
    return store, _archive(store, tmp_path / "source", clock)


def test_a_node_restored_from_the_archive_alone_serves_the_archived_all(store, tmp_path, clock):
    expected = _archive(store, tmp_path / "source", clock)
    target = tmp_path / "node" / "db"
    result = restore_from_archive(store, str(target), chunk_size=CHUNK)
    assert (result.chunks, result.position) == (3, ARCHIVED)
    assert not os.path.exists(staging_folder(str(target)))
    names = sorted(os.listdir(target))
    assert [n for n in names if n.startswith("chunk-")] == [chunk_object_name(n) for n in range(3)]
    events, end, order_0 = _all(target, clock)
    # the log ends at the archive checkpoint; the index is rebuilt (a stream read finds its events)
    assert events == expected and end == ARCHIVED
    assert order_0 == sum(1 for e in expected if e.stream == "order-0") > 0


def _config(tmp_path, archive, db) -> str:
    path = tmp_path / "node.yaml"
    path.write_text(
        f"Db: {db}\nChunkSize: {CHUNK}\nArchive:\n  Enabled: true\n  StorageType: FileSystem\n"
        f"  FileSystem:\n    Path: {archive}\n  RetainAtLeast:\n    Days: 1\n    LogicalBytes: 1\n"
    )
    return str(path)


def test_the_command_takes_the_nodes_configuration_and_refuses_a_database_without_overwrite(
    archived, tmp_path, clock, capsys
):
    store, expected = archived
    target = tmp_path / "node" / "db"
    config = _config(tmp_path, store.folder, target)
    assert main(["restore", "--from-archive", "--config", config, "--progress-json"]) == 0
    out = capsys.readouterr()
    assert "restore complete: 3 chunks" in out.err and f"archive checkpoint {ARCHIVED}" in out.err
    last = json.loads(out.out.strip().splitlines()[-1])
    assert last["state"] == "completed"
    assert _all(target, clock)[0] == expected
    # the folders hold a database now: refused (exit 1) unless --overwrite
    assert main(["restore", "--from-archive", "--config", config]) == 1
    assert "already holds a database. Give --overwrite" in capsys.readouterr().err
    _old_database(target, clock)  # the restored node wrote more; the restore replaces it all
    assert main(["restore", "--from-archive", "--config", config, "--overwrite"]) == 0
    assert _all(target, clock)[0] == expected
    # exactly one source
    with pytest.raises(SystemExit) as exit_info:
        main(["restore", "--from-archive", "--from", str(tmp_path), "--config", config])
    assert exit_info.value.code == 2
    assert main(["restore", "--db", str(target)]) == 2
    assert "--from BACKUP or --from-archive" in capsys.readouterr().err


def test_the_command_needs_the_archive_in_the_configuration(tmp_path, capsys):
    code = main(["restore", "--from-archive", "--db", str(tmp_path / "db")])
    assert code == 2 and "does not enable one (Archive: Enabled: true)" in capsys.readouterr().err
    assert not (tmp_path / "db").exists()


def _nothing_written(target) -> None:
    assert not os.path.exists(staging_folder(str(target)))
    if os.path.exists(target):
        assert set(os.listdir(target)) <= {"evdb.lock"}


def test_no_archive_and_an_empty_archive_are_refused_before_anything_is_written(tmp_path, capsys):
    target = tmp_path / "node" / "db"
    with pytest.raises(InvalidBackupFolder, match="There is no archive there"):
        restore_from_archive(FileSystemStore(str(tmp_path / "nowhere")), str(target), chunk_size=CHUNK)
    (tmp_path / "empty").mkdir()
    with pytest.raises(BackupIncomplete, match="holds no archived chunk yet"):
        restore_from_archive(FileSystemStore(str(tmp_path / "empty")), str(target), chunk_size=CHUNK)
    assert not target.exists()
    # the command's exit codes: 2 (nothing there), 5 (nothing archived yet)
    assert (
        main(["restore", "--from-archive", "--config", _config(tmp_path, tmp_path / "nowhere", target)]) == 2
    )
    assert main(["restore", "--from-archive", "--config", _config(tmp_path, tmp_path / "empty", target)]) == 5
    assert "no archive.claim" in capsys.readouterr().err
    assert not target.exists()


def test_a_chunk_size_other_than_the_archives_and_a_missing_chunk_are_refused(archived, tmp_path):
    store, _ = archived
    target = tmp_path / "node" / "db"
    with pytest.raises(InvalidBackupFolder, match=f"holds chunks of {CHUNK} bytes, the node's ChunkSize is"):
        restore_from_archive(store, str(target), chunk_size=2 * CHUNK)
    store.delete(chunk_object_name(1))
    with pytest.raises(BackupError, match=r"lacks 1 chunk.*chunk-000001\.000001"):
        restore_from_archive(store, str(target), chunk_size=CHUNK)
    assert not target.exists()


def test_a_damaged_object_is_refused_and_the_old_database_stays(archived, tmp_path, clock):
    store, _ = archived
    target = tmp_path / "node" / "db"
    old = _old_database(target, clock)
    data = bytearray(store.get_bytes(chunk_object_name(2)))
    data[1000] ^= 1
    store.put_bytes(chunk_object_name(2), bytes(data))
    with pytest.raises(BackupError, match=r"chunk-000002\.000001 .* is damaged .*Nothing was restored"):
        restore_from_archive(store, str(target), chunk_size=CHUNK, overwrite=True)
    assert not os.path.exists(staging_folder(str(target)))
    assert _all(target, clock)[0] == old


def test_a_chunk_of_another_log_is_refused(archived, tmp_path, clock):
    store, _ = archived
    claim = json.loads(store.get_bytes(CLAIM))
    store.put_bytes(CLAIM, json.dumps({**claim, "log": "0" * 32}).encode())
    target = tmp_path / "node" / "db"
    with pytest.raises(BackupError, match=r"does not begin the log its archive\.claim names"):
        restore_from_archive(store, str(target), chunk_size=CHUNK)
    _nothing_written(target)


def _in_child(run) -> int:
    """Run ``run`` in a forked child; its exit status (``os._exit`` in ``run`` is a kill -9: no
    ``finally`` or ``except`` runs)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        try:
            run()
            os._exit(0)
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


class _KilledAtDownload(FileSystemStore):
    def download(self, name, path):
        if name == chunk_object_name(2):
            os._exit(9)
        return super().download(name, path)


def test_a_kill_at_any_point_leaves_the_old_database_or_the_whole_restored_one(archived, tmp_path, clock):
    store, expected = archived
    target = tmp_path / "node" / "db"
    old = _old_database(target, clock)
    staging = staging_folder(str(target))

    def kill(new: str, current: str) -> None:
        os._exit(9)

    def exchange_then_kill(new: str, current: str) -> None:
        exchange_folders(new, current)
        os._exit(9)

    def killed(source, move=exchange_folders) -> int:
        return _in_child(
            lambda: restore_from_archive(source, str(target), chunk_size=CHUNK, overwrite=True, move=move)
        )

    # during the downloads, and between the download (checkpoints written, synced) and the move
    assert killed(_KilledAtDownload(store.folder)) == 9
    assert os.path.isdir(staging) and _all(target, clock)[0] == old
    assert killed(store, kill) == 9
    assert sorted(n for n in os.listdir(staging) if n.endswith(".chk"))[-1] == "writer.chk"
    assert _all(target, clock)[0] == old  # the node opens its old database, not the staging folder
    # right after the exchange: the restored database is in place, the old one under the staging name
    assert killed(store, exchange_then_kill) == 9
    assert _all(target, clock)[0] == expected
    # the next restore clears what the killed one left
    restore_from_archive(store, str(target), chunk_size=CHUNK, overwrite=True)
    assert not os.path.exists(staging) and _all(target, clock)[0] == expected


def test_an_archiver_node_keeps_its_identity(archived, tmp_path, clock):
    store, _ = archived
    target = tmp_path / "node" / "db"
    _old_database(target, clock)
    (target / "archiving").mkdir()
    (target / "archiving" / "archiver-id").write_text("the-archivers-id")
    restore_from_archive(store, str(target), chunk_size=CHUNK, overwrite=True)
    assert (target / "archiving" / "archiver-id").read_text() == "the-archivers-id"


def test_an_index_outside_the_database_folder_is_replaced_too(archived, tmp_path, clock):
    store, expected = archived
    target, index = tmp_path / "node" / "db", tmp_path / "node" / "index"
    db = Database.open(str(target), index_dir=str(index), clock=clock, chunk_size=CHUNK)
    try:
        db.append("order-0", [NewEvent("Old", data=b"x")])
    finally:
        db.close()
    assert os.listdir(index)
    with pytest.raises(BackupError, match="already holds a database"):
        restore_from_archive(store, str(target), str(index), chunk_size=CHUNK)
    restore_from_archive(store, str(target), str(index), chunk_size=CHUNK, overwrite=True)
    db = Database.open(str(target), index_dir=str(index), clock=clock, chunk_size=CHUNK)
    try:
        assert list(db.iter_all(0)) == expected
        assert len(db.read_stream_forward("order-0", 0, 4096).events) == sum(
            1 for e in expected if e.stream == "order-0"
        )
    finally:
        db.close()


def test_no_bucket_and_an_empty_bucket_are_refused(s3_environ, make_bucket, tmp_path):
    target = tmp_path / "node" / "db"
    missing = S3Store("evdb-archive-no-such-bucket", REGION, s3_environ)
    with pytest.raises(InvalidBackupFolder, match="There is no archive there"):
        restore_from_archive(missing, str(target), chunk_size=CHUNK)
    empty = S3Store(make_bucket(), REGION, s3_environ)
    with pytest.raises(BackupIncomplete, match="holds no archived chunk yet"):
        restore_from_archive(empty, str(target), chunk_size=CHUNK)
    assert not target.exists()


def test_a_database_folder_that_is_a_mount_point_is_refused_before_the_download(
    archived, tmp_path, monkeypatch
):
    store, _ = archived
    target = tmp_path / "node" / "db"
    mounted = os.path.ismount
    monkeypatch.setattr(os.path, "ismount", lambda path: path == str(target) or mounted(path))
    with pytest.raises(InvalidBackupFolder, match="is a mount point"):
        restore_from_archive(store, str(target), chunk_size=CHUNK)
    _nothing_written(target)


def test_a_node_running_on_the_folders_is_refused(archived, tmp_path, clock):
    store, _ = archived
    target = tmp_path / "node" / "db"
    running = Database.open(str(target), clock=clock, chunk_size=CHUNK)
    try:
        with pytest.raises(NodeRunning, match="A node is running on"):
            restore_from_archive(store, str(target), chunk_size=CHUNK, overwrite=True)
        assert not os.path.exists(staging_folder(str(target)))
    finally:
        running.close()
