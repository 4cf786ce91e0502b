"""The retention policy (issue 37): during a scavenge a node deletes a local chunk file only when it is in
the archive, verified against the local file, and outside both RetainAtLeast bounds; the deletion is
crash-safe (a power cut at every disk call of it leaves every event readable on reopen)."""

from __future__ import annotations

import logging
import os
import random
import shutil

import pytest
from archive_helpers import CHUNK
from archive_helpers import archiver as _archiver
from archive_helpers import database as _database
from archive_helpers import drain as _drain

from evdb.archive.archiver import chunk_object_name
from evdb.archive.filesystem import FileSystemStore
from evdb.archive.reads import ArchiveReads
from evdb.archive.retention import PANEL_SECONDS, Retention, newest_timestamp
from evdb.clock import TICKS_PER_SECOND, ManualClock
from evdb.database import Database
from evdb.scavenge.params import ScavengeRequest
from evdb.scavenge.service import ScavengeService
from evdb.storage.disk import use_disk
from evdb.storage.disk_model import DiskModel
from evdb.storage.log import ARCHIVED_CHECKPOINT
from evdb.streams import NewEvent
from tests.cluster.test_chunk_catchup import copy_records

LOGGER = logging.getLogger("test.archive.retention")
DAY = 24 * 3600


def _events(db: Database) -> list[tuple]:
    return [(e.stream, e.event_number, e.data) for e in db.read_all_forward(0, 100_000).events]


def _chunk_files(path) -> list[str]:
    return sorted(n for n in os.listdir(path) if n.startswith("chunk-"))


@pytest.fixture
def archived(tmp_path, clock):
    """3.5 chunks, chunks 0-2 archived in a folder: (database, store, reads)."""
    (tmp_path / "archive").mkdir()
    store = FileSystemStore(str(tmp_path / "archive"))
    db = _database(tmp_path / "db", clock)
    assert _drain(_archiver(store, db)) == 3
    reads = ArchiveReads(
        store, str(tmp_path / "cache"), chunk_size=CHUNK, max_cache_bytes=1 << 30, logger=LOGGER
    )
    db.log.archive = reads
    yield db, store, reads
    db.close()
    reads.close()


def _retention(reads, clock, days=1, logical_bytes=0) -> Retention:
    return Retention(reads, days=days, logical_bytes=logical_bytes, clock=clock, logger=LOGGER)


def test_a_chunk_goes_only_outside_both_bounds_the_edges_included(archived, clock):
    db, _, reads = archived
    log = db.log
    chunk = log.chunk_by_number(1)
    newest = newest_timestamp(chunk)
    assert newest == clock.ticks()  # written now
    after = log.committed - chunk.end_position  # logical bytes after the chunk
    day = DAY * TICKS_PER_SECOND
    policy = _retention(reads, clock, days=2, logical_bytes=after)
    assert policy.outside(chunk, log.committed, newest + 2 * day)  # both edges: outside
    assert not policy.outside(chunk, log.committed, newest + 2 * day - 1)  # a tick too young
    assert not _retention(reads, clock, days=2, logical_bytes=after + 1).outside(
        chunk, log.committed, newest + 3 * day
    )  # a byte too close to the end, however old
    assert not policy.outside(log.chunk_by_number(2), log.committed, newest + 3 * day)  # too close
    # the plan: the oldest files, up to the first one the policy keeps
    assert policy.plan(log).chunks == ()  # (the clock is still at the writes)
    clock.advance(2 * DAY)
    assert [c.start_number for c in policy.plan(log).chunks] == [0, 1]


def test_only_what_the_archive_checkpoint_covers_goes(tmp_path, clock):
    (tmp_path / "archive").mkdir()
    store = FileSystemStore(str(tmp_path / "archive"))
    db = _database(tmp_path / "db", clock)
    reads = ArchiveReads(
        store, str(tmp_path / "cache"), chunk_size=CHUNK, max_cache_bytes=1 << 30, logger=LOGGER
    )
    try:
        archiver = _archiver(store, db)
        assert archiver.step()  # chunk 0 only
        clock.advance(2 * DAY)
        assert [c.start_number for c in _retention(reads, clock).plan(db.log).chunks] == [0]
    finally:
        db.close()
        reads.close()


