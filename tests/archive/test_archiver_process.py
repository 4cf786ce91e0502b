"""The archiver as a real process: a one-node cluster and a read-only replica with `Archiver: true`,
archiving into a folder. Every completed chunk the leader writes reaches the archive, byte for byte as
the replica holds it; a kill -9 of the archiver and a restart neither upload a chunk twice nor skip one. Its disk lost, the
replica restored from the archive alone (`evdb restore --from-archive`) catches up from the leader,
serves the same `$all` and archives on."""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import sys

import pytest
from archive_helpers import filesystem_archive, make_archiver, node_config, node_of, write_filler
from waiting import wait_until

from evdb.archive.archiver import CHECKPOINT, CLAIM, chunk_object_name, read_checkpoint
from evdb.archive.filesystem import FileSystemStore
from evdb.cluster.launcher import LocalCluster
from evdb.database import Database
from evdb.logs import read_log_lines

pytestmark = pytest.mark.slow

CHUNK = 64 * 1024


def _archived_lines(local: LocalCluster) -> list[str]:
    """What the archiver logged of each chunk, over its runs (each run names itself anew)."""
    log = node_config(local, "replica1")["Log"]
    return [
        line["@m"]
        for path in sorted(glob.glob(os.path.join(log, "*", "log-*.json")))
        for line in read_log_lines(path)
        if " archived as " in line["@m"] or "in the archive already" in line["@m"]
    ]


def test_the_archiver_uploads_every_completed_chunk_and_survives_kill_9(tmp_path):
    archive = tmp_path / "archive"
    archive.mkdir()
    extra = {"Archive": filesystem_archive(archive, days=1, logical_bytes=CHUNK)}
    local = LocalCluster(tmp_path / "cluster")
    local.create(nodes=1, replicas=1, insecure=True, chunk_size="64KiB", extra=extra)
    replica = node_of(local, "replica1")
    config = make_archiver(local)
    store = FileSystemStore(str(archive))
    try:
        local.up(timeout=60, log=lambda *_: None)
        leader = local.wait_for_leader(60)
        local.wait_for_node("replica1", 60)
        write_filler(local, leader, 320)  # about five chunks
        wait_until(lambda: read_checkpoint(store).position >= 4 * CHUNK, 60, "four chunks archived")
        os.kill(local.start_node("replica1"), signal.SIGKILL)  # the running pid
        wait_until(lambda: not local.is_running("replica1"), 30, "the archiver gone")
        write_filler(local, leader, 200)
        local.start_node("replica1")
        local.wait_for_node("replica1", 60)
        db = os.path.join(config["Db"])
        wait_until(
            lambda: read_checkpoint(store).position >= 7 * CHUNK, 90, "the chunks written meanwhile archived"
        )
        end = read_checkpoint(store).position // CHUNK
        names = [o.name for o in store.list() if o.name.startswith("chunk-")]
        assert names == [chunk_object_name(n) for n in range(end)]  # no gap
        for n in range(end):
            local_file = next(
                f for f in sorted(os.listdir(db), reverse=True) if f.startswith(f"chunk-{n:06d}.")
            )
            with open(os.path.join(db, local_file), "rb") as f:
                assert store.get_bytes(chunk_object_name(n)) == f.read(), n
        lines = _archived_lines(local)
        uploads = [line.split()[1] for line in lines if " archived as " in line]
        assert sorted(uploads) == sorted(set(uploads))  # no chunk uploaded twice
        assert {int(line.split()[1]) for line in lines} == set(range(end))  # each one logged, by the archiver
        assert store.head(CHECKPOINT) is not None

        # the replica's disk lost: restored from the archive alone, it catches up and serves the same $all
        assert local.stop_node("replica1", log=lambda *_: None)
        shutil.rmtree(db)
        evdb = os.path.join(os.path.dirname(sys.executable), "evdb")
        restore = subprocess.run(
            [evdb, "restore", "--from-archive", "--config", replica["config"]],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert restore.returncode == 0, restore.stderr
        assert f"archive checkpoint {read_checkpoint(store).position}" in restore.stderr
        # its archiver id went with the disk: as when archiving moves to another node, the claim goes
        store.delete(CLAIM)
        local.start_node("replica1")
        local.wait_for_node("replica1", 60)
        write_filler(local, leader, 160)  # more after the restore: streamed to it as to any follower
        wait_until(lambda: _positions(local) is not None, 60, "the restored replica caught up")
        # it is the archiver again: the next chunks reach the archive
        wait_until(lambda: read_checkpoint(store).position > end * CHUNK, 90, "archiving goes on")
    finally:
        local.down(timeout=10, log=lambda *_: None)
    leader_db = next(n for n in local.info()["nodes"] if n["name"] == "node1")["db"]
    served = _all(leader_db)
    assert len(served) > 600 and _all(db) == served


def _positions(local: LocalCluster) -> int | None:
    """The common end of the leader's and the replica's logs, once they are the same."""
    ends = {row["name"]: row.get("writer") for row in local.status()}
    return ends["node1"] if ends.get("node1") and ends["node1"] == ends.get("replica1") else None


def _all(db: str) -> list:
    opened = Database.open(db, chunk_size=CHUNK, existence_filter_capacity=10_000)
    try:
        return [(e.log_position, e.stream, e.event_number, e.event_id, e.data) for e in opened.iter_all(0)]
    finally:
        opened.close()
