"""kurrentdbclient's synchronous client against a real node, over TLS and in insecure mode."""

from __future__ import annotations

import json
import ssl
import uuid

import httpx
import pytest
from kurrentdbclient import KurrentDBClient, NewEvent, StreamState
from kurrentdbclient.exceptions import (
    AccessDeniedError,
    InvalidCommitPositionError,
    NotFoundError,
    StreamIsDeletedError,
    UnauthenticatedError,
    WrongCurrentVersionError,
)

MAX = 9223372036854775807


def name(prefix: str = "s") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def ev(kind: str = "Ev", n: int = 0) -> NewEvent:
    return NewEvent(type=kind, data=json.dumps({"n": n}).encode())


@pytest.fixture
def client(target):
    c = KurrentDBClient(target.uri, root_certificates=None)
    yield c
    c.close()


def test_append_positions_read_back_and_idempotency(client):
    stream = name()
    events = [ev("A", 0), ev("B", 1), ev("C", 2)]
    position = client.append_to_stream(stream, events=events, current_version=StreamState.NO_STREAM)
    recorded = client.get_stream(stream)
    assert [e.id for e in recorded] == [e.id for e in events]
    assert [e.stream_position for e in recorded] == [0, 1, 2]
    positions = [e.commit_position for e in recorded]
    assert positions == sorted(positions) and len(set(positions)) == 3  # one position per event
    assert all(e.commit_position == e.prepare_position for e in recorded)
    assert position == positions[-1]  # the reply carries the last event's position
    assert recorded[0].type == "A" and recorded[0].content_type == "application/json"
    assert recorded[0].recorded_at is not None

    # the same ids at the same expected version: success, original position, nothing written twice
    again = client.append_to_stream(stream, events=events, current_version=StreamState.NO_STREAM)
    assert again == position
    single = ev("D", 3)
    p1 = client.append_event(stream, event=single, current_version=2)
    assert client.append_event(stream, event=single, current_version=2) == p1
    assert client.get_current_version(stream) == 3
    assert len(client.get_stream(stream)) == 4


def test_wrong_expected_versions(client):
    stream = name()
    with pytest.raises(WrongCurrentVersionError) as info:
        client.append_to_stream(stream, events=[ev()], current_version=5)
    assert info.value.actual_version is StreamState.NO_STREAM
    with pytest.raises(WrongCurrentVersionError):  # the single-event Append RPC
        client.append_event(stream, event=ev(), current_version=StreamState.EXISTS)
    client.append_to_stream(stream, events=[ev(), ev()], current_version=StreamState.ANY)
    with pytest.raises(WrongCurrentVersionError) as info:
        client.append_to_stream(stream, events=[ev()], current_version=0)
    assert info.value.actual_version == 1
    with pytest.raises(WrongCurrentVersionError) as info:
        client.append_event(stream, event=ev(), current_version=StreamState.NO_STREAM)
    assert info.value.actual_version == 1
    client.append_event(stream, event=ev(), current_version=StreamState.EXISTS)
    assert client.get_current_version(stream) == 2


def test_stream_reads_forward_backward_limits(client):
    stream = name()
    client.append_to_stream(
        stream, events=[ev("E", i) for i in range(10)], current_version=StreamState.NO_STREAM
    )
    assert [e.stream_position for e in client.get_stream(stream, stream_position=4, limit=3)] == [4, 5, 6]
    assert [e.stream_position for e in client.get_stream(stream, backwards=True, limit=3)] == [9, 8, 7]
    back = client.get_stream(stream, stream_position=5, backwards=True)
    assert [e.stream_position for e in back] == [5, 4, 3, 2, 1, 0]
    assert client.get_stream(stream, stream_position=10) == ()
    with pytest.raises(NotFoundError):
        client.get_stream(name("missing"))
    assert client.get_current_version(name("missing")) is StreamState.NO_STREAM


