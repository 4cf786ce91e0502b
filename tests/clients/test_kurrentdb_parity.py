"""What KurrentDB's own tools (its Node.js client and its test suite) expect of the gRPC API, on a
real TLS node, read raw with grpcio where a client library would hide the answer (issue 35):
a persistent subscription created "from end" through the deprecated ``Settings.revision``, ..."""

from __future__ import annotations

import asyncio
import base64
import json
import queue
import threading
import uuid
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any, cast

import grpc
import pytest
from google.protobuf import empty_pb2
from google.protobuf.duration_pb2 import Duration
from kurrentdbclient import KurrentDBClient, NewEvent, StreamState
from kurrentdbclient.exceptions import NotFoundError
from kurrentdbclient.protos.google.rpc import code_pb2
from kurrentdbclient.protos.v1 import (
    persistent_pb2,
    persistent_pb2_grpc,
    shared_pb2,
    streams_pb2,
    streams_pb2_grpc,
)
from waiting import wait_until

from evdb.errors import NotLeader
from evdb.grpc.errors import KurrentError
from evdb.grpc.streams import StreamsService, _Batch
from evdb.services import GrpcServices
from tests.clients.conftest import ADMIN, NodeThread, tls_node_with_user

USER = ("parity-user", "parity-pw")
UINT64_MAX = 2**64 - 1  # what the Node.js client sends as the deprecated revision for "from end"


