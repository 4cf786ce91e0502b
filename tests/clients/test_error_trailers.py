"""KurrentDB's gRPC error shapes on a real node: the ``exception`` trailers and the facts beside them
(KurrentDB's ``RpcExceptions``), read raw with grpcio and through kurrentdbclient's exception classes;
a passed deadline is DEADLINE_EXCEEDED; ServerFeatures lists the methods served; a filtered ``$all``
subscription whose window is sent as ``count`` gets KurrentDB's checkpoints. The rules themselves
(trailers of each error, the checkpoint pages, the version) are checked without a node first."""

from __future__ import annotations

import base64
import json
import socket
import ssl
import uuid
from collections.abc import Iterator

import grpc
import h2.connection
import h2.events
import pytest
from kurrentdbclient import KurrentDBClient, NewEvent, StreamState
from kurrentdbclient.exceptions import (
    AccessDeniedError,
    NotFoundError,
    StreamIsDeletedError,
    WrongCurrentVersionError,
)
from kurrentdbclient.protos.v1 import shared_pb2, streams_pb2, streams_pb2_grpc

from evdb import errors
from evdb.grpc.errors import KurrentError
from evdb.grpc.features import SERVICE, SupportedMethods, server_version, supported_methods
from evdb.grpc.streams import READ_BATCH_SIZE, _FilterCheckpoints
from tests.clients.conftest import ADMIN, NodeThread, tls_node_with_user

MAX_APPEND = 4096
USER = ("trailers-user", "trailers-pw")
ReadOptions = streams_pb2.ReadReq.Options


