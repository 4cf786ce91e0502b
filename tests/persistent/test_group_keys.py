"""A group's key names one group only (issue 33, point 2): group ``x::y`` of the admins-only stream
``secret`` and group ``y`` of stream ``secret::x`` were one key (``secret::x::y``), so bob, refused on
``secret``, read and parked its events through ``/subscriptions/secret::x/y`` and over gRPC. The key
now escapes the stream's ``%`` and ``:`` (evdb.persistent.model.group_key), and the checkpoint and
parked streams of groups made before move to the new names when the groups load."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import httpx
import pytest
from kurrentdbclient import KurrentDBClient
from kurrentdbclient.exceptions import NotFoundError
from test_clients import NodeThread, node_options
from waiting import wait_until

from evdb.persistent.model import checkpoint_stream, group_key, parked_stream
from evdb.streams import NewEvent

ADMIN = ("admin", "changeit")
BOB = ("bob", "bob-password")


@pytest.fixture
def node(tmp_path: Path):
    thread = NodeThread(node_options(tmp_path, "--insecure"), name="group-keys").start()
    yield thread
    thread.stop()


@pytest.fixture
def http(node: NodeThread):
    with httpx.Client(base_url=f"http://127.0.0.1:{node.port}", timeout=10) as client:
        yield client


def _append(http: httpx.Client, stream: str, n: int) -> None:
    events = [{"eventId": str(uuid.uuid4()), "eventType": "Secret", "data": {"n": i}} for i in range(n)]
    r = http.post(
        f"/streams/{stream}",
        content=json.dumps(events),
        headers={"Content-Type": "application/vnd.kurrent.events+json"},
        auth=ADMIN,
    )
    assert r.status_code == 201, r.text


def test_keys_of_different_groups_never_meet():
    assert group_key("secret", "x::y") != group_key("secret::x", "y")
    assert checkpoint_stream("secret", "x::y") != checkpoint_stream("secret::x", "y")
    assert parked_stream("secret", "x::y") != parked_stream("secret::x", "y")
    assert group_key("a%3A", "g") != group_key("a:", "g")
    assert group_key("orders", "workers") == "orders::workers"  # KurrentDB's, for a plain stream


def test_bob_neither_reads_nor_parks_the_admins_group_through_a_colliding_name(node, http):
    assert http.post("/users", json={"loginName": "bob", "password": BOB[1]}, auth=ADMIN).status_code == 201
    acl = {"$acl": {"$r": "$admins", "$w": "$admins"}}
    r = http.post(
        "/streams/secret/metadata",
        content=json.dumps(acl),
        headers={"Content-Type": "application/json", "Kurrent-EventId": str(uuid.uuid4())},
        auth=ADMIN,
    )
    assert r.status_code == 201, r.text
    _append(http, "secret", 3)
    assert http.put("/subscriptions/secret/x::y", json={}, auth=ADMIN).status_code == 201
    assert http.get("/subscriptions/secret/x::y/1", auth=BOB).status_code == 401  # refused on secret

    # through the colliding name: no such group
    r = http.get("/subscriptions/secret::x/y/3?embed=body", auth=BOB, headers={"Accept": "application/json"})
    assert r.status_code == 404, r.text
    r = http.post(f"/subscriptions/secret::x/y/nack?ids={uuid.uuid4()}&action=park", auth=BOB)
    assert r.status_code in (202, 404)
    uri = f"kurrentdb://bob:{BOB[1]}@127.0.0.1:{node.port}?tls=false"
    with KurrentDBClient(uri) as client, pytest.raises(NotFoundError):
        next(iter(client.read_subscription_to_stream("y", stream_name="secret::x")))
    # the admin's group still has every event, none parked
    feed = http.get(
        "/subscriptions/secret/x::y/3?embed=body", auth=ADMIN, headers={"Accept": "application/json"}
    )
    assert feed.status_code == 200 and len(feed.json()["entries"]) == 3
    info = http.get("/subscriptions/secret/x::y/info", auth=ADMIN).json()
    assert info["parkedMessageCount"] == 0
    assert info["parkedMessageUri"].endswith("/streams/%24persistentsubscription-secret::x::y-parked")


def test_a_group_made_before_the_escaped_keys_keeps_its_checkpoint_and_parked_messages(node, http):
    """A group of stream ``a::b`` kept its checkpoint and parked messages under the bare key
    (``$persistentsubscription-a::b::g-...``); loading it moves them to the escaped names. Group ``y``
    of ``p::q`` and group ``q::y`` of ``p`` shared their bare names: nothing is moved."""
    _append(http, "a::b", 5)
    for stream, group in (("a::b", "g"), ("p::q", "y"), ("p", "q::y")):
        r = http.put(f"/subscriptions/{stream}/{group}", json={}, auth=ADMIN)
        assert r.status_code == 201, r.text
    db = node.node.db  # type: ignore[union-attr]
    checkpoint = NewEvent("$SubscriptionCheckpoint", json.dumps("3").encode(), is_json=True)
    meta = json.dumps({"added": "2026-01-01T00:00:00+00:00", "reason": "r", "subscriptionEventNumber": 1})
    parked = NewEvent("$>", b"1@a::b", meta.encode(), is_json=False)
    db.append("$persistentsubscription-a::b::g-checkpoint", [checkpoint])
    db.append("$persistentsubscription-a::b::g-parked", [parked])
    db.append("$persistentsubscription-p::q::y-checkpoint", [checkpoint])
    assert http.post("/subscriptions/restart", auth=ADMIN).status_code == 200

    def info() -> dict | None:
        r = http.get("/subscriptions/a::b/g/info", auth=ADMIN)
        return r.json() if r.status_code == 200 else None

    detail = wait_until(lambda: (i := info()) and i["parkedMessageCount"] == 1 and i, what="the group moved")
    assert detail["lastCheckpointedEventPosition"] == "3"
    assert db.read_stream_backward(checkpoint_stream("a::b", "g"), None, 1).events[0].data == b'"3"'
    for old in ("$persistentsubscription-a::b::g-checkpoint", "$persistentsubscription-a::b::g-parked"):
        assert db.stream_state(old).soft_deleted  # moved: a group whose new name it is starts afresh
    # the shared bare name is not moved: it stays the name of group q::y of p (a stream without ':'
    # keeps KurrentDB's names), and group y of p::q starts without it
    assert db.stream_state("$persistentsubscription-p::q::y-checkpoint").last_event_number == 0
    assert db.stream_state(checkpoint_stream("p::q", "y")).last_event_number == -1
