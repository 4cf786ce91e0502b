"""Auto-scavenge on a real cluster of processes: 3 nodes and 1 read-only replica (LocalCluster, TLS).

One module-scoped cluster; three cluster scavenges in turn, each on a schedule that fires once a few
seconds ahead (six-field schedules with seconds: AutoScavengeScheduleSeconds):

1. a full cycle: the replica and followers one at a time, then the leader resigns and is scavenged
   as a follower; never two node scavenges at once (from the ``$scavenges-{id}`` streams and logs);
2. pause during a node scavenge answers 202, reaches Paused, and resume finishes the cycle;
3. the leader is killed mid-cycle: the newly elected leader carries on and finishes the cycle.
"""

from __future__ import annotations

import datetime
import itertools
import json
import os
import signal
import time
import uuid
from pathlib import Path

import pytest

from evdb.cluster.launcher import LocalCluster
from tests.cluster.conftest import Cluster

pytestmark = pytest.mark.slow

EXTRA = {
    "AutoScavengeScheduleSeconds": True,
    "AutoScavengeAssessIntervalMs": 500,
    "AutoScavengeNodeTimeoutSec": 60,
}
JSON = {"Accept": "application/json"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    local = LocalCluster(tmp_path_factory.mktemp("auto-scavenge-cluster"))
    local.up(nodes=3, replicas=1, chunk_size="256KiB", extra=EXTRA, timeout=60, log=lambda *_: None)
    c = Cluster(local)
    try:
        yield c
    finally:
        local.down(timeout=10, log=lambda *_: None)


def _deleted_data(c: Cluster) -> None:
    """Some megabytes of deleted events, so every node scavenge has chunks to rewrite (a second or two)."""
    leader = c.leader()
    stream = f"filler-{uuid.uuid4().hex[:8]}"
    payload = "x" * 4000
    with c.client(leader, timeout=30) as client:
        for _ in range(30):
            batch = [
                {"eventId": str(uuid.uuid4()), "eventType": "Filler", "data": {"p": payload}}
                for _ in range(40)
            ]
            r = client.post(
                f"/streams/{stream}",
                content=json.dumps(batch),
                headers={"Content-Type": "application/vnd.kurrent.events+json"},
            )
            assert r.status_code == 201, r.text
        assert client.delete(f"/streams/{stream}").status_code == 204
    c.wait_in_step()


def _once_in(seconds: float) -> str:
    """A six-field schedule (seconds first) that is due once, ``seconds`` from now (UTC)."""
    t = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=seconds)
    return f"{t.second} {t.minute} {t.hour} * * *"


def _data(entry: dict) -> dict:
    data = entry.get("data")
    return json.loads(data) if isinstance(data, str) else data


def _read(c: Cluster, name: str, stream: str) -> list[dict]:
    """The stream's entries. A 503 (Retry-After) is a node's answer while the cluster elects a leader
    (no member judges credentials without a leader's lease): asked again, as a client does."""

    def answer():
        with c.client(name) as client:
            r = client.get(f"/streams/{stream}/0/forward/4096?embed=body", headers=JSON)
        return r if r.status_code != 503 else None

    r = c.wait_until(answer, 30, f"{name} to answer a read of {stream} with other than 503")
    if r.status_code == 404:
        return []
    r.raise_for_status()
    return sorted(r.json()["entries"], key=lambda e: e["eventNumber"])


def _any_node(c: Cluster) -> str | None:
    """A node whose log is in step with the cluster's (None during an election)."""
    states = c.states()
    return next((n for n, s in states.items() if s in ("Leader", "Follower", "ReadOnlyReplica")), None)


def _cycle(c: Cluster, cycle_id: str) -> list[dict]:
    """The events of one cluster scavenge, from ``$auto-scavenges``."""
    out: list[dict] = []
    inside = False
    node = _any_node(c)
    if node is None:
        return out
    for e in _read(c, node, "$auto-scavenges"):
        d = _data(e)
        if e["eventType"] == "$cluster-scavenge-started":
            inside = d["clusterScavengeId"] == cycle_id
        if inside:
            out.append({"type": e["eventType"], **d})
    return out


