from __future__ import annotations

import asyncio
import json
import uuid

EVENTS = "application/vnd.kurrent.events+json"


async def wait_done(client, timeout=30):
    for _ in range(int(timeout * 100)):
        current = (await client.get("/admin/scavenge/current", headers={"Accept": "application/json"})).json()
        if current["scavengeId"] == "":
            return
        await asyncio.sleep(0.01)
    raise AssertionError("scavenge did not finish")


async def test_start_current_last_and_effect(client, anon):
    body = [{"eventId": str(uuid.uuid4()), "eventType": "E", "data": {"i": i}} for i in range(4)]
    await client.post("/streams/s", content=json.dumps(body), headers={"Content-Type": EVENTS})
    await client.post(
        "/streams/s/metadata",
        content=json.dumps({"$maxCount": 1}),
        headers={"Content-Type": "application/json"},
    )
    r = await client.post("/admin/scavenge", headers={"Accept": "application/json"})
    assert r.status_code == 200
    scavenge_id = r.json()["scavengeId"]
    await wait_done(client)
    last = (await client.get("/admin/scavenge/last", headers={"Accept": "application/json"})).json()
    assert last == {
        "scavengeId": scavenge_id,
        "scavengeLink": f"/admin/scavenge/{scavenge_id}",
        "scavengeResult": "Success",
    }
    feed = (await client.get("/streams/%24all/head/backward/100")).json()
    assert [(e["streamId"], e["eventNumber"]) for e in feed["entries"] if e["streamId"] == "s"] == [("s", 3)]
    text = await client.get("/admin/scavenge/current")
    assert text.text.startswith("ScavengeId:")
    assert (await anon.post("/admin/scavenge")).status_code == 401


async def test_validation(client):
    for query, message in [
        ("threads=0", "threads must be a 1 or above"),
        ("throttlePercent=0", "throttlePercent must be between 1 and 100 inclusive"),
        ("throttlePercent=101", "throttlePercent must be between 1 and 100 inclusive"),
        ("threads=2&throttlePercent=50", "throttlePercent must be 100 for a multi-threaded scavenge"),
        ("threshold=x", "threshold must be an integer"),
        ("syncOnly=maybe", "syncOnly must be a boolean"),
        ("startFromChunk=-1", "startFromChunk must be a positive integer"),
    ]:
        r = await client.post(f"/admin/scavenge?{query}")
        assert r.status_code == 400, query
        assert r.text == message


async def test_stop_unknown_is_404(client):
    r = await client.delete("/admin/scavenge/current")
    assert r.status_code == 404 and r.text == "Scavenge Id does not exist"
    r = await client.delete(f"/admin/scavenge/{uuid.uuid4()}")
    assert r.status_code == 404


async def test_ops_may_scavenge_plain_users_may_not(node, client):
    import httpx

    await client.post(
        "/users",
        content=json.dumps({"loginName": "bob", "fullName": "Bob", "groups": [], "password": "pw"}),
        headers={"Content-Type": "application/json"},
    )
    async with httpx.AsyncClient(base_url=node.http_url, auth=("bob", "pw")) as bob:
        assert (await bob.post("/admin/scavenge")).status_code == 401
    async with httpx.AsyncClient(base_url=node.http_url, auth=("ops", "changeit")) as ops:
        r = await ops.post("/admin/scavenge", headers={"Accept": "application/json"})
        assert r.status_code == 200
        await wait_done(ops)
