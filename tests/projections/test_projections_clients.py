"""The system projections through KurrentDB's own Python client and the HTTP API, against a real node
(``--run-projections System --start-standard-projections true``), insecure and over TLS."""

from __future__ import annotations

import json
import ssl
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from clients.conftest import ADMIN, NodeThread, node_options
from kurrentdbclient import KurrentDBClient, NewEvent, StreamState
from kurrentdbclient.exceptions import (
    FailedPreconditionError,
    GrpcError,
    NotFoundError,
    ServiceUnavailableError,
)
from waiting import wait_until

from evdb.tls.certs import DevCertificates, generate_dev_certificates

PROJECTIONS = ["$streams", "$stream_by_category", "$by_category", "$by_event_type", "$by_correlation_id"]


class Running:
    def __init__(self, thread: NodeThread, uri: str, http: httpx.Client) -> None:
        self.thread = thread
        self.uri = uri
        self.http = http


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> DevCertificates:
    return generate_dev_certificates(tmp_path_factory.mktemp("certs"))


def _start(path: Path, tls: bool, certs: DevCertificates, *extra: str) -> Running:
    args = ["--run-projections", "System", "--start-standard-projections", "true", *extra]
    if tls:
        args += [
            "--certificate-file",
            str(certs.cert_path),
            "--certificate-private-key-file",
            str(certs.key_path),
            "--trusted-root-certificates-path",
            str(certs.ca_path),
        ]
    else:
        args.append("--insecure")
    thread = NodeThread(node_options(path, *args), name="projections").start()
    user, password = ADMIN
    if tls:
        uri = f"kurrentdb://{user}:{password}@localhost:{thread.port}?tlsCaFile={certs.ca_path}"
        http = httpx.Client(
            base_url=f"https://localhost:{thread.port}",
            verify=ssl.create_default_context(cafile=str(certs.ca_path)),
            auth=ADMIN,
        )
    else:
        uri = f"kurrentdb://localhost:{thread.port}?tls=false"
        http = httpx.Client(base_url=f"http://127.0.0.1:{thread.port}", auth=ADMIN)
    return Running(thread, uri, http)


@pytest.fixture(scope="module", params=["insecure", "tls"])
def running(request, tmp_path_factory, certs) -> Iterator[Running]:
    r = _start(tmp_path_factory.mktemp("node"), request.param == "tls", certs)
    yield r
    r.http.close()
    r.thread.stop()


@pytest.fixture
def client(running) -> Iterator[KurrentDBClient]:
    c = KurrentDBClient(running.uri)
    yield c
    c.close()


def _category() -> str:
    return "order" + uuid.uuid4().hex[:8]


def test_category_and_event_type_streams_resolve_to_the_events(client):
    category = _category()
    kind = "Placed" + uuid.uuid4().hex[:6]
    first = [NewEvent(type=kind, data=b"{}"), NewEvent(type="Paid", data=b"{}")]
    client.append_to_stream(f"{category}-1", events=first, current_version=StreamState.NO_STREAM)
    second = NewEvent(type=kind, data=b'{"x":1}')
    client.append_to_stream(f"{category}-2", events=[second], current_version=StreamState.NO_STREAM)

    def projected():
        try:
            return len(client.get_stream(f"$ce-{category}", resolve_links=True)) == 3
        except NotFoundError:
            return False

    wait_until(projected, 20, "the $ce- stream")
    resolved = client.get_stream(f"$ce-{category}", resolve_links=True)
    assert [e.id for e in resolved] == [first[0].id, first[1].id, second.id]
    assert [e.stream_name for e in resolved] == [f"{category}-1", f"{category}-1", f"{category}-2"]
    assert all(e.link is not None and e.link.stream_name == f"$ce-{category}" for e in resolved)
    assert resolved[0].link.type == "$>" and resolved[0].link.data == f"0@{category}-1".encode()
    raw = client.get_stream(f"$ce-{category}")
    assert [e.type for e in raw] == ["$>"] * 3 and raw[2].data == f"0@{category}-2".encode()

    wait_until(
        lambda: len(client.get_stream(f"$et-{kind}", resolve_links=True)) == 2,
        20,
        "$et-",
        tolerate=(NotFoundError,),
    )
    by_type = client.get_stream(f"$et-{kind}", resolve_links=True)
    assert [e.id for e in by_type] == [first[0].id, second.id]
    filtered = list(client.read_all(filter_include=(kind,)))
    assert [e.id for e in filtered] == [e.id for e in by_type]

    # a catch-up subscription with resolve_links delivers the events
    subscription = client.subscribe_to_stream(f"$et-{kind}", resolve_links=True)
    seen = []
    for event in subscription:
        seen.append(event.id)
        if len(seen) == 2:
            subscription.stop()
    assert seen == [first[0].id, second.id]

    # $all with resolve_links: the links come back as the events they point to
    everything = list(client.read_all(resolve_links=True, filter_exclude=[]))
    assert sum(1 for e in everything if e.id == second.id) > 1

    # $streams and $category-<category>
    streams = client.get_stream("$streams", resolve_links=False)
    assert f"0@{category}-1".encode() in [e.data for e in streams]
    categories = client.get_stream(f"$category-{category}")
    assert [e.data for e in categories] == [f"{category}-1".encode(), f"{category}-2".encode()]
    assert {e.type for e in categories} == {"$@"}


