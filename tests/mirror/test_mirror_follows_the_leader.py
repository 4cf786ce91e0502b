"""``evdb mirror`` into a cluster follows the cluster's leader, as KurrentDB's clients do: its writes ask
for the leader (a follower sends them on with a redirect), and when the node it writes to is gone it asks
the members it learnt from gossip who leads now and goes on there (bounded; past that it reconnects)."""

from __future__ import annotations

import httpx
import pytest
import waiting
from mirror_helpers import MirrorProcess, new_events, wait_until

from evdb.cluster.launcher import LocalCluster
from evdb.mirror.state import MirrorPaths, read_status

pytestmark = pytest.mark.slow


def stream_ids(url: str, stream: str) -> list[str]:
    with httpx.Client(auth=("admin", "changeit"), timeout=10) as c:
        r = c.get(f"{url}/streams/{stream}/0/forward/1000", headers={"Accept": "application/json"})
    if r.status_code == 404:
        return []
    r.raise_for_status()
    return [e["eventId"] for e in sorted(r.json()["entries"], key=lambda e: e["eventNumber"])]


def test_the_mirror_writes_to_the_leader_and_follows_it_when_that_node_goes(nodes, tmp_path):
    primary = nodes("primary")
    quiet = lambda *_: None  # noqa: E731
    secondary = LocalCluster(tmp_path / "secondary")
    secondary.up(nodes=3, insecure=True, timeout=60, log=quiet)
    try:
        leader = secondary.wait_for_leader(30)
        first = new_events(20)
        primary.append("accounts", first)
        checkpoint = tmp_path / "mirror" / "checkpoint.json"
        paths = MirrorPaths.of(checkpoint)
        mirror = MirrorProcess(primary.url, leader, checkpoint, "--status-every", "0")
        try:
            status = wait_until(
                lambda: (s := read_status(paths.status)) and s["caughtUp"] and s, 30, "the mirror to catch up"
            )
            assert status["writingTo"] == leader, status
            assert stream_ids(leader, "accounts") == [e["eventId"] for e in first]

            # the node it was given goes: the mirror finds the new leader through the members it learnt
            # from gossip (it went on asking the node that was gone before)
            name = next(n["name"] for n in secondary.info()["nodes"] if n["url"] == leader)
            secondary.stop_node(name, log=quiet)
            second = new_events(20)
            primary.append("accounts", second)
            new_leader = secondary.wait_for_leader(60)
            assert new_leader != leader
            waiting.wait_until(
                lambda: stream_ids(new_leader, "accounts") == [e["eventId"] for e in first + second],
                60,
                "the events written after the leader went, on the new leader",
                tolerate=(httpx.HTTPError,),
                detail=lambda: mirror.output()[-1500:],
            )
            wait_until(
                lambda: read_status(paths.status)["writingTo"] == new_leader, 10, "the status to say so"
            )
        finally:
            mirror.close()
    finally:
        secondary.down(timeout=10, log=quiet)
