"""Reads of archived positions: the chunks a node keeps in the archive only, fetched on threads of their
own (issue 37).

The transaction log asks :meth:`ArchiveReads.chunk` for logical chunk N when its local file is gone
(``archived.chk``, evdb/storage/log.py). A chunk already in the cache (:class:`ArchiveCache`) is
given at once, on the reader's thread. Otherwise the download runs on this module's pool
(``evdb-archive-read``, ``threads`` at a time) and the reader waits for it holding no lock of the log,
so reads of local chunks go on meanwhile. The writer's reads (stream states for appends) never wait:
the download starts and the append gets ArchiveUnavailable, try again. At most ``max_waiting`` readers wait for the archive at
once: the next one gets :class:`~evdb.errors.ArchiveUnavailable` (HTTP 503 with Retry-After, gRPC
UNAVAILABLE) instead of taking one more of the threads that serve local reads (the event loop's
default executor: 6 threads on 2 cores). An archive that cannot be reached is ArchiveUnavailable too;
a damaged object is an ArchiveError: a read never gets other data.
"""

from __future__ import annotations

import logging
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor

from evdb.archive.cache import ArchiveCache
from evdb.archive.store import ArchiveStore
from evdb.errors import ArchiveUnavailable
from evdb.storage.chunk import Chunk

__all__ = ["CACHE_FOLDER", "ArchiveReads"]

#: the cache's folder under the database folder
CACHE_FOLDER = "archive-cache"


class ArchiveReads:
    """The log's :class:`~evdb.storage.log.ArchivedChunks`: archived chunks through a bounded cache."""

    def __init__(
        self,
        store: ArchiveStore,
        folder: str,
        *,
        chunk_size: int,
        max_cache_bytes: int,
        logger: logging.Logger,
        threads: int = 2,
        max_waiting: int = 4,
    ) -> None:
        self.store = store
        self.cache = ArchiveCache(
            store, folder, chunk_size=chunk_size, max_bytes=max_cache_bytes, logger=logger
        )
        self.max_waiting = max_waiting
        self._waiting = threading.BoundedSemaphore(max_waiting)
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="evdb-archive-read")
        self._lock = threading.Lock()
        self._fetching: dict[int, Future[Chunk]] = {}  # downloads under way on the pool

    @classmethod
    def for_database(
        cls, store: ArchiveStore, db_dir: str, *, chunk_size: int, logger: logging.Logger
    ) -> ArchiveReads:
        """A node's: the cache in ``<db>/archive-cache``, holding up to four chunks (at least 1 GiB)."""
        return cls(
            store,
            os.path.join(db_dir, CACHE_FOLDER),
            chunk_size=chunk_size,
            max_cache_bytes=max(4 * chunk_size, 1 << 30),
            logger=logger,
        )

    def chunk(self, number: int, *, wait: bool = True) -> Chunk:
        """Logical chunk ``number`` from the archive, verified (see the module); ``wait`` false: the
        download is started and ArchiveUnavailable raised at once (the writer's reads)."""
        found = self.cache.cached(number)
        if found is not None:
            return found
        if not wait:
            self._fetch(number)
            raise ArchiveUnavailable(
                f"Chunk {number} is being read from the archive {self.store.description}: try again"
            )
        if not self._waiting.acquire(blocking=False):
            raise ArchiveUnavailable(
                f"{self.max_waiting} reads are waiting for the archive {self.store.description} already: "
                f"chunk {number} not read (try again)"
            )
        try:
            return self._fetch(number).result()
        finally:
            self._waiting.release()

    def _fetch(self, number: int) -> Future[Chunk]:
        """The download of chunk ``number`` on the pool: the one under way, or a new one."""
        with self._lock:
            future = self._fetching.get(number)
            if future is not None:
                return future
            future = self._fetching[number] = self._pool.submit(self.cache.chunk, number)
        # outside the lock: a download already over runs the callback here, at once
        future.add_done_callback(lambda done: self._done(number, done))
        return future

    def _done(self, number: int, future: Future[Chunk]) -> None:
        with self._lock:
            if self._fetching.get(number) is future:
                del self._fetching[number]

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.cache.close()
