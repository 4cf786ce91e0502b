"""The archiver (evdb/archive/archiver.py) on a real database of small chunks, into both stores: every
completed committed chunk uploaded in order and verified before the checkpoint moves; resumed after a
crash between upload and checkpoint without a second upload; a bucket of another cluster refused;
failures retried with backoff."""

from __future__ import annotations

import dataclasses
import json
import logging
import os

import boto3
import pytest
from archive_helpers import CHUNK, KEYS, REGION, environ_for
from archive_helpers import archiver as _archiver
from archive_helpers import database as _database
from archive_helpers import drain as _drain
from archive_helpers import records as _records
from moto.server import ThreadedMotoServer

from evdb.archive.archiver import (
    CHECKPOINT,
    CLAIM,
    ArchiveClaimed,
    Archiver,
    DatabaseChunks,
    archiver_identity,
    backoff_seconds,
    chunk_object_name,
    read_checkpoint,
)
from evdb.archive.filesystem import FileSystemStore
from evdb.archive.s3 import S3Store
from evdb.archive.store import ObjectChanged
from evdb.database import Database
from evdb.errors import ArchiveUnavailable
from evdb.free_port import free_port
from evdb.storage.chunk import Chunk


@pytest.fixture
def database(tmp_path, clock):
    db = _database(tmp_path / "db", clock)
    yield db
    db.close()


def test_every_completed_committed_chunk_is_uploaded_verified_and_checkpointed(store, database):
    archiver = _archiver(store, database)
    assert _drain(archiver) == 3  # chunks 0-2 are completed; 3 is the active one
    assert read_checkpoint(store).position == 3 * CHUNK
    names = [o.name for o in store.list()]
    assert names == [CHECKPOINT, CLAIM, *(chunk_object_name(n) for n in range(3))]
    for n in range(3):
        with open(database.log.chunk_by_number(n).path, "rb") as f:
            assert store.get_bytes(chunk_object_name(n)) == f.read()
    checkpoint = json.loads(store.get_bytes(CHECKPOINT))
    assert (
        checkpoint["chunkSize"] == CHUNK
        and checkpoint["log"] == DatabaseChunks(lambda: database, CHUNK).log_identity()
    )
    # the next chunk goes once it is completed
    database.call_in_writer(lambda ctx: ctx.complete_active_chunk())
    assert _drain(archiver) == 1 and read_checkpoint(store).position == 4 * CHUNK
    assert archiver.uploaded == 4 and archiver.kept == 0


def test_a_chunk_the_cluster_has_not_committed_waits(tmp_path, clock):
    db = _database(tmp_path / "db", clock)
    try:
        store = FileSystemStore(str(tmp_path))
        db.set_read_limit(CHUNK + 10)  # what the cluster committed ends inside chunk 1
        archiver = _archiver(store, db)
        assert _drain(archiver) == 1 and read_checkpoint(store).position == CHUNK
        db.set_read_limit(db.committed_position)
        assert _drain(archiver) == 2
    finally:
        db.close()


class _Crashing(FileSystemStore):
    """The file-system store, dying (as a kill -9 would) when told, and counting chunk uploads."""

    def __init__(self, folder: str, crash_at_checkpoint: bool = False) -> None:
        super().__init__(folder)
        self.crash_at_checkpoint = crash_at_checkpoint
        self.uploads: list[str] = []

    def put_file(self, name, path):
        self.uploads.append(name)
        return super().put_file(name, path)

    def put_bytes(self, name, data, **kw):
        if name == CHECKPOINT and self.crash_at_checkpoint:
            raise KeyboardInterrupt("killed between the upload and the checkpoint")
        return super().put_bytes(name, data, **kw)


def test_a_crash_between_upload_and_checkpoint_neither_uploads_twice_nor_skips(tmp_path, database):
    (tmp_path / "archive").mkdir()
    crashing = _Crashing(str(tmp_path / "archive"))
    first = _archiver(crashing, database)
    assert first.step()  # chunk 0, checkpoint at 1 chunk
    crashing.crash_at_checkpoint = True
    with pytest.raises(KeyboardInterrupt):
        first.step()  # chunk 1 uploaded, then the process dies before its checkpoint
    assert read_checkpoint(crashing).position == CHUNK
    crashing.crash_at_checkpoint = False
    restarted = _archiver(crashing, database)
    assert _drain(restarted) == 2
    assert restarted.kept == 1 and restarted.uploaded == 1
    assert crashing.uploads == [chunk_object_name(n) for n in range(3)]  # each chunk once, in order
    assert read_checkpoint(crashing).position == 3 * CHUNK


