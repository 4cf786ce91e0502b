"""The storage I/O seam: every change the transaction log, its checkpoints and the index's durable file
replacement make to files goes through the process's current :class:`Disk`.

That is each creating or writable open, write, truncation, sync, rename and unlink. Reads do not:
chunks are read through ``mmap`` and checkpoints with ``os.pread``, so a disk that pretends (the
power-loss model in :mod:`evdb.storage.disk_model`) must leave the real files holding what it claims
survived before the database opens them again.

The default is :class:`OsDisk`, the operating system itself: its methods are the ``os`` functions, so a
call costs one module attribute lookup more than calling ``os`` directly. Tests swap the disk for the
whole process with ``with use_disk(model): ...``.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import mmap
import os
import queue
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Protocol

__all__ = [
    "Disk",
    "OsDisk",
    "Reclaimer",
    "SequentialWriter",
    "current",
    "drop_pages",
    "reclaimer",
    "start_writeback",
    "use_disk",
    "wait_writeback",
    "write_all",
]


class Disk(Protocol):
    """What the storage code asks of the file system (the ``os`` functions of the same names)."""

    def open(self, path: str, flags: int, mode: int = 0o644) -> int: ...

    def pwrite(self, fd: int, data, offset: int) -> int: ...

    def ftruncate(self, fd: int, length: int) -> None: ...

    def fallocate(self, fd: int, offset: int, length: int) -> None:
        """Give ``[offset, offset + length)`` of the file its blocks now (``posix_fallocate``): OSError
        ENOSPC here rather than SIGBUS when a map of a hole is first touched on a full disk."""

    def fsync(self, fd: int) -> None: ...

    def fdatasync(self, fd: int) -> None: ...

    def rename(self, src: str, dst: str) -> None: ...

    def replace(self, src: str, dst: str) -> None: ...

    def unlink(self, path: str) -> None: ...

    def fsync_dir(self, directory: str) -> None:
        """Make the folder's entries (names created, renamed, removed) durable."""


def _fallocate(fd: int, offset: int, length: int) -> None:
    try:
        os.posix_fallocate(fd, offset, length)
    except OSError as exc:
        if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
            raise
        # a file system without allocation (its blocks come with the writes): nothing to do


def _fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class OsDisk:
    """The real file system."""

    open = staticmethod(os.open)
    pwrite = staticmethod(os.pwrite)
    ftruncate = staticmethod(os.ftruncate)
    fallocate = staticmethod(_fallocate)
    fsync = staticmethod(os.fsync)
    fdatasync = staticmethod(os.fdatasync)
    rename = staticmethod(os.rename)
    replace = staticmethod(os.replace)
    unlink = staticmethod(os.unlink)
    fsync_dir = staticmethod(_fsync_dir)


#: the disk every storage call goes through (read it as ``disk.current`` at each call)
current: Disk = OsDisk()


@contextlib.contextmanager
def use_disk(disk: Disk) -> Iterator[Disk]:
    """Make ``disk`` the process's disk for the duration of the block (then the previous one again)."""
    global current
    previous, current = current, disk
    try:
        yield disk
    finally:
        current = previous


def _libc_sync_file_range():
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    function.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)
    function.restype = ctypes.c_int
    return function


_sync_file_range = _libc_sync_file_range()


_SYNC_FILE_RANGE_WAIT_BEFORE = 1
_SYNC_FILE_RANGE_WRITE = 2
_SYNC_FILE_RANGE_WAIT_AFTER = 4


