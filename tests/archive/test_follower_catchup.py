"""A follower behind its leader's archived chunks catches up from the archive itself (issue 37).

In process: a leader whose chunks 0-2 left its disk for the archive (``archived.chk``) and a follower
(a new node, or one whose log ends inside chunk 1), driven with the pieces the replication stream uses
(the handshake's ``resolve_common_point``, ``leader_archive`` for the ``behindArchive`` message,
:class:`ArchiveCatchUp` on the follower, then the leader's chunk files and records). Afterwards the
follower serves exactly what the leader serves, reading the same chunks from its own archive cache.
An unreachable archive, another cluster's archive and a node without an archive take nothing."""

from __future__ import annotations

import logging
import os
import uuid

import pytest
from archive_helpers import CHUNK, REGION, archiver, database, drain, environ_for, fill

from evdb.archive.catchup import ArchiveCatchUp, LeaderArchive, leader_archive
from evdb.archive.filesystem import FileSystemStore
from evdb.archive.reads import ArchiveReads
from evdb.archive.s3 import S3Store
from evdb.cluster.replica import ChunkLogReplication
from evdb.cluster.sending import resolve_common_point
from evdb.database import Database
from evdb.errors import ArchiveError, ArchiveUnavailable
from evdb.storage.log import ARCHIVED_CHECKPOINT
from tests.cluster.test_chunk_catchup import catch_up, reads

LOGGER = logging.getLogger("test.archive.catchup")
LEADER = uuid.UUID(int=7)


def _reads(store, path) -> ArchiveReads:
    return ArchiveReads.for_database(store, str(path), chunk_size=CHUNK, logger=LOGGER)


def _open(path, clock, store=None) -> Database:
    archive = _reads(store, path) if store is not None else None
    return Database.open(
        str(path), clock=clock, chunk_size=CHUNK, existence_filter_capacity=10_000, archive=archive
    )


def _leader(path, clock, store, follower: Database | None = None) -> Database:
    """3.5 chunks, 0-2 archived and left to the archive (as a scavenge under the retention policy);
    ``follower`` takes the first 1.5 chunks (then is left behind)."""
    db = database(path, clock, chunks=0, max_memtable_entries=64, archive=_reads(store, path))
    db.write_epoch(1, LEADER)  # a cluster's log begins with its first leader's epoch
    fill(db, 1.5)
    if follower is not None:
        catch_up(db, follower)
    fill(db, 2)
    assert drain(archiver(store, db)) == 3
    db.index.wait_idle()
    with db.log.chunk_lock:
        db.log.leave_to_archive(3)
    assert db.log.local_start == 3 * CHUNK
    return db


def _files(path) -> list[str]:
    return sorted(n for n in os.listdir(path) if n.startswith("chunk-"))


def _catch_up_from_archive(leader: Database, follower: Database) -> int:
    """The handshake and the archive catch-up as a follower's replication sessions run them: the
    position the follower subscribes from in the end."""
    verdict, end = resolve_common_point(leader, follower)
    while verdict == "ok" and end < ChunkLogReplication(leader).local_start():
        facts = LeaderArchive.from_message(leader_archive(leader, end).message())  # as on the wire
        catch = ArchiveCatchUp(follower, facts, LOGGER)
        while catch.step():
            pass
        verdict, end = resolve_common_point(leader, follower)
    assert verdict == "ok", verdict
    return end


@pytest.mark.parametrize("start_inside", [False, True], ids=["new-node", "log-inside-chunk-1"])
def test_a_follower_behind_the_archive_takes_it_from_the_archive_and_serves_the_same(
    tmp_path, clock, start_inside
):
    (tmp_path / "archive").mkdir()
    store = FileSystemStore(str(tmp_path / "archive"))
    follower = _open(tmp_path / "follower", clock, store)
    leader = _leader(tmp_path / "leader", clock, store, follower if start_inside else None)
    try:
        if start_inside:  # the leader wrote on after: the follower ends inside chunk 1
            assert CHUNK < follower.committed_position < 2 * CHUNK
        assert _catch_up_from_archive(leader, follower) == 3 * CHUNK
        # archived.chk at the leader's boundary, no chunk file of its own before it
        assert follower.log.local_start == 3 * CHUNK
        assert (tmp_path / "follower" / ARCHIVED_CHECKPOINT).exists()
        assert _files(tmp_path / "follower") == ["chunk-000003.000000"]
        catch_up(leader, follower)  # the rest: the leader's chunk file 3 and records
        assert follower.committed_position == leader.committed_position
        assert reads(follower) == reads(leader)
        assert [e["epochId"] for e in follower.epochs()] == [e["epochId"] for e in leader.epochs()]
        # the next handshake agrees at once, and after a reopen too
        assert resolve_common_point(leader, follower) == ("ok", leader.committed_position)
        follower.close()
        follower = _open(tmp_path / "follower", clock, store)
        assert reads(follower) == reads(leader)
    finally:
        follower.close()
        leader.close()


