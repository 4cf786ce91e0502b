"""Protobuf conversions the gRPC services share: expected versions, stream names (checked with the
database's rule), event ids, timestamps."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from google.protobuf import timestamp_pb2
from grpclib import GRPCError
from grpclib.const import Status
from kurrentdbclient.protos.v1 import shared_pb2

from evdb.errors import (
    InvalidInput,
)
from evdb.streams import ANY, NO_STREAM, STREAM_EXISTS, check_stream_name

if TYPE_CHECKING:
    from evdb.services import GrpcServices
    from evdb.storage.records import EventRecord

__all__ = [
    "BINARY",
    "JSON",
    "expected_version",
    "parse_uuid",
    "recorded_event_fields",
    "stream_name",
    "timestamp_now",
    "uuid_message",
]

JSON = "application/json"
BINARY = "application/octet-stream"


def recorded_event_fields(record: EventRecord, position: int, event_id: shared_pb2.UUID) -> dict[str, Any]:
    """The fields of a ``RecordedEvent`` (the streams' reads and the persistent subscriptions' alike):
    evdb's commit and prepare positions are one and the same, ``position``."""
    return {
        "id": event_id,
        "stream_identifier": shared_pb2.StreamIdentifier(stream_name=record.stream.encode()),
        "stream_revision": record.event_number,
        "prepare_position": position,
        "commit_position": position,
        "metadata": {
            "type": record.event_type,
            "content-type": JSON if record.is_json else BINARY,
            "created": str(record.timestamp),
        },
        "custom_metadata": record.metadata,
        "data": record.data,
    }


def expected_version(options: Any, oneof: str, revision_field: str) -> int:
    """The expected version of an append/delete/tombstone request's options, in evdb's numbers."""
    which = options.WhichOneof(oneof)
    if which == revision_field:
        return int(getattr(options, revision_field))
    if which == "no_stream":
        return NO_STREAM
    if which == "stream_exists":
        return STREAM_EXISTS
    return ANY


def stream_name(identifier: shared_pb2.StreamIdentifier) -> str:
    """The request's stream name, checked with the database's rule (evdb.streams.check_stream_name)
    before anything else happens: INVALID_ARGUMENT with the reason."""
    try:
        name = identifier.stream_name.decode("utf-8")
    except UnicodeDecodeError:
        raise GRPCError(Status.INVALID_ARGUMENT, "The stream name is not UTF-8.") from None
    if not name:
        raise GRPCError(Status.INVALID_ARGUMENT, "The stream name must not be empty.")
    try:
        return check_stream_name(name)
    except InvalidInput as exc:
        raise GRPCError(Status.INVALID_ARGUMENT, str(exc)) from None


def uuid_message(value: bytes, structured: bool) -> shared_pb2.UUID:
    """An event id as the client asked for it: a string, or two signed 64-bit halves."""
    if structured:
        most = int.from_bytes(value[:8], "big", signed=True)
        least = int.from_bytes(value[8:], "big", signed=True)
        return shared_pb2.UUID(
            structured=shared_pb2.UUID.Structured(most_significant_bits=most, least_significant_bits=least)
        )
    return shared_pb2.UUID(string=str(uuid.UUID(bytes=value)))


def parse_uuid(message: shared_pb2.UUID) -> uuid.UUID:
    which = message.WhichOneof("value")
    try:
        if which == "string":
            return uuid.UUID(message.string)
        if which == "structured":
            s = message.structured
            return uuid.UUID(
                bytes=s.most_significant_bits.to_bytes(8, "big", signed=True)
                + s.least_significant_bits.to_bytes(8, "big", signed=True)
            )
    except ValueError:
        pass
    raise GRPCError(Status.INVALID_ARGUMENT, "Every event needs a valid id (a UUID).")


def timestamp_now(services: GrpcServices) -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    ts.FromNanoseconds(int(services.clock.time() * 1_000_000_000))
    return ts