def drop_pages(buffer: mmap.mmap, offset: int = 0, length: int | None = None) -> None:
    """Let this process's map of a file go of the pages of ``[offset, offset + length)`` (to the map's
    end by default; whole pages, ``offset`` rounded down: the partial pages at the ends go too) with
    ``madvise(MADV_DONTNEED)``: they stay in the page cache and the next read maps them again (a minor
    fault), so nothing changes for readers but the process's RSS. Only for a map of a file that is
    not written through it. Nothing where the platform has no MADV_DONTNEED; a map closed meanwhile is
    passed over."""
    if not hasattr(mmap, "MADV_DONTNEED"):
        return
    start = max(0, offset) // mmap.PAGESIZE * mmap.PAGESIZE
    size = len(buffer)
    stop = size if length is None else min(size, offset + length)
    if stop > start:
        with contextlib.suppress(ValueError):  # closed meanwhile
            buffer.madvise(mmap.MADV_DONTNEED, start, stop - start)


def start_writeback(fd: int, offset: int = 0, length: int = 0) -> bool:
    """Ask the kernel to start writing the dirty pages of ``length`` bytes at ``offset`` (0: to the end)
    to the disk now, without waiting for it (Linux ``sync_file_range(SYNC_FILE_RANGE_WRITE)``). Not a
    sync. False where the call is missing (then nothing was done). Not through ``current``: it changes
    nothing a power cut could undo."""
    if _sync_file_range is None:
        return False
    _sync_file_range(fd, offset, length, _SYNC_FILE_RANGE_WRITE)
    return True


def wait_writeback(fd: int, offset: int, length: int) -> bool:
    """Start writing back the range and wait until all of its pages written so far are on the disk
    (``SYNC_FILE_RANGE_WAIT_BEFORE | WRITE | WAIT_AFTER``; not a sync: no metadata, no cache flush).
    False where the call is missing."""
    if _sync_file_range is None:
        return False
    flags = _SYNC_FILE_RANGE_WAIT_BEFORE | _SYNC_FILE_RANGE_WRITE | _SYNC_FILE_RANGE_WAIT_AFTER
    _sync_file_range(fd, offset, length, flags)
    return True


def write_all(fd: int, data, offset: int) -> None:
    """Write all of ``data`` at ``offset`` (``pwrite`` may write less than asked)."""
    view = memoryview(data)
    while view:
        written = current.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


class SequentialWriter:
    """Writes a file from its start, gathering small pieces into writes of about ``buffer_size``."""

    def __init__(self, fd: int, buffer_size: int = 1 << 20) -> None:
        self.fd = fd
        self.offset = 0  # where the buffered bytes go
        self._buffer = bytearray()
        self._buffer_size = buffer_size

    def write(self, data) -> None:
        data = memoryview(data).cast("B")
        if len(data) >= self._buffer_size:
            self.flush()
            write_all(self.fd, data, self.offset)
            self.offset += len(data)
            return
        self._buffer += data
        if len(self._buffer) >= self._buffer_size:
            self.flush()

    def flush(self) -> None:
        """Hand the buffered bytes to the disk (not a sync)."""
        if self._buffer:
            write_all(self.fd, self._buffer, self.offset)
            self.offset += len(self._buffer)
            self._buffer = bytearray()


