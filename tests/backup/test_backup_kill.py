"""kill -9 of a backup process at several points; the re-run completes and verifies.

The backup's progress goes to a pipe shrunk to one page, so the process blocks on its progress
output a few lines ahead of the reader: reading N lines and then killing stops it near step N.
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys

import pytest
from backup_helpers import append_events, open_db

from evdb.backup import run_backup, verify_backup
from evdb.backup.copying import TMP_SUFFIX
from evdb.backup.layout import COMPLETE_MARKER

F_SETPIPE_SZ = 1031


def _backup_process(db_dir, index_dir, dest, *extra):
    read_fd, write_fd = os.pipe()
    fcntl.fcntl(write_fd, F_SETPIPE_SZ, 4096)
    proc = subprocess.Popen(
        [sys.executable, "-m", "evdb.cli", "backup", "--db", db_dir, "--index", index_dir, "--to", dest,
         "--progress-json", *extra],
        stdout=write_fd,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    os.close(write_fd)
    return proc, os.fdopen(read_fd, "r")


def _kill_after(lines: int, db_dir, index_dir, dest, *extra) -> bool:
    """Run a backup, kill -9 it after ``lines`` progress lines; True when it was cut short."""
    proc, out = _backup_process(db_dir, index_dir, dest, *extra)
    seen = 0
    with out:
        while seen < lines and out.readline():
            seen += 1
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    return proc.returncode == -signal.SIGKILL and not os.path.exists(os.path.join(dest, COMPLETE_MARKER))


def _contents(dest) -> dict[str, bytes]:
    out = {}
    for directory, _dirs, names in os.walk(dest):
        for name in names:
            path = os.path.join(directory, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, dest)] = f.read()
    return out


def _assert_no_torn_file(source_db, source_index, dest, previous=None):
    """Every file under a final name in the backup is byte for byte the source's (the source is
    closed, so it does not change); temporary files are the only partial ones."""
    for sub, origin in (("db", source_db), ("index", source_index)):
        root = os.path.join(dest, sub)
        for directory, _dirs, names in os.walk(root):
            for name in names:
                if name.endswith(TMP_SUFFIX) or name.endswith(".old"):
                    continue
                relative = os.path.relpath(os.path.join(directory, name), root)
                if relative.endswith("scavenging.db"):
                    continue
                with open(os.path.join(root, relative), "rb") as a:
                    ours = a.read()
                try:
                    with open(os.path.join(origin, relative), "rb") as b:
                        theirs = b.read()
                except FileNotFoundError:
                    theirs = None  # a table merged away since the previous backup
                # the source's file now, or the previous backup's whole copy of it
                assert ours == theirs or (previous or {}).get(f"{sub}/{relative}") == ours, (
                    f"{relative} looks complete but is neither the source's nor the previous backup's"
                )


@pytest.mark.parametrize("mode", ["full", "differential"])
def test_kill_9_at_several_points_then_rerun_completes(source, tmp_path, mode):
    db_dir, index_dir = source
    dest = str(tmp_path / "bk")
    extra: tuple[str, ...] = ()
    previous = None
    if mode == "differential":
        run_backup(db_dir, index_dir, dest)
        previous = _contents(dest)
        with open_db(db_dir, index_dir) as db:
            append_events(db, 1500)
        extra = ("--differential",)
    cut_short = 0
    for lines in (3, 9, 16, 24, 31):
        if _kill_after(lines, db_dir, index_dir, dest, *extra):
            cut_short += 1
            assert not verify_backup(dest).ok
            _assert_no_torn_file(db_dir, index_dir, dest, previous)
    assert cut_short >= 3
    proc, out = _backup_process(db_dir, index_dir, dest, *extra)
    with out:
        lines = out.read().splitlines()
    assert proc.wait(60) == 0
    assert '"state":"completed"' in lines[-1]
    report = verify_backup(dest)
    assert report.ok, report.problems
    assert not [n for _d, _s, names in os.walk(dest) for n in names if n.endswith(TMP_SUFFIX)]
    _assert_no_torn_file(db_dir, index_dir, dest)
