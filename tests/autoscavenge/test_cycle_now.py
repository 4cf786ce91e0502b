"""``POST /auto-scavenge/cycle-now`` (evdb extension): a cluster scavenge started at once, as if the
schedule fired now; refused with KurrentDB's 400-and-a-JSON-string while one runs, while paused or
pausing, and while the cluster is not healthy. The machine on a ManualClock, then the endpoint on a
real in-process node."""

from __future__ import annotations

import asyncio
import logging

import httpx
import pytest

from evdb.autoscavenge.machine import CycleNowRefused
from evdb.autoscavenge.schedule import parse_schedule
from evdb.autoscavenge.state import EVENTS_STREAM
from evdb.free_port import free_port
from evdb.node import Node
from tests.autoscavenge.conftest import ADMIN, options_for, time_moves
from tests.autoscavenge.test_machine import (  # `world`: ManualClock, in-memory store, scripted cluster
    LEADER,
    START,
    _loaded,
    world,  # noqa: F401
)


async def _run_cycle(machine, scavenger) -> list[str]:
    """Finish every node scavenge the machine starts; the endpoints in the order they ran."""
    order = []
    await machine.assess()
    while scavenger.running:
        (endpoint,) = scavenger.running
        order.append(endpoint)
        scavenger.finish(endpoint)
        await machine.assess()
    return order


async def test_cycle_now_starts_a_cluster_scavenge_before_the_due_time(world, caplog):  # noqa: F811
    clock, store, cluster, scavenger, machine = world
    caplog.set_level(logging.INFO, "test.autoscavenge")
    await _loaded(machine)
    await machine.configure(parse_schedule("0 6 * * 6"))  # due in three days
    await machine.assess()
    assert machine.status()["state"] == "Waiting" and scavenger.calls == []
    started = await machine.cycle_now("ops")
    assert machine.status() == {
        "state": "InProgress",
        "schedule": "0 6 * * 6",
        "timeUntilNextCycle": "00:00:00",
    }
    assert started.members == sorted(cluster.states)  # every alive member, replicas included
    assert store.types() == ["$cluster-scavenge-started"]
    assert "started now at the request of ops" in caplog.text
    order = await _run_cycle(machine, scavenger)
    assert LEADER not in order and cluster.resigned == 1  # followers first, then the leader resigns
    # the cycle is the scheduled kind in every other way: the next due time follows its completion
    cluster.states.update({LEADER: "Follower", "10.0.0.2:2113": "Leader"})
    cluster.me = "10.0.0.2:2113"
    await machine.load()
    assert await _run_cycle(machine, scavenger) == [LEADER]
    assert store.types()[-1] == "$cluster-scavenge-completed"
    assert machine.status()["state"] == "Waiting"
    assert machine.progress()["clusterScavengeId"] is None
    assert clock.time() == START  # no time passed: nothing was due


async def test_cycle_now_without_a_schedule_runs_once_and_goes_back_to_not_configured(world):  # noqa: F811
    _clock, store, cluster, scavenger, machine = world
    cluster.states = {LEADER: "Leader"}
    cluster.size = 1
    await _loaded(machine)
    started = await machine.cycle_now("admin")
    assert started.members == [LEADER]
    assert await _run_cycle(machine, scavenger) == [LEADER]  # a single node scavenges its leader
    assert store.types()[-1] == "$cluster-scavenge-completed"
    assert machine.status() == {"state": "NotConfigured", "schedule": None, "timeUntilNextCycle": None}