def _started_cycles(c: Cluster) -> list[str]:
    node = _any_node(c)
    if node is None:
        return []
    return [
        _data(e)["clusterScavengeId"]
        for e in _read(c, node, "$auto-scavenges")
        if e["eventType"] == "$cluster-scavenge-started"
    ]


def _configure(c: Cluster, via: str, schedule: str) -> None:
    with c.client(via) as client:
        r = client.post("/auto-scavenge/configure", json={"schedule": schedule})
    assert (r.status_code, r.json()) == (200, {}), r.text


def _status(c: Cluster, via: str) -> dict:
    with c.client(via) as client:
        r = client.get("/auto-scavenge/status")
    assert r.status_code == 200, r.text
    return r.json()


def _wait_for_new_cycle(c: Cluster, known: list[str], timeout: float = 30.0) -> str:
    return c.wait_until(
        lambda: next((i for i in _started_cycles(c) if i not in known), None),
        timeout,
        "a new cluster scavenge",
    )


def _wait_completed(c: Cluster, cycle_id: str, timeout: float = 60.0) -> list[dict]:
    return c.wait_until(
        lambda: (
            (events := _cycle(c, cycle_id)) and events[-1]["type"] == "$cluster-scavenge-completed" and events
        ),
        timeout,
        f"cluster scavenge {cycle_id} to complete",
    )


def _endpoint(c: Cluster, name: str) -> str:
    return c.node(name)["url"].split("://", 1)[1]


def _node_runs(
    c: Cluster, events: list[dict], *, complete_only: bool = False
) -> list[tuple[str, float, float, str]]:
    """(node endpoint, started, completed, result) of each node scavenge of a cycle, from the
    ``$scavenges-{id}`` streams the nodes themselves wrote. With ``complete_only``, runs whose
    ``$scavengeCompleted`` could not be written (no leader at that moment) are left out."""
    runs = []
    for e in events:
        if e["type"] != "$node-scavenge-started":
            continue
        sid = e["scavengeId"]
        entries = _read(c, c.leader(), f"$scavenges-{sid}")
        started = [x for x in entries if x["eventType"] == "$scavengeStarted"]
        completed = [x for x in entries if x["eventType"] == "$scavengeCompleted"]
        if complete_only and not (started and completed):
            continue
        assert started and completed, f"scavenge {sid}: {[x['eventType'] for x in entries]}"
        node = _data(started[0])["nodeEndpoint"]
        runs.append((node, _when(started[0]), _when(completed[-1]), _data(completed[-1])["result"]))
    return runs


def _when(entry: dict) -> float:
    return datetime.datetime.fromisoformat(entry["updated"].replace("Z", "+00:00")).timestamp()


def _never_two_at_once(runs: list[tuple[str, float, float, str]]) -> None:
    ordered = sorted(runs, key=lambda r: r[1])
    for before, after in itertools.pairwise(ordered):
        assert before[2] <= after[1], f"two node scavenges at once: {before} and {after}"


def _stdout(c: Cluster, name: str) -> str:
    return (Path(c.node(name)["config"]).parent / "stdout.log").read_text(errors="replace")


def test_a_full_cycle_one_node_at_a_time_the_leader_last(cluster):
    c = cluster
    leader = c.leader()
    follower = next(n for n, s in c.states().items() if s == "Follower")
    replica = next(n["name"] for n in c.nodes() if n["read_only_replica"])
    assert _status(c, replica) == {"state": "NotConfigured", "schedule": None, "timeUntilNextCycle": None}
    known = _started_cycles(c)
    _configure(c, replica, _once_in(3))  # sent to the replica: forwarded to the leader
    status = _status(c, follower)
    assert status["state"] == "Waiting" and status["timeUntilNextCycle"].startswith("00:00:0")
    cycle_id = _wait_for_new_cycle(c, known)
    events = _wait_completed(c, cycle_id)
    started = [e["nodeId"] for e in events if e["type"] == "$node-scavenge-started"]
    order = [f"{n['address']}:{n['port']}" for n in started]
    others = {_endpoint(c, n["name"]) for n in c.nodes() if n["name"] != leader}
    assert set(order[:3]) == others and order[3] == _endpoint(c, leader), order
    results = [e["result"] for e in events if e["type"] == "$node-scavenge-completed"]
    assert results == ["Success"] * 4
    runs = _node_runs(c, events)
    assert [r[0] for r in runs] == order
    _never_two_at_once(runs)
    # the old leader resigned, then was scavenged as a follower
    assert "resigning from leadership so that it is scavenged as a follower" in _stdout(c, leader)
    new_leader = c.leader()
    assert new_leader != leader
    assert "Loaded the auto-scavenge state from $auto-scavenges: InProgress" in _stdout(c, new_leader)
    for node in c.nodes():
        assert (
            _stdout(c, node["name"]).count(
                "Request scavenging because /admin/scavenge request has been received."
            )
            >= 1
        )
    assert _status(c, replica)["state"] == "Waiting"