def test_read_all_positions_filters_and_system_events(client):
    stream = name("order")
    other = name("invoice")
    client.append_to_stream(
        stream, events=[ev("OrderPlaced", i) for i in range(3)], current_version=StreamState.NO_STREAM
    )
    client.append_to_stream(other, events=[ev("InvoiceSent")], current_version=StreamState.NO_STREAM)
    everything = list(client.read_all(filter_exclude=()))
    assert everything[0].type.startswith("$")  # a fresh database starts with system events
    positions = [e.commit_position for e in everything]
    assert positions == sorted(positions)
    mine = [e for e in everything if e.stream_name == stream]
    assert len(mine) == 3

    # forward from a position includes that event; backward from it excludes it
    start = mine[1].commit_position
    forward = list(client.read_all(commit_position=start, limit=2, filter_exclude=()))
    assert forward[0].commit_position == start and forward[0].stream_name == stream
    backward = list(client.read_all(commit_position=start, backwards=True, limit=1, filter_exclude=()))
    assert backward[0].commit_position == mine[0].commit_position

    # the default filter leaves out $-typed events
    assert all(not e.type.startswith("$") for e in client.read_all())
    # filters: event type regex, stream name prefix
    types = list(client.read_all(filter_include=["Order.*"]))
    assert {e.type for e in types} == {"OrderPlaced"} and len(types) >= 3
    by_prefix = list(
        client.read_all(filter_include=[other], filter_by_stream_name=True, filter_by_prefix=True)
    )
    assert [e.stream_name for e in by_prefix] == [other]
    by_regex = list(client.read_all(filter_include=["invoice-.*"], filter_by_stream_name=True))
    assert [e.stream_name for e in by_regex] == [other]
    excluded = list(client.read_all(filter_exclude=["OrderPlaced", r"\$.*"]))
    assert all(e.type != "OrderPlaced" for e in excluded)
    # commit position of the database: the last non-system event
    assert client.get_commit_position() == by_prefix[0].commit_position
    # a position inside an event is refused
    with pytest.raises(InvalidCommitPositionError):
        list(client.read_all(commit_position=start + 1))


def test_soft_delete_recreate_and_delete_errors(client):
    stream = name()
    client.append_to_stream(stream, events=[ev(), ev()], current_version=StreamState.NO_STREAM)
    client.delete_stream(stream, current_version=1)
    with pytest.raises(NotFoundError):
        client.get_stream(stream)
    metadata, _ = client.get_stream_metadata(stream)
    assert metadata == {"$tb": MAX}
    assert client.get_current_version(stream) is StreamState.NO_STREAM
    # recreate with no-stream: numbering continues, $tb rewritten to the first new event
    client.append_to_stream(stream, events=[ev("Again")], current_version=StreamState.NO_STREAM)
    recorded = client.get_stream(stream)
    assert [(e.type, e.stream_position) for e in recorded] == [("Again", 2)]
    metadata, _ = client.get_stream_metadata(stream)
    assert metadata["$tb"] == 2
    # deleting again with "exists" after a delete says deleted; wrong version and never-existed
    client.delete_stream(stream, current_version=StreamState.EXISTS)
    with pytest.raises(StreamIsDeletedError):
        client.delete_stream(stream, current_version=StreamState.EXISTS)
    other = name()
    client.append_to_stream(other, events=[ev()], current_version=StreamState.NO_STREAM)
    with pytest.raises(WrongCurrentVersionError) as info:
        client.delete_stream(other, current_version=5)
    assert info.value.actual_version == 0
    with pytest.raises(NotFoundError):
        client.delete_stream(name("never"), current_version=StreamState.EXISTS)
    # recreate with the old last revision
    client.delete_stream(other, current_version=0)
    client.append_to_stream(other, events=[ev("Back")], current_version=0)
    assert [e.stream_position for e in client.get_stream(other)] == [1]


