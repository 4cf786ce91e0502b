"""A 3-node cluster in this process (each node on its own thread): a follower sends every persistent
subscription HTTP route on to the leader with the caller's credentials (KurrentDB's HttpForwarder), and
serves ``viewparkedmessages`` from its own copy of the parked stream."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kurrentdbclient import KurrentDBClient
from test_clients import NodeThread, _append, _http, node_options
from waiting import wait_until

from evdb.free_port import free_port


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


def test_a_follower_forwards_the_persistent_subscription_routes_to_the_leader(
    nodes: list[NodeThread],
) -> None:
    wait_until(
        lambda: sorted(_states(nodes)) == ["Follower", "Follower", "Leader"],
        what="a leader and two followers",
        detail=lambda: _states(nodes),
    )
    leader = next(t for t in nodes if t.node is not None and t.node.cluster.is_leader)  # type: ignore[union-attr]
    follower = next(t for t in nodes if t is not leader)
    port = follower.port
    # the users are the leader's: ask until the follower has them
    wait_until(lambda: _http(port, "GET", "/subscriptions") == (200, []), what="the follower to answer")
    with KurrentDBClient(f"kurrentdb://localhost:{leader.port}?tls=false") as client:
        _append(client, "orders", 3)
    status, body = _http(port, "PUT", "/subscriptions/orders/g", {"readBatchSize": 10})
    assert status == 201 and body["result"] == "Success"
    assert leader.node is not None and leader.node.persistent.info("orders", "g")["groupName"] == "g"
    status, listing = _http(port, "GET", "/subscriptions")
    assert status == 200 and [(s["eventStreamId"], s["groupName"]) for s in listing] == [("orders", "g")]
    status, detail = _http(port, "GET", "/subscriptions/orders/g/info")
    assert status == 200 and detail["config"]["readBatchSize"] == 10
    # the competing-consumer read and a nack (park) through the follower
    taken: list[str] = []  # each read hands out what the group has read so far

    def three_taken() -> bool:
        status, feed = _http(port, "GET", "/subscriptions/orders/g/3")
        assert status == 200, feed
        taken.extend(e["eventId"] for e in feed["entries"])
        return len(taken) == 3

    wait_until(three_taken, what="three messages")
    ids = ",".join(taken)
    assert _http(port, "POST", f"/subscriptions/orders/g/nack?ids={ids}&action=park")[0] == 202

    def parked_count() -> int:
        return _http(port, "GET", "/subscriptions/orders/g/info")[1]["parkedMessageCount"]

    wait_until(lambda: parked_count() == 3, what="three parked messages")
    # the parked stream, read on the follower itself
    view = "/subscriptions/viewparkedmessages/orders/g/head/backward/20"
    wait_until(lambda: len(_http(port, "GET", view)[1]["entries"]) == 3, what="the parked stream here")
    status, body = _http(port, "POST", "/subscriptions/orders/g/truncateParked")
    assert status == 200 and body["result"] == "Success"
    wait_until(lambda: parked_count() == 0, what="the parked messages truncated")
    # a request forwarded once is not forwarded again: a node that does not lead answers it (not ready)
    status, _ = _http_with(port, "GET", "/subscriptions", {"X-Evdb-Forwarded-By": "127.0.0.1:1"})
    assert status == 503
    status, _ = _http(port, "DELETE", "/subscriptions/orders/g")
    assert status == 200
    assert _http(port, "GET", "/subscriptions") == (200, [])
    # the group's streams are deleted after the answer: wait for that here, so no write is left
    # waiting for the followers when the nodes stop
    wait_until(lambda: _http(port, "GET", view)[0] in (404, 410), what="the parked stream deleted")
    checkpoint = "/streams/%24persistentsubscription-orders%3A%3Ag-checkpoint"
    wait_until(lambda: _http(port, "GET", checkpoint)[0] in (404, 410), what="the checkpoint stream deleted")


def _http_with(port: int, method: str, path: str, headers: dict[str, str]) -> tuple[int, Any]:
    import base64
    import urllib.error
    import urllib.request

    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method)
    request.add_header("Authorization", "Basic " + base64.b64encode(b"admin:changeit").decode())
    for name, value in headers.items():
        request.add_header(name, value)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