def test_applied_it_deletes_verified_files_logs_each_and_every_event_still_reads(archived, clock, caplog):
    db, _, reads = archived
    written = _events(db)
    clock.advance(2 * DAY)
    caplog.set_level(logging.INFO, LOGGER.name)
    deleted = _retention(reads, clock, logical_bytes=CHUNK).apply(db.log)
    assert [os.path.basename(p) for p in deleted] == ["chunk-000000.000000", "chunk-000001.000000"]
    assert _chunk_files(os.path.dirname(deleted[0])) == ["chunk-000002.000000", "chunk-000003.000000"]
    logged = "\n".join(r.getMessage() for r in caplog.records)
    for path in deleted:
        assert f"Retention: deleted chunk file {path} " in logged
    assert db.log.archived_chunks == 2 and _events(db) == written
    assert _retention(reads, clock, logical_bytes=CHUNK).apply(db.log) == []  # nothing more to do


def test_another_nodes_file_of_the_archived_records_goes_too(tmp_path, clock):
    """The archiver (a replica) wrote its own file of each chunk from the leader's records: the leader's
    file of the same records differs in its header's chunk id, so in its footer's checksum. The leader
    downloads the archived chunk, verified, and compares the records (before, nothing left the leader's
    disk, nor any node's but the archiver's)."""
    (tmp_path / "archive").mkdir()
    store = FileSystemStore(str(tmp_path / "archive"))
    leader = _database(tmp_path / "leader", clock)
    replica = Database.open(str(tmp_path / "replica"), clock=clock, chunk_size=CHUNK)
    reads = ArchiveReads(
        store, str(tmp_path / "cache"), chunk_size=CHUNK, max_cache_bytes=1 << 30, logger=LOGGER
    )
    try:
        copy_records(leader, replica, leader.committed_position)  # records, not files: its own chunk ids
        assert _drain(_archiver(store, replica)) == 3
        leader.log.archive = reads
        written = _events(leader)
        clock.advance(2 * DAY)
        deleted = _retention(reads, clock).apply(leader.log)
        assert [os.path.basename(p) for p in deleted] == [f"chunk-00000{i}.000000" for i in range(3)]
        assert leader.log.archived_chunks == 3 and _events(leader) == written
    finally:
        replica.close()
        leader.close()
        reads.close()


def test_a_file_the_archived_object_does_not_match_stays(archived, clock, caplog):
    db, store, reads = archived
    store.put_bytes(chunk_object_name(0), store.get_bytes(chunk_object_name(1)))  # another chunk's bytes
    clock.advance(2 * DAY)
    assert _retention(reads, clock).apply(db.log) == []  # chunk 0 stays, and so every later one
    assert (
        f"Retention: chunk file {db.log.chunk_by_number(0).path} stays: the archived chunk-000000.000001"
        in caplog.text
    )
    assert db.log.archived_chunks == 0


def test_a_merged_file_goes_once_each_archived_chunk_it_covers_verifies_whole(archived, clock):
    db, _, reads = archived
    written = _events(db)
    log = db.log
    builder = log.new_chunk_builder(0, 1, temp_suffix=".merge.scavenge.tmp")
    for n in (0, 1):
        for record in log.chunk_by_number(n).iter_records():
            builder.add(
                log.chunk_by_number(n).raw_frame(record.log_position - n * CHUNK), record.log_position
            )
    with log.chunk_lock:
        log.switch_chunk(builder.finish())
    assert log.chunk_by_number(0).end_number == 1
    clock.advance(2 * DAY)
    deleted = _retention(reads, clock, logical_bytes=CHUNK).apply(log)
    assert [os.path.basename(p) for p in deleted] == ["chunk-000000.000001"]
    assert reads.cache.stats.downloads == 2 and _events(db) == written


