"""Read your writes on followers in a real local cluster (3 nodes + 1 read-only replica, TLS, one
process each): a client writes a new stream through the leader and, as soon as it has the answer, reads
it from every follower, as kurrentdbclient's cluster discovery test does. The rule (the top of
evdb/cluster/service.py) promises the write on every follower that held a durable copy when the leader
answered; a majority held one, so at least one follower shows every write."""

from __future__ import annotations

import uuid

import pytest

pytestmark = pytest.mark.slow

WRITES = 60


def test_a_write_the_leader_answered_is_read_back_at_once_from_the_followers(cluster):
    leader = cluster.leader()
    cluster.wait_until(lambda: sorted(cluster.states().values()).count("Follower") == 2, 30, "two followers")
    followers = sorted(name for name, state in cluster.states().items() if state == "Follower")
    clients = {name: cluster.client(name) for name in [leader, *followers]}
    try:
        for i in range(WRITES):
            stream = f"read-back-{i}-{uuid.uuid4().hex[:8]}"
            answer = clients[leader].post(
                f"/streams/{stream}",
                json={"n": i},
                headers={"Kurrent-EventType": "TestEvent", "Kurrent-EventId": str(uuid.uuid4())},
            )
            assert answer.status_code == 201, answer.text
            shown = []
            for name in followers:
                r = clients[name].get(
                    f"/streams/{stream}/0/forward/1", headers={"Accept": "application/json"}
                )
                assert r.status_code in (200, 404), (name, r.status_code, r.text)
                if r.status_code == 200 and r.json()["entries"]:
                    shown.append(name)
            assert shown, f"write {i}: no follower shows {stream} after the leader answered"
    finally:
        for client in clients.values():
            client.close()
