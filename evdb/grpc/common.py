"""What every gRPC service shares: the caller, access rules, leader checks, error shapes, conversions.

Errors reach the client in the shapes kurrentdbclient parses (see the reference
``kurrentdb-grpc-clients.md``): a wrong expected version on Delete/Tombstone and a deleted stream are
``FAILED_PRECONDITION`` with KurrentDB's messages; "not leader" is ``FAILED_PRECONDITION`` whose
``grpc-status-details-bin`` packs ``kurrent.rpc.NotLeaderNodeErrorDetails`` with the leader's address.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from google.protobuf import timestamp_pb2
from grpclib import GRPCError
from grpclib.const import Status
from grpclib.server import Stream
from kurrentdbclient.protos.kurrent.rpc import errors_pb2
from kurrentdbclient.protos.v1 import shared_pb2

from evdb.auth import ADMINS, OPS, Principal, parse_basic_authorization, stream_access
from evdb.errors import DatabaseReopening, InvalidInput, NotLeader, status_of
from evdb.streams import ANY, NO_STREAM, STREAM_EXISTS, check_stream_name

if TYPE_CHECKING:
    from evdb.database import Database
    from evdb.node import Node
    from evdb.scavenge.service import ScavengeService

__all__ = [
    "SYSTEM",
    "call_context",
    "check_stream_access",
    "database",
    "expected_version",
    "grpc_error",
    "require_ops",
    "scavenge_service",
    "timestamp_now",
    "uuid_message",
]

_log = logging.getLogger("evdb.grpc")

#: The caller of a request without credentials on an insecure node: KurrentDB's insecure mode turns
#: authentication and authorization off, and kurrentdbclient sends credentials only over TLS.
SYSTEM = Principal("$system", frozenset({ADMINS, OPS, "$system"}))
_ANONYMOUS = Principal("")


class CallContext:
    """Who calls, and whether the call insists on the leader."""

    __slots__ = ("principal", "requires_leader")

    def __init__(self, principal: Principal, requires_leader: bool) -> None:
        self.principal = principal
        self.requires_leader = requires_leader


async def call_context(node: Node, stream: Stream) -> CallContext:
    """Authenticate the call (``authorization: Basic``); wrong credentials are UNAUTHENTICATED."""
    metadata: Mapping[str, Any] = stream.metadata or {}
    header = metadata.get("authorization")
    requires_leader = str(metadata.get("requires-leader", "false")).lower() == "true"
    if isinstance(header, bytes):
        header = header.decode("latin-1")
    if header:
        parsed = parse_basic_authorization(header)
        if parsed is None:
            raise GRPCError(Status.UNAUTHENTICATED, "Malformed authorization header.")
        principal = await asyncio.to_thread(node.users.authenticate, *parsed)
        if principal is None:
            raise GRPCError(Status.UNAUTHENTICATED, "Bad credentials.")
        return CallContext(principal, requires_leader)
    return CallContext(SYSTEM if node.options.insecure else _ANONYMOUS, requires_leader)


def check_stream_access(node: Node, principal: Principal, stream: str, action: str) -> None:
    """The HTTP API's stream access rules (evdb.auth.stream_access); blocking (reads metadata)."""
    verdict = stream_access(database(node), principal, stream, action)
    if verdict == "unauthenticated":
        raise GRPCError(Status.UNAUTHENTICATED, "Authentication is required.")
    if verdict == "denied":
        raise GRPCError(Status.PERMISSION_DENIED, "Access denied.")


def database(node: Node) -> Database:
    """The node's open database (Node.open_db); UNAVAILABLE while a follower reopens it."""
    try:
        return node.open_db()
    except DatabaseReopening as exc:
        raise GRPCError(Status.UNAVAILABLE, str(exc)) from None


def scavenge_service(node: Node) -> ScavengeService:
    """The node's scavenge service (Node.open_scavenge); UNAVAILABLE while a follower reopens it."""
    try:
        return node.open_scavenge()
    except DatabaseReopening as exc:
        raise GRPCError(Status.UNAVAILABLE, str(exc)) from None


def require_ops(principal: Principal) -> None:
    if not principal.is_authenticated:
        raise GRPCError(Status.UNAUTHENTICATED, "Authentication is required.")
    if not principal.is_ops:
        raise GRPCError(Status.PERMISSION_DENIED, "Access denied.")


def not_leader_error(node: Node) -> GRPCError:
    """FAILED_PRECONDITION with the leader's address, as KurrentDB answers a requires-leader call on a
    follower; UNAVAILABLE when no leader is known."""
    cluster = node.cluster
    leader = cluster.leader_http_endpoint() if cluster is not None else None
    if leader is None:
        return GRPCError(Status.UNAVAILABLE, "Server Is Not Ready")
    host, port = leader
    peer = cluster.leader_peer() if cluster is not None else None
    node_id = str(peer.info.get("instanceId", "")) if peer is not None else ""
    details = errors_pb2.NotLeaderNodeErrorDetails(
        current_leader=errors_pb2.NotLeaderNodeErrorDetails.NodeInfo(host=host, port=port, node_id=node_id)
    )
    return GRPCError(Status.FAILED_PRECONDITION, "Leader info available", [details])


def check_leader(node: Node, ctx: CallContext) -> None:
    """A call that requires the leader, on a node that is not: the not-leader answer."""
    cluster = node.cluster
    if ctx.requires_leader and cluster is not None and not cluster.is_leader:
        raise not_leader_error(node)


def grpc_error(node: Node, exc: BaseException) -> GRPCError:
    """evdb's errors as the gRPC statuses KurrentDB answers with (messages included)."""
    if isinstance(exc, GRPCError):
        return exc
    if isinstance(exc, NotLeader):
        return not_leader_error(node)  # with the leader's endpoint, as KurrentDB's clients expect
    known = status_of(exc)  # the one table of statuses (evdb/errors.py), shared with HTTP
    if known is not None:
        return GRPCError(Status[known[1]], str(exc) or "Access denied.")
    if getattr(node, "db", None) is None:  # a follower cutting a diverged tail: a moment, not a fault
        return GRPCError(Status.UNAVAILABLE, DatabaseReopening.MESSAGE)
    node.logger.exception("gRPC call failed unexpectedly", exc_info=exc)
    return GRPCError(Status.INTERNAL, f"Internal error: {exc}")


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


def timestamp_now(node: Node) -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    ts.FromNanoseconds(int(node.clock.time() * 1_000_000_000))
    return ts
