"""Hostile backup input (issue 20, item 7): a folder with a NUL byte is refused before anything is
created (exit code 2), and a disk-full failure names the file that was being written."""

from __future__ import annotations

import errno
import logging
import os

import pytest
from backup_helpers import files_in, progress

from evdb.backup import copying
from evdb.backup.errors import BackupError
from evdb.backup.procedures import run_backup
from evdb.backup.progress import Progress
from evdb.backup.restore import restore_backup
from evdb.cli import main


def test_cli_backup_into_a_folder_with_a_nul_byte_is_exit_2_and_creates_nothing(source, tmp_path, capsys):
    db_dir, index_dir = source
    before = files_in(str(tmp_path))
    code = main(["backup", "--db", db_dir, "--index", index_dir, "--to", f"{tmp_path}/bk\x00evil"])
    assert code == 2
    err = capsys.readouterr().err
    assert "NUL byte" in err and "backup folder" in err
    assert files_in(str(tmp_path)) == before


def test_cli_restore_from_a_folder_with_a_nul_byte_is_exit_2(tmp_path, capsys):
    code = main(["restore", "--from", f"{tmp_path}/bk\x00", "--db", str(tmp_path / "db")])
    assert code == 2
    assert "NUL byte" in capsys.readouterr().err
    assert not (tmp_path / "db").exists()


@pytest.mark.parametrize("call", ["backup", "restore"])
def test_the_procedures_refuse_a_nul_byte_before_touching_a_file(source, tmp_path, call):
    db_dir, index_dir = source
    before = files_in(str(tmp_path))
    with pytest.raises(BackupError) as raised:
        if call == "backup":
            run_backup(db_dir, index_dir, f"{tmp_path}/bk\x00", progress=progress())
        else:
            restore_backup(f"{tmp_path}/bk", f"{tmp_path}/db\x00")
    assert raised.value.exit_code == 2
    assert files_in(str(tmp_path)) == before


def _disk_full(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_disk_full_backup_names_the_file_being_written(source, tmp_path, monkeypatch, caplog):
    db_dir, index_dir = source
    dest = tmp_path / "bk"
    monkeypatch.setattr(copying.os, "copy_file_range", _disk_full)
    logger = logging.getLogger("test.hostile_backup")  # not under evdb.backup, whose CLI stops propagation
    with caplog.at_level(logging.ERROR), pytest.raises(OSError) as raised:
        run_backup(db_dir, index_dir, str(dest), progress=Progress("full", logger))
    assert raised.value.errno == errno.ENOSPC
    written = raised.value.filename
    assert written and written.startswith(str(dest)), str(raised.value)
    assert written in str(raised.value)
    failed = [r.getMessage() for r in caplog.records if "failed" in r.getMessage()]
    assert failed and written in failed[-1], failed
    # no temporary file is left behind
    assert not [n for n in files_in(str(dest)) if copying.is_temp_name(os.path.basename(n))]


def test_a_disk_full_chunk_copy_names_the_chunk(source, tmp_path, monkeypatch, capsys):
    """The chunks go through copy_files (fsync on a second thread): the CLI's message names the chunk."""
    db_dir, index_dir = source
    real = copying.os.copy_file_range

    def full_on_chunks(src, dst, count, offset_src=None, offset_dst=None):
        if "chunk-" in os.readlink(f"/proc/self/fd/{dst}"):
            _disk_full()
        return real(src, dst, count, offset_src, offset_dst)

    monkeypatch.setattr(copying.os, "copy_file_range", full_on_chunks)
    dest = tmp_path / "bk"
    code = main(["backup", "--db", db_dir, "--index", index_dir, "--to", str(dest)])
    assert code == 1
    err = capsys.readouterr().err
    assert "No space left on device" in err
    assert os.path.join(str(dest), "db", "chunk-000000.000000") in err, err


def test_a_source_deleted_and_cut_while_copied_is_a_file_gone_not_a_damaged_source(tmp_path):
    """The node frees a deleted file's blocks a step at a time (evdb/storage/disk.py Reclaimer) while a
    backup may still be copying it through a descriptor opened before the deletion: the copy then
    ends early. That is the file gone (FileNotFoundError naming it, which the backup's steps handle: a
    merged-away index table is looked up again, a switched-out chunk is ScavengeDuringBackup), not
    the EIO of a source that became shorter while it still has a name."""
    source = tmp_path / "table"
    source.write_bytes(b"x" * (3 << 20))
    target = tmp_path / "copy"
    target.write_bytes(b"")
    src = os.open(source, os.O_RDONLY)
    dst = os.open(target, os.O_WRONLY)
    try:
        os.unlink(source)
        os.truncate(f"/proc/self/fd/{src}", 1 << 20)  # the reclaimer's first cut
        with pytest.raises(FileNotFoundError) as gone:
            copying._copy_range(src, dst, 0, 3 << 20, None, str(source))
        assert gone.value.filename == str(source)
    finally:
        os.close(src)
        os.close(dst)

    named = tmp_path / "named"
    named.write_bytes(b"y" * 4096)
    src = os.open(named, os.O_RDONLY)
    dst = os.open(target, os.O_WRONLY)
    try:
        os.truncate(named, 1024)  # still named: a damaged source, as before
        with pytest.raises(OSError, match="became shorter") as short:
            copying._copy_range(src, dst, 0, 4096, None, str(named))
        assert not isinstance(short.value, FileNotFoundError) and str(named) in str(short.value)
    finally:
        os.close(src)
        os.close(dst)
