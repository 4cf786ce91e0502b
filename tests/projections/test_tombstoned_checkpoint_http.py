"""Issue 33 point 5 over HTTP, on a node restarted after a projection's checkpoint stream was
hard-deleted: every ``/projection/*`` answered 503 for 30+ s, reset 503, restarting the subsystem 500,
and ``$ce-`` streams were no longer written. Now only that projection is faulted; the others run,
reset runs it again, restarting the subsystem works."""

from __future__ import annotations

import json
import uuid

import httpx
from waiting import until

from evdb.clock import SystemClock
from evdb.node import Node
from evdb.options import load_options
from evdb.projections.service import checkpoint_stream

ADMIN = ("admin", "changeit")
EVENTS = "application/vnd.eventstore.events+json"


def _options(tmp_path):
    return load_options(
        [
            "--db", str(tmp_path / "db"), "--log", str(tmp_path / "log"), "--insecure",
            "--http-port", "0", "--stats-period-sec", "0", "--run-projections", "System",
            "--start-standard-projections",
        ],
        {},
    )  # fmt: skip


async def _append(client: httpx.AsyncClient, stream: str) -> None:
    body = json.dumps([{"eventId": str(uuid.uuid4()), "eventType": "Made", "data": {}}])
    r = await client.post(f"/streams/{stream}", content=body, headers={"Content-Type": EVENTS})
    assert r.status_code == 201, r.text


async def _status(client: httpx.AsyncClient, name: str) -> str:
    r = await client.get(f"/projection/{name}")
    assert r.status_code == 200, (r.status_code, r.text)
    return r.json()["status"]


def _links(node: Node, stream: str) -> int:
    db = node.db
    assert db is not None
    return db.stream_state(stream).last_event_number + 1


async def test_a_tombstoned_checkpoint_stream_faults_one_projection_over_http(tmp_path):
    async with (
        Node(_options(tmp_path), clock=SystemClock(), name="p1") as node,
        httpx.AsyncClient(base_url=node.http_url, auth=ADMIN, timeout=30) as client,
    ):
        await _append(client, "cart-1")
        await until(lambda: _links(node, "$ce-cart") == 1, "the first link", 30)
        r = await client.post("/projection/$by_category/command/disable")  # writes its checkpoint
        assert r.status_code == 200, r.text
        r = await client.delete(
            f"/streams/{checkpoint_stream('$by_category')}", headers={"Kurrent-HardDelete": "true"}
        )
        assert r.status_code == 204, r.text
        r = await client.post("/projection/$by_category/command/enable")
        assert r.status_code == 200, r.text
    async with (
        Node(_options(tmp_path), clock=SystemClock(), name="p2") as node,
        httpx.AsyncClient(base_url=node.http_url, auth=ADMIN, timeout=30) as client,
    ):
        await until(lambda: node.projections is not None and node.projections.active, "the projections", 30)
        assert (await _status(client, "$by_category")).startswith("Faulted")
        assert await _status(client, "$by_event_type") == "Running"
        await _append(client, "cart-2")
        await until(lambda: _links(node, "$et-Made") == 2, "the other projections to go on", 30)
        r = await client.post("/projection/$by_category/command/reset")
        assert r.status_code == 200, r.text
        await until(lambda: _links(node, "$ce-cart") >= 3, "the reset projection to write again", 30)
        assert await _status(client, "$by_category") == "Running"
        r = await client.post("/projections/restart")
        assert r.status_code == 200, r.text
        await _append(client, "cart-3")
        await until(lambda: _links(node, "$et-Made") == 3, "the projections after the restart", 30)
        assert await _status(client, "$by_category") == "Running"
