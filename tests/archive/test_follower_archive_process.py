"""Real processes: a one-node cluster with an archiver replica whose leader left its first chunks to the
archive (a scavenge under the retention policy), and a second read-only replica that was down while
that happened. Without `Archive: Enabled` it is refused, and both sides say what to configure; with
it, it takes the archived chunks from the archive itself, then the rest from the leader, and serves
the same `$all` (issue 37)."""

from __future__ import annotations

import glob
import logging
import os

import pytest
from archive_helpers import (
    archived_chk,
    filesystem_archive,
    make_archiver,
    node_config,
    node_of,
    save_node_config,
    write_filler,
)
from waiting import wait_until

from evdb.archive.archiver import read_checkpoint
from evdb.archive.filesystem import FileSystemStore
from evdb.archive.reads import ArchiveReads
from evdb.cluster.launcher import LocalCluster
from evdb.database import Database
from evdb.logs import read_log_lines

pytestmark = pytest.mark.slow

CHUNK = 64 * 1024


def _said(local: LocalCluster, name: str, words: str) -> list[str]:
    log = node_config(local, name)["Log"]
    return [
        line["@m"]
        for path in sorted(glob.glob(os.path.join(log, "*", "log-*.json")))
        for line in read_log_lines(path)
        if words in line["@m"]
    ]


def _all(db: str, store: FileSystemStore) -> list:
    reads = ArchiveReads.for_database(store, db, chunk_size=CHUNK, logger=logging.getLogger("test"))
    opened = Database.open(db, chunk_size=CHUNK, existence_filter_capacity=10_000, archive=reads)
    try:
        return [(e.log_position, e.stream, e.event_number, e.event_id, e.data) for e in opened.iter_all(0)]
    finally:
        opened.close()
        reads.close()


def test_a_replica_behind_the_leaders_archived_chunks_catches_up_from_the_archive(tmp_path):
    archive = tmp_path / "archive"
    archive.mkdir()
    settings = filesystem_archive(archive, days=0, logical_bytes=CHUNK)
    local = LocalCluster(tmp_path / "cluster")
    local.create(nodes=1, replicas=2, insecure=True, chunk_size="64KiB", extra={"Archive": settings})
    make_archiver(local)
    late = node_config(local, "replica2")
    del late["Archive"]  # first without an archive
    save_node_config(local, "replica2", late)
    store = FileSystemStore(str(archive))
    leader_db = node_of(local, "node1")["db"]
    try:
        local.up(timeout=60, log=lambda *_: None)
        leader = local.wait_for_leader(60)
        local.wait_for_node("replica2", 60)
        assert local.stop_node("replica2", log=lambda *_: None)  # down while the leader goes on
        write_filler(local, leader, 320)  # about five chunks
        wait_until(lambda: read_checkpoint(store).position >= 4 * CHUNK, 60, "four chunks archived")
        with local.client(leader, timeout=30) as client:
            assert client.post("/admin/scavenge").status_code == 200
        wait_until(
            lambda: archived_chk(leader_db) >= 3 * CHUNK, 60, "the leader's chunks left to the archive"
        )
        boundary = archived_chk(leader_db)

        # without an archive: refused, both sides saying what to configure
        local.start_node("replica2")
        wait_until(lambda: _said(local, "node1", "cannot catch up"), 60, "the leader's refusal")
        wait_until(lambda: _said(local, "replica2", "configure Archive: Enabled"), 60, "the replica's")
        assert "configure Archive: Enabled" in _said(local, "node1", "cannot catch up")[0]
        # the follower waits and asks again, 1 s doubling (to 60 s)
        assert _said(local, "replica2", "Catching up from the archive failed (attempt 1, next in 1 s)")
        assert local.stop_node("replica2", log=lambda *_: None)
        assert archived_chk(late["Db"]) == 0

        # with the cluster's archive: chunks from the archive, the rest from the leader
        late["Archive"] = settings
        save_node_config(local, "replica2", late)
        local.start_node("replica2")
        write_filler(local, leader, 80)
        wait_until(
            lambda: (
                (ends := {r["name"]: r.get("writer") for r in local.status()})["replica2"] == ends["node1"]
            ),
            90,
            "the replica caught up",
        )
        assert _said(local, "replica2", "catching up from the archive")
        assert archived_chk(late["Db"]) >= boundary
        first_local = min(n for n in os.listdir(late["Db"]) if n.startswith("chunk-"))
        assert int(first_local[6:12]) * CHUNK >= boundary  # no chunk file of its own before the boundary
    finally:
        local.down(timeout=10, log=lambda *_: None)
    served = _all(leader_db, store)
    assert len(served) > 300 and _all(late["Db"], store) == served