def test_a_scavenge_applies_the_policy_as_it_ends_and_the_next_one_runs_beside_archived_chunks(
    archived, clock, tmp_path
):
    db, _, reads = archived
    written = _events(db)
    clock.advance(2 * DAY)
    service = ScavengeService(
        db, state_path=str(tmp_path / "scavenge.db"), logger=LOGGER, clock=clock,
        retention=_retention(reads, clock, logical_bytes=CHUNK * 3 // 2),
    )  # fmt: skip

    def scavenge() -> None:
        service.start(ScavengeRequest())
        assert service.wait(60)
        assert service.last()[1] == "Success"

    def ours() -> list[tuple]:  # (the scavenges' own events come after)
        return [e for e in _events(db) if e[0].startswith("order-")]

    try:
        scavenge()
        # it completed chunk 3 (its end: a little over 4 chunks); chunk 2 ends within 1.5 chunks of it
        assert db.log.committed > 4 * CHUNK and db.log.archived_chunks == 2
        assert ours() == written
        db.set_stream_metadata("order-3", {"$maxCount": 1})  # something for the next scavenge to remove
        scavenge()  # a scavenge of a log whose first chunks are in the archive only
        # chunk 2 (archived, now outside the policy) goes; the chunks in the archive only keep every event
        assert db.log.archived_chunks == 3
        assert [e for e in ours() if e[0] != "order-3"] == [e for e in written if e[0] != "order-3"]
        last = db.read_stream_backward("order-3", None, 10).events
        assert [e.event_number for e in last] == [max(w[1] for w in written if w[0] == "order-3")]
    finally:
        service.close()


# -- a power cut at every disk call of the deletion ---------------------------------------------------


def _cut_run(template, root, cut: int | None, seed: int) -> tuple[int, str | None]:
    """Delete chunks 0-2 of a copy of ``template`` with the power cut at its ``cut``-th disk call, open
    it again: the disk calls the deletion made, and what went wrong, if anything."""
    name = f"{cut}-{seed}"
    shutil.copytree(template / "db", root / name)
    clock = ManualClock()
    store = FileSystemStore(str(template / "archive"))
    reads = ArchiveReads(
        store, str(root / f"cache-{name}"), chunk_size=CHUNK, max_cache_bytes=1 << 30, logger=LOGGER
    )
    try:
        db = Database.open(
            str(root / name), clock=clock, chunk_size=CHUNK, existence_filter_capacity=10_000, archive=reads
        )
        written = _events(db)
        model = DiskModel(str(root / f"scratch-{name}"))
        with use_disk(model):
            if cut is not None:
                model.cut_after(cut)
            try:
                with db.log.chunk_lock:
                    db.log.leave_to_archive(3)
            except OSError:
                pass
            calls = model.calls
            model.cut()
            model.power_loss(random.Random(seed))
            db.close()
        db = Database.open(
            str(root / name), clock=clock, chunk_size=CHUNK, existence_filter_capacity=10_000, archive=reads
        )
        try:
            got = _events(db)
            files = _chunk_files(root / name)
            archived = db.log.archived_chunks
        finally:
            db.close()
    finally:
        reads.close()
    if got != written:
        return calls, f"read {len(got)} events, not the {len(written)} written"
    if (archived, files) not in (
        (0, [f"chunk-00000{i}.000000" for i in range(4)]),
        (3, ["chunk-000003.000000"]),
    ):
        return calls, f"{ARCHIVED_CHECKPOINT} says {archived} chunks archived, the files are {files}"
    return calls, None


def test_a_power_cut_at_every_disk_call_of_a_deletion_leaves_every_event_readable(tmp_path):
    template = tmp_path / "template"
    (template / "archive").mkdir(parents=True)
    db = _database(template / "db", ManualClock())
    try:
        assert _drain(_archiver(FileSystemStore(str(template / "archive")), db)) == 3
    finally:
        db.close()
    calls, violation = _cut_run(template, tmp_path, None, 0)
    assert violation is None and calls >= 5, (calls, violation)
    failures = []
    for cut in range(1, calls + 1):
        for seed in range(3):
            _, violation = _cut_run(template, tmp_path, cut, seed)
            if violation:
                failures.append(f"cut at disk call {cut}, seed {seed}: {violation}")
    assert not failures, "\n".join(failures)


def test_the_panel_shows_local_and_archived_bytes_and_what_the_next_scavenge_frees(archived, clock, tmp_path):
    db, _, reads = archived
    log = db.log
    policy = _retention(reads, clock, logical_bytes=CHUNK)
    panel = policy.panel(log)
    assert panel["archiveCheckpoint"] == panel["archivedLogicalBytes"] == 3 * CHUNK
    assert panel["nextScavengeFrees"] == {"chunkFiles": 0, "bytes": 0}  # all of it written today
    assert (panel["localChunkFiles"], panel["archivedOnlyChunks"], panel["localLogicalBytes"]) == (
        4,
        0,
        log.committed,
    )
    assert panel["retainAtLeast"] == {"days": 1, "logicalBytes": CHUNK}
    clock.advance(2 * DAY)
    sizes = sum(log.chunk_by_number(n).file_size for n in (0, 1))
    assert policy.panel(log)["nextScavengeFrees"] == {"chunkFiles": 2, "bytes": sizes}
    policy.apply(log)
    clock.advance(PANEL_SECONDS)
    panel = policy.panel(log)
    assert panel["nextScavengeFrees"] == {"chunkFiles": 0, "bytes": 0}
    assert (panel["localChunkFiles"], panel["archivedOnlyChunks"], panel["localLogicalBytes"]) == (
        2,
        2,
        log.committed - 2 * CHUNK,
    )
    shutil.rmtree(tmp_path / "archive")  # the archive gone: the panel says so, the local figures stay
    clock.advance(PANEL_SECONDS)
    panel = policy.panel(log)
    assert panel["archiveCheckpoint"] == -1 and str(tmp_path / "archive") in panel["archiveError"]
    assert panel["localChunkFiles"] == 2


def test_the_archivers_figures_say_its_upload_lag_in_the_panel_of_its_node(archived, clock):
    """``es.archive.archiver`` (the dashboard's archive panel): the completed, committed chunks past the
    archiver's checkpoint are its upload lag; none is known before it has read the checkpoint; only the
    archiver's node reports it."""
    db, store, reads = archived  # chunks 0-2 archived
    archiver = _archiver(store, db)  # the same archiver, restarted
    assert archiver.figures() == {
        "checkpoint": -1,
        "pendingChunks": None,
        "pendingBytes": None,
        "pendingSince": None,
        "uploaded": 0,
        "kept": 0,
        "failures": 0,
        "lastError": None,
    }
    assert not archiver.step()  # it reads the checkpoint: nothing to upload, chunk 3 is the active one
    assert (archiver.figures()["checkpoint"], archiver.figures()["pendingChunks"]) == (3 * CHUNK, 0)
    for _ in range(2):  # two more chunks completed, not uploaded yet: its lag
        db.call_in_writer(lambda ctx: ctx.complete_active_chunk())
        db.append("order-lag", [NewEvent("Placed", data=b"x" * 100)])
    figures = archiver.figures()
    assert (figures["pendingChunks"], figures["pendingBytes"]) == (2, 2 * CHUNK)
    oldest = db.log.chunk_by_number(3)  # its last record's time: how long the oldest has waited
    assert figures["pendingSince"] == newest_timestamp(oldest) / TICKS_PER_SECOND
    policy = _retention(reads, clock)
    assert "archiver" not in policy.panel(db.log)  # a node that is not the archiver
    assert policy.panel(db.log, archiver)["archiver"]["pendingChunks"] == 2
    assert archiver.step() and archiver.figures()["pendingChunks"] == 1
    assert archiver.figures()["uploaded"] == 1
    # the archiver's node asks the archive again as soon as its archiver moved the checkpoint (the clock
    # has not moved: another node's figures wait up to PANEL_SECONDS)
    assert policy.panel(db.log)["archiveCheckpoint"] == 3 * CHUNK
    assert policy.panel(db.log, archiver)["archiveCheckpoint"] == 4 * CHUNK
