"""The Operations service (as the .NET/Java/Go clients call it) and metadata whose effect needs a
scavenge or time: a scavenge started over gRPC, then seen through kurrentdbclient."""

from __future__ import annotations

import base64
import json
import uuid

import grpc
import pytest
from kurrentdbclient import KurrentDBClient, NewEvent, StreamState
from kurrentdbclient.exceptions import NotFoundError
from kurrentdbclient.protos.v1 import shared_pb2
from waiting import wait_until

from evdb.grpc import operations_pb2

OPS = "/event_store.client.operations.Operations/"


def name(prefix: str = "s") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def ev(kind: str = "Ev", n: int = 0, size: int = 0) -> NewEvent:
    return NewEvent(type=kind, data=json.dumps({"n": n, "pad": "x" * size}).encode())


class Operations:
    """A plain grpcio client for the Operations service, built on evdb's compiled module."""

    def __init__(self, target, credentials: tuple[str, str] | None = ("admin", "changeit")) -> None:
        address = f"localhost:{target.node.port}"
        if target.tls:
            with open(target.ca, "rb") as f:
                self.channel = grpc.secure_channel(address, grpc.ssl_channel_credentials(f.read()))
        else:
            self.channel = grpc.insecure_channel(address)
        self.metadata = []
        if credentials:
            token = base64.b64encode(":".join(credentials).encode()).decode()
            self.metadata.append(("authorization", f"Basic {token}"))

    def call(self, method: str, request, reply_type):
        rpc = self.channel.unary_unary(
            OPS + method,
            request_serializer=type(request).SerializeToString,
            response_deserializer=reply_type.FromString,
        )
        return rpc(request, metadata=self.metadata, timeout=20)

    def close(self) -> None:
        self.channel.close()


def test_scavenge_through_operations_removes_what_metadata_hides(target):
    client = KurrentDBClient(target.uri)
    ops = Operations(target)
    try:
        kept = name("kept")
        gone = name("gone")
        client.append_to_stream(
            kept, events=[ev("K", i) for i in range(5)], current_version=StreamState.NO_STREAM
        )
        client.append_to_stream(
            gone, events=[ev("G", i) for i in range(3)], current_version=StreamState.NO_STREAM
        )
        client.set_stream_metadata(kept, metadata={"$maxCount": 2})
        client.delete_stream(gone, current_version=2)
        # fill the rest of the 64 KiB chunk so these events sit in a completed (scavengeable) chunk
        filler = name("filler")
        for batch in range(8):
            client.append_to_stream(
                filler,
                events=[ev("F", i, 1000) for i in range(10)],
                current_version=batch * 10 - 1 if batch else StreamState.NO_STREAM,
            )

        def in_all(stream):
            return [e for e in client.read_all(filter_exclude=()) if e.stream_name == stream]

        # before the scavenge, $all still carries the hidden events; stream reads do not
        assert len(in_all(kept)) == 5 and len(in_all(gone)) == 3
        assert [e.stream_position for e in client.get_stream(kept)] == [3, 4]

        started = ops.call(
            "StartScavenge",
            operations_pb2.StartScavengeReq(options={"thread_count": 2, "start_from_chunk": 0}),
            operations_pb2.ScavengeResp,
        )
        assert started.scavenge_result == operations_pb2.ScavengeResp.Started
        assert uuid.UUID(started.scavenge_id)

        # a scavenge keeps the last event of a stream (it remembers the stream's version)
        wait_until(lambda: len(in_all(kept)) == 2 and len(in_all(gone)) == 1, what="the scavenge's effect")
        assert [e.stream_position for e in in_all(kept)] == [3, 4]
        assert [e.stream_position for e in in_all(gone)] == [2]
        with pytest.raises(NotFoundError):
            client.get_stream(gone)
        assert [e.stream_position for e in client.get_stream(kept)] == [3, 4]
        assert len(client.get_stream(filler)) == 80

        # stopping a scavenge that is not running
        with pytest.raises(grpc.RpcError) as info:
            ops.call(
                "StopScavenge",
                operations_pb2.StopScavengeReq(options={"scavenge_id": str(uuid.uuid4())}),
                operations_pb2.ScavengeResp,
            )
        assert info.value.code() == grpc.StatusCode.NOT_FOUND
    finally:
        ops.close()
        client.close()


def test_other_operations(target):
    ops = Operations(target)
    node = target.node
    try:
        ops.call("MergeIndexes", shared_pb2.Empty(), shared_pb2.Empty)
        ops.call("SetNodePriority", operations_pb2.SetNodePriorityReq(priority=7), shared_pb2.Empty)
        assert node.node.cluster.priority == 7
        with pytest.raises(grpc.RpcError) as info:
            ops.call("SetNodePriority", operations_pb2.SetNodePriorityReq(priority=5000), shared_pb2.Empty)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        ops.call("RestartPersistentSubscriptions", shared_pb2.Empty(), shared_pb2.Empty)
        ops.call("Shutdown", shared_pb2.Empty(), shared_pb2.Empty)
        wait_until(node.node.shutdown_requested.is_set, what="the shutdown request")
        if target.tls:
            anonymous = Operations(target, credentials=None)
            try:
                with pytest.raises(grpc.RpcError) as info:
                    anonymous.call("MergeIndexes", shared_pb2.Empty(), shared_pb2.Empty)
                assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
            finally:
                anonymous.close()
    finally:
        ops.close()


def test_max_age_hides_old_events(clocked):
    target, clock = clocked
    client = KurrentDBClient(target.uri)
    try:
        stream = name()
        client.append_to_stream(
            stream, events=[ev("Old", i) for i in range(3)], current_version=StreamState.NO_STREAM
        )
        client.set_stream_metadata(stream, metadata={"$maxAge": 60})
        assert len(client.get_stream(stream)) == 3
        clock.advance(30)
        client.append_event(stream, event=ev("New"), current_version=2)
        clock.advance(45)  # the old events are 75 s old, the new one 45 s
        recorded = client.get_stream(stream)
        assert [(e.type, e.stream_position) for e in recorded] == [("New", 3)]
        assert client.get_current_version(stream) == 3
    finally:
        client.close()
