"""A file-system archive: one folder, an object per file (``StorageType: FileSystem``).

For development and tests (KurrentDB's is development-only too), but as careful as the S3 store:
a put writes a temporary file, fsyncs it, renames it over the object and fsyncs the folder, so an
object is whole or absent after a crash. Conditional puts compare and rename under an exclusive
``flock`` of ``<folder>/.lock``, which every process using the folder takes, so of two archivers
only one can win. The entity tag is the file's inode, modification time and size: a put makes a
new inode, so the tag changes whenever the object is replaced.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from collections.abc import Iterator

from evdb.archive.store import ArchiveStore, ObjectInfo, ObjectMissing, check_name
from evdb.backup.copying import copy_file, fsync_dir, is_temp_name
from evdb.errors import ArchiveError
from evdb.index.durable import TMP_SUFFIX, write_durably

__all__ = ["FileSystemStore"]

#: errors of the folder's storage itself (a lost network mount, a failing disk): the archive is unavailable
_UNAVAILABLE = {errno.EIO, errno.ENOTCONN, errno.ETIMEDOUT, errno.ESTALE, errno.EHOSTDOWN, errno.ENODEV}


class FileSystemStore(ArchiveStore):
    def __init__(self, folder: str) -> None:
        self.folder = os.path.abspath(os.path.expanduser(folder))
        self.description = self.folder

    # -- names ---------------------------------------------------------------------------------------
    def _path(self, name: str) -> str:
        check_name(name)
        if is_temp_name(name) or name.endswith(TMP_SUFFIX):
            raise ValueError(f"{name!r} is not an archive object name (a temporary file's name)")
        return os.path.join(self.folder, *name.split("/"))

    def _info(self, name: str, st: os.stat_result) -> ObjectInfo:
        return ObjectInfo(name, st.st_size, f"{st.st_ino:x}-{st.st_mtime_ns:x}-{st.st_size:x}")

    @contextlib.contextmanager
    def _errors(self, what: str, name: str, local: str | None = None) -> Iterator[None]:
        """OSErrors as the port's errors, naming the folder and the object; an error of the local
        file ``local`` (the file a put uploads, gone, say) stays the OSError it is."""
        try:
            yield
        except OSError as exc:
            if local is not None and exc.filename == local:
                raise
            raise self._archive_error(exc, what, name) from exc

    def _archive_error(self, exc: OSError, what: str, name: str) -> ArchiveError:
        if isinstance(exc, FileNotFoundError):
            if not os.path.isdir(self.folder):
                return ArchiveError(f"The archive folder {self.folder} does not exist")
            return self._missing(name)
        if exc.errno in _UNAVAILABLE:
            return self._unavailable(f"{what} {name}", exc)
        return ArchiveError(f"The archive {self.description} failed to {what} {name}: {exc}")

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        fd = os.open(os.path.join(self.folder, ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    # -- the port ------------------------------------------------------------------------------------
    def check(self) -> None:
        with self._errors("list", "the folder"):
            if not os.path.isdir(self.folder):
                raise FileNotFoundError(errno.ENOENT, "no such folder", self.folder)
            os.listdir(self.folder)

    def put_file(self, name: str, path: str) -> ObjectInfo:
        target = self._path(name)
        with self._errors("store", name, local=path):
            os.makedirs(os.path.dirname(target), exist_ok=True)
            copy_file(path, target)
            fsync_dir(os.path.dirname(target))
            return self._info(name, os.stat(target))

    def put_bytes(
        self, name: str, data: bytes, *, if_absent: bool = False, if_match: str | None = None
    ) -> ObjectInfo:
        target = self._path(name)
        with self._errors("store", name):
            os.makedirs(os.path.dirname(target), exist_ok=True)
            if not if_absent and if_match is None:
                write_durably(target, [data])
                return self._info(name, os.stat(target))
            with self._locked():
                current = self.head(name)
                if if_absent and current is not None:
                    raise self._held(name)
                if if_match is not None and (current is None or current.etag != if_match):
                    found = current.etag if current else "none"
                    raise self._changed(name, f"expected entity tag {if_match}, found {found}")
                write_durably(target, [data])
                return self._info(name, os.stat(target))

    def get_bytes(self, name: str) -> bytes:
        path = self._path(name)
        with self._errors("read", name), open(path, "rb") as f:
            return f.read()

    def get_range(self, name: str, start: int, length: int) -> bytes:
        if start < 0 or length < 0:
            raise ValueError(
                f"a range starts and has a length of at least 0 (start {start}, length {length})"
            )
        path = self._path(name)
        with self._errors("read", name):
            fd = os.open(path, os.O_RDONLY)
            try:
                parts = []
                while length > 0:
                    part = os.pread(fd, length, start)
                    if not part:
                        break
                    parts.append(part)
                    start += len(part)
                    length -= len(part)
                return b"".join(parts)
            finally:
                os.close(fd)

    def download(self, name: str, path: str) -> ObjectInfo:
        source = self._path(name)
        with self._errors("read", name):
            st = os.stat(source)
            copy_file(source, path)
            fsync_dir(os.path.dirname(os.path.abspath(path)))
            return self._info(name, st)

    def head(self, name: str) -> ObjectInfo | None:
        path = self._path(name)
        try:
            with self._errors("read", name):
                return self._info(name, os.stat(path))
        except ObjectMissing:
            return None

    def list(self, folder: str = "") -> list[ObjectInfo]:
        base = self._path(folder) if folder else self.folder
        found = []
        with self._errors("list", folder or "the folder"):
            if not os.path.isdir(self.folder):
                raise FileNotFoundError(errno.ENOENT, "no such folder", self.folder)
            for root, dirs, files in os.walk(base):
                dirs[:] = [d for d in dirs if not d.startswith(".")]
                for file in files:
                    if file.startswith(".") or is_temp_name(file) or file.endswith(TMP_SUFFIX):
                        continue
                    path = os.path.join(root, file)
                    name = os.path.relpath(path, self.folder).replace(os.sep, "/")
                    with contextlib.suppress(FileNotFoundError):  # deleted while listed
                        found.append(self._info(name, os.stat(path)))
        return sorted(found, key=lambda o: o.name)

    def delete(self, name: str) -> None:
        path = self._path(name)
        with self._errors("delete", name):
            try:
                os.unlink(path)
            except FileNotFoundError:
                return
            fsync_dir(os.path.dirname(path))
