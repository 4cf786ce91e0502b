"""Restarting on a full disk (issue 33, point 7): one clear message naming the file, a non-zero exit.

The active chunk was made by ``ftruncate`` alone, a sparse file; on a full tmpfs the first read of a
hole through its map needs a page and the node died of SIGBUS with no message. Now an active chunk gets
its blocks (``posix_fallocate``) when it is made and again when it is opened for appending, before it
is mapped: a full disk is an ENOSPC there, which the database's open turns into DiskFull naming the
file, and ``evdb node`` prints it and exits with 1.

The real checks mount a small tmpfs (root only); the seam check runs everywhere.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import uuid

import pytest

from evdb.database import Database
from evdb.errors import DiskFull, EvdbError
from evdb.free_port import free_port
from evdb.storage import disk
from evdb.storage.disk import OsDisk, use_disk
from evdb.streams import NewEvent

CHUNK = 1 << 20


def _mount(path, size: str = "8m") -> str | None:
    if os.geteuid() != 0:
        return "mounting a tmpfs needs root"
    os.makedirs(path, exist_ok=True)
    out = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True
    )
    if out.returncode != 0:
        return f"mount -t tmpfs refused: {out.stderr.decode().strip()}"
    return None


@pytest.fixture
def tmpfs(tmp_path):
    mount_point = tmp_path / "disk"
    reason = _mount(mount_point)
    if reason:
        pytest.skip(reason)
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


class _NoAllocation(OsDisk):
    """A disk as evdb used it before: an active chunk is a sparse file (ftruncate alone)."""

    def fallocate(self, fd: int, offset: int, length: int) -> None:
        return None


class _FullAtAllocation(OsDisk):
    def fallocate(self, fd: int, offset: int, length: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _fill(path) -> None:
    """Take every free byte of the file system holding ``path``."""
    fd = os.open(os.path.join(path, "filler"), os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        block = 1 << 20
        while block:
            try:
                os.write(fd, b"\0" * block)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                block //= 2
    finally:
        os.close(fd)


def _start_node(db: str, log: str) -> subprocess.CompletedProcess[str]:
    args = [
        sys.executable, "-m", "evdb.cli", "node", "--db", db, "--log", log, "--insecure",
        "--http-port", str(free_port()), "--chunk-size", str(CHUNK), "--stats-period-sec", "0",
    ]  # fmt: skip
    return subprocess.run(args, capture_output=True, text=True, timeout=120)


def _assert_refused_clearly(out: subprocess.CompletedProcess[str], chunk: str) -> None:
    assert out.returncode != -signal.SIGBUS, "the node died of SIGBUS"
    assert out.returncode == 1, (out.returncode, out.stderr[-3000:])
    said = [line for line in out.stderr.splitlines() if line.startswith("evdb node: cannot start:")]
    assert len(said) == 1, out.stderr[-3000:]
    assert chunk in said[0] and "the disk is full (No space left on device" in said[0], said
    assert "Traceback" not in out.stderr and "Traceback" not in out.stdout


def _append_until_full(db_dir: str) -> int:
    """Append until the disk is full; the number of appends acknowledged."""
    db = Database.open(db_dir, chunk_size=CHUNK)
    acknowledged = 0
    try:
        while True:
            db.append(f"fill-{acknowledged % 4}", [NewEvent("T", os.urandom(3000), event_id=uuid.uuid4())])
            acknowledged += 1
    except (OSError, EvdbError) as exc:
        assert getattr(exc, "errno", None) == errno.ENOSPC or "disk" in str(exc), exc
    finally:
        db.close()
    assert acknowledged > 100
    return acknowledged


def _grow(mount_point) -> None:
    subprocess.run(["mount", "-o", "remount,size=64m", str(mount_point)], check=True)


def _holds(db_dir: str, acknowledged: int) -> None:
    db = Database.open(db_dir, chunk_size=CHUNK)
    try:
        assert sum(db.stream_state(f"fill-{n}").last_event_number + 1 for n in range(4)) == acknowledged
    finally:
        db.close()


def test_a_sparse_active_chunk_on_a_full_tmpfs_is_refused_by_name(tmpfs, tmp_path):
    """The issue's case: the chunk files as evdb made them before (sparse), the disk filled by
    appends, then a restart: SIGBUS reading the active chunk's footer through its map."""
    db_dir = str(tmpfs / "db")
    with use_disk(_NoAllocation()):
        acknowledged = _append_until_full(db_dir)
    _fill(tmpfs)
    out = _start_node(db_dir, str(tmp_path / "log"))
    _assert_refused_clearly(out, os.path.join(db_dir, "chunk-"))
    _grow(tmpfs)  # with room again, it opens and holds every acknowledged event
    _holds(db_dir, acknowledged)


def test_a_disk_filled_by_appends_then_restarted_is_refused_by_name(tmpfs, tmp_path):
    db_dir = str(tmpfs / "db")
    acknowledged = _append_until_full(db_dir)
    _fill(tmpfs)
    out = _start_node(db_dir, str(tmp_path / "log"))
    _assert_refused_clearly(out, db_dir + "/")
    _grow(tmpfs)
    _holds(db_dir, acknowledged)


def test_an_allocation_refused_at_open_is_disk_full_naming_the_chunk(tmp_path):
    db_dir = str(tmp_path / "db")
    db = Database.open(db_dir, chunk_size=65536)
    db.append("s-1", [NewEvent("T", b"x", event_id=uuid.uuid4())])
    db.close()
    before = {name: os.path.getsize(os.path.join(db_dir, name)) for name in os.listdir(db_dir)}
    with use_disk(_FullAtAllocation()), pytest.raises(DiskFull) as refused:
        Database.open(db_dir, chunk_size=65536)
    assert refused.value.path == os.path.join(db_dir, "chunk-000000.000000")
    assert "the disk is full" in str(refused.value)
    after = {name: os.path.getsize(os.path.join(db_dir, name)) for name in os.listdir(db_dir)}
    assert after == before
    assert isinstance(disk.current, OsDisk)