def test_a_follower_restored_at_the_archive_end_agrees_with_the_leader(tmp_path, clock):
    """A log that ends where the leader's local chunks start, its last chunk in the archive on the
    leader: the record found ends before the chunk's end, and the chunk's end is where both agree
    (before, the follower was told to cut its log inside that chunk)."""
    (tmp_path / "archive").mkdir()
    store = FileSystemStore(str(tmp_path / "archive"))
    follower = _open(tmp_path / "follower", clock, store)
    leader = _leader(tmp_path / "leader", clock, store)
    try:
        assert _catch_up_from_archive(leader, follower) == 3 * CHUNK
        last = leader.log.reading_chunk_for(3 * CHUNK - 1)
        assert last is not None and last.data_end_position < 3 * CHUNK  # the chunk's tail is padding
        assert ChunkLogReplication(leader).completed_chunk_ends(0, 3 * CHUNK) == [
            (last.data_end_position, 3 * CHUNK)
        ]
        assert ChunkLogReplication(follower).chunk_end_after(last.data_end_position) == 3 * CHUNK
    finally:
        follower.close()
        leader.close()


def test_an_unreachable_archive_takes_nothing_and_a_retry_goes_on(tmp_path, clock):
    (tmp_path / "archive").mkdir()
    store = FileSystemStore(str(tmp_path / "archive"))
    leader = _leader(tmp_path / "leader", clock, store)
    dead = S3Store(
        "evdb-nowhere", REGION, environ_for("http://127.0.0.1:9", tmp_path / "home"), max_retries=0
    )
    follower = _open(tmp_path / "follower", clock, dead)
    try:
        facts = leader_archive(leader, 0)
        with pytest.raises(ArchiveUnavailable, match="evdb-nowhere"):
            ArchiveCatchUp(follower, facts, LOGGER).step()
        assert follower.committed_position == 0 and follower.log.local_start == 0
        assert not (tmp_path / "follower" / ARCHIVED_CHECKPOINT).exists()
    finally:
        follower.close()
        dead.close()
    # a download that fails half-way keeps the chunks taken before it; the next try goes on from there
    failing = _Failing(str(tmp_path / "archive"), fail_on="chunk-000001.000001")
    follower = _open(tmp_path / "follower", clock, failing)
    try:
        catch = ArchiveCatchUp(follower, leader_archive(leader, 0), LOGGER)
        assert catch.step()  # chunk 0
        with pytest.raises(ArchiveUnavailable, match="chunk-000001"):
            catch.step()
        assert follower.committed_position == CHUNK and follower.log.local_start == CHUNK
        assert not [n for n in os.listdir(tmp_path / "follower") if n.endswith(".tmp")]
        failing.fail_on = None
        assert _catch_up_from_archive(leader, follower) == 3 * CHUNK
        catch_up(leader, follower)
        assert reads(follower) == reads(leader)
    finally:
        follower.close()
        leader.close()


def test_another_clusters_archive_or_none_takes_nothing(tmp_path, clock):
    (tmp_path / "archive").mkdir()
    (tmp_path / "other").mkdir()
    store = FileSystemStore(str(tmp_path / "archive"))
    other = FileSystemStore(str(tmp_path / "other"))
    leader = _leader(tmp_path / "leader", clock, store)
    stranger = database(tmp_path / "stranger", clock)  # another cluster's log, archived into "other"
    drain(archiver(other, stranger))
    stranger.close()
    follower = _open(tmp_path / "follower", clock, other)
    try:
        with pytest.raises(ArchiveError, match="must name its cluster's archive"):
            ArchiveCatchUp(follower, leader_archive(leader, 0), LOGGER).step()
        assert follower.committed_position == 0 and _files(tmp_path / "follower") == ["chunk-000000.000000"]
    finally:
        follower.close()
    follower = _open(tmp_path / "follower", clock)  # no archive configured
    try:
        with pytest.raises(ArchiveError, match="configure Archive: Enabled"):
            ArchiveCatchUp(follower, leader_archive(leader, 0), LOGGER)
    finally:
        follower.close()
        leader.close()


class _Failing(FileSystemStore):
    """A folder whose download of one object fails as an unreachable store's does (the fault, injected)."""

    def __init__(self, folder: str, fail_on: str | None) -> None:
        super().__init__(folder)
        self.fail_on = fail_on

    def download(self, name, path):
        if name == self.fail_on:
            raise self._unavailable("download", f"{name}: connection refused")
        return super().download(name, path)
