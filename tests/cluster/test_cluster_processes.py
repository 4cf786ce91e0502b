"""A real local cluster (3 nodes + 1 read-only replica, TLS, one process each) under faults."""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.slow


def test_write_through_any_node_and_read_from_every_node(cluster):
    leader = cluster.leader()
    ids = []
    for name in [n["name"] for n in cluster.nodes()]:  # followers and the replica forward to the leader
        event_id = uuid.uuid4()
        assert cluster.append(name, "everywhere", event_id).status_code == 201, name
        ids.append(str(event_id))
        # read your own write on the node you wrote through
        assert str(event_id) in cluster.read_ids(name, "everywhere")
    cluster.wait_in_step()
    for node in cluster.nodes():
        assert sorted(cluster.read_ids(node["name"], "everywhere")) == sorted(ids), node["name"]

    def settled():  # a follower that was catching up is a Follower in the leader's view a gossip later
        with cluster.client(leader) as c:
            members = c.get("/gossip").json()["members"]
        states = sorted(m["state"] for m in members)
        expected = ["Follower", "Follower", "Leader", "ReadOnlyReplica"]
        return members if states == expected and all(m["isAlive"] for m in members) else None

    gossip = cluster.wait_until(settled, 15, "the leader's gossip: two followers and the replica, alive")
    assert len({m["epochNumber"] for m in gossip}) == 1


def test_a_write_that_requires_the_leader_is_redirected(cluster):
    leader = cluster.leader()
    follower = next(n for n, s in cluster.states().items() if s == "Follower")
    r = cluster.append(follower, "redirected", **{"Kurrent-RequireLeader": "true"})
    assert r.status_code == 307
    assert r.headers["Location"] == cluster.node(leader)["url"] + "/streams/redirected"


def test_resigning_the_leader_elects_another(cluster):
    old = cluster.leader()
    with cluster.client(old) as c:
        assert c.post("/admin/node/resign").status_code == 200
    new = cluster.wait_until(
        lambda: next((n for n, s in cluster.states().items() if s == "Leader" and n != old), None),
        30,
        "a new leader",
    )
    cluster.wait_until(lambda: cluster.states()[old] == "Follower", 30, "the old leader to follow")
    assert cluster.append(old, "after-resign").status_code == 201  # forwarded to the new leader
    assert new != old


def test_kill_the_leader_during_appends_loses_nothing_acknowledged(cluster):
    leader = cluster.leader()
    writers = [n["name"] for n in cluster.nodes() if n["name"] != leader]
    acknowledged: list[str] = []
    stop = threading.Event()

    def append_forever():
        i = 0
        while not stop.is_set():
            event_id = uuid.uuid4()
            name = writers[i % len(writers)]
            i += 1
            for _attempt in range(50):  # retry the same event id until some node acknowledges it
                try:
                    if cluster.append(name, "kill-stream", event_id).status_code == 201:
                        acknowledged.append(str(event_id))
                        break
                except httpx.HTTPError:
                    pass
                name = writers[(writers.index(name) + 1) % len(writers)]
                time.sleep(0.05)

    thread = threading.Thread(target=append_forever)
    thread.start()
    try:
        cluster.wait_until(lambda: len(acknowledged) >= 20, 30, "appends before the kill")
        os.kill(cluster.node(leader)["pid"], signal.SIGKILL)
        killed_at = time.monotonic()
        new = cluster.wait_until(
            lambda: next((n for n, s in cluster.states().items() if s == "Leader"), None), 30, "a new leader"
        )
        elected_after = time.monotonic() - killed_at
        count = len(acknowledged)
        cluster.wait_until(lambda: len(acknowledged) >= count + 20, 30, "appends after the election")
    finally:
        stop.set()
        thread.join()
    print(f"new leader {new} elected {elected_after:.2f} s after kill -9 of {leader}")
    assert elected_after < 15
    cluster.local.start_node(leader)
    cluster.wait_until(lambda: cluster.states()[leader] == "Follower", 60, "the old leader to rejoin")
    cluster.wait_in_step(60)
    for node in cluster.nodes():
        ids = cluster.read_ids(node["name"], "kill-stream")
        assert len(ids) == len(set(ids)), f"an event appears twice on {node['name']}"
        missing = set(acknowledged) - set(ids)
        assert not missing, f"{len(missing)} acknowledged events missing on {node['name']}"


