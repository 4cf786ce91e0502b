"""Persistent subscriptions through KurrentDB's own Python client (gRPC) and the HTTP API, against a
real node: create, competing consumers, ack, nack park, replay parked, info/list shapes, checkpoints
surviving a node restart, the errors the client maps."""

from __future__ import annotations

import base64
import importlib.util
import json
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from kurrentdbclient import KurrentDBClient, NewEvent, StreamState
from kurrentdbclient.exceptions import AlreadyExistsError, NotFoundError
from waiting import wait_until


def _clients_conftest() -> Any:
    """tests/clients' node on a thread (its conftest, loaded under its own name)."""
    path = Path(__file__).resolve().parents[1] / "clients" / "conftest.py"
    spec = importlib.util.spec_from_file_location("clients_conftest", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["clients_conftest"] = module
    spec.loader.exec_module(module)
    return module


_nodes = _clients_conftest()
NodeThread, node_options = _nodes.NodeThread, _nodes.node_options


def _append(client: KurrentDBClient, stream: str, count: int) -> None:
    events = [NewEvent(type="Ordered", data=json.dumps({"n": n}).encode()) for n in range(count)]
    client.append_to_stream(stream, current_version=StreamState.ANY, events=events)


def _http(port: int, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method)
    request.add_header("Accept", "application/json")
    request.add_header("Authorization", "Basic " + base64.b64encode(b"admin:changeit").decode())
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            raw = response.read()
            return response.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        try:
            return exc.code, json.loads(raw)
        except ValueError:
            return exc.code, raw.decode()


@pytest.fixture
def node(tmp_path: Path):
    thread = NodeThread(node_options(tmp_path, "--insecure"), name="persistent").start()
    yield thread
    thread.stop()


@pytest.fixture
def client(node: NodeThread):
    c = KurrentDBClient(f"kurrentdb://localhost:{node.port}?tls=false")
    yield c
    c.close()


def test_competing_consumers_park_and_replay(client: KurrentDBClient) -> None:
    _append(client, "orders-1", 6)
    client.create_subscription_to_stream("workers", stream_name="orders-1", consumer_strategy="RoundRobin")
    with pytest.raises(AlreadyExistsError):
        client.create_subscription_to_stream("workers", stream_name="orders-1")
    first = client.read_subscription_to_stream("workers", stream_name="orders-1", event_buffer_size=2)
    second = client.read_subscription_to_stream("workers", stream_name="orders-1", event_buffer_size=2)
    seen: dict[int, int] = {}
    try:
        for consumer, sub in ((0, first), (1, second), (0, first), (1, second)):
            event = next(sub)
            seen[event.stream_position] = consumer
            if event.stream_position == 1:
                sub.nack(event, "park")
            else:
                sub.ack(event)
        assert set(seen.values()) == {0, 1}  # both consumers took messages
        wait_until(
            lambda: client.get_subscription_info("workers", stream_name="orders-1").parked_message_count == 1,
            what="one parked message",
        )
        info = client.get_subscription_info("workers", stream_name="orders-1")
        assert info.consumer_strategy == "RoundRobin" and len(info.connections) == 2
        client.replay_parked_events("workers", stream_name="orders-1")
        replayed: list[int] = []
        for sub in (first, second):
            while True:
                event = next(sub)
                sub.ack(event)
                replayed.append(event.stream_position)
                if 1 in replayed or len(replayed) > 8:
                    break
            if 1 in replayed:
                break
        assert 1 in replayed
    finally:
        first.stop()
        second.stop()
    infos = client.list_subscriptions()
    assert [(i.event_source, i.group_name) for i in infos] == [("orders-1", "workers")]
    client.delete_subscription("workers", stream_name="orders-1")
    with pytest.raises(NotFoundError):
        client.get_subscription_info("workers", stream_name="orders-1")


def test_subscription_to_all_with_a_filter(client: KurrentDBClient) -> None:
    _append(client, "orders-2", 2)
    client.append_to_stream(
        "other", current_version=StreamState.ANY, events=[NewEvent(type="Ignored", data=b"{}")]
    )
    client.create_subscription_to_all("all-orders", filter_include=["Ordered"], consumer_strategy="Pinned")
    sub = client.read_subscription_to_all("all-orders")
    try:
        types = []
        for _ in range(2):
            event = next(sub)
            types.append((event.stream_name, event.type))
            sub.ack(event)
    finally:
        sub.stop()
    assert types == [("orders-2", "Ordered"), ("orders-2", "Ordered")]
    info = client.get_subscription_info("all-orders")
    assert info.event_source == "$all" and info.start_from == "C:0/P:0"


def test_http_api_shapes_and_errors(node: NodeThread, client: KurrentDBClient) -> None:
    _append(client, "orders-3", 3)
    status, body = _http(node.port, "PUT", "/subscriptions/orders-3/web", {"readBatchSize": 10})
    assert status == 201 and body["result"] == "Success"
    status, _ = _http(node.port, "PUT", "/subscriptions/orders-3/web", {})
    assert status == 409
    status, body = _http(node.port, "PUT", "/subscriptions/%24all/web", {})
    assert status == 400 and "only supported over gRPC" in body["reason"]
    status, body = _http(
        node.port, "PUT", "/subscriptions/orders-3/bad", {"bufferSize": 5, "readBatchSize": 10}
    )
    assert status == 400 and "must be larger than ReadBatchSize" in body
    status, listing = _http(node.port, "GET", "/subscriptions")
    assert status == 200 and listing[0]["eventStreamId"] == "orders-3"
    assert set(listing[0]) == {
        "links", "eventStreamId", "groupName", "parkedMessageUri", "getMessagesUri", "status",
        "averageItemsPerSecond", "totalItemsProcessed", "lastProcessedEventNumber",
        "lastCheckpointedEventPosition", "lastKnownEventNumber", "lastKnownEventPosition",
        "connectionCount", "totalInFlightMessages",
    }  # fmt: skip
    status, page = _http(node.port, "GET", "/subscriptions?offset=0&count=5")
    assert status == 200 and page["total"] == 1 and page["subscriptions"][0]["groupName"] == "web"
    # the competing-consumer read over HTTP, then an ack
    status, feed = _http(node.port, "GET", "/subscriptions/orders-3/web/2?embed=body")
    assert status == 200 and len(feed["entries"]) == 2
    ack = next(link["uri"] for link in feed["links"] if link["relation"] == "ackAll")
    status, _ = _http(node.port, "POST", ack.split(f":{node.port}", 1)[1])
    assert status == 202
    status, detail = _http(node.port, "GET", "/subscriptions/orders-3/web/info")
    assert status == 200
    assert (
        detail["config"]["readBatchSize"] == 10 and detail["config"]["namedConsumerStrategy"] == "RoundRobin"
    )
    assert detail["totalItemsProcessed"] == 2 and detail["lastKnownEventPosition"] == "2"
    assert detail["outstandingMessagesCount"] == 0
    status, _ = _http(node.port, "POST", "/subscriptions/orders-3/web/replayParked?stopAt=-1")
    assert status == 400
    status, _ = _http(node.port, "POST", "/subscriptions/restart")
    assert status == 200
    wait_until(
        lambda: _http(node.port, "GET", "/subscriptions/orders-3/web/info")[0] == 200, what="restarted"
    )
    status, _ = _http(node.port, "DELETE", "/subscriptions/orders-3/web")
    assert status == 200
    status, _ = _http(node.port, "GET", "/subscriptions/orders-3")
    assert status == 404


def test_checkpoint_survives_a_node_restart(tmp_path: Path) -> None:
    options = node_options(tmp_path, "--insecure")
    thread = NodeThread(options, name="persistent-1").start()
    try:
        client = KurrentDBClient(f"kurrentdb://localhost:{thread.port}?tls=false")
        _append(client, "orders-4", 5)
        client.create_subscription_to_stream(
            "durable", stream_name="orders-4", min_checkpoint_count=1, checkpoint_after=0.1
        )
        sub = client.read_subscription_to_stream("durable", stream_name="orders-4")
        for _ in range(3):
            sub.ack(next(sub))
        wait_until(
            lambda: (
                client.get_subscription_info(
                    "durable", stream_name="orders-4"
                ).last_checkpointed_event_position
                == "2"
            ),
            what="the checkpoint at event 2",
        )
        sub.stop()
        client.close()
    finally:
        thread.stop()
    thread = NodeThread(options, name="persistent-2").start()
    try:
        client = KurrentDBClient(f"kurrentdb://localhost:{thread.port}?tls=false")
        info = client.get_subscription_info("durable", stream_name="orders-4")
        assert info.min_checkpoint_count == 1
        sub = client.read_subscription_to_stream("durable", stream_name="orders-4")
        event = next(sub)
        assert event.stream_position == 3  # 0-2 were checkpointed before the restart
        sub.stop()
        client.close()
    finally:
        thread.stop()


def test_parked_messages_over_http_view_truncate_and_extra_statistics(
    node: NodeThread, client: KurrentDBClient
) -> None:
    _append(client, "orders-5", 3)
    status, _ = _http(node.port, "PUT", "/subscriptions/orders-5/web", {"extraStatistics": True})
    assert status == 201
    # the group loads its start after the create's answer: read until the three messages came
    entries: list[dict[str, Any]] = []
    nacks: list[str] = []

    def read_all_three() -> bool:
        status, feed = _http(node.port, "GET", f"/subscriptions/orders-5/web/{3 - len(entries)}")
        assert status == 200
        if feed["entries"]:
            entries.extend(feed["entries"])
            nacks.append(next(link["uri"] for link in feed["links"] if link["relation"] == "nackAll"))
        return len(entries) == 3

    wait_until(read_all_three, what="the three messages over HTTP")
    for nack in nacks:
        status, _ = _http(node.port, "POST", nack.split(f":{node.port}", 1)[1] + "&action=park")
        assert status == 202

    def info() -> dict[str, Any]:
        return _http(node.port, "GET", "/subscriptions/orders-5/web/info")[1]

    wait_until(lambda: info()["parkedMessageCount"] == 3, what="three parked messages")
    view = "/subscriptions/viewparkedmessages/orders-5/web"
    status, parked = _http(node.port, "GET", f"{view}/head/backward/20?embed=body")
    assert status == 200 and parked["streamId"] == "$persistentsubscription-orders-5::web-parked"
    # resolved: the parked events (the parks of one nack run concurrently, each write off the loop, so
    # their order in the parked stream is the order they were written in, not always the nack's)
    order = [e["eventNumber"] for e in parked["entries"]]
    assert sorted(order) == [0, 1, 2]
    assert {e["streamId"] for e in parked["entries"]} == {"orders-5"}
    status, forward = _http(node.port, "GET", f"{view}/1/forward/1")
    assert status == 200 and len(forward["entries"]) == 1
    for bad in (f"{view}/x/backward/20", f"{view}/0/backward/0", f"{view}/head/forward/5"):
        assert _http(node.port, "GET", bad)[0] == 400, bad
    # truncate: drops parked messages without replaying them
    truncate = "/subscriptions/orders-5/web/truncateParked"
    assert _http(node.port, "POST", f"{truncate}?stopAt=x")[0] == 400
    assert _http(node.port, "POST", "/subscriptions/orders-5/nope/truncateParked")[0] == 404
    status, body = _http(node.port, "POST", f"{truncate}?stopAt=2")
    assert status == 200 and body["result"] == "Success"
    wait_until(lambda: info()["parkedMessageCount"] == 1, what="two parked messages truncated")
    status, parked = _http(node.port, "GET", f"{view}/head/backward/20")
    assert [e["eventNumber"] for e in parked["entries"]] == order[:1]  # the newest parked one is kept
    # extra statistics: a gRPC consumer's time to ack, KurrentDB's measurement names
    sub = client.read_subscription_to_stream("web", stream_name="orders-5")
    try:
        _append(client, "orders-5", 1)
        event = next(sub)
        sub.ack(event)

        def measured() -> list[dict[str, Any]]:
            connections = info()["connections"]
            return connections[0]["extraStatistics"] if connections else []

        keys = [m["key"] for m in wait_until(measured, what="a measurement")]
        assert keys[:4] == ["Mean", "Median", "Fastest", "Quintile 1"] and keys[-1] == "Highest"
    finally:
        sub.stop()
