"""Archived chunks on a node's disk for reading: a bounded cache of whole chunk files (issue 37; the
log reads through it by evdb/archive/reads.py).

:meth:`ArchiveCache.chunk` gives logical chunk N as an open, verified :class:`~evdb.storage.chunk.Chunk`:
from the cache folder when it is there (no request to the archive), else downloaded from the archive
to a temporary file, checked (header: the chunk number and size this log expects; footer: the
xxh3-128 checksum of every byte) and renamed into the folder. A damaged object is an
:class:`~evdb.errors.ArchiveError` and nothing is kept; an archive that cannot be reached is
:class:`~evdb.errors.ArchiveUnavailable`: a read never gets other data.

Only the chunk being fetched is locked while it downloads: reads of other archived chunks, and of
the node's local chunks, never wait for it; two readers of the same chunk share one download. The
folder holds at most ``max_bytes`` (the least recently read chunks go first; a reader that holds an
evicted chunk keeps reading its map).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import uuid
from collections import OrderedDict
from dataclasses import dataclass

from evdb.archive.archiver import archived_as, chunk_object_name
from evdb.archive.store import ArchiveStore, ObjectInfo
from evdb.errors import ArchiveError, CorruptedFile
from evdb.index.durable import fsync_dir
from evdb.storage.chunk import Chunk

__all__ = ["ArchiveCache", "CacheStats", "check_archived_chunk", "download_verified"]

_SUFFIX = ".archived"
_TMP = ".archived.tmp"


def check_archived_chunk(chunk: Chunk, number: int, chunk_size: int, where: str) -> None:
    """CorruptedFile unless ``chunk`` (opened with its checksum verified) is logical chunk ``number``
    of a log of ``chunk_size`` (what the archive's object of that number must hold)."""
    if chunk.start_number != number or chunk.end_number != number or chunk.chunk_size != chunk_size:
        raise CorruptedFile(
            where,
            f"holds chunks {chunk.start_number}-{chunk.end_number} of size {chunk.chunk_size}, "
            f"not chunk {number} of size {chunk_size}",
        )


def download_verified(
    store: ArchiveStore, number: int, chunk_size: int, tmp: str, path: str
) -> tuple[Chunk, ObjectInfo]:
    """Archived chunk ``number`` downloaded to ``tmp``, verified (the footer's checksum of every byte,
    the header's chunk number and size: :func:`check_archived_chunk`), renamed to ``path`` and the
    folder synced; returned open. A damaged object is an ArchiveError and ``tmp`` is removed: nothing
    unverified is ever kept (the cache's downloads and ``evdb restore --from-archive``'s)."""
    name = chunk_object_name(number)
    try:
        info = store.download(name, tmp)
        try:
            chunk = Chunk.open(tmp, verify=True)
            check_archived_chunk(chunk, number, chunk_size, tmp)
        except CorruptedFile as exc:
            raise ArchiveError(
                f"The archived {name} in {store.description} is damaged ({exc.reason}): not read"
            ) from exc
        os.replace(tmp, path)
        fsync_dir(os.path.dirname(path) or ".")
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    chunk.path = path
    return chunk, info


@dataclass
class CacheStats:
    hits: int = 0
    downloads: int = 0
    downloaded_bytes: int = 0
    evictions: int = 0


class ArchiveCache:
    def __init__(
        self, store: ArchiveStore, folder: str, *, chunk_size: int, max_bytes: int, logger: logging.Logger
    ) -> None:
        self.store = store
        self.folder = folder
        self.chunk_size = chunk_size
        self.max_bytes = max_bytes
        self.logger = logger
        self.stats = CacheStats()
        self._lock = threading.Lock()  # the table below; never held while a chunk downloads
        self._chunks: OrderedDict[int, Chunk] = OrderedDict()  # least recently read first
        self._fetching: dict[int, threading.Lock] = {}
        os.makedirs(folder, exist_ok=True)
        for name in os.listdir(folder):  # a download a crash interrupted
            if name.endswith(_TMP):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(folder, name))

    @property
    def cached_bytes(self) -> int:
        with self._lock:
            return sum(c.file_size for c in self._chunks.values())

    def _path(self, number: int) -> str:
        return os.path.join(self.folder, f"chunk-{number:06d}{_SUFFIX}")

    def chunk(self, number: int) -> Chunk:
        """Logical chunk ``number`` of the archive, verified (see the module)."""
        with self._lock:
            found = self._cached(number)
            if found is not None:
                return found
            fetching = self._fetching.setdefault(number, threading.Lock())
        with fetching:  # one download of a chunk at a time; others wait for it, not for the table
            with self._lock:
                found = self._cached(number)  # fetched by the reader this one waited for
            if found is not None:
                return found
            chunk = self._open_cached(number) or self._download(number)
            with self._lock:
                self._chunks[number] = chunk
                self._fetching.pop(number, None)
                self._evict()
            return chunk

    def cached(self, number: int) -> Chunk | None:
        """The chunk when it is open in the cache already (no download, no wait); else None."""
        with self._lock:
            return self._cached(number)

    def _cached(self, number: int) -> Chunk | None:
        """The chunk when the table has it (now the most recently read); called under the lock."""
        found = self._chunks.get(number)
        if found is not None:
            self._chunks.move_to_end(number)
            self.stats.hits += 1
        return found

    def _open_cached(self, number: int) -> Chunk | None:
        """The chunk's file left in the folder by an earlier run, checked again; None when absent."""
        path = self._path(number)
        if not os.path.exists(path):
            return None
        try:
            chunk = Chunk.open(path, verify=True)
            check_archived_chunk(chunk, number, self.chunk_size, path)
        except CorruptedFile as exc:
            self.logger.warning("Archive cache: %s dropped (%s); downloading it again", path, exc)
            os.unlink(path)
            return None
        if self._replaced(number, chunk):
            chunk.close()
            self.logger.info(
                "Archive cache: %s dropped: the archive holds another copy now (rewritten); downloading it",
                path,
            )
            os.unlink(path)
            return None
        return chunk

    def _replaced(self, number: int, chunk: Chunk) -> bool:
        """Whether the archive's object of chunk ``number`` is another copy than the cached file (a
        scavenge or a redaction rewrote it: the cache is keyed by the object's size and checksum). One
        HEAD and a 16-byte read; an archive that cannot be asked keeps the file (it was verified)."""
        assert chunk.footer is not None
        try:
            found = archived_as(self.store, chunk_object_name(number))
        except ArchiveError:
            return False
        return found is not None and found != (chunk.file_size, chunk.footer.checksum)

    def _download(self, number: int) -> Chunk:
        tmp = os.path.join(self.folder, f"{uuid.uuid4().hex}{_TMP}")
        chunk, info = download_verified(self.store, number, self.chunk_size, tmp, self._path(number))
        self.stats.downloads += 1
        self.stats.downloaded_bytes += info.size
        self.logger.info(
            "Archive cache: chunk %d read from %s (%d bytes)", number, self.store.description, info.size
        )
        return chunk

    def _evict(self) -> None:
        """Drop the least recently read chunks until the folder is within its bound (the newest stays)."""
        total = sum(c.file_size for c in self._chunks.values())
        while total > self.max_bytes and len(self._chunks) > 1:
            number, chunk = self._chunks.popitem(last=False)
            total -= chunk.file_size
            self.stats.evictions += 1
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._path(number))

    # -- rewritten archived chunks (evdb/archive/archive_rewrite.py) ----------------------------------
    def drop(self, number: int) -> None:
        """Forget chunk ``number`` and delete its file: the archive holds another copy now (a reader
        that holds the old one keeps reading its map; the next read downloads the new one)."""
        with self._lock:
            self._chunks.pop(number, None)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._path(number))

    def drop_stale(self) -> list[int]:
        """Drop every cached chunk whose file is not the archive's object now (size and footer
        checksum: the cache is keyed by the object's checksum); the numbers dropped. Called by a
        node's scavenge and redaction, which may follow another node's rewrite of the archive."""
        dropped = []
        for name in sorted(os.listdir(self.folder)):
            if not name.endswith(_SUFFIX) or not name.startswith("chunk-"):
                continue
            try:
                number = int(name[len("chunk-") : -len(_SUFFIX)])
            except ValueError:
                continue
            path = self._path(number)
            try:
                with open(path, "rb") as f:
                    size = os.fstat(f.fileno()).st_size
                    f.seek(max(0, size - 16))
                    mine = (size, f.read(16))
            except FileNotFoundError:
                continue
            if archived_as(self.store, chunk_object_name(number)) != mine:
                self.drop(number)
                dropped.append(number)
        return dropped

    def close(self) -> None:
        with self._lock:
            self._chunks.clear()
