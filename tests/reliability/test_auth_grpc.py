"""gRPC × callers: who gets in through the Streams and Operations services.

tests/node/test_auth_matrix.py walks every HTTP endpoint; this walks the gRPC API of a TLS node (where
credentials count: in insecure mode a call without them runs as the system, as KurrentDB's does) with
{anonymous, wrong password, unknown user, plain user, ops, admin} on a write (Append and BatchAppend,
which kurrentdbclient uses), a user-stream read, a ``$all`` read and subscription, and the Operations
calls StartScavenge and StopScavenge. The calls are raw grpcio calls on kurrentdbclient's own protos
(and evdb's compiled Operations module, as tests/clients/test_operations.py), so the status code is
what the server sent. A refused call yields no message at all, writes nothing and starts nothing.

KurrentDB refuses the same callers: bad credentials are UNAUTHENTICATED (its authentication
middleware), a signed-in caller without the right is PERMISSION_DENIED (``RpcExceptions.AccessDenied``).
A call without credentials on a secure node is refused by both; evdb answers UNAUTHENTICATED (KurrentDB
answers PERMISSION_DENIED "Access Denied" for its anonymous principal), so the anonymous column accepts
either code: a client sees a refusal either way.
"""

from __future__ import annotations

import base64
import json
import ssl
import uuid
from collections.abc import Iterator

import grpc
import httpx
import pytest
from kurrentdbclient.protos.v1 import shared_pb2, streams_pb2
from waiting import wait_until

from evdb.grpc import operations_pb2
from evdb.tls.certs import generate_dev_certificates
from tests.clients.conftest import NodeThread, node_options

ANON, WRONG, UNKNOWN, USER, OPS, ADMIN = "anonymous", "wrong-password", "unknown-user", "user", "ops", "admin"
USER_LOGIN, USER_PASSWORD = "grpc-user", "grpc-pw"
CALLERS: dict[str, tuple[str, str] | None] = {
    ANON: None,
    WRONG: ("admin", "not-the-password"),
    UNKNOWN: ("nobody-at-all", "changeit"),
    USER: (USER_LOGIN, USER_PASSWORD),
    OPS: ("ops", "changeit"),
    ADMIN: ("admin", "changeit"),
}
OK = "allowed"  # let through: an answer, or an error other than UNAUTHENTICATED/PERMISSION_DENIED
UNAUTH = grpc.StatusCode.UNAUTHENTICATED
DENIED = grpc.StatusCode.PERMISSION_DENIED
REFUSED = "refused"  # UNAUTHENTICATED or PERMISSION_DENIED (see the module docstring)

USER_STREAM, SYSTEM_STREAM = "grpc-auth", "$grpc-auth"

#: call -> caller -> expected answer
EXPECTED: dict[str, dict[str, object]] = {
    "Append user stream": {ANON: REFUSED, WRONG: UNAUTH, UNKNOWN: UNAUTH, USER: OK, OPS: OK, ADMIN: OK},
    "BatchAppend user stream": {ANON: REFUSED, WRONG: UNAUTH, UNKNOWN: UNAUTH, USER: OK, OPS: OK, ADMIN: OK},
    "Append $-stream": {ANON: REFUSED, WRONG: UNAUTH, UNKNOWN: UNAUTH, USER: DENIED, OPS: DENIED, ADMIN: OK},
    "Read user stream": {ANON: REFUSED, WRONG: UNAUTH, UNKNOWN: UNAUTH, USER: OK, OPS: OK, ADMIN: OK},
    "Read $all": {ANON: REFUSED, WRONG: UNAUTH, UNKNOWN: UNAUTH, USER: DENIED, OPS: DENIED, ADMIN: OK},
    "Subscribe $all": {ANON: REFUSED, WRONG: UNAUTH, UNKNOWN: UNAUTH, USER: DENIED, OPS: DENIED, ADMIN: OK},
    "StartScavenge": {ANON: REFUSED, WRONG: UNAUTH, UNKNOWN: UNAUTH, USER: DENIED, OPS: OK, ADMIN: OK},
    "StopScavenge": {ANON: REFUSED, WRONG: UNAUTH, UNKNOWN: UNAUTH, USER: DENIED, OPS: OK, ADMIN: OK},
}
STREAMS = "/event_store.client.streams.Streams/"
OPERATIONS = "/event_store.client.operations.Operations/"