def test_a_link_to_a_deleted_event_is_skipped_by_the_client(client):
    category = _category()
    kept = NewEvent(type="Kept", data=b"{}")
    client.append_to_stream(
        f"{category}-a", events=[NewEvent(type="Gone", data=b"{}")], current_version=StreamState.NO_STREAM
    )
    client.append_to_stream(f"{category}-b", events=[kept], current_version=StreamState.NO_STREAM)
    wait_until(
        lambda: len(client.get_stream(f"$ce-{category}")) == 2, 20, "two links", tolerate=(NotFoundError,)
    )
    client.delete_stream(f"{category}-a", current_version=0)
    wait_until(lambda: len(client.get_stream(f"$ce-{category}")) == 3, 20, "the deletion's link")
    resolved = client.get_stream(f"$ce-{category}", resolve_links=True)
    # the deleted event's link has no event (the client drops it); the deletion's link reaches $$<stream>
    assert resolved[0].id == kept.id
    assert [e.stream_name for e in resolved] == [f"{category}-b", f"$${category}-a"]


def test_management_calls(client, running):
    statistics = client.list_all_projection_statistics()
    assert sorted(s.name for s in statistics) == sorted(PROJECTIONS)
    assert {s.status for s in statistics} == {"Running"} and {s.mode for s in statistics} == {"Continuous"}
    stats = client.get_projection_statistics(name="$by_category")
    assert stats.name == "$by_category" and stats.position.startswith("C:")
    with pytest.raises(NotFoundError):
        client.get_projection_statistics(name="no-such-projection")
    assert client.get_projection_state(name="$by_category").value == {}

    client.disable_projection(name="$by_correlation_id")
    assert client.get_projection_statistics(name="$by_correlation_id").status == "Stopped"
    client.enable_projection(name="$by_correlation_id")
    assert client.get_projection_statistics(name="$by_correlation_id").status == "Running"
    before = client.get_projection_statistics(name="$by_correlation_id")
    client.reset_projection(name="$by_correlation_id")
    after = client.get_projection_statistics(name="$by_correlation_id")
    assert after.epoch == after.version > before.version

    with pytest.raises(GrpcError, match="User-defined"):
        client.create_projection(name="mine", query="fromAll().when({})")
    with pytest.raises(GrpcError, match="User-defined"):
        client.update_projection(name="$by_category", query="fromAll()")
    with pytest.raises(FailedPreconditionError, match="deletion of System Projections"):
        client.delete_projection(name="$by_category")


def test_http_projections_api_and_resolve_link_tos(client, running):
    http = running.http
    listed = http.get("/projections/all-non-transient").json()["projections"]
    assert sorted(p["name"] for p in listed) == sorted(PROJECTIONS)
    assert (
        listed[0]["statusUrl"].endswith("/projection/%24streams") or "/projection/$" in listed[0]["statusUrl"]
    )
    assert http.get("/projections/transient").json() == {"projections": []}
    one = http.get("/projection/$by_event_type")
    assert one.status_code == 200 and one.json()["status"] == "Running"
    assert http.get("/projection/nope").status_code == 404
    assert http.post("/projection/$by_event_type/command/disable").json() == {"name": "$by_event_type"}
    assert http.get("/projection/$by_event_type").json()["status"] == "Stopped"
    assert http.post("/projection/$by_event_type/command/enable").status_code == 200
    refused = http.post("/projections/continuous?name=x&type=JS", content="fromAll()")
    assert refused.status_code == 501 and "User-defined" in refused.text
    assert http.delete("/projection/$by_category").status_code == 500

    category = _category()
    event = NewEvent(type="Made", data=b'{"made":true}')
    client.append_to_stream(f"{category}-1", events=[event], current_version=StreamState.NO_STREAM)
    feed_url = f"/streams/$ce-{category}?embed=body"
    wait_until(lambda: http.get(feed_url).status_code == 200, 20, "the $ce- stream over HTTP")
    resolved = http.get(feed_url, headers={"Accept": "application/vnd.kurrent.atom+json"}).json()["entries"][
        0
    ]
    assert resolved["eventId"] == str(event.id) and resolved["streamId"] == f"{category}-1"
    assert resolved["positionStreamId"] == f"$ce-{category}" and resolved["summary"] == "$>"
    assert resolved["data"] == {"made": True} and resolved["isLinkMetaData"] is True
    assert json.loads(resolved["linkMetaData"])["$o"] == f"{category}-1"
    raw = http.get(feed_url, headers={"ES-ResolveLinkTos": "false"}).json()["entries"][0]
    assert raw["eventType"] == "$>" and raw["streamId"] == f"$ce-{category}"
    assert http.get(feed_url, headers={"Kurrent-ResolveLinkTos": "maybe"}).status_code == 400
    single = http.get(f"/streams/$ce-{category}/0")
    assert single.json() == {"made": True}


