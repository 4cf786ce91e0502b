"""The eventsourcing application's gRPC traffic, per command, and the benchmark's client floor
(bench/bench_eventsourcing.py ``--floor-server``: an in-memory grpcio server the benchmark runs to
measure what the client costs with a server that takes no time).

A command of the benchmark's Bank application (load an aggregate, change it, save it) is one
Streams/Read and one Streams/BatchAppend against evdb: no gossip, no feature probe, no second read.
The floor server must answer those two calls with what evdb answers (the same messages, fields and
values but the positions and the recorded time), or the floor would measure a different client's work."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import grpc  # type: ignore[import-untyped]
import pytest
from kurrentdbclient.protos.v1 import shared_pb2, streams_pb2, streams_pb2_grpc

from tests.clients.conftest import NodeThread, insecure_node
from tests.grpc.read_requests import stream_read

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_eventsourcing.py"


@pytest.fixture(scope="module")
def node(tmp_path_factory) -> Iterator[NodeThread]:
    yield from insecure_node(tmp_path_factory, "floor")


@pytest.fixture(scope="module")
def floor() -> Iterator[int]:
    process = subprocess.Popen(
        [sys.executable, str(BENCH), "--floor-server"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        port = process.stdout.readline().strip()
        assert port.isdigit(), f"the floor server did not start (exit code {process.poll()})"
        yield int(port)
    finally:
        process.kill()
        process.wait()


def read_request(stream: str) -> streams_pb2.ReadReq:
    """The ReadReq kurrentdbclient sends for eventsourcing's ``select_events`` (forwards from the start,
    no limit, no filter, links not resolved, string ids)."""
    return stream_read(stream, count=sys.maxsize)


def batch(stream: str, events: list[tuple[str, bytes]], revision: int | None) -> streams_pb2.BatchAppendReq:
    options = streams_pb2.BatchAppendReq.Options(
        stream_identifier=shared_pb2.StreamIdentifier(stream_name=stream.encode())
    )
    if revision is None:
        options.no_stream.SetInParent()
    else:
        options.stream_position = revision
    options.deadline.seconds = 315_576_000_000  # kurrentdbclient's "no deadline"
    return streams_pb2.BatchAppendReq(
        correlation_id=shared_pb2.UUID(string=str(uuid.uuid4())),
        options=options,
        proposed_messages=[
            streams_pb2.BatchAppendReq.ProposedMessage(
                id=shared_pb2.UUID(string=event_id),
                metadata={"type": "Bank.Account.Credited", "content-type": "application/octet-stream"},
                custom_metadata=b"",
                data=data,
            )
            for event_id, data in events
        ],
        is_final=True,
    )


def without_positions(message):
    """The message with its log positions and recorded time cleared (they differ between servers)."""
    copy = type(message)()
    copy.CopyFrom(message)
    if isinstance(copy, streams_pb2.ReadResp) and copy.HasField("event"):
        copy.event.commit_position = 0
        recorded = copy.event.event
        recorded.commit_position = recorded.prepare_position = 0
        del recorded.metadata["created"]
    if isinstance(copy, streams_pb2.BatchAppendResp):
        copy.correlation_id.Clear()
        if copy.HasField("success"):
            copy.success.position.Clear()
    return copy


def converse(port: int, stream: str) -> list:
    """What a server answers to the client's calls for an aggregate's first three commands: a read of
    a stream not there, then a read and an append per command; every answer, positions cleared."""
    answers: list = []
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = streams_pb2_grpc.StreamsStub(channel)  # type: ignore[no-untyped-call]
        ids = [f"00000000-0000-4000-8000-00000000000{i}" for i in range(4)]
        answers.extend(stub.Read(read_request(stream)))
        for revision in (None, 0, 1):
            first = 0 if revision is None else revision + 1
            events = [(ids[first], b'{"amount": %d}' % first)]
            answers.extend(stub.BatchAppend(iter([batch(stream, events, revision)])))
            answers.extend(stub.Read(read_request(stream)))
    return [without_positions(answer) for answer in answers]


def test_the_floor_server_answers_what_evdb_answers(node, floor):
    stream = f"account-{uuid.uuid4()}"
    theirs = converse(floor, stream)
    ours = converse(node.port, stream)
    assert [
        answer.WhichOneof("content" if isinstance(answer, streams_pb2.ReadResp) else "result")
        for answer in ours
    ] == [
        "stream_not_found",
        "success",
        "event",
        "success",
        "event",
        "event",
        "success",
        "event",
        "event",
        "event",
    ]
    assert theirs == ours


class Counting(grpc.UnaryStreamClientInterceptor, grpc.StreamStreamClientInterceptor):
    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()

    def intercept_unary_stream(self, continuation, details, request):
        self.calls[details.method.rsplit("/", 1)[1]] += 1
        return continuation(details, request)

    def intercept_stream_stream(self, continuation, details, request_iterator):
        self.calls[details.method.rsplit("/", 1)[1]] += 1
        return continuation(details, request_iterator)


def test_a_command_is_one_read_and_one_batch_append(node, monkeypatch):
    sys.path.insert(0, str(BENCH.parent))
    try:
        from bench_eventsourcing import Bank
    finally:
        sys.path.remove(str(BENCH.parent))
    counting = Counting()
    plain = grpc.insecure_channel
    monkeypatch.setattr(
        grpc, "insecure_channel", lambda *a, **kw: grpc.intercept_channel(plain(*a, **kw), counting)
    )
    bank = Bank(
        env={
            "PERSISTENCE_MODULE": "eventsourcing_kurrentdb",
            "KURRENTDB_URI": f"kurrentdb://127.0.0.1:{node.port}?tls=false",
        }
    )
    try:
        account = bank.open("owner")
        assert counting.calls == Counter({"BatchAppend": 1})
        counting.calls.clear()
        for _ in range(5):
            bank.credit(account, 1)
        assert counting.calls == Counter({"Read": 5, "BatchAppend": 5})
        assert bank.repository.get(account).balance == 5
    finally:
        bank.close()
