"""Spec rule 5: a backup seeds a brand-new cluster. One node's backup is restored into the folders of
every node of a new 3-node cluster (real processes); the cluster elects a leader, serves every event
of the backup from every node, and takes new writes."""

from __future__ import annotations

import asyncio
import time
import uuid

import httpx
import pytest

from evdb.backup import restore_backup, run_backup, verify_backup
from evdb.cluster.launcher import LocalCluster
from evdb.node import Node
from evdb.options import load_options
from evdb.streams import NewEvent

pytestmark = pytest.mark.slow

STREAMS = [f"seed-{i}" for i in range(6)]


async def _source_node_with_events(root) -> int:
    options = load_options(
        [
            *("--db", str(root / "db"), "--log", str(root / "log"), "--insecure", "--http-port", "0"),
            *("--chunk-size", "65536", "--stats-period-sec", "0"),
        ],
        {},
    )
    async with Node(options, name="source") as node:
        for i in range(300):
            stream = STREAMS[i % len(STREAMS)]
            await asyncio.to_thread(
                node.db.append, stream, [NewEvent("Seeded", b'{"i": %d}' % i, is_json=True)]
            )
        return node.db.committed_position


def _read_all(client: httpx.Client, stream: str) -> list[str]:
    ids: list[str] = []
    while True:
        r = client.get(
            f"/streams/{stream}/{len(ids)}/forward/100?embed=body", headers={"Accept": "application/json"}
        )
        if r.status_code == 404:
            return ids
        r.raise_for_status()
        entries = sorted(r.json()["entries"], key=lambda e: e["eventNumber"])
        ids += [e["eventId"] for e in entries]
        if len(entries) < 100:
            return ids


def test_one_backup_seeds_every_node_of_a_new_cluster(tmp_path):
    source = tmp_path / "source"
    asyncio.run(_source_node_with_events(source))
    backup = str(tmp_path / "backup")
    run_backup(str(source / "db"), None, backup)
    assert verify_backup(backup).ok

    cluster = LocalCluster(tmp_path / "cluster")
    info = cluster.create(nodes=3, insecure=True, chunk_size="64KiB")
    for node in info["nodes"]:
        result = restore_backup(backup, node["db"])
        assert result.files_copied > 0
    try:
        cluster.up(timeout=60, log=lambda *_: None)
        leader_url = cluster.wait_for_leader(60)
        with cluster.client(leader_url) as leader:
            expected = {stream: _read_all(leader, stream) for stream in STREAMS}
            assert sum(len(ids) for ids in expected.values()) == 300
            new_id = str(uuid.uuid4())
            r = leader.post(
                "/streams/seed-0",
                json={"after": True},
                headers={"Kurrent-EventType": "AfterSeeding", "Kurrent-EventId": new_id},
            )
            assert r.status_code == 201, r.text
        expected["seed-0"].append(new_id)
        for node in cluster.info()["nodes"]:  # followers may need a moment for the last write
            with cluster.client(node["url"]) as c:
                deadline = time.monotonic() + 10
                while (held := {stream: _read_all(c, stream) for stream in STREAMS}) != expected:
                    assert time.monotonic() < deadline, (node["name"], held, expected)
                    time.sleep(0.1)
    finally:
        cluster.down(timeout=10, log=lambda *_: None)
