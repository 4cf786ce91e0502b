from __future__ import annotations

import uuid

import httpx
import pytest
from waiting import wait_until

from evdb.cluster.launcher import LocalCluster


class Cluster:
    """A LocalCluster with the helpers the tests share."""

    def __init__(self, local: LocalCluster) -> None:
        self.local = local

    def nodes(self) -> list[dict]:
        return self.local.info()["nodes"]

    def node(self, name: str) -> dict:
        return next(n for n in self.nodes() if n["name"] == name)

    def client(self, name: str, timeout: float = 10.0) -> httpx.Client:
        return self.local.client(self.node(name)["url"], timeout=timeout)

    def states(self) -> dict[str, str]:
        return {r["name"]: r["state"] for r in self.local.status()}

    def leader(self, timeout: float = 30.0) -> str:
        url = self.local.wait_for_leader(timeout)
        return next(n["name"] for n in self.nodes() if n["url"] == url)

    def wait_until(self, condition, timeout: float = 30.0, what: str = "condition"):
        return wait_until(condition, timeout, what, detail=lambda: f"states: {self.states()}")

    def writers(self) -> dict[str, int]:
        return {r["name"]: r.get("writer", -1) for r in self.local.status() if r["state"] != "Down"}

    def wait_in_step(self, timeout: float = 30.0) -> int:
        """Wait until every running node's log ends at the same position; that position."""

        def same():
            w = self.writers()
            values = set(w.values())
            return values.pop() if len(values) == 1 and -1 not in w.values() else None

        return self.wait_until(same, timeout, "every node at the same position")

    def append(
        self, name: str, stream: str, event_id: uuid.UUID | None = None, data: dict | None = None, **headers
    ):
        with self.client(name) as c:
            return c.post(
                f"/streams/{stream}",
                json=data or {"n": 1},
                headers={
                    "Kurrent-EventType": "TestEvent",
                    "Kurrent-EventId": str(event_id or uuid.uuid4()),
                    **headers,
                },
            )

    def read_ids(self, name: str, stream: str) -> list[str]:
        """Every event id of ``stream`` on node ``name``, in event-number order (paging forward)."""
        ids: list[str] = []
        with self.client(name) as c:
            while True:
                r = c.get(
                    f"/streams/{stream}/{len(ids)}/forward/500?embed=body",
                    headers={"Accept": "application/json"},
                )
                if r.status_code == 404:
                    return ids
                r.raise_for_status()
                entries = sorted(r.json()["entries"], key=lambda e: e["eventNumber"])
                assert [e["eventNumber"] for e in entries] == list(range(len(ids), len(ids) + len(entries)))
                ids += [e["eventId"] for e in entries]
                if len(entries) < 500:
                    return ids


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    local = LocalCluster(tmp_path_factory.mktemp("cluster"))
    local.up(nodes=3, replicas=1, chunk_size="256KiB", timeout=60, log=lambda *_: None)
    try:
        yield Cluster(local)
    finally:
        local.down(timeout=10, log=lambda *_: None)
