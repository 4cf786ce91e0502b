"""verify finds damage; restore refuses a running node and puts a backup in place."""

from __future__ import annotations

import os

import pytest
from backup_helpers import append_events, open_db

from evdb.backup import BackupIncomplete, NodeRunning, restore_backup, run_backup, verify_backup
from evdb.backup.cli import register_cli  # noqa: F401  (the CLI module imports cleanly)
from evdb.backup.layout import COMPLETE_MARKER, chunk_files, read_checkpoint
from evdb.cli import main
from evdb.index.indexmap import IndexMap


@pytest.fixture
def backup(source, tmp_path):
    db_dir, index_dir = source
    dest = str(tmp_path / "bk")
    run_backup(db_dir, index_dir, dest)
    return dest


def test_verify_accepts_a_good_backup(backup, capsys):
    assert main(["backup", "verify", backup]) == 0
    assert "verify OK" in capsys.readouterr().out


def test_verify_detects_a_corrupted_chunk(backup, capsys):
    first = os.path.join(backup, "db", chunk_files(os.path.join(backup, "db"))[0])
    with open(first, "r+b") as f:
        f.seek(500)
        byte = f.read(1)
        f.seek(500)
        f.write(bytes([byte[0] ^ 0xFF]))
    report = verify_backup(backup)
    assert any("checksum mismatch" in p and first in p for p in report.problems)
    assert main(["backup", "verify", backup]) == 1
    assert "checksum mismatch" in capsys.readouterr().out


def test_verify_detects_a_missing_ptable(backup):
    index = os.path.join(backup, "index")
    table = IndexMap.read(index).tables[0].name
    os.unlink(os.path.join(index, table))
    report = verify_backup(backup)
    assert any("missing" in p and table in p for p in report.problems)


def test_verify_detects_a_missing_chunk(backup):
    db = os.path.join(backup, "db")
    os.unlink(os.path.join(db, chunk_files(db)[1]))
    problems = verify_backup(backup).problems
    assert any("chunk 1 is missing" in p for p in problems)


def test_verify_and_restore_refuse_an_unfinished_backup(backup, tmp_path):
    os.unlink(os.path.join(backup, COMPLETE_MARKER))
    assert "did not finish" in verify_backup(backup).problems[0]
    with pytest.raises(BackupIncomplete):
        restore_backup(backup, str(tmp_path / "r" / "db"))


def test_restore_refuses_while_a_node_holds_the_database(backup, tmp_path, capsys):
    target = str(tmp_path / "live" / "db")
    with open_db(target) as db:
        append_events(db, 5)
        before = sorted(os.listdir(target))
        with pytest.raises(NodeRunning, match="Stop the node"):
            restore_backup(backup, target, overwrite=True)
        assert main(["restore", "--from", backup, "--db", target, "--overwrite"]) == 6
        assert sorted(os.listdir(target)) == before
    assert "Stop the node first" in capsys.readouterr().err


def test_restore_refuses_to_replace_a_database_without_overwrite(backup, tmp_path):
    target = str(tmp_path / "old" / "db")
    with open_db(target) as db:
        append_events(db, 5)
    from evdb.backup import BackupError

    with pytest.raises(BackupError, match="--overwrite"):
        restore_backup(backup, target)


def test_restore_copies_everything_and_sets_truncate_to_chaser(backup, source, tmp_path, capsys):
    target_db = str(tmp_path / "r" / "db")
    target_index = str(tmp_path / "r" / "index")
    assert main(["restore", "--from", backup, "--db", target_db, "--index", target_index]) == 0
    err = capsys.readouterr().err
    assert "spec rule 6" in err
    chaser = read_checkpoint(os.path.join(backup, "db", "chaser.chk"))
    assert read_checkpoint(os.path.join(target_db, "truncate.chk")) == chaser
    assert chunk_files(target_db) == chunk_files(os.path.join(backup, "db"))
    with open_db(target_db, target_index) as db:
        assert db.committed_position == chaser
        assert db.log.checkpoints.truncate.value == -1
        assert len(db.read_stream_forward("s-3", 0, 10_000).events) == 100


def test_restore_over_an_old_database_removes_what_the_backup_lacks(backup, tmp_path):
    target_db = str(tmp_path / "r" / "db")
    with open_db(target_db) as db:
        append_events(db, 3000)  # more chunks than the backup has
    restore_backup(backup, target_db, overwrite=True)
    assert chunk_files(target_db) == chunk_files(os.path.join(backup, "db"))
    with open_db(target_db) as db:
        assert len(db.read_stream_forward("s-3", 0, 10_000).events) == 100


def test_restoring_the_source_itself_reminds_a_full_backup(backup, source):
    db_dir, index_dir = source
    result = restore_backup(backup, db_dir, index_dir, overwrite=True)
    assert result.same_node_as_source
    assert "FULL backup" in result.reminder