def test_pause_during_a_node_scavenge_then_resume(cluster):
    c = cluster
    _deleted_data(c)  # so the node scavenges last long enough to be paused
    leader = c.leader()
    known = _started_cycles(c)
    _configure(c, leader, _once_in(3))
    cycle_id = _wait_for_new_cycle(c, known)
    c.wait_until(
        lambda: any(e["type"] == "$node-scavenge-started" for e in _cycle(c, cycle_id)),
        20,
        "the first node scavenge to start",
    )
    follower = next(n for n, s in c.states().items() if s == "Follower")
    with c.client(follower) as client:
        r = client.post("/auto-scavenge/pause")
    assert r.status_code == 202 and r.content == b"", (r.status_code, r.text)
    c.wait_until(lambda: _status(c, follower)["state"] == "Paused", 30, "Paused")
    types = [e["type"] for e in _cycle(c, cycle_id)]
    # the running node scavenge was stopped; or it finished on its own before the stop reached it (a
    # small database on a fast machine): then the cycle records its completion before pausing
    finished_first = types[-3:] == ["$pause-requested", "$node-scavenge-completed", "$paused"]
    assert finished_first or types[-2:] == ["$pause-requested", "$paused"], types
    with c.client(leader) as client:
        again = client.post("/auto-scavenge/pause")
        assert (again.status_code, again.json()) == (200, {})
    # paused: no further node scavenge starts
    started_while_paused = types.count("$node-scavenge-started")
    time.sleep(1.5)  # three assessments
    assert [e["type"] for e in _cycle(c, cycle_id)].count("$node-scavenge-started") == started_while_paused
    with c.client(follower) as client:
        r = client.post("/auto-scavenge/resume")
    assert (r.status_code, r.json()) == (200, {})
    events = _wait_completed(c, cycle_id)
    done = [e for e in events if e["type"] == "$node-scavenge-completed"]
    assert len(done) == 4 and {e["result"] for e in done} == {"Success"}
    runs = _node_runs(c, events)
    stopped = [r for r in runs if r[3] == "Stopped"]
    assert len(stopped) == (0 if finished_first else 1)  # the one paused, then started again on resume
    _never_two_at_once(runs)


def test_killing_the_leader_mid_cycle_the_new_leader_finishes_it(cluster):
    c = cluster
    leader = c.leader()
    known = _started_cycles(c)
    _configure(c, leader, _once_in(3))
    cycle_id = _wait_for_new_cycle(c, known)
    c.wait_until(
        lambda: any(e["type"] == "$node-scavenge-started" for e in _cycle(c, cycle_id)),
        20,
        "the first node scavenge to start",
    )
    os.kill(c.node(leader)["pid"], signal.SIGKILL)
    new_leader = c.wait_until(
        lambda: next((n for n, s in c.states().items() if s == "Leader" and n != leader), None),
        30,
        "a new leader",
    )
    c.local.start_node(leader)  # it comes back as a follower and is scavenged in its turn
    events = _wait_completed(c, cycle_id, timeout=90)
    done = {
        f"{e['nodeId']['address']}:{e['nodeId']['port']}": e["result"]
        for e in events
        if e["type"] == "$node-scavenge-completed"
    }
    assert set(done) == {_endpoint(c, n["name"]) for n in c.nodes()}
    assert done[_endpoint(c, leader)] == "Success"
    assert "Loaded the auto-scavenge state from $auto-scavenges: InProgress" in _stdout(c, new_leader)
    _never_two_at_once(_node_runs(c, events, complete_only=True))