def test_http_projection_config(running):
    http = running.http
    config = http.get("/projection/$by_category/config")
    assert config.status_code == 200 and config.headers["Content-Type"].startswith("application/json")
    # KurrentDB's ProjectionConfig through Json.NET: false and zero left out, indented, then the label
    assert config.json() == {
        "emitEnabled": True,
        "checkpointHandledThreshold": 4000,
        "checkpointUnhandledBytesThreshold": 10000000,
        "pendingEventsThreshold": 5000,
        "maxWriteBatchLength": 500,
        "label": "ProjectionMessage-Management-ProjectionConfig",
    }
    assert config.text.startswith('{\n  "emitEnabled": true,')
    assert http.get("/projection/nope/config").status_code == 404
    defaults = {k: v for k, v in config.json().items() if k != "label"}
    running_now = http.put("/projection/$by_correlation_id/config", json=defaults)
    assert running_now.status_code == 500
    assert running_now.text == "Cannot update the config of a projection that hasn't been stopped or faulted."

    assert http.post("/projection/$by_correlation_id/command/disable").status_code == 200
    before = http.get("/projection/$by_correlation_id").json()["version"]
    for body, reason in [
        (b"{not json", "Failed to parse the projection config"),
        (b'{"checkpointHandledThreshold": "many"}', "checkpointHandledThreshold must be a 32-bit integer"),
        (b'{"maxWriteBatchLength": 10, "projectionExecutionTimeout": 0}', "should be positive. Found : 0"),
        (b'{"maxWriteBatchLength": 10, "trackEmittedStreams": true}', "trackEmittedStreams is not supported"),
        (
            b'{"emitEnabled": true}',
            "maxWriteBatchLength must be positive",
        ),  # missing: 0, as KurrentDB reads it
    ]:
        refused = http.put("/projection/$by_correlation_id/config", content=body)
        assert refused.status_code == 400 and reason in refused.text, (body, refused.text)
    assert http.get("/projection/$by_correlation_id").json()["version"] == before  # nothing written
    wanted = {
        "emitEnabled": True,
        "checkpointAfterMs": 10,
        "checkpointHandledThreshold": 100,
        "checkpointUnhandledBytesThreshold": 5000,
        "pendingEventsThreshold": 50,
        "maxWriteBatchLength": 20,
        "maxAllowedWritesInFlight": 2,
        "projectionExecutionTimeout": 250,
    }
    updated = http.put("/projection/$by_correlation_id/config", json=wanted)
    assert updated.status_code == 200 and updated.json() == {"name": "$by_correlation_id"}
    got = http.get("/projection/$by_correlation_id/config").json()
    assert got == {**wanted, "label": "ProjectionMessage-Management-ProjectionConfig"}
    assert http.get("/projection/$by_correlation_id").json()["version"] == before + 1
    assert http.put("/projection/$by_correlation_id/config", json=defaults).status_code == 200
    assert http.post("/projection/$by_correlation_id/command/enable").status_code == 200

    user = http.put("/projection/$by_category/config", json=defaults, auth=("nobody", "wrong"))
    assert user.status_code == 401


def test_last_scavenge_before_any_is_the_zero_guid(running):
    """KurrentDB's ScavengeGetLastResultDto when no scavenge has run: Guid.Empty, no link, Unknown."""
    last = running.http.get("/admin/scavenge/last", headers={"Accept": "application/json"})
    assert last.status_code == 200
    assert last.json() == {
        "scavengeId": "00000000-0000-0000-0000-000000000000",
        "scavengeLink": "",
        "scavengeResult": "Unknown",
    }


def test_a_tombstoned_emitted_stream_faults_the_projection_as_kurrentdb(tmp_path, certs):
    """Visible over gRPC and HTTP: status "Faulted (Enabled)" and KurrentDB's reason."""
    fresh = _start(tmp_path, False, certs)
    client = KurrentDBClient(fresh.uri)
    try:
        client.append_to_stream(
            "$bc-doomed", events=[NewEvent(type="X", data=b"{}")], current_version=StreamState.ANY
        )
        client.tombstone_stream("$bc-doomed", current_version=StreamState.ANY)
        caused = NewEvent(type="Made", data=b"{}", metadata=b'{"$correlationId":"doomed"}')
        client.append_to_stream("widget-1", events=[caused], current_version=StreamState.NO_STREAM)
        reason = "Stream : $bc-doomed is deleted. Cannot emit events to it"

        def faulted():
            return client.get_projection_statistics(name="$by_correlation_id").status == "Faulted (Enabled)"

        # the leader may still be loading its projections (UNAVAILABLE: "Server Is Not Ready")
        wait_until(faulted, 20, "$by_correlation_id to fault", tolerate=(ServiceUnavailableError,))
        stats = client.get_projection_statistics(name="$by_correlation_id")
        assert stats.state_reason == reason
        over_http = fresh.http.get("/projection/$by_correlation_id").json()
        assert over_http["status"] == "Faulted (Enabled)" and over_http["stateReason"] == reason
        assert client.get_projection_statistics(name="$by_category").status == "Running"
    finally:
        client.close()
        fresh.http.close()
        fresh.thread.stop()