async def test_cycle_now_is_refused_while_it_cannot_start_and_writes_nothing(world):  # noqa: F811
    _clock, store, cluster, scavenger, machine = world
    await _loaded(machine)
    await machine.configure(parse_schedule("0 6 * * 6"))

    async def refused(match: str) -> None:
        before = list(store.types())
        with pytest.raises(CycleNowRefused, match=match):
            await machine.cycle_now("ops")
        assert store.types() == before

    cluster.dead.add("10.0.0.3:2113")
    await refused(r"^The cluster is not healthy: 2 of 3 cluster members are alive")
    cluster.dead.clear()
    assert await machine.pause() == 200
    await refused(r"^Auto-scavenge is paused: resume it first")
    assert await machine.resume() is None
    started = await machine.cycle_now("ops")
    await refused(rf"^Cluster scavenge {started.cluster_scavenge_id} is already in progress")
    await machine.assess()  # a node scavenge runs now
    assert scavenger.running
    scavenger.stop_gate = asyncio.Event()
    assert await machine.pause() == 202
    await refused(r"^Auto scavenge process is currently pausing")
    scavenger.stop_gate.set()
    for _ in range(100):
        if machine.status()["state"] == "Paused":
            break
        await asyncio.sleep(0.01)
    await refused(rf"^Cluster scavenge {started.cluster_scavenge_id} is paused: resume it")


# -- the endpoint on a real node ------------------------------------------------------------------------
async def test_the_endpoint_starts_a_cycle_roles_and_refusals(licensed_node, clients, clock):
    admin, ops = clients["admin"], clients["ops"]
    assert (await clients["anonymous"].post("/auto-scavenge/cycle-now")).status_code == 401
    assert (await clients["user"].post("/auto-scavenge/cycle-now")).status_code == 403
    assert (await ops.post("/auto-scavenge/pause")).status_code == 200
    refused = await ops.post("/auto-scavenge/cycle-now")
    assert refused.status_code == 400
    assert refused.json().startswith("Auto-scavenge is paused: resume it first")
    assert refused.headers["Content-Type"].startswith("application/json")
    assert (await ops.post("/auto-scavenge/resume")).status_code == 200
    # no schedule is set: the cycle runs once all the same
    r = await ops.post("/auto-scavenge/cycle-now")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["members"] == [licensed_node.auto_scavenge.cluster.self_endpoint]
    cycle_id = body["clusterScavengeId"]
    service = licensed_node.auto_scavenge
    deadline = asyncio.get_running_loop().time() + 20
    while True:
        await service.tick()
        progress = (await admin.get("/auto-scavenge/progress")).json()
        if progress["lastCompletedAt"] is not None:
            break
        assert asyncio.get_running_loop().time() < deadline, f"the cycle did not complete: {progress}"
        await asyncio.sleep(0.05)
    events = licensed_node.db.read_stream_forward(EVENTS_STREAM).events
    types = [e.event_type for e in events]
    assert types[-5:] == [
        "$cluster-scavenge-started",
        "$node-designated",
        "$node-scavenge-started",
        "$node-scavenge-completed",
        "$cluster-scavenge-completed",
    ]
    assert cycle_id in events[-5].data.decode()
    assert (await admin.get("/auto-scavenge/status")).json()["state"] == "NotConfigured"
    spec = (await admin.get("/openapi.json")).json()
    assert "evdb extension" in spec["paths"]["/auto-scavenge/cycle-now"]["post"]["summary"]


async def test_a_node_that_never_had_a_leader_answers_not_ready(tmp_path, clock, monkeypatch):
    from evdb.http import autoscavenge as autoscavenge_http

    monkeypatch.setattr(autoscavenge_http, "LEADER_WAIT_SECONDS", 0.3)  # no election will end: no wait

    async with Node(options_for(tmp_path, license_at=clock.time()), clock=clock, name="first"):
        pass  # a single node: it leads and creates the default users
    seeds = f"127.0.0.1:{free_port()},127.0.0.1:{free_port()}"
    options = options_for(tmp_path, "--cluster-size", "3", "--gossip-seed", seeds, license_at=clock.time())
    async with Node(options, clock=clock, name="alone") as node, time_moves(clock):
        assert node.cluster is not None and not node.cluster.is_leader
        async with httpx.AsyncClient(base_url=node.http_url, auth=ADMIN, timeout=30) as c:
            # it never heard from a leader, so it holds no sign-in lease and judges no credentials
            # (docs/cluster.md, sign-in leases): not ready, try again, rather than a wrong answer
            r = await c.post("/auto-scavenge/cycle-now")
            assert r.status_code == 503, r.text
            assert r.headers["Retry-After"] == "1" and "sign-in lease" in r.text
