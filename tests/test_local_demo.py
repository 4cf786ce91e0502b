"""The local cluster's demo is sized for practice (issue 34): a new local cluster's nodes use 64 KiB
chunks unless told otherwise (an existing cluster's folders keep theirs), and ``evdb demo-load``
interleaves its streams a batch at a time, so its data spreads over many chunks whose weights differ."""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from functools import partial
from pathlib import Path

import httpx
import yaml

from evdb.clock import SystemClock
from evdb.cluster.launcher import LOCAL_CHUNK_SIZE, LocalCluster
from evdb.demo import BATCH, DEFAULT_EVENTS, write_demo_data
from evdb.node import Node
from tests.node.conftest import node_options

ADMIN = ("admin", "changeit")


def _chunk_sizes(cluster: LocalCluster) -> list[object]:
    return [yaml.safe_load(Path(n["config"]).read_text())["ChunkSize"] for n in cluster.info()["nodes"]]


def test_a_new_local_cluster_uses_practice_chunks_and_an_existing_one_keeps_its_own(tmp_path):
    assert LOCAL_CHUNK_SIZE == "64KiB"
    new = LocalCluster(tmp_path / "a")
    new.create(nodes=2)
    assert _chunk_sizes(new) == ["64KiB", "64KiB"]
    given = LocalCluster(tmp_path / "b")
    given.create(nodes=1, chunk_size="1MiB")
    assert _chunk_sizes(given) == ["1MiB"]
    option = LocalCluster(tmp_path / "c")
    option.create(nodes=1, options={"ChunkSize": "128KiB"})
    assert _chunk_sizes(option) in (["128KiB"], [128 * 1024])
    # a cluster made before (no ChunkSize in node.yaml: the node's 256 MiB) keeps it when options change
    old = LocalCluster(tmp_path / "d")
    old.create(nodes=1)
    config = Path(old.info()["nodes"][0]["config"])
    written = yaml.safe_load(config.read_text())
    del written["ChunkSize"]
    config.write_text(yaml.safe_dump(written, sort_keys=False))
    old.set_node_options({"StatsPeriodSec": "5"})
    assert "ChunkSize" not in yaml.safe_load(config.read_text())


async def test_the_demo_spreads_over_many_chunks_of_mixed_streams(tmp_path, clock):
    assert DEFAULT_EVENTS == 100_000 and BATCH == 100
    async with Node(
        node_options(tmp_path, "--chunk-size", LOCAL_CHUNK_SIZE, "--max-mem-table-size", "1000000"),
        clock=clock,
        name="demo",
    ) as node:
        with httpx.Client(base_url=node.http_url, auth=ADMIN, timeout=30) as client:
            report = await asyncio.to_thread(
                partial(write_demo_data, client, events=4000, clock=SystemClock())
            )
        assert report.events_written == 4000
        chunks = [f for f in os.listdir(node.options.db) if f.startswith("chunk-")]
        assert len(chunks) >= 15, chunks  # 4,000 events of ~320 bytes: ~19 chunks of 64 KiB
        async with httpx.AsyncClient(base_url=node.http_url, auth=ADMIN, timeout=30) as c:
            page = await c.get("/streams/$all/head/backward/400", headers={"Accept": "application/json"})
        streams = Counter(e["streamId"] for e in page.json()["entries"] if e["streamId"].startswith("demo-"))
        # the newest 400 events (about two chunks) come from several streams, not from one
        assert len(streams) >= 3, streams
