"""The endpoints on a real in-process node: roles and status codes, bodies, CRON validation, a cycle
driven through the node's own scavenge endpoints, and the node token those calls carry."""

from __future__ import annotations

import asyncio
import json
import time

import httpx

from evdb.autoscavenge.state import CONFIGURATION_STREAM, EVENTS_STREAM
from evdb.free_port import free_port
from evdb.http import autoscavenge as autoscavenge_http
from evdb.node import Node
from evdb.scavenge.events import SCAVENGES_STREAM
from tests.autoscavenge.conftest import ADMIN, OPS, log_messages, options_for, time_moves

COMMANDS = ("/auto-scavenge/pause", "/auto-scavenge/resume", "/auto-scavenge/configure")
READS = ("/auto-scavenge/enabled", "/auto-scavenge/status", "/auto-scavenge/progress")


async def test_roles_and_status_codes(clients):
    for path in READS:
        r = await clients["anonymous"].get(path)
        assert r.status_code == 401, path
        assert r.headers["WWW-Authenticate"].startswith("Basic ")
        for who in ("user", "ops", "admin"):
            assert (await clients[who].get(path)).status_code == 200, (who, path)
    for path in COMMANDS:
        body = {"schedule": "0 6 * * 6"} if path.endswith("configure") else None
        assert (await clients["anonymous"].post(path, json=body)).status_code == 401, path
        forbidden = await clients["user"].post(path, json=body)
        assert forbidden.status_code == 403, path
        for who in ("ops", "admin"):
            assert (await clients[who].post(path, json=body)).status_code == 200, (who, path)
    wrong = httpx.AsyncClient(base_url=str(clients["admin"].base_url), auth=("admin", "nope"))
    async with wrong:
        assert (await wrong.get("/auto-scavenge/status")).status_code == 401


async def test_bodies_have_kurrentdbs_shapes(clients, licensed_node):
    admin = clients["admin"]
    enabled = await admin.get("/auto-scavenge/enabled")
    assert enabled.json() == {"enabled": True}
    assert enabled.headers["Content-Type"].startswith("application/json")
    status = await admin.get("/auto-scavenge/status")
    assert status.json() == {"state": "NotConfigured", "schedule": None, "timeUntilNextCycle": None}
    r = await admin.post("/auto-scavenge/configure", json={"schedule": "0 6 * * 6"})
    assert (r.status_code, r.json()) == (200, {})
    status = (await admin.get("/auto-scavenge/status")).json()
    # the ManualClock starts on 2023-11-14 22:13:20 UTC, a Tuesday
    assert status == {"state": "Waiting", "schedule": "0 6 * * 6", "timeUntilNextCycle": "3.07:46:40"}
    r = await admin.post("/auto-scavenge/pause")
    assert (r.status_code, r.json()) == (200, {})
    assert (await admin.get("/auto-scavenge/status")).json()["state"] == "Paused"
    r = await admin.post("/auto-scavenge/resume")
    assert (r.status_code, r.json()) == (200, {})
    assert (await admin.get("/auto-scavenge/status")).json()["state"] == "Waiting"
    # the configuration is an event of $auto-scavenge-configuration, the pause/resume of $auto-scavenges
    db = licensed_node.db
    (config,) = db.read_stream_forward(CONFIGURATION_STREAM).events
    assert config.event_type == "$configuration-updated"
    assert json.loads(config.data) == {"schedule": "0 6 * * 6", "updatedAt": "2023-11-14T22:13:20Z"}
    assert [e.event_type for e in db.read_stream_forward(EVENTS_STREAM).events] == ["$paused", "$resumed"]
    spec = (await admin.get("/openapi.json")).json()
    assert {"/auto-scavenge/status", "/auto-scavenge/configure"} <= set(spec["paths"])