# -- requests ----------------------------------------------------------------------------------------
def _event(marker: str) -> tuple[shared_pb2.UUID, dict[str, str], bytes]:
    data = json.dumps({"marker": marker}).encode()
    return (
        shared_pb2.UUID(string=str(uuid.uuid4())),
        {"type": "AuthProbe", "content-type": "application/json"},
        data,
    )


def append_requests(stream: str, marker: str) -> Iterator[streams_pb2.AppendReq]:
    options = streams_pb2.AppendReq.Options(
        stream_identifier=shared_pb2.StreamIdentifier(stream_name=stream.encode())
    )
    options.any.CopyFrom(shared_pb2.Empty())
    yield streams_pb2.AppendReq(options=options)
    event_id, metadata, data = _event(marker)
    yield streams_pb2.AppendReq(
        proposed_message=streams_pb2.AppendReq.ProposedMessage(id=event_id, metadata=metadata, data=data)
    )


def batch_requests(stream: str, marker: str) -> Iterator[streams_pb2.BatchAppendReq]:
    options = streams_pb2.BatchAppendReq.Options(
        stream_identifier=shared_pb2.StreamIdentifier(stream_name=stream.encode())
    )
    options.any.SetInParent()
    event_id, metadata, data = _event(marker)
    yield streams_pb2.BatchAppendReq(
        correlation_id=shared_pb2.UUID(string=str(uuid.uuid4())),
        options=options,
        proposed_messages=[
            streams_pb2.BatchAppendReq.ProposedMessage(id=event_id, metadata=metadata, data=data)
        ],
        is_final=True,
    )


def read_request(stream: str | None, *, subscribe: bool = False) -> streams_pb2.ReadReq:
    o = streams_pb2.ReadReq.Options
    options = o(read_direction=o.Forwards, resolve_links=False)
    if stream is None:
        options.all.CopyFrom(o.AllOptions(start=shared_pb2.Empty()))
    else:
        stream_options = o.StreamOptions(
            stream_identifier=shared_pb2.StreamIdentifier(stream_name=stream.encode())
        )
        stream_options.start.CopyFrom(shared_pb2.Empty())
        options.stream.CopyFrom(stream_options)
    if subscribe:
        options.subscription.CopyFrom(o.SubscriptionOptions())
    else:
        options.count = 100
    options.no_filter.CopyFrom(shared_pb2.Empty())
    options.uuid_option.CopyFrom(o.UUIDOption(string=shared_pb2.Empty()))
    return streams_pb2.ReadReq(options=options)


