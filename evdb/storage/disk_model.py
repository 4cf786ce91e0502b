"""A disk that can lose power, for tests: what survives a power cut is only what was synced.

``kill -9`` keeps the operating system's page cache, so every write a killed process made is still
there afterwards: a crash test cannot tell a synced write from an unsynced one. :class:`DiskModel`
can. Installed as the process's disk (``with use_disk(model): ...``, see :mod:`evdb.storage.disk`),
it performs every call on the real files (so the process reads what it wrote) and remembers what a
power cut could still undo:

- per file, every write and truncation since that file's last ``fsync``/``fdatasync`` (with the bytes
  it overwrote, so that it can be undone);
- every name created, renamed or removed since the last ``fsync_dir`` of its folder (a file renamed
  over or removed is kept under another name in ``scratch_dir`` until then, so it can come back).

:meth:`DiskModel.power_loss` then decides, with the ``random.Random`` it is given, what the disk kept,
and rewrites the real files to that:

- folder changes survive as a prefix of the order they were made in (as a journaling file system
  commits them), any length from none to all;
- each unsynced write is kept, dropped, or torn (a prefix of its 512-byte sectors kept, counted on the
  file's sector boundaries); each unsynced truncation is kept or dropped; each independently of the
  others, whatever their order (a disk reorders writes).

The same calls and the same seed give the same result. Writes the model did not see (files written
with ``os`` directly) count as durable. The model never syncs the real files (the machine running the
test does not lose power): a sync is bookkeeping, which keeps tests fast.

To stop the process at a chosen moment, :meth:`DiskModel.cut_after` makes the n-th call from now fail
with :class:`PowerCut` (an ``OSError``, EIO), and every call after it too, so nothing more is written
or acknowledged. After :meth:`DiskModel.power_loss` the disk is off: calls that change files are
dropped silently (opens still fail), so the dead database can be closed and its files released
without changing what the power cut left.

``scratch_dir`` must be on the same file system as the files (the model keeps removed files there with
hard links).
"""

from __future__ import annotations

import errno
import itertools
import os
import random
import stat
import threading
from dataclasses import dataclass, field

from evdb.storage.disk import OsDisk

__all__ = ["SECTOR_SIZE", "DiskModel", "PowerCut", "PowerLossReport"]

SECTOR_SIZE = 512


class PowerCut(OSError):
    """The disk lost power: the call did not happen."""

    def __init__(self, what: str) -> None:
        super().__init__(errno.EIO, f"power cut (disk model) at {what}")


@dataclass(slots=True)
class _Write:
    offset: int
    data: bytes
    old: bytes  # the bytes it overwrote (shorter than data when it wrote past the end)
    old_size: int

    def undo(self, fd: int) -> None:
        os.pwrite(fd, self.old, self.offset)
        os.ftruncate(fd, self.old_size)

    def describe(self) -> str:
        return f"write of {len(self.data)} bytes at {self.offset}"


@dataclass(slots=True)
class _Truncate:
    length: int
    removed: bytes  # the bytes a shrinking truncation cut off
    old_size: int

    def undo(self, fd: int) -> None:
        os.ftruncate(fd, self.old_size)
        if self.removed:
            os.pwrite(fd, self.removed, self.length)

    def describe(self) -> str:
        return f"truncation from {self.old_size} to {self.length} bytes"


@dataclass(slots=True)
class _File:
    path: str | None  # where the file is now (None: removed for good)
    unsynced: list[_Write | _Truncate] = field(default_factory=list)


@dataclass(slots=True)
class _DirOp:
    kind: str  # create | rename | unlink
    directory: str
    path: str  # created or removed name; the source of a rename
    key: tuple[int, int]  # the file it names
    dst: str | None = None  # the target of a rename
    stash: str | None = None  # where the file a rename replaced, or the removed file, is kept
    stash_key: tuple[int, int] | None = None

    def describe(self) -> str:
        if self.kind == "rename":
            return f"rename {self.path} -> {self.dst}"
        return f"{self.kind} {self.path}"


@dataclass
class PowerLossReport:
    """What :meth:`DiskModel.power_loss` kept and undid (for the message of a failing test)."""

    seed_note: str = ""
    kept: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    torn: list[str] = field(default_factory=list)

    def summary(self) -> str:
        lines = [f"power loss{self.seed_note}: {len(self.kept)} kept, {len(self.dropped)} dropped, "
                 f"{len(self.torn)} torn"]  # fmt: skip
        lines += [f"  dropped {d}" for d in self.dropped[:40]]
        lines += [f"  torn {t}" for t in self.torn[:40]]
        return "\n".join(lines)


