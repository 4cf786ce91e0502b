"""A gRPC call that meets the node without its database (a follower cutting a diverged tail closes and
reopens it) is answered UNAVAILABLE, try again, as HTTP answers 503; never UNKNOWN."""

from __future__ import annotations

from urllib.parse import urlsplit

import grpc
from kurrentdbclient.protos.v1 import shared_pb2, streams_pb2

READ = "/event_store.client.streams.Streams/Read"
MERGE_INDEXES = "/event_store.client.operations.Operations/MergeIndexes"


def _read_request(stream: str) -> streams_pb2.ReadReq:
    o = streams_pb2.ReadReq.Options
    options = o(read_direction=o.Forwards, resolve_links=False, count=10)
    options.stream.stream_identifier.stream_name = stream.encode()
    options.stream.start.CopyFrom(shared_pb2.Empty())
    options.no_filter.CopyFrom(shared_pb2.Empty())
    options.uuid_option.string.CopyFrom(shared_pb2.Empty())
    return streams_pb2.ReadReq(options=options)


async def test_calls_meeting_the_database_reopening_are_unavailable(node):
    db, node.db = node.db, None  # the moment between closing and reopening (Node.truncate_and_reopen)
    try:
        async with grpc.aio.insecure_channel(urlsplit(node.http_url).netloc) as channel:
            read = channel.unary_stream(
                READ,
                request_serializer=streams_pb2.ReadReq.SerializeToString,
                response_deserializer=streams_pb2.ReadResp.FromString,
            )
            merge = channel.unary_unary(
                MERGE_INDEXES,
                request_serializer=shared_pb2.Empty.SerializeToString,
                response_deserializer=shared_pb2.Empty.FromString,
            )

            async def read_all() -> None:
                async for _ in read(_read_request("s")):
                    pass

            for call in (read_all, lambda: merge(shared_pb2.Empty())):
                try:
                    await call()
                except grpc.aio.AioRpcError as exc:
                    assert exc.code() == grpc.StatusCode.UNAVAILABLE, (exc.code(), exc.details())
                    assert "reopening its database" in (exc.details() or "")
                else:
                    raise AssertionError("the call succeeded without a database")
    finally:
        node.db = db