# -- the node and the callers --------------------------------------------------------------------------
class Caller:
    def __init__(self, port: int, ca: bytes, credentials: tuple[str, str] | None) -> None:
        self.channel = grpc.secure_channel(f"localhost:{port}", grpc.ssl_channel_credentials(ca))
        self.metadata: list[tuple[str, str]] = []
        if credentials is not None:
            token = base64.b64encode(":".join(credentials).encode()).decode()
            self.metadata.append(("authorization", f"Basic {token}"))

    def _rpc(self, kind: str, path: str, request_type, reply_type):
        return getattr(self.channel, kind)(
            path,
            request_serializer=request_type.SerializeToString,
            response_deserializer=reply_type.FromString,
        )

    def call(self, name: str, marker: str) -> list:
        """The messages the server sent; raises grpc.RpcError when the call fails."""
        timeout = 10
        if name.startswith("Append"):
            stream = SYSTEM_STREAM if "$" in name else USER_STREAM
            rpc = self._rpc("stream_unary", STREAMS + "Append", streams_pb2.AppendReq, streams_pb2.AppendResp)
            return [rpc(append_requests(stream, marker), metadata=self.metadata, timeout=timeout)]
        if name.startswith("BatchAppend"):
            rpc = self._rpc(
                "stream_stream",
                STREAMS + "BatchAppend",
                streams_pb2.BatchAppendReq,
                streams_pb2.BatchAppendResp,
            )
            # the request stream ends after the batch, so the server ends the call after its answer
            return list(rpc(batch_requests(USER_STREAM, marker), metadata=self.metadata, timeout=timeout))
        if name.startswith("Read") or name.startswith("Subscribe"):
            stream = None if "$all" in name else USER_STREAM
            rpc = self._rpc("unary_stream", STREAMS + "Read", streams_pb2.ReadReq, streams_pb2.ReadResp)
            call = rpc(
                read_request(stream, subscribe=name.startswith("Subscribe")),
                metadata=self.metadata,
                timeout=timeout,
            )
            messages = []
            try:
                for message in call:
                    messages.append(message)
                    # a subscription never ends: the first message (the confirmation) is enough
                    if name.startswith("Subscribe"):
                        break
            finally:
                call.cancel()
            return messages
        if name == "StartScavenge":
            rpc = self._rpc(
                "unary_unary", OPERATIONS + name, operations_pb2.StartScavengeReq, operations_pb2.ScavengeResp
            )
            return [
                rpc(
                    operations_pb2.StartScavengeReq(options={"thread_count": 1}),
                    metadata=self.metadata,
                    timeout=timeout,
                )
            ]
        if name == "StopScavenge":
            rpc = self._rpc(
                "unary_unary", OPERATIONS + name, operations_pb2.StopScavengeReq, operations_pb2.ScavengeResp
            )
            request = operations_pb2.StopScavengeReq(options={"scavenge_id": "no-such-scavenge"})
            return [rpc(request, metadata=self.metadata, timeout=timeout)]
        raise AssertionError(name)

    def close(self) -> None:
        self.channel.close()


@pytest.fixture(scope="module")
def secure_node(tmp_path_factory):
    base = tmp_path_factory.mktemp("grpc-auth")
    certs = generate_dev_certificates(base / "certs")
    options = node_options(
        base,
        "--certificate-file", str(certs.cert_path),
        "--certificate-private-key-file", str(certs.key_path),
        "--trusted-root-certificates-path", str(certs.ca_path),
    )  # fmt: skip
    thread = NodeThread(options, name="grpc-auth").start()
    http = httpx.Client(
        base_url=f"https://localhost:{thread.port}",
        verify=ssl.create_default_context(cafile=str(certs.ca_path)),
        auth=CALLERS[ADMIN],
        timeout=30,
    )
    created = http.post(
        "/users", json={"loginName": USER_LOGIN, "fullName": "gRPC", "groups": [], "password": USER_PASSWORD}
    )
    assert created.status_code == 201, created.text
    ca = certs.ca_path.read_bytes()
    callers = {caller: Caller(thread.port, ca, credentials) for caller, credentials in CALLERS.items()}
    try:
        yield thread, http, callers
    finally:
        for caller in callers.values():
            caller.close()
        http.close()
        thread.stop()


def _stream_markers(http: httpx.Client, stream: str) -> set[str]:
    response = http.get(
        f"/streams/{stream}/0/forward/100", params={"embed": "body"}, headers={"Accept": "application/json"}
    )
    if response.status_code == 404:
        return set()
    assert response.status_code == 200, response.text
    return {
        json.loads(entry["data"])["marker"] if isinstance(entry["data"], str) else entry["data"]["marker"]
        for entry in response.json()["entries"]
    }