def name(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def ev(kind: str = "Ev") -> NewEvent:
    return NewEvent(type=kind, data=json.dumps({"k": kind}).encode())


class Node:
    def __init__(self, thread: NodeThread, ca_path: str) -> None:
        self.thread = thread
        self.ca_path = ca_path
        with open(ca_path, "rb") as f:
            self.channel = grpc.secure_channel(
                f"localhost:{thread.port}", grpc.ssl_channel_credentials(f.read())
            )
        self.persistent = persistent_pb2_grpc.PersistentSubscriptionsStub(self.channel)

    def metadata(self, credentials: tuple[str, str] = ADMIN) -> list[tuple[str, str]]:
        token = base64.b64encode(":".join(credentials).encode()).decode()
        return [("authorization", f"Basic {token}")]

    def client(self) -> KurrentDBClient:
        user, password = ADMIN
        return KurrentDBClient(
            f"kurrentdb://{user}:{password}@localhost:{self.thread.port}?tlsCaFile={self.ca_path}"
        )


@pytest.fixture(scope="module")
def node(tmp_path_factory) -> Iterator[Node]:
    base = tmp_path_factory.mktemp("parity")
    thread, certs = tls_node_with_user(base, "parity", USER)
    n = Node(thread, str(certs.ca_path))
    try:
        yield n
    finally:
        n.channel.close()
        thread.stop()


def deprecated_create(stream: str, group: str, revision: int) -> persistent_pb2.CreateReq:
    """A Create as the Node.js client sends it: the stream and the start in the pre-21.10 fields."""
    settings = persistent_pb2.CreateReq.Settings(
        revision=revision,
        message_timeout_ms=30_000,
        checkpoint_after_ms=2_000,
        max_retry_count=10,
        min_checkpoint_count=10,
        max_checkpoint_count=1000,
        live_buffer_size=500,
        read_batch_size=20,
        history_buffer_size=500,
        consumer_strategy="RoundRobin",
    )
    options = persistent_pb2.CreateReq.Options(group_name=group, settings=settings)
    options.stream_identifier.stream_name = stream.encode()
    return persistent_pb2.CreateReq(options=options)


def test_a_group_created_from_end_through_the_deprecated_revision_starts_at_the_end(node):
    stream, group = name("from-end"), "g"
    with node.client() as client:
        client.append_to_stream(stream, events=[ev("Old")], current_version=StreamState.NO_STREAM)
        node.persistent.Create(
            deprecated_create(stream, group, UINT64_MAX), metadata=node.metadata(), timeout=20
        )
        info = client.get_subscription_info(group, stream_name=stream)
        assert info.start_from == "-1"  # KurrentDB's "end" (what KurrentDB's GetInfo reports)
        assert [i.start_from for i in client.list_subscriptions_to_stream(stream)] == ["-1"]
        # an explicit revision is still taken as it is
        node.persistent.Create(deprecated_create(stream, "g0", 0), metadata=node.metadata(), timeout=20)
        assert client.get_subscription_info("g0", stream_name=stream).start_from == "0"

        # from end: only what is appended after the group was created is delivered
        client.append_to_stream(stream, events=[ev("New")], current_version=0)
        subscription = client.read_subscription_to_stream(group, stream, timeout=20)
        try:
            first = next(iter(subscription))
            assert first.type == "New"
            subscription.ack(first)
        finally:
            subscription.stop()


# -- BatchAppend's deadline ------------------------------------------------------------------------------
def batch_request(
    stream: str, correlation: str, *, final: bool, deadline: Duration | None = None, options: bool = True
) -> streams_pb2.BatchAppendReq:
    message = streams_pb2.BatchAppendReq.ProposedMessage(
        id=shared_pb2.UUID(string=str(uuid.uuid4())),
        metadata={"type": "B", "content-type": "application/json"},
        data=b"{}",
    )
    request = streams_pb2.BatchAppendReq(
        correlation_id=shared_pb2.UUID(string=correlation), proposed_messages=[message], is_final=final
    )
    if options:
        request.options.stream_identifier.stream_name = stream.encode()
        request.options.any.CopyFrom(empty_pb2.Empty())
        if deadline is not None:
            request.options.deadline.CopyFrom(deadline)
    return request


def test_a_batch_whose_deadline_passes_is_answered_timeout(node):
    stream = name("batch")
    stub = streams_pb2_grpc.StreamsStub(node.channel)
    requests: queue.Queue[streams_pb2.BatchAppendReq | None] = queue.Queue()
    call = stub.BatchAppend(iter(requests.get, None), metadata=node.metadata(), timeout=30)
    answers = iter(call)
    try:
        # a deadline already passed: Timeout at once (KurrentDB's Status.Timeout: DEADLINE_EXCEEDED)
        late = str(uuid.uuid4())
        requests.put(batch_request(stream, late, final=True, deadline=Duration(seconds=0)))
        answer = next(answers)
        assert (
            answer.correlation_id.string == late and answer.stream_identifier.stream_name == stream.encode()
        )
        assert answer.WhichOneof("result") == "error"
        assert (answer.error.code, answer.error.message) == (code_pb2.DEADLINE_EXCEEDED, "Timeout")
        assert answer.error.details.Is(shared_pb2.Timeout.DESCRIPTOR)

        # a 1 ms deadline passes while the batch is still being sent: Timeout, and its final part is
        # then ignored (nothing appended)
        slow = str(uuid.uuid4())
        requests.put(batch_request(stream, slow, final=False, deadline=Duration(nanos=1_000_000)))
        answer = next(answers)  # without the final part: the deadline's own answer
        assert answer.correlation_id.string == slow
        assert (answer.error.code, answer.error.message) == (code_pb2.DEADLINE_EXCEEDED, "Timeout")
        requests.put(batch_request(stream, slow, final=True, options=False))

        # a batch within its deadline is appended, on the same call
        on_time = str(uuid.uuid4())
        requests.put(batch_request(stream, on_time, final=True, deadline=Duration(seconds=60)))
        answer = next(answers)
        assert answer.correlation_id.string == on_time and answer.WhichOneof("result") == "success"
        assert answer.success.current_revision == 0  # the one event: the timed-out batches wrote none
    finally:
        requests.put(None)
        call.cancel()


# -- soft delete of a stream that has metadata but no events --------------------------------------------
def test_deleting_a_stream_with_only_metadata_as_no_stream_succeeds(node):
    """KurrentDB's soft delete refuses only a stream that never existed, neither events nor metadata;
    with metadata set, delete(NO_STREAM) writes ``$tb`` to the metastream and succeeds."""
    stream = name("meta-only")
    with node.client() as client:
        client.set_stream_metadata(stream, metadata={"foo": "bar"})
        client.delete_stream(stream, current_version=StreamState.NO_STREAM)
        metadata, _ = client.get_stream_metadata(stream)
        assert metadata["$tb"] == 2**63 - 1 and metadata["foo"] == "bar"
        # a stream without even metadata: still refused (kurrentdbclient: NotFoundError)
        with pytest.raises(NotFoundError):
            client.delete_stream(name("never"), current_version=StreamState.NO_STREAM)


class _HeldQueue:
    """The writer's queue with its blocking ``get`` held until ``release``: the test sees what is
    handed to the writer while it writes nothing."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.puts = 0
        self.released = threading.Event()

    def put(self, item: Any) -> None:
        self.puts += 1
        self.real.put(item)

    def get(self) -> Any:
        self.released.wait()
        return self.real.get()

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self.real, attribute)


def test_the_batches_of_one_call_are_written_without_waiting_for_each_other(node):
    """KurrentDB hands each complete batch of a BatchAppend call to its writer as it arrives and answers
    each when written: the Node.js client's flood test has 10,000 appends in flight on one call, each
    with a 10 s deadline. Written one at a time (each awaited before the next was read), they missed
    their deadlines on a loaded machine; now they reach the writer together, in their order."""
    stream = name("flood")
    count = 50
    writer = node.thread.node.db._writer  # the database's GroupCommitWriter
    held = _HeldQueue(writer._queue)
    node.thread.call(setattr, writer, "_queue", held)
    stub = streams_pb2_grpc.StreamsStub(node.channel)
    requests = [batch_request(stream, str(uuid.uuid4()), final=True) for _ in range(count)]
    try:
        call = stub.BatchAppend(iter(requests), metadata=node.metadata(), timeout=60)
        # the writer takes nothing while held: every batch must still have been handed to it
        wait_until(lambda: held.puts >= count, 30, "every batch handed to the writer")
        held.released.set()
        answers = {a.correlation_id.string: a for a in call}
    finally:
        held.released.set()
        node.thread.call(setattr, writer, "_queue", held.real)
    revisions = [answers[r.correlation_id.string].success.current_revision for r in requests]
    assert revisions == list(range(count))  # written in the order they came


def test_a_batch_costs_the_node_no_task_of_its_own(node):
    """The flood test's batches (one request each: options with a deadline, one event, is_final) are
    handed to the writer from the call's reading loop and answered from their writes' callbacks: the
    call's tasks do not grow with its batches. Before, each batch had two (a deadline timer, cancelled
    when its final request came at once, and its write), 2 x 200 here."""
    stream = name("tasks")
    count = 200
    created: list[Any] = []
    loop = node.thread.loop
    previous = node.thread.call(loop.get_task_factory)

    def counting(loop: Any, coro: Any, **kwargs: Any) -> Any:
        created.append(getattr(coro, "__qualname__", coro))
        if previous is not None:
            return previous(loop, coro, **kwargs)
        return asyncio.Task(coro, loop=loop, **kwargs)

    stub = streams_pb2_grpc.StreamsStub(node.channel)
    deadline = Duration(seconds=600)
    requests = [batch_request(stream, str(uuid.uuid4()), final=True, deadline=deadline) for _ in range(count)]
    node.thread.call(loop.set_task_factory, counting)
    try:
        answers = list(stub.BatchAppend(iter(requests), metadata=node.metadata(), timeout=60))
    finally:
        node.thread.call(loop.set_task_factory, previous)
    assert [a.success.current_revision for a in answers] == list(range(count))  # answered in order
    assert len(created) < count // 4, created[:20]


def test_a_write_refused_as_not_leader_fails_the_call_when_the_leader_is_known():
    """KurrentDB's BatchAppend: a write its node refuses as not leader, with the leader known, fails
    the whole call with the leader's address (RpcExceptions.LeaderInfo); with none known that batch
    alone is answered. The not-leader error carries trailers, not google.rpc details, so a check of
    ``details`` let it pass as one batch's error."""
    options = streams_pb2.BatchAppendReq.Options()
    options.stream_identifier.stream_name = b"s"
    batch = _Batch(shared_pb2.UUID(string=str(uuid.uuid4())), options, -2, [])

    def service(leader: tuple[str, int] | None) -> StreamsService:
        cluster = SimpleNamespace(leader_client_endpoint=lambda: leader)
        return StreamsService(cast(GrpcServices, SimpleNamespace(cluster=cluster)))

    with pytest.raises(KurrentError) as raised:
        service(("10.0.0.9", 2113))._batch_error(batch, NotLeader())
    assert raised.value.status.name == "NOT_FOUND" and raised.value.message == "Leader info available"
    assert raised.value.trailers["leader-endpoint-host"] == "10.0.0.9"
    assert service(None)._batch_error(batch, NotLeader()).message == "Server Is Not Ready"


