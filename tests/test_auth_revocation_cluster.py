"""Revoking users in a 3-node cluster in this process (each node on its own thread; issue 33, point 1):
after each kind of user change on the leader (password reset, disable, delete, removal from $admins, a
raw append to ``$user-<login>``), no node accepts the old credentials once it shows the change, and the
leader refuses them as soon as it acknowledges it (tests/user_changes.py)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import user_changes
from waiting import wait_until

from evdb.free_port import free_port

NodeThread, node_options = (
    user_changes.clients_conftest().NodeThread,
    user_changes.clients_conftest().node_options,
)


@pytest.fixture
def nodes(tmp_path: Path):
    http = [free_port() for _ in range(3)]
    threads: list[NodeThread] = []
    try:
        for i in range(3):
            seeds = ",".join(f"127.0.0.1:{p}" for j, p in enumerate(http) if j != i)
            options = node_options(
                tmp_path / f"node{i}", "--insecure", "--http-ip", "127.0.0.1", "--http-port", str(http[i]),
                "--replication-port", str(free_port()), "--cluster-size", "3", "--gossip-seed", seeds,
                "--gossip-interval-ms", "100",
            )  # fmt: skip
            threads.append(NodeThread(options, name=f"node{i}").start())
        yield threads
    finally:
        for thread in threads:
            thread.stop()


def _states(threads: list[NodeThread]) -> list[str]:
    return [
        t.node.cluster.state if t.node is not None and t.node.cluster is not None else "" for t in threads
    ]


def test_no_node_accepts_revoked_credentials(nodes: list[NodeThread]) -> None:
    wait_until(
        lambda: sorted(_states(nodes)) == ["Follower", "Follower", "Leader"],
        what="a leader and two followers",
        detail=lambda: _states(nodes),
    )
    leader = next(t.name for t in nodes if t.node is not None and t.node.cluster.is_leader)  # type: ignore[union-attr]
    clients = {t.name: httpx.Client(base_url=f"http://127.0.0.1:{t.port}", timeout=10) for t in nodes}
    try:
        # the default users replicate to the followers: ask until every node has them
        for name, client in clients.items():
            wait_until(
                lambda c=client: c.get("/users/admin", auth=user_changes.ADMIN).status_code == 200,  # type: ignore[misc]
                what=f"{name} to sign admin in",
            )
        user_changes.run(clients, leader)
    finally:
        for client in clients.values():
            client.close()