BAD_CONFIGURE = [
    (b'{"schedule": "61 * * * *"}', "application/json", "Invalid CRON expression"),
    (b'{"schedule": "* * * *"}', "application/json", "Invalid CRON expression"),
    (b'{"schedule": "0 0 * * * *"}', "application/json", "Invalid CRON expression"),  # seconds: option off
    (b'{"schedule": "@daily"}', "application/json", "Invalid CRON expression"),
    (b'{"schedule": "0 0 L * *"}', "application/json", "Invalid CRON expression"),
    (b'{"schedule": "H * * * *"}', "application/json", "Invalid CRON expression"),
    (b'{"schedule": ""}', "application/json", "Invalid CRON expression"),
    (b'{"schedule": 5}', "application/json", "CRON expression can only be a string"),
    (b'{"schedule": null}', "application/json", "CRON expression can only be a string"),
    (b'{"cron": "* * * * *"}', "application/json", "Invalid payload"),
    (b'["* * * * *"]', "application/json", "Invalid payload"),
    (b"{not json", "application/json", "Invalid payload"),
    (b"", "application/json", "Invalid payload"),
    (b'{"schedule": "* * * * *"}', "text/plain", "Invalid payload"),
]


async def test_configure_refuses_bad_schedules_and_payloads(clients):
    for body, content_type, answer in BAD_CONFIGURE:
        r = await clients["ops"].post(
            "/auto-scavenge/configure", content=body, headers={"Content-Type": content_type}
        )
        assert r.status_code == 400, body
        assert r.headers["Content-Type"].startswith("application/json")
        assert r.json() == answer, body
    status = (await clients["ops"].get("/auto-scavenge/status")).json()
    assert status["state"] == "NotConfigured"


async def test_schedules_are_shown_in_kurrentdb_s_normal_form(clients):
    """KurrentDB keeps and shows NCrontab's form of a schedule: values listed, names as numbers."""
    for schedule, normal in (
        ("0 6 * * SAT", "0 6 * * 6"),
        ("*/15 1-5 * JAN-MAR MON,WED", "0,15,30,45 1-5 * 1-3 1,3"),
        ("0 0 1 */2 *", "0 0 1 1,3,5,7,9,11 *"),
        ("*/15 * * * *", "0,15,30,45 * * * *"),
        ("0 3 * * MON", "0 3 * * 1"),
    ):
        r = await clients["ops"].post("/auto-scavenge/configure", json={"Schedule": schedule})
        assert r.status_code == 200 and r.json() == {}, (schedule, r.text)
        assert (await clients["ops"].get("/auto-scavenge/status")).json()["schedule"] == normal


async def test_a_day_of_week_7_is_refused_as_in_kurrentdb(clients):
    for schedule in ("0 6 * * 7", "0 6 * * 0-7", "0 6 * * @daily"):
        r = await clients["ops"].post("/auto-scavenge/configure", json={"schedule": schedule})
        assert r.status_code == 400 and r.json() == "Invalid CRON expression", schedule


