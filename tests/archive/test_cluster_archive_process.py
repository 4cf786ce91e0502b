"""Issue 37's first "Done when", as an operator would see it: a 3-node cluster plus an archiver
(real processes, the file-system archive), written to over many chunks, uploads every completed
chunk; a scavenge on each node under `RetainAtLeast` shrinks its local chunk files to the policy;
and every event stays readable from every node, over HTTP from each node and over gRPC through
KurrentDB's Python client (`read_all` from position 0) preferring the leader, a follower and the
replica."""

from __future__ import annotations

import os

import pytest
from archive_helpers import archived_chk, filesystem_archive, make_archiver, write_filler
from kurrentdbclient import KurrentDBClient
from waiting import wait_until

from evdb.archive.archiver import read_checkpoint
from evdb.archive.filesystem import FileSystemStore
from evdb.cluster.launcher import LocalCluster

pytestmark = pytest.mark.slow

CHUNK = 64 * 1024
KEEP = 2 * CHUNK  # RetainAtLeast.LogicalBytes


def _chunk_files(db: str) -> list[str]:
    return sorted(n for n in os.listdir(db) if n.startswith("chunk-"))


def _left(db: str) -> bool:
    """Retention ran: chunks before ``archived.chk`` are the archive's only, their files gone."""
    boundary = archived_chk(db)
    return boundary > 0 and all(int(f[6:12]) * CHUNK >= boundary for f in _chunk_files(db))


def _http_all(local: LocalCluster, url: str) -> list[str]:
    """The ids of the non-system events of `$all`, read over HTTP from the node at ``url``."""
    with local.client(url, timeout=60) as client:
        r = client.get(
            "/streams/%24all/" + "0" * 32 + "/forward/4096?embed=body",
            headers={"Accept": "application/vnd.kurrent.atom+json"},
        )
    assert r.status_code == 200, r.text
    entries = r.json()["entries"]
    return sorted(e["eventId"] for e in entries if not e["eventType"].startswith("$"))


def _grpc_all(local: LocalCluster, url: str, preference: str) -> list[str]:
    host = url.split("//", 1)[1]
    with KurrentDBClient(
        f"kurrentdb://admin:changeit@{host}?tls=false&NodePreference={preference}"
    ) as client:
        return sorted(str(e.id) for e in client.read_all(commit_position=0) if not e.type.startswith("$"))


def test_a_cluster_with_an_archiver_keeps_every_event_readable_after_retention(tmp_path):
    archive = tmp_path / "archive"
    archive.mkdir()
    settings = filesystem_archive(archive, days=0, logical_bytes=KEEP)
    local = LocalCluster(tmp_path / "cluster")
    local.create(nodes=3, replicas=1, insecure=True, chunk_size="64KiB", extra={"Archive": settings})
    make_archiver(local)
    store = FileSystemStore(str(archive))
    voters = [n for n in local.info()["nodes"] if not n["read_only_replica"]]
    try:
        local.up(timeout=90, log=lambda *_: None)
        leader = local.wait_for_leader(60)
        local.wait_for_node("replica1", 60)
        write_filler(local, leader, 480)  # about eight chunks
        written = _http_all(local, leader)
        assert len(written) == 480
        wait_until(lambda: read_checkpoint(store).position >= 6 * CHUNK, 90, "six chunks archived")
        for node in voters:  # a scavenge on each node: its chunks outside the policy leave its disk
            with local.client(node["url"], timeout=30) as client:
                assert client.post("/admin/scavenge").status_code == 200
            wait_until(lambda node=node: _left(node["db"]), 90, f"{node['name']}'s chunk files to leave")
        for node in voters:
            boundary = archived_chk(node["db"])
            assert 3 * CHUNK <= boundary <= read_checkpoint(store).position  # only what the archive holds
            end = next(r["writer"] for r in local.status() if r["name"] == node["name"])
            assert end - boundary >= KEEP  # the policy's bytes stay on the disk

        for node in voters:  # every event, from every node, over HTTP
            assert _http_all(local, node["url"]) == written, node["name"]
        for preference in ("leader", "follower", "readonlyreplica"):  # and over gRPC
            assert _grpc_all(local, leader, preference) == written, preference
    finally:
        local.down(timeout=10, log=lambda *_: None)
