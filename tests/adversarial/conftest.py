"""Fixtures of the adversarial suite: a real-process cluster (three members and a read-only replica)."""

from __future__ import annotations

import ssl
from typing import Any

import httpx
import pytest
from waiting import wait_until

from evdb.cluster.launcher import LocalCluster


class ClusterUnderTest:
    """A running LocalCluster: its nodes by role and clients to them with any credentials."""

    def __init__(self, local: LocalCluster) -> None:
        self.local = local

    def roles(self) -> dict[str, str]:
        """Node name -> its own state (Leader, Follower, ReadOnlyReplica ...)."""
        return {row["name"]: row["state"] for row in self.local.status()}

    def url(self, name: str) -> str:
        return next(n["url"] for n in self.local.info()["nodes"] if n["name"] == name)

    def by_role(self) -> dict[str, str]:
        """'leader', 'follower' (one of them) and 'replica' -> a node name, once the cluster settled."""

        def settled() -> dict[str, str] | None:
            states = self.roles()
            names = {state: name for name, state in sorted(states.items())}
            if {"Leader", "Follower", "ReadOnlyReplica"} <= set(names):
                return {
                    "leader": names["Leader"],
                    "follower": names["Follower"],
                    "replica": names["ReadOnlyReplica"],
                }
            return None

        return wait_until(settled, 60, "a leader, a follower and a replica", detail=self.roles)

    def client(self, name: str, auth: tuple[str, str] | None, timeout: float = 15.0) -> httpx.Client:
        info = self.local.info()
        verify: Any = ssl.create_default_context(cafile=info["ca"]) if info.get("ca") else False
        return httpx.Client(base_url=self.url(name), auth=auth, verify=verify, timeout=timeout)

    @property
    def admin(self) -> tuple[str, str]:
        info = self.local.info()
        return info["user"], info["password"]


#: the cluster's request body limit, small so that oversized and inflated bodies stay cheap to send
BODY_LIMIT = 1024 * 1024


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    """One cluster for the suite's modules (each leaves the others' users and streams alone)."""
    local = LocalCluster(tmp_path_factory.mktemp("adversarial-cluster"))
    local.up(
        nodes=3,
        replicas=1,
        chunk_size="256KiB",
        options={"HttpMaxRequestBodySize": str(BODY_LIMIT)},
        timeout=90,
        log=lambda *_: None,
    )
    try:
        yield ClusterUnderTest(local)
    finally:
        local.down(timeout=15, log=lambda *_: None)