def test_a_stopped_follower_catches_up_and_a_paused_one_comes_back(cluster):
    cluster.leader()
    follower = next(n for n, s in cluster.states().items() if s == "Follower")
    pid = cluster.node(follower)["pid"]
    os.kill(pid, signal.SIGTERM)
    cluster.wait_until(lambda: cluster.states()[follower] == "Down", 30, "the follower to stop")
    others = [n for n, s in cluster.states().items() if s in ("Leader", "Follower")]
    for i in range(30):
        assert cluster.append(others[i % len(others)], "while-down").status_code == 201
    cluster.local.start_node(follower)
    cluster.wait_until(lambda: cluster.states()[follower] == "Follower", 60, "the follower to catch up")
    cluster.wait_in_step(60)
    assert len(cluster.read_ids(follower, "while-down")) == 30

    paused = next(n for n, s in cluster.states().items() if s == "Follower")
    pid = cluster.node(paused)["pid"]
    os.kill(pid, signal.SIGSTOP)
    try:
        port = int(cluster.node(paused)["url"].rsplit(":", 1)[1])
        leader = next(n for n, s in cluster.states().items() if s == "Leader")

        def seen_dead():
            with cluster.client(leader) as c:
                members = c.get("/gossip").json()["members"]
            return [m["isAlive"] for m in members if m.get("httpEndPointPort") == port] == [False]

        cluster.wait_until(seen_dead, 15, "the leader to see the paused node dead (GossipTimeoutMs)")
        assert cluster.append(leader, "while-paused").status_code == 201  # 2 of 3 is still a majority
    finally:
        os.kill(pid, signal.SIGCONT)
    cluster.wait_until(lambda: cluster.states()[paused] in ("Follower", "Leader"), 60, "the paused node")
    cluster.wait_in_step(60)
    assert len(cluster.read_ids(paused, "while-paused")) == 1


def test_a_node_with_a_certificate_from_another_ca_cannot_join(cluster, tmp_path):
    import yaml

    from evdb.cluster.launcher import LocalCluster

    stranger = LocalCluster(tmp_path / "stranger")
    stranger.create(nodes=1)
    info = stranger.info()
    config_path = info["nodes"][0]["config"]
    with open(config_path) as f:
        config = yaml.safe_load(f)
    leader_url = cluster.node(cluster.leader())["url"]
    config.update(ClusterSize=3, GossipSeed=leader_url.split("//")[1])
    with open(config_path, "w") as f:
        yaml.safe_dump(config, f)
    pid = stranger.start_node("node1")
    try:
        log_dir = info["nodes"][0]["log_dir"]

        def logged_chain_error():
            for root, _dirs, files in os.walk(log_dir):
                for name in files:
                    with open(os.path.join(root, name), errors="replace") as f:
                        if "certificate validation error" in f.read():
                            return True
            return False

        cluster.wait_until(logged_chain_error, 30, "a certificate validation error in the stranger's log")
        assert stranger.status()[0]["state"] != "Follower"
        with cluster.client(cluster.leader()) as c:
            members = c.get("/gossip").json()["members"]
        assert len(members) == 4  # the stranger is not a member
    finally:
        os.kill(pid, signal.SIGKILL)


def test_follower_scavenges_sync_to_the_leaders_point_or_ask_it_for_one(cluster):
    """A follower's scavenge point comes from the leader (written there, replicated): syncOnly goes to an
    existing point it has not reached and does nothing without one; without syncOnly the follower has
    the leader write a new point (spec: Node scavenge moves)."""
    leader = cluster.leader()
    follower = next(n for n, s in cluster.states().items() if s == "Follower")

    def points(name: str) -> list[int]:
        with cluster.client(name) as c:
            r = c.get(
                "/streams/$scavengePoints/0/forward/100?embed=body", headers={"Accept": "application/json"}
            )
        return [] if r.status_code == 404 else sorted(e["eventNumber"] for e in r.json()["entries"])

    def scavenge(name: str, **params) -> dict:
        with cluster.client(name) as c:
            r = c.post("/admin/scavenge", params=params, headers={"Accept": "application/json"})
            assert r.status_code == 200, r.text
            scavenge_id = r.json()["scavengeId"]

            def finished():
                last = c.get("/admin/scavenge/last", headers={"Accept": "application/json"}).json()
                return (
                    last
                    if last["scavengeId"] == scavenge_id and last["scavengeResult"] != "InProgress"
                    else None
                )

            return cluster.wait_until(finished, 60, f"the scavenge on {name} to finish")

    for i in range(20):
        assert cluster.append(leader, f"sync-only-{i % 2}").status_code == 201
    with cluster.client(leader) as c:
        assert c.delete("/streams/sync-only-0").status_code == 204
    before = points(leader)
    assert scavenge(leader)["scavengeResult"] == "Success"  # writes a new point
    cluster.wait_in_step()
    leader_points = points(leader)
    assert len(leader_points) == len(before) + 1 and points(follower) == leader_points

    assert scavenge(follower, syncOnly="true")["scavengeResult"] == "Success"  # to the leader's point
    assert scavenge(follower, syncOnly="true")["scavengeResult"] == "Success"  # nothing left to reach
    assert points(follower) == leader_points  # syncOnly never adds a point
    log_dir = Path(cluster.node(follower)["log_dir"])
    log = "".join(f.read_text() for f in sorted(log_dir.rglob("log-*.json")))  # <log>/<node name>/
    assert "No existing scavenge point to sync with, nothing to do." in log

    assert scavenge(follower)["scavengeResult"] == "Success"  # asks the leader for a new point
    cluster.wait_in_step()
    assert points(leader) == points(follower) == [*leader_points, leader_points[-1] + 1]
