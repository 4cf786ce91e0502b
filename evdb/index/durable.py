"""Durable file replacement: a file appears under its final name whole, or not at all.

Every index file is written under a temporary name, fsynced, renamed over its final name, and the
folder is fsynced after the rename so the new name survives a power cut. The differential backup
copies index files by name while the node runs: it must never see a half-written file.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable

from evdb.storage import disk

__all__ = ["TMP_SUFFIX", "fsync_dir", "fsync_file", "remove_durably", "replace_durably", "write_durably"]

TMP_SUFFIX = ".tmp"


def fsync_dir(directory: str) -> None:
    """Make the folder's entries (created, renamed, removed names) durable."""
    disk.current.fsync_dir(directory)


def fsync_file(path: str) -> None:
    """Make a file's bytes durable (a file written and closed elsewhere)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        disk.current.fsync(fd)
    finally:
        os.close(fd)


def replace_durably(tmp_path: str, path: str) -> None:
    """Rename a complete, fsynced temporary file over ``path``, then fsync the folder."""
    disk.current.replace(tmp_path, path)
    fsync_dir(os.path.dirname(path) or ".")


def write_durably(path: str, parts: Iterable[bytes | bytearray | memoryview]) -> None:
    """Write ``parts`` to ``path + ".tmp"``, fsync it, rename it over ``path``, fsync the folder."""
    tmp_path = path + TMP_SUFFIX
    try:
        # 0644 like the other data files, whatever the umask (never writable by other users)
        fd = disk.current.open(tmp_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            writer = disk.SequentialWriter(fd)
            for part in parts:
                writer.write(part)
            writer.flush()
            disk.current.fsync(fd)
        finally:
            os.close(fd)
        replace_durably(tmp_path, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            disk.current.unlink(tmp_path)
        if exc.filename is None:  # a write or sync on the descriptor: say which file it was
            raise OSError(exc.errno, exc.strerror, tmp_path) from exc
        raise
    except BaseException:
        with contextlib.suppress(OSError):
            disk.current.unlink(tmp_path)
        raise


def remove_durably(paths: Iterable[str]) -> None:
    """Delete files (missing ones are fine), then fsync each folder touched once."""
    folders: set[str] = set()
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            disk.current.unlink(path)
            folders.add(os.path.dirname(path) or ".")
    for folder in folders:
        fsync_dir(folder)
