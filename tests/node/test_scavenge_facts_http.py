"""The reference's scavenge facts, end to end over HTTP on a real node (threshold 0, merging on by
default: the surviving events are what matters, wherever they sit)."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest

EVENTS = "application/vnd.kurrent.events+json"
TOMBSTONE = 9223372036854775807


async def append(client, stream, count, **headers):
    body = [{"eventId": str(uuid.uuid4()), "eventType": "E", "data": {"i": i}} for i in range(count)]
    r = await client.post(
        f"/streams/{stream}", content=json.dumps(body), headers={"Content-Type": EVENTS, **headers}
    )
    assert r.status_code == 201, r.text


async def metadata(client, stream, value):
    r = await client.post(f"/streams/{stream}/metadata", json=value)
    assert r.status_code == 201, r.text


async def scavenge(client, **params) -> dict:
    r = await client.post("/admin/scavenge", params=params, headers={"Accept": "application/json"})
    assert r.status_code == 200, r.text
    scavenge_id = r.json()["scavengeId"]
    for _ in range(3000):
        current = (await client.get("/admin/scavenge/current", headers={"Accept": "application/json"})).json()
        if current["scavengeId"] != scavenge_id:
            break
        await asyncio.sleep(0.01)
    last = (await client.get("/admin/scavenge/last", headers={"Accept": "application/json"})).json()
    assert last["scavengeId"] == scavenge_id and last["scavengeResult"] == "Success", last
    return (await client.get("/admin/scavenge/progress")).json()["last"]


async def survivors(client) -> list[tuple[str, int]]:
    feed = (await client.get("/streams/%24all/" + "0" * 32 + "/forward/4096")).json()
    out = []
    for e in reversed(feed["entries"]):  # pages list newest first
        s = e["streamId"]
        if s.startswith("$$$") or (s.startswith("$") and not s.startswith("$$")):
            continue
        out.append((s, e["eventNumber"]))
    return out


async def test_max_count_1(client):
    await append(client, "s", 4)
    await metadata(client, "s", {"$maxCount": 1})
    await scavenge(client)
    assert await survivors(client) == [("s", 3), ("$$s", 0)]


async def test_truncate_before(client):
    await append(client, "s", 4)
    await metadata(client, "s", {"$tb": 3})
    await append(client, "t", 2)
    await metadata(client, "t", {"$tb": 4})
    await scavenge(client)
    assert await survivors(client) == [("s", 3), ("$$s", 0), ("t", 1), ("$$t", 0)]


async def test_max_age(client, clock):
    await append(client, "s", 2)
    clock.advance(120)
    await append(client, "s", 2)
    await metadata(client, "s", {"$maxAge": 60})
    await scavenge(client)
    assert await survivors(client) == [("s", 2), ("s", 3), ("$$s", 0)]


async def test_tombstone_leaves_only_the_tombstone(client):
    await append(client, "s", 1)
    await metadata(client, "s", {"$maxCount": 3})
    assert (await client.delete("/streams/s", headers={"Kurrent-HardDelete": "true"})).status_code == 204
    await scavenge(client)
    assert await survivors(client) == [("s", TOMBSTONE)]


async def test_soft_delete_then_recreate(client):
    await append(client, "s", 3)
    assert (await client.delete("/streams/s")).status_code == 204
    await append(client, "s", 1)
    await scavenge(client)
    assert await survivors(client) == [("s", 3), ("$$s", 1)]
    feed = (await client.get("/streams/s")).json()
    assert [e["eventNumber"] for e in feed["entries"]] == [3]


async def test_two_metadata_records_keep_the_newer(client):
    await append(client, "s", 1)
    await metadata(client, "s", {"$maxCount": 10})
    await metadata(client, "s", {"$maxCount": 20})
    await scavenge(client)
    assert await survivors(client) == [("s", 0), ("$$s", 1)]


@pytest.mark.parametrize(("threshold", "executed"), [(-1, 3), (0, 2), (2, 1)])
async def test_threshold(unmerged_client, threshold, executed):
    client = unmerged_client
    # three chunks with weights 2, 4 and 0: a scavenge that executes nothing completes each chunk
    await append(client, "a", 2)
    await scavenge(client, threshold=1_000_000)
    await append(client, "b", 3)
    await scavenge(client, threshold=1_000_000)
    await append(client, "c", 1)
    await metadata(client, "a", {"$maxCount": 1})
    await metadata(client, "b", {"$maxCount": 1})
    progress = await scavenge(client, threshold=threshold)
    weights = {int(k): v for k, v in progress["chunkWeights"].items()}
    assert sorted(w for w in weights.values() if w) == [2, 4]
    run = [c for c in progress["chunks"] if not c["merged"]]
    assert sum(1 for c in run if c["executed"]) == executed
    left = await survivors(client)
    assert ("b", 0) not in left and ("b", 2) in left
    assert (("a", 0) in left) == (threshold == 2)  # the light chunk stays untouched above its weight


async def test_a_finished_runs_elapsed_time_stops_at_its_end(client, clock):
    await append(client, "s", 2)
    first = await scavenge(client)
    clock.advance(300)
    again = (await client.get("/admin/scavenge/progress")).json()["last"]
    assert again["result"] == "Success"
    assert again["elapsedSeconds"] == first["elapsedSeconds"] < 300
