"""The archive cache (evdb/archive/cache.py): archived chunks read back verified, from both stores; a
repeated read served from the folder; the folder bounded; a damaged object or an unreachable archive
an error, never data; one download for many readers of one chunk."""

from __future__ import annotations

import logging
import os
import threading

import pytest
from archive_helpers import CHUNK, REGION, environ_for
from archive_helpers import archiver as _archiver
from archive_helpers import database as _database
from archive_helpers import drain as _drain
from archive_helpers import records as _records

from evdb.archive.archiver import chunk_object_name
from evdb.archive.cache import ArchiveCache
from evdb.archive.filesystem import FileSystemStore
from evdb.archive.s3 import S3Store
from evdb.errors import ArchiveError, ArchiveUnavailable
from evdb.free_port import free_port

LOGGER = logging.getLogger("test.archive.cache")


@pytest.fixture
def archived(store, tmp_path, clock):
    """A database whose chunks 0-2 are in ``store``: (database, store)."""
    db = _database(tmp_path / "db", clock)
    assert _drain(_archiver(store, db)) == 3
    yield db, store
    db.close()


def _cache(store, tmp_path, max_bytes=1 << 30) -> ArchiveCache:
    return ArchiveCache(store, str(tmp_path / "cache"), chunk_size=CHUNK, max_bytes=max_bytes, logger=LOGGER)


def test_an_archived_chunk_reads_as_the_local_one_and_again_from_the_cache(archived, tmp_path):
    db, store = archived
    cache = _cache(store, tmp_path)
    chunk = cache.chunk(1)
    assert _records(chunk) == _records(db.log.chunk_by_number(1))
    store.delete(chunk_object_name(1))  # the second read does not ask the archive
    assert cache.chunk(1) is chunk
    assert (cache.stats.downloads, cache.stats.hits) == (1, 1)
    # a restarted node finds the file in its folder (checked again), without a download
    again = _cache(store, tmp_path)
    assert _records(again.chunk(1)) == _records(db.log.chunk_by_number(1))
    assert again.stats.downloads == 0


def test_the_folder_is_bounded_and_the_least_recently_read_chunk_goes(archived, tmp_path):
    db, store = archived
    size = db.log.chunk_by_number(0).file_size
    cache = _cache(store, tmp_path, max_bytes=2 * size + 100)
    held = cache.chunk(0)
    cache.chunk(1)
    cache.chunk(0)  # read again: 1 is now the least recently read
    cache.chunk(2)
    assert sorted(os.listdir(tmp_path / "cache")) == ["chunk-000000.archived", "chunk-000002.archived"]
    assert cache.cached_bytes <= 2 * size + 100 and cache.stats.evictions == 1
    assert _records(held) == _records(db.log.chunk_by_number(0))


def test_a_damaged_object_is_an_error_and_nothing_is_kept(archived, tmp_path):
    db, store = archived
    with open(db.log.chunk_by_number(2).path, "rb") as f:
        data = bytearray(f.read())
    data[len(data) // 2] ^= 0xFF  # one flipped bit in the records
    store.put_bytes(chunk_object_name(2), bytes(data))
    cache = _cache(store, tmp_path)
    with pytest.raises(
        ArchiveError, match=r"archived chunk-000002.000001 in .* is damaged \(chunk checksum mismatch\)"
    ):
        cache.chunk(2)
    store.put_bytes(chunk_object_name(2), store.get_bytes(chunk_object_name(1)))  # another chunk's bytes
    with pytest.raises(ArchiveError, match="holds chunks 1-1 of size 65536, not chunk 2"):
        cache.chunk(2)
    assert os.listdir(tmp_path / "cache") == []


def test_an_unreachable_archive_is_unavailable(tmp_path):
    store = S3Store(
        "evdb-archive",
        REGION,
        environ_for(f"http://127.0.0.1:{free_port()}", tmp_path),
        max_retries=0,
        connect_timeout_seconds=1,
    )
    with pytest.raises(ArchiveUnavailable, match="s3://evdb-archive"):
        _cache(store, tmp_path).chunk(0)
    assert os.listdir(tmp_path / "cache") == []


class _Counting(FileSystemStore):
    def __init__(self, folder: str) -> None:
        super().__init__(folder)
        self.downloads = 0

    def download(self, name, path):
        self.downloads += 1
        return super().download(name, path)


def test_many_readers_of_one_chunk_share_one_download(tmp_path, clock):
    (tmp_path / "archive").mkdir()
    store = _Counting(str(tmp_path / "archive"))
    db = _database(tmp_path / "db", clock)
    try:
        _drain(_archiver(store, db))
        cache = _cache(store, tmp_path)
        barrier = threading.Barrier(6)
        got = []

        def read() -> None:
            barrier.wait()
            got.append(cache.chunk(1))

        threads = [threading.Thread(target=read) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert store.downloads == 1 and len(got) == 6 and all(c is got[0] for c in got)
    finally:
        db.close()