def test_an_object_that_does_not_match_the_local_chunk_is_uploaded_again(store, database):
    store.put_bytes(chunk_object_name(0), b"torn" * 100)  # not the chunk: another size, another checksum
    archiver = _archiver(store, database)
    assert archiver.step() and archiver.uploaded == 1 and archiver.kept == 0
    with open(database.log.chunk_by_number(0).path, "rb") as f:
        assert store.get_bytes(chunk_object_name(0)) == f.read()


def test_a_bucket_of_another_cluster_is_refused_loudly(store, database, tmp_path, clock, caplog):
    assert _archiver(store, database).step()
    other = _database(tmp_path / "other", clock, chunks=1.5)
    try:
        intruder = _archiver(store, other, name="other-archiver")
        with pytest.raises(ArchiveClaimed, match="belongs to another cluster"):
            intruder.step()
        with caplog.at_level(logging.CRITICAL, logger="test.archiver"):
            intruder.run()  # returns: it does not retry a bucket that is not its cluster's
        assert "Archiving stopped: The archive" in caplog.text and "use one bucket per cluster" in caplog.text
        assert read_checkpoint(store).position == CHUNK  # nothing of the other log went in
    finally:
        other.close()


class _Flaky(FileSystemStore):
    """Unavailable for the first ``failures`` calls (an object store that is down, then back)."""

    def __init__(self, folder: str, failures: int) -> None:
        super().__init__(folder)
        self.failures = failures

    def head(self, name):
        if self.failures:
            self.failures -= 1
            raise ArchiveUnavailable(f"The archive {self.description} is unavailable (read {name}): down")
        return super().head(name)


def test_an_unavailable_archive_is_retried_with_backoff_until_it_is_back(tmp_path, database, caplog):
    (tmp_path / "archive").mkdir()
    flaky = _Flaky(str(tmp_path / "archive"), failures=4)
    waits: list[float] = []
    archiver: Archiver

    def wait(seconds: float) -> bool:  # the injected sleep: records, and stops once all is uploaded
        waits.append(seconds)
        return archiver.checkpoint == 3 * CHUNK

    archiver = _archiver(flaky, database, wait=wait)
    with caplog.at_level(logging.INFO, logger="test.archiver"):
        archiver.run(idle_seconds=5)
    assert waits == [1, 2, 4, 8, 5]  # backoff while down, then the idle wait once everything is up
    assert read_checkpoint(flaky).position == 3 * CHUNK
    assert "Archiving failed (attempt 4, next in 8 s)" in caplog.text
    assert "Archiving resumed after 4 failed attempts" in caplog.text


def test_backoff_doubles_to_a_minute():
    assert [backoff_seconds(n) for n in (1, 2, 3, 6, 7, 20)] == [1, 2, 4, 32, 60, 60]


def test_an_s3_endpoint_that_is_down_is_waited_out_and_archiving_goes_on_when_it_is_up(tmp_path, database):
    port = free_port()  # nothing listens there yet
    environ = environ_for(f"http://127.0.0.1:{port}", tmp_path)
    store = S3Store("evdb-archive-late", REGION, environ, max_retries=0, connect_timeout_seconds=1)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    waits: list[float] = []
    archiver: Archiver

    def wait(seconds: float) -> bool:
        waits.append(seconds)
        if len(waits) == 2:  # the store comes up after two failed attempts
            server.start()
            boto3.client(
                "s3",
                endpoint_url=f"http://127.0.0.1:{port}",
                region_name=REGION,
                aws_access_key_id=KEYS["AWS_ACCESS_KEY_ID"],
                aws_secret_access_key=KEYS["AWS_SECRET_ACCESS_KEY"],
            ).create_bucket(
                Bucket="evdb-archive-late", CreateBucketConfiguration={"LocationConstraint": REGION}
            )
        return archiver.checkpoint == 3 * CHUNK

    archiver = _archiver(store, database, wait=wait)
    try:
        archiver.run(idle_seconds=5)
    finally:
        server.stop()
    assert waits == [1, 2, 5] and archiver.uploaded == 3


