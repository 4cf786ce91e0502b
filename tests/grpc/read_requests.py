"""The Streams/Read request the gRPC tests send: a stream read forwards from its start, links not
resolved, no filter, string ids (what kurrentdbclient sends for a stream read)."""

from __future__ import annotations

from kurrentdbclient.protos.v1 import shared_pb2, streams_pb2

ReadOptions = streams_pb2.ReadReq.Options


def stream_read(stream: str, *, subscribe: bool = False, count: int = 1_000_000) -> streams_pb2.ReadReq:
    """Read ``stream`` forwards from its start: ``count`` events at most, or a subscription."""
    options = ReadOptions(
        stream=ReadOptions.StreamOptions(
            stream_identifier=shared_pb2.StreamIdentifier(stream_name=stream.encode()),
            start=shared_pb2.Empty(),
        ),
        read_direction=ReadOptions.Forwards,
        resolve_links=False,
        no_filter=shared_pb2.Empty(),
        uuid_option=ReadOptions.UUIDOption(string=shared_pb2.Empty()),
    )
    if subscribe:
        options.subscription.SetInParent()
    else:
        options.count = count
    return streams_pb2.ReadReq(options=options)