class DiskModel:
    """A :class:`~evdb.storage.disk.Disk` that records what is not yet durable and can lose power."""

    def __init__(self, scratch_dir: str) -> None:
        os.makedirs(scratch_dir, exist_ok=True)
        self.scratch_dir = os.path.abspath(scratch_dir)
        self.calls = 0  # calls that change files (or make them durable) so far
        self.state = "on"  # on | cut (every call fails) | off (after power_loss: changes dropped)
        self._cut_at: int | None = None
        self._files: dict[tuple[int, int], _File] = {}
        self._dir_ops: list[_DirOp] = []  # not yet made durable by an fsync_dir, in order
        self._stash_names = itertools.count()
        self._lock = threading.RLock()

    # -- power ------------------------------------------------------------------------------------------
    def cut_after(self, calls: int) -> None:
        """The ``calls``-th call from now (1: the next one) fails with :class:`PowerCut`, and all after it."""
        with self._lock:
            self._cut_at = self.calls + max(1, calls)

    def cut(self) -> None:
        """The power goes now: every later call fails with :class:`PowerCut`."""
        with self._lock:
            if self.state == "on":
                self.state = "cut"

    def _tick(self, what: str) -> bool:
        """Count a call; raise when the power is (or goes) off now; False when the disk is off."""
        if self.state == "off":
            return False
        if self.state == "on":
            self.calls += 1
            if self._cut_at is not None and self.calls >= self._cut_at:
                self.state = "cut"
        if self.state == "cut":
            raise PowerCut(what)
        return True

    # -- the Disk calls -----------------------------------------------------------------------------------
    def open(self, path: str, flags: int, mode: int = 0o644) -> int:
        with self._lock:
            if self.state != "on":
                raise PowerCut(f"open {path}")
            creating = bool(flags & os.O_CREAT) and not os.path.lexists(path)
            if creating:
                self._tick(f"create {path}")
            # read-write even when asked write-only: the model reads what each write overwrites
            fd = os.open(path, (flags & ~(os.O_TRUNC | os.O_ACCMODE)) | os.O_RDWR, mode)
            try:
                key = _key(os.fstat(fd))
                self._file(key, fd, path)
                if creating:
                    self._dir_ops.append(_DirOp("create", _dir_of(path), os.path.abspath(path), key))
                if flags & os.O_TRUNC:
                    self.ftruncate(fd, 0)
            except BaseException:
                os.close(fd)
                raise
            return fd

    def pwrite(self, fd: int, data, offset: int) -> int:
        with self._lock:
            if not self._tick(f"write to fd {fd}"):
                return len(data)
            data = bytes(data)
            st = os.fstat(fd)
            old = _pread(fd, len(data), offset)
            written = os.pwrite(fd, data, offset)
            self._file(_key(st), fd).unsynced.append(
                _Write(offset, data[:written], old[:written], st.st_size)
            )
            return written

    def ftruncate(self, fd: int, length: int) -> None:
        with self._lock:
            if not self._tick(f"truncate fd {fd}"):
                return
            st = os.fstat(fd)
            removed = _pread(fd, st.st_size - length, length) if length < st.st_size else b""
            os.ftruncate(fd, length)
            self._file(_key(st), fd).unsynced.append(_Truncate(length, removed, st.st_size))

    def fallocate(self, fd: int, offset: int, length: int) -> None:
        """Blocks for a range, the contents unchanged (zeros past the end): nothing a power cut undoes
        but a size, and the model's callers fallocate only within the size they truncated to."""
        OsDisk().fallocate(fd, offset, length)

    def fsync(self, fd: int) -> None:
        with self._lock:
            if not self._tick(f"fsync fd {fd}"):
                return
            self._file(_key(os.fstat(fd)), fd).unsynced.clear()

    def fdatasync(self, fd: int) -> None:
        with self._lock:
            if not self._tick(f"fdatasync fd {fd}"):
                return
            self._file(_key(os.fstat(fd)), fd).unsynced.clear()

    def rename(self, src: str, dst: str) -> None:
        with self._lock:
            if not self._tick(f"rename {src} -> {dst}"):
                return
            src, dst = os.path.abspath(src), os.path.abspath(dst)
            if _dir_of(src) != _dir_of(dst):
                raise ValueError("the disk model renames within one folder only")
            key = _key(os.stat(src))
            op = _DirOp("rename", _dir_of(src), src, key, dst=dst)
            if os.path.lexists(dst):
                op.stash_key = _key(os.stat(dst))
                op.stash = self._stash(dst)
            try:
                os.rename(src, dst)
            except BaseException:
                if op.stash is not None:
                    os.unlink(op.stash)
                raise
            self._dir_ops.append(op)
            self._file(key, None, dst).path = dst
            if op.stash_key is not None:
                self._file(op.stash_key, None, op.stash).path = op.stash

    replace = rename

    def unlink(self, path: str) -> None:
        with self._lock:
            if not self._tick(f"unlink {path}"):
                return
            path = os.path.abspath(path)
            key = _key(os.lstat(path))
            stash = self._stash(path)
            try:
                os.unlink(path)
            except BaseException:
                os.unlink(stash)
                raise
            self._dir_ops.append(_DirOp("unlink", _dir_of(path), path, key, stash=stash, stash_key=key))
            self._file(key, None, stash).path = stash

    def fsync_dir(self, directory: str) -> None:
        with self._lock:
            if not self._tick(f"fsync_dir {directory}"):
                return
            directory = os.path.abspath(directory)
            if not os.path.isdir(directory):
                raise FileNotFoundError(errno.ENOENT, "no such folder", directory)
            remaining = []
            for op in self._dir_ops:
                if op.directory == directory:
                    self._forget_stash(op)
                else:
                    remaining.append(op)
            self._dir_ops = remaining

    # -- the power cut ------------------------------------------------------------------------------------
    def power_loss(self, rng: random.Random) -> PowerLossReport:
        """Decide what the disk kept, rewrite the real files to it, and switch the disk off."""
        with self._lock:
            self.state = "off"
            report = PowerLossReport()
            ops, self._dir_ops = self._dir_ops, []
            survive = rng.randint(0, len(ops))
            for op in ops[:survive]:
                report.kept.append(op.describe())
                self._forget_stash(op)
            for op in reversed(ops[survive:]):
                report.dropped.append(op.describe())
                self._undo_dir_op(op)
            for state in self._files.values():
                if not state.unsynced:
                    continue
                changes, state.unsynced = state.unsynced, []
                if state.path is None:
                    continue  # removed for good
                self._replay(state.path, changes, rng, report)
            return report

    def _replay(self, path: str, changes: list, rng: random.Random, report: PowerLossReport) -> None:
        """Undo every unsynced change of the file, then redo those the disk kept (in their order)."""
        try:
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:  # renamed or removed behind the model's back
            report.dropped.append(f"{len(changes)} changes of {path} (no longer there)")
            return
        try:
            for change in reversed(changes):
                change.undo(fd)
            for change in changes:
                what = f"{change.describe()} of {path}"
                if isinstance(change, _Truncate):
                    if rng.random() < 0.5:
                        os.ftruncate(fd, change.length)
                        report.kept.append(what)
                    else:
                        report.dropped.append(what)
                    continue
                pieces = _sector_pieces(change.offset, len(change.data))
                fate = rng.randrange(3) if pieces > 1 else rng.randrange(2)
                if fate == 0:
                    os.pwrite(fd, change.data, change.offset)
                    report.kept.append(what)
                elif fate == 1:
                    report.dropped.append(what)
                else:
                    sectors = rng.randint(1, pieces - 1)
                    end = (change.offset // SECTOR_SIZE + sectors) * SECTOR_SIZE
                    os.pwrite(fd, change.data[: end - change.offset], change.offset)
                    report.torn.append(f"{what} ({end - change.offset} bytes kept)")
        finally:
            os.close(fd)

    def _undo_dir_op(self, op: _DirOp) -> None:
        if op.kind == "create":
            os.unlink(op.path)
            self._files.pop(op.key, None)
        elif op.kind == "rename":
            assert op.dst is not None
            os.rename(op.dst, op.path)
            self._file(op.key, None).path = op.path
            if op.stash is not None:
                os.rename(op.stash, op.dst)
                assert op.stash_key is not None
                self._file(op.stash_key, None).path = op.dst
        else:  # unlink
            assert op.stash is not None
            os.rename(op.stash, op.path)
            self._file(op.key, None).path = op.path

    # -- bookkeeping -------------------------------------------------------------------------------------
    def _file(self, key: tuple[int, int], fd: int | None, path: str | None = None) -> _File:
        state = self._files.get(key)
        if state is not None and fd is not None and not _names(state.path, key):
            state = None  # a file removed behind the model's back; its inode number was used again
        if state is None:
            if path is None and fd is not None:
                path = os.readlink(f"/proc/self/fd/{fd}")
            state = self._files[key] = _File(os.path.abspath(path) if path else None)
        return state

    def _stash(self, path: str) -> str:
        stash = os.path.join(self.scratch_dir, f"kept-{next(self._stash_names)}")
        os.link(path, stash)
        return stash

    def _forget_stash(self, op: _DirOp) -> None:
        """The change is durable: the file it replaced or removed is gone for good."""
        if op.stash is not None:
            os.unlink(op.stash)
            assert op.stash_key is not None
            if (state := self._files.get(op.stash_key)) is not None and state.path == op.stash:
                del self._files[op.stash_key]  # its inode number may be used again


def _pread(fd: int, size: int, offset: int) -> bytes:
    """Read from ``fd`` even when it was opened write-only (through another descriptor)."""
    try:
        return os.pread(fd, size, offset)
    except OSError as exc:
        if exc.errno != errno.EBADF:
            raise
    other = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY)
    try:
        return os.pread(other, size, offset)
    finally:
        os.close(other)


def _key(st: os.stat_result) -> tuple[int, int]:
    if not stat.S_ISREG(st.st_mode):
        raise ValueError("the disk model handles regular files only")
    return st.st_dev, st.st_ino


def _names(path: str | None, key: tuple[int, int]) -> bool:
    """Whether ``path`` still names the file ``key``."""
    try:
        st = os.lstat(path) if path is not None else None
    except FileNotFoundError:
        return False
    return st is not None and (st.st_dev, st.st_ino) == key


def _dir_of(path: str) -> str:
    return os.path.dirname(os.path.abspath(path))


def _sector_pieces(offset: int, length: int) -> int:
    """How many 512-byte sectors of the file a write of ``length`` bytes at ``offset`` touches."""
    if length <= 0:
        return 1
    return (offset + length - 1) // SECTOR_SIZE - offset // SECTOR_SIZE + 1
