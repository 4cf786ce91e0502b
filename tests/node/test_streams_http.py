from __future__ import annotations

import asyncio
import json
import uuid

EVENTS = "application/vnd.kurrent.events+json"


def events(*types: str, data=None) -> list[dict]:
    return [{"eventId": str(uuid.uuid4()), "eventType": t, "data": data or {"t": t}} for t in types]


async def post(client, stream, body, **headers):
    return await client.post(
        f"/streams/{stream}", content=json.dumps(body), headers={"Content-Type": EVENTS, **headers}
    )


async def test_append_and_read(client):
    r = await post(client, "orders-1", events("A", "B"))
    assert r.status_code == 201
    assert r.headers["Location"].endswith("/streams/orders-1/0")
    r = await client.get("/streams/orders-1", params={"embed": "body"})
    assert r.status_code == 200
    feed = r.json()
    assert [e["eventType"] for e in feed["entries"]] == ["B", "A"]
    assert feed["entries"][0]["data"] == {"t": "B"} and feed["entries"][0]["isRedacted"] is False
    relations = {link["relation"] for link in feed["links"]}
    assert {"self", "first", "last", "previous", "metadata"} <= relations
    r = await client.get("/streams/orders-1/0/forward/20", params={"embed": "body"})
    assert [e["eventNumber"] for e in r.json()["entries"]] == [1, 0]
    r = await client.get("/streams/orders-1/1", headers={"Accept": "application/json"})
    assert r.json() == {"t": "B"}


async def test_legacy_headers_and_content_type(client):
    body = events("A")
    r = await client.post(
        "/streams/legacy",
        content=json.dumps(body),
        headers={"Content-Type": "application/vnd.eventstore.events+json", "ES-ExpectedVersion": "-1"},
    )
    assert r.status_code == 201


async def test_wrong_expected_version_is_400_with_current_version(client):
    await post(client, "s", events("A"))
    r = await post(client, "s", events("B"), **{"Kurrent-ExpectedVersion": "5"})
    assert r.status_code == 400
    assert r.headers["Kurrent-CurrentVersion"] == "0"


async def test_idempotent_append_over_http(client):
    body = events("A")
    await post(client, "s", body, **{"Kurrent-ExpectedVersion": "-1"})
    r = await post(client, "s", body, **{"Kurrent-ExpectedVersion": "-1"})
    assert r.status_code == 201
    r = await client.get("/streams/s")
    assert len(r.json()["entries"]) == 1


async def test_missing_deleted_and_tombstoned(client):
    assert (await client.get("/streams/nope")).status_code == 404
    await post(client, "soft", events("A"))
    assert (await client.delete("/streams/soft")).status_code == 204
    assert (await client.get("/streams/soft")).status_code == 404
    await post(client, "hard", events("A"))
    assert (await client.delete("/streams/hard", headers={"Kurrent-HardDelete": "true"})).status_code == 204
    assert (await client.get("/streams/hard")).status_code == 410
    assert (await post(client, "hard", events("B"))).status_code == 410


async def test_metadata_max_count(client):
    await post(client, "m", events("A", "B", "C"))
    r = await client.post(
        "/streams/m/metadata",
        content=json.dumps({"$maxCount": 1}),
        headers={"Content-Type": "application/json"},
    )
    assert r.status_code == 201
    assert (await client.get("/streams/m/metadata")).json() == {"$maxCount": 1}
    feed = (await client.get("/streams/m")).json()
    assert [e["eventNumber"] for e in feed["entries"]] == [2]


async def test_all_stream_by_position(client):
    await post(client, "x", events("A"))
    feed = (await client.get("/streams/$all/head/backward/5")).json()
    assert feed["entries"][0]["streamId"] == "x"
    start = "0" * 32
    feed = (await client.get(f"/streams/%24all/{start}/forward/100")).json()
    assert any(e["streamId"] == "$epochs" for e in feed["entries"])  # the system event at the start


async def test_bad_input(client):
    r = await client.post("/streams/s", content="not json", headers={"Content-Type": EVENTS})
    assert r.status_code == 400
    r = await client.post("/streams/s", content="[]", headers={"Content-Type": "text/html"})
    assert r.status_code == 415
    r = await client.post(
        "/streams/s", content=json.dumps([{"eventType": "A"}]), headers={"Content-Type": EVENTS}
    )
    assert r.status_code == 400 and "eventId" in r.text
    r = await client.get("/streams/s/0/forward/0")
    assert r.status_code == 400
    r = await post(client, "s", events("A"), **{"Kurrent-ExpectedVersion": "abc"})
    assert r.status_code == 400


async def test_authentication(anon, node):
    r = await anon.get("/streams/s")
    assert r.status_code == 401
    r = await anon.get("/streams/s", auth=("admin", "wrong"))
    assert r.status_code == 401 and r.headers["WWW-Authenticate"].startswith("Basic")
    r = await anon.get("/info")
    assert r.status_code == 200 and r.json()["esVersion"]
    r = await anon.post("/admin/shutdown")
    assert r.status_code == 401


async def test_sse_subscription(client):
    await post(client, "live", events("A"))
    received = []

    async def listen():
        async with client.stream("GET", "/subscriptions/streams/live") as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            async for line in response.aiter_lines():
                if line.startswith("data:"):
                    received.append(json.loads(line[5:]))
                    if len(received) == 3:
                        return

    task = asyncio.create_task(listen())
    while len(received) < 2:  # event A and caught-up
        await asyncio.sleep(0.01)
    await post(client, "live", events("B"))
    await asyncio.wait_for(task, 10)
    assert received[0]["eventType"] == "A" and "position" in received[1] and received[2]["eventType"] == "B"


async def test_info_gossip_metrics_openapi(client):
    gossip = (await client.get("/gossip")).json()
    assert gossip["members"][0]["state"] == "Leader" and gossip["members"][0]["isAlive"]
    metrics = (await client.get("/metrics")).text
    assert "kurrentdb_statuses" in metrics and "evdb_events_written" in metrics
    spec = (await client.get("/openapi.json")).json()
    assert "/admin/scavenge" in spec["paths"] and "/streams/{stream}" in spec["paths"]


async def test_odd_stream_names_and_numbers(client):
    # control characters in a stream name: the Location header is percent-encoded, not broken
    r = await post(client, "%1F", events("A"))
    assert r.status_code == 201 and "%1F" in r.headers["Location"]
    r = await client.post("/streams/%1F/metadata", json={})
    assert r.status_code == 201
    # "³" is a digit to str.isdigit(), not a number
    assert (await client.get("/streams/x/%C2%B3")).status_code == 400
    assert (await client.get("/streams/x/%C2%B3/forward/5")).status_code == 400
