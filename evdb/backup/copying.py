"""Copying one file into a backup (or back into a node's folders) so that a crash never leaves a
file that looks complete: temporary name, kernel copy, fsync, rename.

The data moves with ``os.copy_file_range`` (in-kernel, and a reflink on file systems that offer
one), region by region so that holes stay holes: an active chunk is a file of the full chunk size
whose tail is zeros, and copying them would cost what copying a full chunk costs. Blocks of zeros
are not written either (they stay holes in the copy): whether the file system reports a
preallocated tail as a hole depends on what the page cache holds (ext4 calls it data once it has
been read), so without this a full backup of the same data copied 13 MB one time and 281 MB the
next. Every byte of a file is reported once to one of three callbacks: written (``progress``),
already in the backup (``unchanged``), or a hole or zeros not written (``passed``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor

from evdb.index.durable import fsync_dir, fsync_file
from evdb.scavenge import state as scavenge_state

__all__ = [
    "TMP_SUFFIX",
    "copy_file",
    "copy_files",
    "copy_sqlite",
    "fsync_dir",
    "is_temp_name",
    "remove_files",
]

#: Suffix of files being copied. ``.tmp`` because the node already removes ``*.tmp`` from its
#: folders at start, so even a restore killed midway leaves nothing the node would take for data.
TMP_SUFFIX = ".backup.tmp"
_STEP = 1024 * 1024  # bytes per copy call (and per check for zeros): progress is reported between calls
_ZEROS = bytes(_STEP)

ProgressCallback = Callable[[int], None]


def is_temp_name(name: str) -> bool:
    return name.endswith(TMP_SUFFIX)


@contextlib.contextmanager
def _writing(target: str) -> Iterator[None]:
    """An OSError that names no file (a full disk in a copy, an fsync or a rename) is raised again
    naming ``target``, the file being written, so the message and the log line say which."""
    try:
        yield
    except OSError as exc:
        if exc.filename is not None or exc.errno is None:
            raise
        raise OSError(exc.errno, exc.strerror, target) from exc


def _data_regions(fd: int, size: int) -> list[tuple[int, int]]:
    """(offset, length) of the parts of the file that hold data; the whole file when the file
    system does not tell holes apart."""
    regions = []
    offset = 0
    try:
        while offset < size:
            try:
                start = os.lseek(fd, offset, os.SEEK_DATA)
            except OSError as exc:
                if exc.errno == errno.ENXIO:  # only a hole remains
                    break
                raise
            end = min(os.lseek(fd, start, os.SEEK_HOLE), size)
            regions.append((start, end - start))
            offset = end
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.EOPNOTSUPP):
            raise
        return [(0, size)]
    return regions


class _CutShort(OSError):
    """The source ended before the size its copy started from, and it still has its name."""


def _copy_range(
    src: int,
    dst: int,
    offset: int,
    length: int,
    progress: ProgressCallback | None,
    source: str,
    passed: ProgressCallback | None = None,
) -> None:
    """Copy ``[offset, offset + length)`` of ``src`` into ``dst`` at the same place; a block of
    zeros is left out (``dst`` reads zeros there: a new file or one truncated to ``offset``)."""
    end = offset + length
    use_kernel = True
    while offset < end:
        count = min(_STEP, end - offset)
        block = os.pread(src, count, offset)
        if block and block == (_ZEROS if len(block) == _STEP else bytes(len(block))):
            offset += len(block)
            if passed is not None:
                passed(len(block))
            continue
        count = len(block) or count
        if use_kernel:
            try:
                done = os.copy_file_range(src, dst, count, offset, offset)
            except OSError as exc:
                if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL):
                    raise
                use_kernel = False
                continue
        else:
            done = os.pwrite(dst, block, offset) if block else 0
        if done == 0:
            if os.fstat(src).st_nlink == 0:
                # deleted while it was copied (a merged-away index table, a switched-out chunk): the
                # node's reclaimer cuts a deleted file's blocks (evdb/storage/disk.py Reclaimer), so this
                # is the file gone, which the callers handle, not a damaged source
                raise FileNotFoundError(errno.ENOENT, "deleted while it was copied", source)
            raise _CutShort(
                errno.EIO, f"the source file {source} became shorter while it was copied (at byte {offset})"
            )
        offset += done
        if progress is not None:
            progress(done)


#: copies of one file that changed size under them before the backup gives up on it
_ATTEMPTS = 3


def _fill(
    src: int,
    dst: int,
    source: str,
    progress: ProgressCallback | None,
    unchanged: ProgressCallback | None,
    passed: ProgressCallback | None,
) -> int:
    """Make ``dst`` hold the bytes of ``src``; returns their count. What ``dst`` already holds (an
    earlier copy of the same file, or an attempt cut short) is kept up to the first block of
    :data:`_COMPARE` bytes that differs; everything after it is copied (holes stay holes).

    The copy is of one version of the file: a file whose size changes while it is copied is copied
    again (from its first block that differs). A node's active chunk does that once: completing it
    writes its footer and cuts the file from the full chunk size to its exact size, at any moment of
    a backup beside a writing node; completed, it never changes again (a scavenge or redaction writes
    a new file). A copy made again reports only the bytes it writes again (``progress``)."""
    for attempt in range(1, _ATTEMPTS + 1):
        size = os.fstat(src).st_size
        same = _same_prefix(src, dst, min(size, os.fstat(dst).st_size))
        os.ftruncate(dst, same)  # what follows is the source's: holes stay holes
        if unchanged is not None and same:
            unchanged(same)
        after = 0  # bytes after ``same`` in data regions
        try:
            for offset, length in _data_regions(src, size):
                begin = max(offset, same)
                if begin < offset + length:
                    after += offset + length - begin
                    _copy_range(src, dst, begin, offset + length - begin, progress, source, passed)
        except _CutShort:
            if attempt == _ATTEMPTS:
                raise
        else:
            now = os.fstat(src).st_size
            if now == size:
                os.ftruncate(dst, size)
                if passed is not None and size - same - after > 0:
                    passed(size - same - after)
                return size
            if attempt == _ATTEMPTS:
                raise OSError(
                    errno.EIO,
                    f"the source file {source} kept changing size while it was copied ({size} bytes, "
                    f"then {now}; {attempt} copies)",
                )
        unchanged = passed = None
    raise AssertionError("unreachable")  # pragma: no cover


def _copy_to_temp(
    source: str, target: str, progress: ProgressCallback | None, passed: ProgressCallback | None = None
) -> tuple[str, int]:
    """Copy ``source`` next to ``target`` under a temporary name (not yet fsynced); (temp path, size)."""
    directory = os.path.dirname(target) or "."
    tmp = os.path.join(directory, f".{os.path.basename(target)}.{uuid.uuid4().hex[:8]}{TMP_SUFFIX}")
    src = os.open(source, os.O_RDONLY)
    try:
        dst = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            with _writing(target):
                size = _fill(src, dst, source, progress, None, passed)
        finally:
            os.close(dst)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    finally:
        os.close(src)
    return tmp, size


#: bytes compared at a time when an earlier copy is brought up to date (``_update_to_temp``)
_COMPARE = 8 * 1024 * 1024


def _same_prefix(src: int, old: int, size: int) -> int:
    """How many leading bytes of the two files are the same, in whole blocks of :data:`_COMPARE`
    (read into two buffers and compared; nothing is written)."""
    ours, theirs = bytearray(min(_COMPARE, size)), bytearray(min(_COMPARE, size))
    same = 0
    while same < size:
        count = min(_COMPARE, size - same)
        if count != len(ours):
            ours, theirs = bytearray(count), bytearray(count)
        if os.preadv(src, [ours], same) != count or os.preadv(old, [theirs], same) != count:
            break  # a file shorter than it said: what follows is copied
        if ours != theirs:
            break
        same += count
    return same


def _unchanged_size(source: str, target: str) -> int | None:
    """The size of ``source`` when ``target`` holds exactly its bytes, else None."""
    with _writing(target):
        src = os.open(source, os.O_RDONLY)
        try:
            dst = os.open(target, os.O_RDONLY)
            try:
                size = os.fstat(src).st_size
                if os.fstat(dst).st_size != size or _same_prefix(src, dst, size) != size:
                    return None
                return size
            finally:
                os.close(dst)
        finally:
            os.close(src)


def _update_to_temp(
    source: str,
    target: str,
    earlier: str,
    progress: ProgressCallback | None,
    unchanged: ProgressCallback | None = None,
    passed: ProgressCallback | None = None,
) -> tuple[str, int]:
    """Like :func:`_copy_to_temp`, from ``earlier``, an older copy of ``source`` in the target's
    folder (the differential backup's ``.old`` chunk: the same chunk, fewer records): it is renamed
    to the temporary name, and only what differs from ``source`` is written into it — everything
    from the first block that is not the same, so a chunk that was only appended to (or completed)
    since costs its new bytes, and any other change a plain copy. ``earlier`` is gone afterwards,
    whatever happens; the temporary file is removed on an error. The bytes the earlier copy already
    held are reported to ``unchanged``, not to ``progress`` (they are not copied)."""
    directory = os.path.dirname(target) or "."
    tmp = os.path.join(directory, f".{os.path.basename(target)}.{uuid.uuid4().hex[:8]}{TMP_SUFFIX}")
    with _writing(target):
        os.rename(earlier, tmp)
    try:
        src = os.open(source, os.O_RDONLY)
        try:
            dst = os.open(tmp, os.O_RDWR)
            try:
                with _writing(target):
                    size = _fill(src, dst, source, progress, unchanged, passed)
            finally:
                os.close(dst)
        finally:
            os.close(src)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return tmp, size


def _sync_and_rename(tmp: str, target: str) -> None:
    with _writing(target):
        fsync_file(tmp)
        os.replace(tmp, target)


def copy_file(
    source: str,
    target: str,
    progress: ProgressCallback | None = None,
    *,
    update: bool = False,
    unchanged: ProgressCallback | None = None,
    passed: ProgressCallback | None = None,
) -> int:
    """Copy ``source`` to ``target`` (replacing it) through a temporary file; returns the size.
    ``update``: an existing ``target`` (an earlier copy of the same file) is brought up to date
    instead, writing only what differs (``_update_to_temp``; a file that did not change costs a
    read of both and no write). ``progress``: bytes written; ``unchanged``: bytes the earlier copy
    already held; ``passed``: holes and zeros not written.

    The target's folder is not fsynced here: callers fsync each folder once after a batch of files
    and before they write anything that says the batch is complete.
    """
    if update and os.path.exists(target):
        size = _unchanged_size(source, target)
        if size is not None:  # the backup holds these bytes already, durably (an earlier run's)
            if unchanged is not None and size:
                unchanged(size)
            return size
        tmp, size = _update_to_temp(source, target, target, progress, unchanged, passed)
    else:
        tmp, size = _copy_to_temp(source, target, progress, passed)
    try:
        _sync_and_rename(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return size


def copy_files(
    pairs: list[tuple[str, str]],
    progress: ProgressCallback | None = None,
    copied: Callable[[str, int], None] | None = None,
    earlier: dict[str, str] | None = None,
    unchanged: ProgressCallback | None = None,
    passed: ProgressCallback | None = None,
) -> None:
    """Copy several files, each through a temporary file that is fsynced, then renamed into place
    (``copied(target, size)`` after each rename, in order). Each file's fsync runs on a second thread
    while the next file is copied, so the disk writes one file back while the kernel copies the next
    instead of the copy waiting on every fsync in turn; a file still gets its final name only once
    its bytes are on disk. ``earlier``: for a target, an older copy of its source in the target's
    folder, brought up to date instead of copying the whole file (``_update_to_temp``). On an error
    every temporary file is removed, and the files already renamed stay (each complete)."""
    temps: list[tuple[str, str, int, Future[None]]] = []
    earlier = earlier or {}
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="backup-fsync") as syncing:
        try:
            for source, target in pairs:
                base = earlier.get(target)
                if base is not None and os.path.exists(base):
                    tmp, size = _update_to_temp(source, target, base, progress, unchanged, passed)
                else:
                    tmp, size = _copy_to_temp(source, target, progress, passed)
                temps.append((tmp, target, size, syncing.submit(fsync_file, tmp)))
            while temps:
                tmp, target, size, synced = temps[0]
                with _writing(target):
                    synced.result()
                    os.replace(tmp, target)
                temps.pop(0)
                if copied is not None:
                    copied(target, size)
        except BaseException:
            for tmp, _, _, synced in temps:
                synced.cancel()
                with contextlib.suppress(BaseException):
                    synced.result()
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
            raise


def copy_sqlite(source: str, target: str) -> int:
    """Copy a live SQLite database (WAL mode) consistently with SQLite's online backup, through a
    temporary file. A plain file copy could catch the main file in the middle of a WAL checkpoint."""
    directory = os.path.dirname(target) or "."
    tmp = os.path.join(directory, f".{os.path.basename(target)}.{uuid.uuid4().hex[:8]}{TMP_SUFFIX}")
    try:
        with scavenge_state.reading(source) as src:
            dst = sqlite3.connect(tmp)
            try:
                src.backup(dst)
                dst.execute("PRAGMA journal_mode = DELETE")
            except sqlite3.Error as exc:  # e.g. "database or disk is full": say which file
                full = getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL
                raise OSError(errno.ENOSPC if full else errno.EIO, f"SQLite: {exc}", target) from exc
            finally:
                dst.close()
        with _writing(target):
            fsync_file(tmp)
            os.replace(tmp, target)
    except BaseException:
        for leftover in (tmp, tmp + "-journal", tmp + "-wal", tmp + "-shm"):
            with contextlib.suppress(OSError):
                os.unlink(leftover)
        raise
    return os.path.getsize(target)


def remove_files(paths: list[str]) -> None:
    """Delete files (missing ones are fine), then fsync each folder touched."""
    folders = set()
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
            folders.add(os.path.dirname(path) or ".")
    for folder in folders:
        fsync_dir(folder)