def _merge_first_two(db: Database) -> None:
    """Chunks 0 and 1 as one merged chunk, as a scavenge's merge leaves them (every record kept)."""
    log = db.log
    builder = log.new_chunk_builder(0, 1, temp_suffix=".merge.scavenge.tmp")
    for n in (0, 1):
        chunk = log.chunk_by_number(n)
        offset = 0
        while offset < chunk.physical_end:
            _, after = chunk.read_at(offset)
            builder.add(chunk.raw_frame(offset), chunk.start_position + offset)
            offset = after
    merged = builder.finish()
    with log.chunk_lock:
        log.switch_chunk(merged)


def test_a_merged_chunk_is_split_back_for_upload_once_even_across_a_crash(tmp_path, database):
    originals = {n: _records(database.log.chunk_by_number(n)) for n in (0, 1)}
    _merge_first_two(database)
    assert database.log.chunk_by_number(0).end_number == 1
    (tmp_path / "archive").mkdir()
    store = _Crashing(str(tmp_path / "archive"), crash_at_checkpoint=True)
    work = tmp_path / "db" / "archiving"
    first = _archiver(store, database, work_dir=str(work))
    with pytest.raises(KeyboardInterrupt):
        first.step()  # chunk 0 split and uploaded, then the process dies before its checkpoint
    assert os.listdir(work) == ["unmerged-000000"]  # kept for the restart
    store.crash_at_checkpoint = False
    restarted = _archiver(store, database, work_dir=str(work))
    assert _drain(restarted) == 3
    assert restarted.kept == 1 and store.uploads == [chunk_object_name(n) for n in range(3)]
    assert os.listdir(work) == []  # each split file removed once its checkpoint moved
    for n in (0, 1):  # each archived chunk holds exactly its logical chunk's records
        (tmp_path / "copy").write_bytes(store.get_bytes(chunk_object_name(n)))
        copy = Chunk.open(str(tmp_path / "copy"))
        assert (copy.start_number, copy.end_number) == (n, n)
        assert _records(copy) == originals[n]
        copy.close()


def test_a_second_archiver_of_the_same_cluster_is_refused_loudly(store, database, tmp_path):
    first_id = archiver_identity(str(tmp_path / "first"))
    assert archiver_identity(str(tmp_path / "first")) == first_id  # kept across restarts
    assert _archiver(store, database, name="replica1", archiver_id=first_id).step()
    second = _archiver(
        store, database, name="replica2", archiver_id=archiver_identity(str(tmp_path / "second"))
    )
    with pytest.raises(
        ArchiveClaimed, match=r"Another archiver of this cluster \(replica1, id [0-9a-f]{32}\)"
    ):
        second.step()
    assert read_checkpoint(store).position == CHUNK
    # the first one, restarted under another node name, is still the cluster's archiver
    assert _archiver(store, database, name="replica1-again", archiver_id=first_id).step()


def test_a_checkpoint_changed_by_another_writer_is_read_again_not_overwritten(store, database):
    archiver = _archiver(store, database)
    assert archiver.step() and read_checkpoint(store).position == CHUNK
    ours = json.loads(store.get_bytes(CHECKPOINT))
    store.put_bytes(CHECKPOINT, json.dumps({**ours, "position": 2 * CHUNK}).encode())  # someone else moved it
    with pytest.raises(ObjectChanged):
        archiver.step()  # its own last write is stale: the If-Match refuses it
    assert read_checkpoint(store).position == 2 * CHUNK
    assert archiver.step() and read_checkpoint(store).position == 3 * CHUNK  # read again, went on from there


def test_a_checkpoint_written_while_it_is_read_is_read_again(store, database):
    """A full CI run's test polled the archive checkpoint beside a working archiver and got
    ObjectChanged (the archiver wrote it between the read's head and get): such a read is made again;
    ObjectChanged only when it changes under every read."""
    assert _archiver(store, database).step() and read_checkpoint(store).position == CHUNK
    heads = {"n": 0}
    real_head = store.head

    class Moving:  # the checkpoint's tag moves between a read's two heads, ``changes`` times
        def __init__(self, changes: int) -> None:
            self.changes = changes

        def __getattr__(self, name):
            return getattr(store, name)

        def head(self, name):
            info = real_head(name)
            heads["n"] += 1
            if self.changes and heads["n"] % 2 == 0:
                self.changes -= 1
                return dataclasses.replace(info, etag=f"moved-{heads['n']}")
            return info

    assert read_checkpoint(Moving(2)).position == CHUNK  # type: ignore[arg-type]
    with pytest.raises(ObjectChanged):
        read_checkpoint(Moving(100))  # type: ignore[arg-type]