def test_tombstone(client):
    stream = name()
    client.append_to_stream(stream, events=[ev()], current_version=StreamState.NO_STREAM)
    client.tombstone_stream(stream, current_version=StreamState.ANY)
    with pytest.raises(StreamIsDeletedError):
        client.get_stream(stream)
    with pytest.raises(StreamIsDeletedError):
        client.get_stream_metadata(stream)
    with pytest.raises(StreamIsDeletedError):
        client.append_to_stream(stream, events=[ev()], current_version=StreamState.ANY)
    with pytest.raises(StreamIsDeletedError):
        client.delete_stream(stream, current_version=StreamState.ANY)
    # the metastream of a tombstoned stream can still be appended to
    client.append_event(f"$${stream}", event=ev("$metadata"), current_version=StreamState.ANY)
    # tombstoning a stream that never existed, with "any", works
    never = name("never")
    client.tombstone_stream(never, current_version=StreamState.ANY)
    with pytest.raises(StreamIsDeletedError):
        client.get_stream(never)


def test_metadata_max_count_and_truncate_before(client):
    stream = name()
    client.append_to_stream(
        stream, events=[ev("E", i) for i in range(5)], current_version=StreamState.NO_STREAM
    )
    assert client.get_stream_metadata(stream) == ({}, StreamState.NO_STREAM)
    client.set_stream_metadata(stream, metadata={"$maxCount": 2})
    metadata, version = client.get_stream_metadata(stream)
    assert metadata == {"$maxCount": 2} and version == 0
    assert [e.stream_position for e in client.get_stream(stream)] == [3, 4]
    client.set_stream_metadata(stream, metadata={"$tb": 4}, current_version=0)
    assert [e.stream_position for e in client.get_stream(stream)] == [4]
    with pytest.raises(WrongCurrentVersionError):
        client.set_stream_metadata(stream, metadata={}, current_version=0)
    # metadata is the last $metadata event of $$stream
    last = client.get_stream(f"$${stream}", backwards=True, limit=1)[0]
    assert last.type == "$metadata" and json.loads(last.data) == {"$tb": 4}


def test_gossip_persistent_subscriptions_and_http_on_the_same_port(client, target):
    members = client.read_gossip()
    assert len(members) == 1
    assert members[0].state == "NODE_STATE_LEADER" and members[0].port == target.node.port
    assert client.list_subscriptions() == []
    # the HTTP API answers on the very same port
    scheme = "https" if target.tls else "http"
    verify = ssl.create_default_context(cafile=target.ca) if target.ca else False
    with httpx.Client(verify=verify, auth=("admin", "changeit")) as http:
        answer = http.get(
            f"{scheme}://localhost:{target.node.port}/info", headers={"Accept": "application/json"}
        )
    assert answer.status_code == 200


def test_discovery_finds_the_leader(target):
    uri = target.uri.replace("kurrentdb://", "kurrentdb+discover://")
    with KurrentDBClient(uri) as c:
        stream = name()
        c.append_to_stream(stream, events=[ev()], current_version=StreamState.NO_STREAM)
        assert len(c.get_stream(stream)) == 1


def test_credentials_and_roles(target):
    if not target.tls:
        # insecure mode, as KurrentDB's: no TLS, no authentication (the client sends no credentials)
        with KurrentDBClient(target.uri) as c:
            assert list(c.read_all(filter_exclude=(), limit=1))
        return
    with KurrentDBClient(target.uri.replace("changeit", "wrong")) as c, pytest.raises(UnauthenticatedError):
        c.get_stream(name())
    with KurrentDBClient(target.uri.replace("admin:", "ops:")) as c:
        stream = name()
        c.append_to_stream(stream, events=[ev()], current_version=StreamState.NO_STREAM)
        assert len(c.get_stream(stream)) == 1
        with pytest.raises(AccessDeniedError):  # $all is for admins
            list(c.read_all(limit=1))
