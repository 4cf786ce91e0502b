"""A chunk skipped because its weight is below the threshold keeps its weight until it is executed:
a later scavenge that finds nothing new still executes it when that stored weight passes its own
threshold (spec: "0 scavenges every chunk that has something to remove"; a positive threshold once
must not exempt data from removal for good)."""

from __future__ import annotations

import asyncio
import json
import os
import uuid

import httpx
import pytest

from evdb.node import Node
from evdb.streams import NewEvent
from tests.node.conftest import ADMIN, node_options

EVENTS = "application/vnd.kurrent.events+json"


def ev(marker: str) -> NewEvent:
    return NewEvent.json("E", {"marker": marker})


def chunk_bytes(folder) -> bytes:
    return b"".join(
        (folder / name).read_bytes() for name in sorted(os.listdir(folder)) if name.startswith("chunk-")
    )


# -- unit level: the scavenge service on a database ------------------------------------------------------


@pytest.mark.parametrize("second", [0, 1])
def test_a_skipped_chunk_is_executed_by_a_later_run_with_a_lower_threshold(harness, second):
    gone = uuid.uuid4().hex
    harness.db.append("s", [ev(gone), ev("kept")])
    harness.db.set_stream_metadata("s", {"$maxCount": 1})
    assert harness.scavenge(threshold=1000)[1] == "Success"
    first = harness.service.last_progress()
    assert first.weights == {0: 2.0}
    assert [(c.start_number, c.executed) for c in first.chunks] == [(0, False)]
    assert harness.service.state.weights() == {0: 2.0}  # kept until chunk 0 is executed
    assert ("s", 0) in harness.survivors()

    assert harness.scavenge(threshold=second)[1] == "Success"
    again = harness.service.last_progress()
    assert again.weights.get(0) == 2.0
    assert (0, True) in [(c.start_number, c.executed) for c in again.chunks]
    assert ("s", 0) not in harness.survivors() and ("s", 1) in harness.survivors()
    assert gone.encode() not in chunk_bytes(harness.path / "db")
    assert harness.service.state.weights().get(0, 0) == 0  # executed: its weight starts again from 0


def test_skipped_weights_add_up_across_runs_until_they_pass_the_threshold(harness):
    """Two removals found by two runs (2 + 2) pass a threshold of 3 that each alone did not."""
    db = harness.db
    db.append("a", [ev("a0"), ev("a1")])
    db.append("b", [ev("b0"), ev("b1")])
    db.set_stream_metadata("a", {"$maxCount": 1})
    assert harness.scavenge(threshold=3)[1] == "Success"
    assert harness.service.state.weights() == {0: 2.0}
    db.set_stream_metadata("b", {"$maxCount": 1})
    assert harness.scavenge(threshold=3)[1] == "Success"
    progress = harness.service.last_progress()
    assert progress.weights[0] == 4.0
    assert (0, True) in [(c.start_number, c.executed) for c in progress.chunks]
    survivors = harness.survivors()
    assert ("a", 0) not in survivors and ("b", 0) not in survivors
    assert ("a", 1) in survivors and ("b", 1) in survivors


def test_max_age_weights_are_counted_once_by_the_runs_that_skip_the_chunk(harness, clock):
    """$maxAge streams are calculated by every run: the expired records are weighed by the run that
    moves the discard point past them (their index entries then go), never again by the runs after
    it that skip the chunk too."""
    harness.db.append("a", [ev("a0"), ev("a1")])
    clock.advance(120)
    harness.db.append("a", [ev("a2"), ev("a3")])
    harness.db.set_stream_metadata("a", {"$maxAge": 60})
    for _ in range(3):
        assert harness.scavenge(threshold=1000)[1] == "Success"
        assert sum(harness.service.last_progress().weights.values()) == 4
    assert harness.scavenge(threshold=3)[1] == "Success"
    assert ("a", 0) not in harness.survivors()


def test_a_stopped_execution_keeps_the_weights_of_the_chunks_it_did_not_reach(harness):
    db = harness.db
    db.append("a", [ev("a0"), ev("a1")])
    harness.complete_chunk()
    db.append("b", [ev("b0"), ev("b1")])
    db.set_stream_metadata("a", {"$maxCount": 1})
    db.set_stream_metadata("b", {"$maxCount": 1})
    assert harness.scavenge(threshold=1000)[1] == "Success"
    assert harness.service.state.weights() == {0: 2.0, 1: 2.0}
    assert harness.scavenge()[1] == "Success"
    assert harness.service.state.weights() == {}
    survivors = harness.survivors()
    assert ("a", 0) not in survivors and ("b", 0) not in survivors


# -- end to end: the HTTP route of a real node, merging on and off ----------------------------------------


async def _scavenge(client, threshold: int) -> dict:
    r = await client.post(
        "/admin/scavenge", params={"threshold": threshold}, headers={"Accept": "application/json"}
    )
    assert r.status_code == 200, r.text
    scavenge_id = r.json()["scavengeId"]
    for _ in range(6000):
        current = (await client.get("/admin/scavenge/current", headers={"Accept": "application/json"})).json()
        if current["scavengeId"] != scavenge_id:
            break
        await asyncio.sleep(0.01)
    last = (await client.get("/admin/scavenge/last", headers={"Accept": "application/json"})).json()
    assert last["scavengeId"] == scavenge_id and last["scavengeResult"] == "Success", last
    return (await client.get("/admin/scavenge/progress")).json()["last"]


async def _in_all(client, stream: str) -> list[int]:
    feed = (await client.get("/streams/%24all/" + "0" * 32 + "/forward/4096")).json()
    return sorted(e["eventNumber"] for e in feed["entries"] if e["streamId"] == stream)


@pytest.mark.parametrize("merging", [True, False])
@pytest.mark.parametrize("second", [0, 1])
async def test_over_http_a_skipped_chunk_is_scavenged_by_the_next_run(tmp_path, clock, merging, second):
    extra = () if merging else ("--disable-scavenge-merging",)
    gone = uuid.uuid4().hex
    async with (
        Node(node_options(tmp_path, *extra), clock=clock, name="weights") as node,
        httpx.AsyncClient(base_url=node.http_url, auth=ADMIN, timeout=30) as client,
    ):
        body = [
            {"eventId": str(uuid.uuid4()), "eventType": "E", "data": {"marker": marker}}
            for marker in (gone, "kept")
        ]
        r = await client.post("/streams/s", content=json.dumps(body), headers={"Content-Type": EVENTS})
        assert r.status_code == 201, r.text
        r = await client.post("/streams/s/metadata", json={"$maxCount": 1})
        assert r.status_code == 201, r.text

        await _scavenge(client, 1000)  # weight 2: rightly skipped
        assert await _in_all(client, "s") == [0, 1]
        assert gone.encode() in chunk_bytes(tmp_path / "db")

        progress = await _scavenge(client, second)
        assert any(w >= 2 for w in progress["chunkWeights"].values()), progress["chunkWeights"]
        assert await _in_all(client, "s") == [1]
        assert gone.encode() not in chunk_bytes(tmp_path / "db")