async def _wait_for(condition, what: str, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = await condition()
        if value:
            return value
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


async def test_a_cycle_on_a_single_node_runs_its_scavenge_through_http(
    licensed_node, clients, clock, tmp_path
):
    admin = clients["admin"]
    assert (await admin.post("/auto-scavenge/configure", json={"schedule": "* * * * *"})).status_code == 200
    service = licensed_node.auto_scavenge
    await service.tick()
    assert (await admin.get("/auto-scavenge/status")).json()["state"] == "Waiting"
    clock.advance(60)

    async def finished():
        await service.tick()
        progress = (await admin.get("/auto-scavenge/progress")).json()
        return progress["lastCompletedAt"] is not None and progress

    await _wait_for(finished, "the cluster scavenge to complete")
    status = (await admin.get("/auto-scavenge/status")).json()
    assert status["state"] == "Waiting" and status["timeUntilNextCycle"] == "00:00:40"
    events = licensed_node.db.read_stream_forward(EVENTS_STREAM).events
    assert [e.event_type for e in events] == [
        "$cluster-scavenge-started",
        "$node-designated",
        "$node-scavenge-started",
        "$node-scavenge-completed",
        "$cluster-scavenge-completed",
    ]
    started = json.loads(events[2].data)
    assert json.loads(events[3].data)["result"] == "Success"
    # the node's own scavenge ran, with its usual streams
    links = licensed_node.db.read_stream_forward(SCAVENGES_STREAM).events
    assert any(started["scavengeId"] in link.data.decode() for link in links)
    messages = log_messages(tmp_path, "auto")
    assert any("Request scavenging because /admin/scavenge request has been received." in m for m in messages)
    assert any(m.startswith("Cluster scavenge") and "completed" in m for m in messages)


async def test_the_node_token_is_checked(licensed_node, clients):
    async with httpx.AsyncClient(base_url=licensed_node.http_url) as c:
        r = await c.get("/admin/scavenge/last", headers={"Authorization": "EvdbNode not-the-token"})
        assert r.status_code == 401
    await licensed_node.auto_scavenge.tick()  # the leader writes the token
    token = (await licensed_node.auto_scavenge._authorization()).split(" ", 1)[1]
    async with httpx.AsyncClient(base_url=licensed_node.http_url) as c:
        r = await c.get("/admin/scavenge/last", headers={"Authorization": f"EvdbNode {token}"})
        assert r.status_code == 200
    # only admins can read it
    r = await clients["ops"].get("/streams/$auto-scavenge-node-token")
    assert r.status_code in (401, 403)


async def test_with_no_leader_a_signed_in_caller_is_not_judged_and_told_to_retry(
    tmp_path, clock, monkeypatch
):
    """A member that never heard from a leader holds no sign-in lease (docs/cluster.md, sign-in leases):
    it cannot know whether a credential was revoked, so it judges none: 503 with Retry-After, before
    any route (KurrentDB's 500 problem "No leader node was found in the cluster" is the answer a
    member still under its lease gives: tests/autoscavenge/test_cycle_now.py and the forwarder's
    tests)."""
    monkeypatch.setattr(autoscavenge_http, "LEADER_WAIT_SECONDS", 0.3)  # no election will end: no wait
    async with Node(options_for(tmp_path, license_at=clock.time()), clock=clock, name="first"):
        pass  # a single node: it leads and creates the default users
    seeds = f"127.0.0.1:{free_port()},127.0.0.1:{free_port()}"
    options = options_for(tmp_path, "--cluster-size", "3", "--gossip-seed", seeds, license_at=clock.time())
    async with Node(options, clock=clock, name="alone") as node, time_moves(clock):
        assert not node.cluster.is_leader
        for auth in (ADMIN, OPS):
            async with httpx.AsyncClient(base_url=node.http_url, auth=auth, timeout=30) as c:
                for method, path in [
                    ("GET", "/auto-scavenge/enabled"),
                    ("GET", "/auto-scavenge/status"),
                    ("POST", "/auto-scavenge/pause"),
                    ("POST", "/auto-scavenge/resume"),
                ]:
                    r = await c.request(method, path)
                    assert r.status_code == 503, (path, r.text)
                    assert r.headers["Retry-After"] == "1"
                    assert "sign-in lease" in r.text
        # a reload and its outcome are judged on the node's own records all the same: the spec's rolling
        # certificate update reloads nodes that cannot reach the others (evdb/http/app.py _WITHOUT_LEASE)
        async with httpx.AsyncClient(base_url=node.http_url, auth=ADMIN, timeout=30) as c:
            assert (await c.post("/admin/reloadconfig")).status_code == 200
            assert (await c.get("/admin/certificates")).json()["lastReload"]["result"] in (
                "Success",
                "Failed",
            )
        async with httpx.AsyncClient(base_url=node.http_url, auth=("admin", "wrong"), timeout=30) as c:
            assert (await c.post("/admin/reloadconfig")).status_code == 401
            assert (await c.get("/admin/certificates")).status_code == 401
        async with httpx.AsyncClient(base_url=node.http_url, auth=("admin", "changeit"), timeout=30) as c:
            assert (await c.get("/streams/any")).status_code == 503  # data: still under the lease rule


async def test_a_request_during_an_election_waits_for_the_new_leader():
    """A leader resigns at the end of every cycle: a request arriving before the next is elected waits
    for it (bounded) instead of failing with NO_LEADER."""
    import asyncio

    class Electing:
        is_leader = False

        def __init__(self) -> None:
            self.leader: tuple[str, int] | None = None

        def leader_http_endpoint(self):
            return self.leader

    cluster = Electing()
    waiting = asyncio.ensure_future(autoscavenge_http._leader_within(cluster, 5.0))
    await asyncio.sleep(0.3)
    assert not waiting.done()
    cluster.leader = ("127.0.0.1", 2114)
    assert await asyncio.wait_for(waiting, 2) == ("127.0.0.1", 2114)
    assert await autoscavenge_http._leader_within(Electing(), 0.2) is None


async def test_a_leader_taking_office_answers_once_it_can_read_its_log_and_no_leader_if_it_never_can(
    clients, licensed_node, monkeypatch
):
    """While the leader cannot read its whole log yet (TakingOffice), a request waits for it (bounded by
    LEADER_WAIT_SECONDS), then runs; past the bound the answer is KurrentDB's no-leader problem, naming
    the reason. Nothing is written meanwhile."""
    from evdb.autoscavenge.machine import TakingOffice

    store = licensed_node.auto_scavenge.store
    load = store.load
    refusals = {"left": 3}

    async def taking_office_for_a_while():
        if refusals["left"] > 0:
            refusals["left"] -= 1
            raise TakingOffice("its log is readable up to position 10, ... (test)")
        return await load()

    licensed_node.auto_scavenge.machine.unload()
    monkeypatch.setattr(store, "load", taking_office_for_a_while)
    r = await clients["ops"].post("/auto-scavenge/pause")
    assert (r.status_code, r.json(), refusals["left"]) == (200, {}, 0)
    licensed_node.auto_scavenge.machine.unload()
    refusals["left"] = 10**6
    monkeypatch.setattr(autoscavenge_http, "LEADER_WAIT_SECONDS", 0.3)
    r = await clients["ops"].post("/auto-scavenge/resume")
    assert r.status_code == 500
    assert r.json()["detail"].startswith(
        "No leader node was found in the cluster (This node is taking office"
    )
    db = licensed_node.db
    assert [e.event_type for e in db.read_stream_forward(EVENTS_STREAM, 0, 10).events] == ["$paused"]


async def test_the_schedule_as_the_operator_gave_it_is_kept_and_shown(tmp_path, clock):
    """Issue 34: with AutoScavengeScheduleSeconds, ``*/2 * * * * *`` was only ever shown as thirty listed
    seconds. The status keeps KurrentDB's normal form; evdb's progress shows the operator's own text,
    also after a restart (it is kept in the configuration event)."""
    options = options_for(tmp_path, "--auto-scavenge-schedule-seconds", "true", license_at=clock.time())
    normal = ",".join(str(s) for s in range(0, 60, 2)) + " * * * * *"
    async with (
        Node(options, clock=clock, name="given") as node,
        httpx.AsyncClient(base_url=node.http_url, auth=OPS, timeout=30) as c,
    ):
        r = await c.post("/auto-scavenge/configure", json={"schedule": " */2  * * * * *"})
        assert r.status_code == 200, r.text
        assert (await c.get("/auto-scavenge/status")).json()["schedule"] == normal
        progress = (await c.get("/auto-scavenge/progress")).json()
        assert (progress["schedule"], progress["scheduleAsGiven"]) == (normal, "*/2 * * * * *")
    async with (
        Node(options, clock=clock, name="given") as node,
        httpx.AsyncClient(base_url=node.http_url, auth=OPS, timeout=30) as c,
    ):
        assert (await c.get("/auto-scavenge/status")).json()["schedule"] == normal
        progress = (await c.get("/auto-scavenge/progress")).json()
        assert progress["scheduleAsGiven"] == "*/2 * * * * *"
        # a schedule whose normal form is what was typed: the same text twice
        await c.post("/auto-scavenge/configure", json={"schedule": "0 6 * * 6"})
        progress = (await c.get("/auto-scavenge/progress")).json()
        assert (progress["schedule"], progress["scheduleAsGiven"]) == ("0 6 * * 6", "0 6 * * 6")