class Reclaimer:
    """Frees the blocks of deleted files a step at a time, on a thread of its own.

    Deleting a big file frees all of its blocks at once, and on a file system mounted with
    ``discard`` they are discarded then (with a journal: by the commit that frees them; ext4 without
    one, as on the machine measured, in the truncation itself): an append's write and cache flush
    wait behind the discard in the device's queue (a 256 MiB chunk file: the unlink took about 50 ms
    and an append in another process waited 15-35 ms behind it, docs/performance-lab-notes.md issue 23, fourth
    round). Cut down ``step`` bytes at a time with a ``pause`` between the cuts, the blocks are
    freed and discarded ``step`` bytes at a time. An append that meets a cut waits for about one
    step's discard: 2 MiB steps 2 ms apart kept an append's p99 beside the
    cuts of a 1 GiB file at 0.56-0.64 ms against 1.42-1.69 ms with 8 MiB steps 4 ms apart, and free
    about 760 MB/s (docs/performance-lab-notes.md issue 23, sixth round).

    The file is deleted by name as before (the deletion is what a power cut may undo or not); a
    descriptor opened before it (:meth:`hold`) keeps the blocks until the last map of the file in
    this process is gone (:meth:`release_when_unmapped`: no map of this process can touch a page cut
    off; a backup copying it through a descriptor of its own sees the file end early, which it takes
    as the file gone: evdb/backup/copying.py ``_copy_range``), then
    the thread cuts the file down and closes the descriptor. It cuts only a file no name leads to
    (``st_nlink == 0``: no folder entry, no hard link, which is also how the power-loss model keeps
    a deleted file it may bring back), so the cuts change nothing a power cut could bring back:
    they are not made through :data:`current` (on ext4 a truncation of an unlinked file is
    journaled after its unlink, never kept without it). A cut that fails is logged with the file's
    name and the descriptor closed (the kernel frees the rest at once, as a plain unlink does)."""

    def __init__(
        self,
        step: int = 2 << 20,
        pause: float = 0.002,
        sleep: Callable[[float], None] = time.sleep,
        logger: logging.Logger | None = None,
    ) -> None:
        self.step = step
        self.pause = pause
        self.sleep = sleep
        self.logger = logger or logging.getLogger("evdb.storage")
        self._queue: queue.SimpleQueue[tuple[int, str]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def hold(self, path: str, size: int) -> int | None:
        """A descriptor of ``path`` (``size`` bytes), opened before it is deleted, or None when it is
        too small to be worth cutting (or cannot be opened: it is then deleted as before)."""
        if size <= self.step:
            return None
        try:
            return os.open(path, os.O_WRONLY)  # (opens nothing new, changes nothing)
        except OSError:
            return None

    def delete(self, path: str, size: int, mapping: object | None = None) -> bool:
        """Delete ``path`` (``size`` bytes) through :data:`current`, its blocks freed here once
        ``mapping`` (this process's map of it, if any) is gone; False when it was not there."""
        fd = self.hold(path, size)
        try:
            current.unlink(path)
        except FileNotFoundError:
            if fd is not None:
                os.close(fd)
            return False
        except BaseException:
            if fd is not None:
                os.close(fd)
            raise
        if fd is not None:
            if mapping is not None:
                self.release_when_unmapped(mapping, fd, path)
            else:
                self.release(fd, path)
        return True

    def release_when_unmapped(self, mapping: object, fd: int, path: str) -> None:
        """Cut ``fd``'s file down once ``mapping`` (this process's map of it) is gone."""
        finalizer = weakref.finalize(mapping, self._queue.put, (fd, path))
        finalizer.atexit = False  # at exit the descriptor just closes: the kernel frees the file
        self._ensure_thread()

    def release(self, fd: int, path: str) -> None:
        """Cut ``fd``'s file down (no map of it is left)."""
        self._queue.put((fd, path))
        self._ensure_thread()

    def _ensure_thread(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="evdb-reclaim", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            fd, path = self._queue.get()
            try:
                self.shrink(fd, path)  # (closes fd whatever happens)
            except Exception:  # the thread goes on with the next file
                self.logger.exception("Could not free the blocks of the deleted file %s step by step", path)

    def shrink(self, fd: int, path: str) -> None:
        """Cut the deleted file of ``fd`` down ``step`` bytes at a time, then close ``fd``."""
        try:
            st = os.fstat(fd)
            if st.st_nlink == 0:
                size = st.st_size
                while size > 0:
                    size = max(0, size - self.step)
                    os.ftruncate(fd, size)
                    if size:
                        self.sleep(self.pause)
        except OSError as exc:
            self.logger.warning(
                "Could not free the blocks of the deleted file %s step by step: %s", path, exc
            )
        finally:
            os.close(fd)


#: the process's reclaimer of deleted chunk and index table files (its thread starts at its first file)
reclaimer = Reclaimer()
