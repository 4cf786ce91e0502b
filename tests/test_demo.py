"""``evdb demo-load`` / ``evdb.demo.write_demo_data``: events across streams, soft and hard deletions
and ``$maxCount`` metadata, so that a scavenge has something to reclaim; the estimate it prints is
what a scavenge of an in-process node then reclaims. The CLI finds a local cluster's CA and
credentials by itself, and refuses bad input with exit code 2."""

from __future__ import annotations

import asyncio
import json
from functools import partial

import httpx
import pytest

from evdb.cli import main as evdb_main
from evdb.clock import SystemClock
from evdb.cluster.launcher import ClusterLaunchError, LocalCluster
from evdb.demo import MAX_COUNT, DemoReport, check_event_count, connection_settings, write_demo_data
from evdb.errors import InvalidInput
from evdb.node import Node
from evdb.scavenge.events import SCAVENGES_STREAM
from tests.node.conftest import node_options

ADMIN = ("admin", "changeit")


def _space_saved(node, scavenge_id: str) -> int:
    for link in node.db.read_stream_forward(SCAVENGES_STREAM, 0, 1000).events:
        number, _, stream = link.data.decode().partition("@")
        if stream != f"$scavenges-{scavenge_id}":
            continue
        event = node.db.read_stream_forward(stream, int(number), 1).events[0]
        if event.event_type == "$scavengeCompleted":
            return int(json.loads(event.data)["spaceSaved"])
    return -1


async def test_a_scavenge_reclaims_what_the_demo_says(tmp_path, clock):
    async with Node(
        node_options(tmp_path, "--chunk-size", "1MiB", "--max-mem-table-size", "1000000"),
        clock=clock,
        name="demo",
    ) as node:
        seen: list[tuple[int, int]] = []
        with httpx.Client(base_url=node.http_url, auth=ADMIN, timeout=30) as client:
            report = await asyncio.to_thread(
                partial(write_demo_data, client, events=600, clock=SystemClock()),
                progress=lambda done, total: seen.append((done, total)),
            )
        assert isinstance(report, DemoReport)
        assert report.events_written == 600 and seen[-1] == (600, 600)
        assert len(report.kept) == 3 and len(report.max_count) == 3
        assert len(report.soft_deleted) == 2 and len(report.hard_deleted) == 2
        # 60 events a stream: all of the 4 deleted streams' and 50 of each $maxCount stream's
        assert report.reclaimable_events == 4 * 60 + 3 * (60 - MAX_COUNT)
        assert 0 < report.reclaimable_bytes < report.bytes_written
        text = "\n".join(report.summary())
        assert "600 events" in text and "a scavenge should reclaim about" in text
        async with httpx.AsyncClient(base_url=node.http_url, auth=ADMIN, timeout=30) as c:
            json_accept = {"Accept": "application/json"}
            assert (await c.get(f"/streams/{report.soft_deleted[0]}", headers=json_accept)).status_code == 404
            assert (await c.get(f"/streams/{report.hard_deleted[0]}", headers=json_accept)).status_code == 410
            page = await c.get(f"/streams/{report.max_count[0]}/0/forward/100", headers=json_accept)
            assert len(page.json()["entries"]) == MAX_COUNT
            page = await c.get(f"/streams/{report.kept[0]}/0/forward/100", headers=json_accept)
            assert len(page.json()["entries"]) == 60
            started = await c.post("/admin/scavenge", headers=json_accept)
            assert started.status_code == 200, started.text
            scavenge_id = started.json()["scavengeId"]

            async def finished():
                last = (await c.get("/admin/scavenge/last", headers=json_accept)).json()
                return last["scavengeId"] == scavenge_id and last["scavengeResult"] != "InProgress" and last

            deadline = asyncio.get_running_loop().time() + 30
            while not (last := await finished()):
                assert asyncio.get_running_loop().time() < deadline, "the scavenge did not finish"
                await asyncio.sleep(0.05)
        assert last["scavengeResult"] == "Success"
        saved = _space_saved(node, scavenge_id)
        # the estimate is the removed records' frames; the chunk also loses nothing else of note
        assert report.reclaimable_bytes * 0.9 <= saved <= report.reclaimable_bytes * 1.1, (saved, report)


def test_bad_input_is_refused(capsys):
    for bad in (0, 9, -5, 1_000_001, True, "100"):
        with pytest.raises(InvalidInput):
            check_event_count(bad)
    assert check_event_count(10) == 10
    for argv in (["--events", "5"], ["--url", "ftp://127.0.0.1:2113"], ["--url", "127.0.0.1:2113"]):
        assert evdb_main(["demo-load", *argv]) == 2, argv
        assert capsys.readouterr().err.startswith("evdb demo-load: ")


def test_the_local_clusters_ca_and_credentials_are_found(tmp_path):
    cluster = LocalCluster(tmp_path / "tls")
    info = cluster.create(nodes=1)  # TLS, a generated CA; not started
    url = info["nodes"][0]["url"]
    settings = connection_settings(url, data_dir=cluster.data_dir)
    assert (settings.url, settings.verify, settings.user, settings.password) == (
        url,
        info["ca"],
        "admin",
        "changeit",
    )
    assert connection_settings(url + "/", data_dir=cluster.data_dir).verify == info["ca"]
    # given ones win; a node of no local cluster is verified with the system's roots
    assert connection_settings(url, data_dir=cluster.data_dir, ca="/my/ca.crt").verify == "/my/ca.crt"
    other = connection_settings("https://db.example.com:2113", data_dir=cluster.data_dir)
    assert other.verify is True and other.user == "admin"
    assert connection_settings(url, data_dir=tmp_path / "none", insecure_skip_verify=True).verify is False
    with pytest.raises(ClusterLaunchError, match=r"no node of the local cluster .* is running"):
        connection_settings(None, data_dir=cluster.data_dir)  # no --url: a running node of the cluster


async def test_the_command_writes_and_prints_the_estimate(tmp_path, clock, capsys):
    async with Node(
        node_options(tmp_path, "--chunk-size", "1MiB", "--max-mem-table-size", "1000000"),
        clock=clock,
        name="demo",
    ) as node:
        argv = ["demo-load", "--url", node.http_url, "--events", "50", "--data", str(tmp_path / "none")]
        assert await asyncio.to_thread(evdb_main, argv) == 0
        out = capsys.readouterr().out
        assert "Wrote 50 events" in out and "a scavenge should reclaim about" in out