def test_a_write_that_fails_the_call_ends_it_after_the_answers_before(node):
    """A batch's write that fails the call (here an error no append answers) ends the call at once,
    without waiting for the client's next request, and the batches written before it were answered."""
    stream = name("fails")
    db = node.thread.node.db
    real = db.append_on_loop
    calls: list[str] = []

    def failing_third(stream_name: str, events: Any, expected: int, **kwargs: Any) -> Any:
        calls.append(stream_name)
        if len(calls) < 3:
            return real(stream_name, events, expected, **kwargs)
        failed = asyncio.get_running_loop().create_future()
        failed.set_exception(RuntimeError("the writer stopped"))
        return failed

    stub = streams_pb2_grpc.StreamsStub(node.channel)
    requests: queue.Queue[streams_pb2.BatchAppendReq | None] = queue.Queue()
    node.thread.call(setattr, db, "append_on_loop", failing_third)
    try:
        call = stub.BatchAppend(iter(requests.get, None), metadata=node.metadata(), timeout=30)
        answers = iter(call)
        for revision in (0, 1):
            requests.put(batch_request(stream, str(uuid.uuid4()), final=True))
            assert next(answers).success.current_revision == revision
        requests.put(batch_request(stream, str(uuid.uuid4()), final=True))
        with pytest.raises(grpc.RpcError) as ended:
            next(answers)  # the client sends nothing more: the failure alone ends the call
    finally:
        requests.put(None)
        node.thread.call(delattr, db, "append_on_loop")  # the class's method again
    assert ended.value.code() == grpc.StatusCode.UNKNOWN  # an unexpected error: grpclib ends the call so


def test_a_batch_refused_for_access_is_answered_and_the_call_goes_on(node):
    """KurrentDB's BatchAppend answers a batch its caller may not write with PermissionDenied
    (AccessDenied) and goes on with the call's other batches; evdb failed the whole call."""
    allowed = name("allowed")
    stub = streams_pb2_grpc.StreamsStub(node.channel)
    denied = str(uuid.uuid4())
    requests = [
        batch_request(f"${name('system')}", denied, final=True),  # a system stream: admins only
        batch_request(allowed, str(uuid.uuid4()), final=True),
    ]
    answers = list(stub.BatchAppend(iter(requests), metadata=node.metadata(("ops", "changeit")), timeout=30))
    assert len(answers) == 2
    refused = next(a for a in answers if a.correlation_id.string == denied)
    assert refused.error.code == grpc.StatusCode.PERMISSION_DENIED.value[0]
    assert refused.error.details.Is(shared_pb2.AccessDenied.DESCRIPTOR)
    written = next(a for a in answers if a.correlation_id.string != denied)
    assert written.success.current_revision == 0