def name(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def ev(kind: str = "Ev") -> NewEvent:
    return NewEvent(type=kind, data=json.dumps({"k": kind}).encode())


# -- the rules, without a node ---------------------------------------------------------------------------
def test_each_mapped_error_names_its_kurrentdb_exception_and_facts():
    assert errors.trailers_of(errors.StreamDeleted("s")) == {
        "exception": "stream-deleted",
        "stream-name": "s",
    }
    assert errors.trailers_of(errors.StreamNotFound("s")) == {
        "exception": "stream-not-found",
        "stream-name": "s",
    }
    assert errors.trailers_of(errors.WrongExpectedVersion("s", 7, 2, "Delete")) == {
        "exception": "wrong-expected-version",
        "stream-name": "s",
        "expected-version": "7",
        "actual-version": "2",
    }
    assert str(errors.WrongExpectedVersion("s", -2, -1, "Delete")).startswith("Delete failed due to")
    assert errors.trailers_of(errors.AccessDenied()) == {"exception": "access-denied"}
    assert errors.trailers_of(errors.NotLeader("10.0.0.2", 2113)) == {
        "exception": "not-leader",
        "leader-endpoint-host": "10.0.0.2",
        "leader-endpoint-port": "2113",
    }
    assert errors.trailers_of(errors.EventTooLarge("big", limit=4096)) == {
        "exception": "maximum-append-size-exceeded",
        "maximum-append-size": "4096",
    }
    assert errors.trailers_of(errors.ScavengeNotFound("abc")) == {
        "exception": "scavenge-not-found",
        "scavenge-id": "abc",
    }
    assert errors.trailers_of(errors.PersistentSubscriptionNotFound("s", "g")) == {
        "exception": "persistent-subscription-does-not-exist",
        "stream-name": "s",
        "group-name": "g",
    }
    assert errors.trailers_of(errors.PersistentSubscriptionFailed("s", "g", "why"))["reason"] == "why"
    for kind in (errors.PersistentSubscriptionExists, errors.MaximumSubscribersReached):
        assert errors.trailers_of(kind("s", "g"))["group-name"] == "g"
    assert errors.trailers_of(errors.PersistentSubscriptionDropped("s", "g"))["exception"] == (
        "persistent-subscription-dropped"
    )
    # errors KurrentDB sends without trailers, and what is not evdb's
    assert errors.trailers_of(errors.InvalidInput("bad")) == {}
    assert errors.trailers_of(errors.DatabaseReopening()) == {}
    assert errors.trailers_of(ValueError("x")) == {}


def test_trailer_values_are_what_http2_carries():
    error = KurrentError(
        grpc_status(), "m", {"exception": "stream-deleted", "stream-name": "bücher 100%", "empty": ""}
    )
    assert error.trailers == {"exception": "stream-deleted", "stream-name": "b%C3%BCcher 100%25"}


def grpc_status():
    from grpclib.const import Status

    return Status.FAILED_PRECONDITION


def test_filter_checkpoints_follow_kurrentdb_pages():
    # window 4 (max=4), multiplier 2: pages of 4 events looked at, a checkpoint every 8
    cp = _FilterCheckpoints(4, 8)
    due = [cp.looked_at(p, matched=False) for p in range(1, 21)]
    assert [p for p in due if p is not None] == [8, 16]
    assert cp.caught_up() == 20  # end of history: one more, before caught_up
    assert cp.caught_up() is None  # never the same position twice
    live = [cp.looked_at(p, matched=False) for p in range(21, 40)]
    assert [p for p in live if p is not None] == [28, 36]  # live: every 8 events

    # a page also ends at 32 matching events (KurrentDB's ReadBatchSize), whatever the window
    cp = _FilterCheckpoints(1000, 40)
    due = [cp.looked_at(p, matched=True) for p in range(1, 100)]
    assert [p for p in due if p is not None] == [64, 96]  # pages end at 32, 64, 96 matches

    # nothing looked at (a subscription from the end): no checkpoint before caught_up
    assert _FilterCheckpoints(READ_BATCH_SIZE, READ_BATCH_SIZE).caught_up() is None


def test_server_features_answer_shape():
    assert server_version("24.10.0-evdb.0.1.0") == "24.10.0"
    answer = supported_methods(
        [
            "/event_store.client.streams.Streams/Read",
            "/event_store.client.streams.Streams/BatchAppend",
            "/event_store.client.streams.Streams/Read",  # listed once
            "/event_store.client.persistent_subscriptions.PersistentSubscriptions/Create",
            "/event_store.client.projections.Projections/Create",
            "/event_store.cluster.Gossip/Read",  # not a client service: not listed
        ],
        "24.10.0-evdb.0.1.0",
    )
    got = {(m.service_name, m.method_name): list(m.features) for m in answer.methods}
    assert got == {
        ("event_store.client.streams.streams", "read"): ["position", "events"],
        ("event_store.client.streams.streams", "batchappend"): ["deadline_duration"],
        ("event_store.client.persistent_subscriptions.persistentsubscriptions", "create"): ["stream", "all"],
        ("event_store.client.projections.projections", "create"): ["track_emitted_streams"],
    }
    assert SupportedMethods.FromString(answer.SerializeToString()).event_store_server_version == "24.10.0"


# -- a real node ---------------------------------------------------------------------------------------
class Node:
    def __init__(self, thread: NodeThread, ca: bytes, ca_path: str) -> None:
        self.thread = thread
        self.ca_path = ca_path
        self.channel = grpc.secure_channel(f"localhost:{thread.port}", grpc.ssl_channel_credentials(ca))
        self.streams = streams_pb2_grpc.StreamsStub(self.channel)

    def metadata(self, credentials: tuple[str, str] = ADMIN) -> list[tuple[str, str]]:
        token = base64.b64encode(":".join(credentials).encode()).decode()
        return [("authorization", f"Basic {token}")]

    def client(self, credentials: tuple[str, str] = ADMIN) -> KurrentDBClient:
        user, password = credentials
        return KurrentDBClient(
            f"kurrentdb://{user}:{password}@localhost:{self.thread.port}?tlsCaFile={self.ca_path}"
        )


@pytest.fixture(scope="module")
def node(tmp_path_factory) -> Iterator[Node]:
    base = tmp_path_factory.mktemp("trailers")
    thread, certs = tls_node_with_user(base, "trailers", USER, "--max-append-size", str(MAX_APPEND))
    n = Node(thread, certs.ca_path.read_bytes(), str(certs.ca_path))
    try:
        yield n
    finally:
        n.channel.close()
        thread.stop()


def trailers(error: grpc.RpcError) -> dict[str, str]:
    return {key: value for key, value in (error.trailing_metadata() or ()) if not key.startswith("grpc-")}


def stream_read(stream: str) -> streams_pb2.ReadReq:
    options = ReadOptions(read_direction=ReadOptions.Forwards, count=10)
    options.stream.stream_identifier.stream_name = stream.encode()
    options.stream.start.CopyFrom(shared_pb2.Empty())
    options.no_filter.CopyFrom(shared_pb2.Empty())
    options.uuid_option.string.CopyFrom(shared_pb2.Empty())
    return streams_pb2.ReadReq(options=options)


def delete(node: Node, stream: str, revision: int) -> grpc.RpcError:
    options = streams_pb2.DeleteReq.Options(revision=revision)
    options.stream_identifier.stream_name = stream.encode()
    with pytest.raises(grpc.RpcError) as info:
        node.streams.Delete(streams_pb2.DeleteReq(options=options), metadata=node.metadata(), timeout=20)
    return info.value


def test_tombstoned_stream_answers_stream_deleted_with_its_name(node):
    stream = name("tomb")
    with node.client() as client:
        client.append_to_stream(stream, events=[ev()], current_version=StreamState.NO_STREAM)
        client.tombstone_stream(stream, current_version=StreamState.ANY)
        with pytest.raises(StreamIsDeletedError):
            client.get_stream(stream)
    with pytest.raises(grpc.RpcError) as info:
        list(node.streams.Read(stream_read(stream), metadata=node.metadata(), timeout=20))
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert info.value.details() == f"Event stream '{stream}' is deleted."
    assert trailers(info.value) == {"exception": "stream-deleted", "stream-name": stream}


def test_delete_with_a_wrong_expected_version_names_both_versions(node):
    stream = name("wev")
    with node.client() as client:
        client.append_to_stream(stream, events=[ev(), ev(), ev()], current_version=StreamState.NO_STREAM)
        error = delete(node, stream, 7)
        assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert error.details() == (
            f"Delete failed due to WrongExpectedVersion. Stream: {stream}, Expected version: 7, Actual version: 2"
        )
        assert trailers(error) == {
            "exception": "wrong-expected-version",
            "stream-name": stream,
            "expected-version": "7",
            "actual-version": "2",
        }
        with pytest.raises(WrongCurrentVersionError):
            client.delete_stream(stream, current_version=7)

        # soft-deleted: KurrentDB still reports its last event number (not -1, read as "not found")
        client.delete_stream(stream, current_version=2)
        error = delete(node, stream, 7)
        assert trailers(error)["actual-version"] == "2" and error.details().endswith("Actual version: 2")
        with pytest.raises(WrongCurrentVersionError):
            client.delete_stream(stream, current_version=7)

        # a stream that never existed: actual version -1 (kurrentdbclient's NotFoundError)
        never = name("never")
        error = delete(node, never, 0)
        assert trailers(error) == {
            "exception": "wrong-expected-version",
            "stream-name": never,
            "expected-version": "0",
            "actual-version": "-1",
        }
        with pytest.raises(NotFoundError):
            client.delete_stream(never, current_version=0)


def test_a_refused_caller_gets_access_denied(node):
    options = ReadOptions(read_direction=ReadOptions.Forwards, count=10)
    options.all.start.CopyFrom(shared_pb2.Empty())
    options.no_filter.CopyFrom(shared_pb2.Empty())
    options.uuid_option.string.CopyFrom(shared_pb2.Empty())
    with pytest.raises(grpc.RpcError) as info:
        list(
            node.streams.Read(streams_pb2.ReadReq(options=options), metadata=node.metadata(USER), timeout=20)
        )
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert (info.value.details(), trailers(info.value)) == ("Access Denied", {"exception": "access-denied"})
    with node.client(USER) as client, pytest.raises(AccessDeniedError):
        list(client.read_all(filter_exclude=()))


def test_an_append_over_max_append_size_names_the_limit(node):
    stream = name("big")
    options = streams_pb2.AppendReq.Options(no_stream=shared_pb2.Empty())
    options.stream_identifier.stream_name = stream.encode()
    message = streams_pb2.AppendReq.ProposedMessage(
        id=shared_pb2.UUID(string=str(uuid.uuid4())),
        metadata={"type": "Big", "content-type": "application/octet-stream"},
        data=b"x" * (MAX_APPEND + 1),
    )
    requests = [streams_pb2.AppendReq(options=options), streams_pb2.AppendReq(proposed_message=message)]
    with pytest.raises(grpc.RpcError) as info:
        node.streams.Append(iter(requests), metadata=node.metadata(), timeout=20)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert trailers(info.value) == {
        "exception": "maximum-append-size-exceeded",
        "maximum-append-size": str(MAX_APPEND),
    }


def raw_call(node: Node, path: str, message: bytes, grpc_timeout: str) -> dict[str, str]:
    """One gRPC call over a bare HTTP/2 connection (h2), with a ``grpc-timeout`` header as given:
    grpcio gives up on its own at a passed deadline, so it cannot show what the server answers. The
    headers of the first answer that ends the stream or carries a status (trailers-only or trailers)."""
    context = ssl.create_default_context(cafile=node.ca_path)
    context.set_alpn_protocols(["h2"])  # as gRPC clients offer it
    with (
        socket.create_connection(("localhost", node.thread.port), timeout=20) as raw,
        context.wrap_socket(raw, server_hostname="localhost") as sock,
    ):
        connection = h2.connection.H2Connection()
        connection.initiate_connection()
        connection.send_headers(
            1,
            [
                (":method", "POST"),
                (":scheme", "https"),
                (":path", path),
                (":authority", f"localhost:{node.thread.port}"),
                ("content-type", "application/grpc"),
                ("te", "trailers"),
                ("grpc-timeout", grpc_timeout),
                ("authorization", node.metadata()[0][1]),
            ],
        )
        connection.send_data(1, b"\x00" + len(message).to_bytes(4, "big") + message, end_stream=True)
        sock.sendall(connection.data_to_send())
        while True:
            data = sock.recv(65536)
            assert data, "the server closed the connection without an answer"
            for event in connection.receive_data(data):
                if isinstance(event, h2.events.ResponseReceived | h2.events.TrailersReceived):
                    headers = {k.decode(): v.decode() for k, v in event.headers}
                    if "grpc-status" in headers:
                        return headers
                if isinstance(event, h2.events.StreamEnded | h2.events.StreamReset):
                    raise AssertionError("the call ended without a status")
            sock.sendall(connection.data_to_send())


def test_a_call_whose_deadline_has_passed_is_deadline_exceeded(node):
    path = "/event_store.client.streams.Streams/Read"
    message = stream_read(name("late")).SerializeToString()
    for timeout in ("0n", "500u"):
        headers = raw_call(node, path, message, timeout)
        assert headers["grpc-status"] == str(grpc.StatusCode.DEADLINE_EXCEEDED.value[0]), timeout
        assert headers["grpc-message"] == "Deadline Exceeded"
    # a deadline that leaves time: the call is served (a stream_not_found message, then OK)
    assert raw_call(node, path, message, "10S")["grpc-status"] == "0"


def test_server_features_lists_the_methods_served_and_the_version(node):
    get = node.channel.unary_unary(
        f"/{SERVICE}/GetSupportedMethods",
        request_serializer=shared_pb2.Empty.SerializeToString,
        response_deserializer=SupportedMethods.FromString,
    )
    answer = get(shared_pb2.Empty(), metadata=node.metadata(), timeout=20)
    assert answer.event_store_server_version == server_version()
    methods = {(m.service_name, m.method_name): list(m.features) for m in answer.methods}
    streams = "event_store.client.streams.streams"
    for method in ("read", "append", "batchappend", "delete", "tombstone"):
        assert (streams, method) in methods
    assert methods[(streams, "batchappend")] == ["deadline_duration"]
    assert ("event_store.client.operations.operations", "startscavenge") in methods
    assert ("event_store.client.gossip.gossip", "read") in methods
    assert ("event_store.client.server_features.serverfeatures", "getsupportedmethods") in methods
    persistent = [
        k for k in methods if k[0] == "event_store.client.persistent_subscriptions.persistentsubscriptions"
    ]
    assert persistent and all(methods[k] == ["stream", "all"] for k in persistent)


def test_a_filter_window_sent_as_count_gets_checkpoints(node):
    prefix = name("count")
    options = ReadOptions(read_direction=ReadOptions.Forwards)
    options.all.start.CopyFrom(shared_pb2.Empty())
    options.subscription.CopyFrom(ReadOptions.SubscriptionOptions())
    options.filter.stream_identifier.prefix.append(prefix)
    options.filter.count.CopyFrom(shared_pb2.Empty())  # the Node.js client's default window
    options.filter.checkpointIntervalMultiplier = 1
    options.uuid_option.string.CopyFrom(shared_pb2.Empty())
    with node.client() as client:
        noise = name("noise")
        client.append_to_stream(
            noise, events=[ev() for _ in range(2 * READ_BATCH_SIZE)], current_version=StreamState.NO_STREAM
        )
        call = node.streams.Read(streams_pb2.ReadReq(options=options), metadata=node.metadata(), timeout=60)
        try:
            kinds = []
            for reply in call:
                kinds.append(reply.WhichOneof("content"))
                if kinds[-1] == "caught_up":
                    break
            assert kinds[0] == "confirmation" and kinds[-2:] == ["checkpoint", "caught_up"]
            assert kinds.count("checkpoint") >= 2  # every 32 events looked at, and one at the end
            client.append_to_stream(
                name("noise"),
                events=[ev() for _ in range(READ_BATCH_SIZE)],
                current_version=StreamState.NO_STREAM,
            )
            client.append_to_stream(f"{prefix}-1", events=[ev("Mine")], current_version=StreamState.NO_STREAM)
            live = []
            for reply in call:
                live.append(reply.WhichOneof("content"))
                if live[-1] == "event":
                    assert reply.event.event.stream_identifier.stream_name == f"{prefix}-1".encode()
                    break
            assert "checkpoint" in live  # 32 events that do not match, live
        finally:
            call.cancel()
