"""Revoking users in a real local cluster (3 nodes and a read-only replica, TLS, one process each;
issue 33, point 1): after each kind of user change on the leader (password reset, disable, delete,
removal from $admins, a raw append to ``$user-<login>``), the leader refuses the old credentials as
soon as it acknowledges the change, and every follower and the replica as soon as they show it; a user
removed from $admins creates no user through any node (tests/user_changes.py)."""

from __future__ import annotations

import pytest
import user_changes

pytestmark = pytest.mark.slow


def test_no_node_of_a_real_cluster_accepts_revoked_credentials(cluster):
    leader = cluster.leader()
    cluster.wait_until(lambda: sorted(cluster.states().values()).count("Follower") == 2, 30, "two followers")
    names = [n["name"] for n in cluster.nodes()]
    assert len(names) == 4  # the leader, two followers and the read-only replica
    clients = {name: cluster.client(name) for name in names}
    try:
        user_changes.run(clients, leader)
    finally:
        for client in clients.values():
            client.close()