# -- tests -------------------------------------------------------------------------------------------
def test_each_caller_gets_the_expected_answer_and_a_refusal_carries_nothing(secure_node):
    _, http, callers = secure_node
    problems = []
    refused_markers: set[str] = set()
    walked = 0
    for name, expected_by_caller in EXPECTED.items():
        for caller, expected in expected_by_caller.items():
            marker = f"{name}/{caller}/{uuid.uuid4().hex[:8]}"
            walked += 1
            try:
                messages = callers[caller].call(name, marker)
            except grpc.RpcError as error:
                code = error.code()
                if expected == OK and code not in (UNAUTH, DENIED):
                    continue  # the handler's own answer (StopScavenge of an unknown id: NOT_FOUND)
                if expected == OK:
                    problems.append(f"{caller}: {name}: refused with {code} {error.details()!r}")
                elif expected == REFUSED and code not in (UNAUTH, DENIED):
                    problems.append(f"{caller}: {name}: expected a refusal, got {code} {error.details()!r}")
                elif expected not in (OK, REFUSED) and code != expected:
                    problems.append(f"{caller}: {name}: expected {expected}, got {code} {error.details()!r}")
                refused_markers.add(marker)
                continue
            if expected != OK:
                problems.append(f"{caller}: {name}: expected {expected}, let through with {messages!r:.200}")
            elif (
                name.startswith("BatchAppend") and messages and messages[0].WhichOneof("result") != "success"
            ):
                problems.append(f"{caller}: {name}: the batch failed: {messages[0]!r:.200}")
    assert not problems, "\n".join(problems)
    assert walked == 6 * len(EXPECTED)

    # a refused write wrote nothing; every allowed one is there
    written = _stream_markers(http, USER_STREAM) | _stream_markers(http, SYSTEM_STREAM)
    assert not written & refused_markers, f"refused writes were written: {sorted(written & refused_markers)}"
    for name in ("Append user stream", "BatchAppend user stream", "Append $-stream"):
        allowed = {c for c, e in EXPECTED[name].items() if e == OK}
        assert {m.split("/")[1] for m in written if m.startswith(name + "/")} == allowed, name


def test_a_refused_read_yields_no_event_before_its_error(secure_node):
    """The refusal comes before the first message: not one event of $all reaches the caller."""
    _, _, callers = secure_node
    for caller in (ANON, WRONG, USER, OPS):
        for name in ("Read $all", "Subscribe $all"):
            rpc = callers[caller]._rpc(
                "unary_stream", STREAMS + "Read", streams_pb2.ReadReq, streams_pb2.ReadResp
            )
            call = rpc(
                read_request(None, subscribe=name.startswith("Subscribe")),
                metadata=callers[caller].metadata,
                timeout=10,
            )
            received = []
            with pytest.raises(grpc.RpcError) as info:
                for message in call:
                    received.append(message)
            assert info.value.code() in (UNAUTH, DENIED), (caller, name, info.value.code())
            assert received == [], (caller, name, received[:1])
    events = callers[ADMIN].call("Read $all", "-")
    assert any(m.WhichOneof("content") == "event" for m in events), "the admin's read is the control"


def _scavenge_ids(http: httpx.Client) -> set[str]:
    """The scavenges the node has started, from the links in ``$scavenges``."""
    response = http.get(
        "/streams/$scavenges/0/forward/1000", params={"embed": "body"}, headers={"Accept": "application/json"}
    )
    if response.status_code == 404:
        return set()
    assert response.status_code == 200, response.text
    return {str(entry.get("data", "")).split("@", 1)[-1] for entry in response.json()["entries"]}


def test_a_refused_start_scavenge_starts_nothing(secure_node):
    thread, http, callers = secure_node
    # the scavenges an earlier test started (its allowed calls) end first: their events are then written
    wait_until(
        lambda: (
            http.get("/admin/scavenge/current", headers={"Accept": "application/json"}).json()["scavengeId"]
            == ""
        ),
        60,
        "no scavenge running",
    )
    before = _scavenge_ids(http)
    for caller in (ANON, WRONG, UNKNOWN, USER):
        with pytest.raises(grpc.RpcError) as info:
            callers[caller].call("StartScavenge", "-")
        assert info.value.code() in (UNAUTH, DENIED), (caller, info.value.code())
    assert _scavenge_ids(http) == before
    started = callers[OPS].call("StartScavenge", "-")[0]  # the control
    assert started.scavenge_id
    for caller in (USER, ANON):
        with pytest.raises(grpc.RpcError):
            callers[caller].channel.unary_unary(
                OPERATIONS + "Shutdown",
                request_serializer=shared_pb2.Empty.SerializeToString,
                response_deserializer=shared_pb2.Empty.FromString,
            )(shared_pb2.Empty(), metadata=callers[caller].metadata, timeout=10)
    assert not thread.node.shutdown_requested.is_set()
