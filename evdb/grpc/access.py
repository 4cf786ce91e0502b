"""The gRPC API's access rules: the HTTP API's stream access (evdb.auth.stream_access), the operations
role, and the calls only the leader serves."""

from __future__ import annotations

from typing import TYPE_CHECKING

from grpclib import GRPCError
from grpclib.const import Status

from evdb.auth import Principal, stream_access
from evdb.grpc.context import CallContext, database
from evdb.grpc.errors import access_denied, not_leader_error

if TYPE_CHECKING:
    from evdb.services import GrpcServices

__all__ = [
    "check_leader",
    "check_stream_access",
    "require_leader",
    "require_ops",
]


def check_stream_access(services: GrpcServices, principal: Principal, stream: str, action: str) -> None:
    """The HTTP API's stream access rules (evdb.auth.stream_access), on the event loop as the HTTP API
    checks them: the stream's metadata is read through the index and the chunks' maps (``mmap``), which
    hold the GIL in a worker thread as much as on the loop, so a thread hop would only add wake-ups."""
    verdict = stream_access(database(services), principal, stream, action)
    if verdict == "unauthenticated":
        raise GRPCError(Status.UNAUTHENTICATED, "Authentication is required.")
    if verdict == "denied":
        raise access_denied()


def require_ops(principal: Principal) -> None:
    if not principal.is_authenticated:
        raise GRPCError(Status.UNAUTHENTICATED, "Authentication is required.")
    if not principal.is_ops:
        raise access_denied()


def check_leader(services: GrpcServices, ctx: CallContext) -> None:
    """A call that requires the leader, on a node that is not: the not-leader answer."""
    cluster = services.cluster
    if ctx.requires_leader and cluster is not None and not cluster.is_leader:
        raise not_leader_error(services)


def require_leader(services: GrpcServices) -> None:
    """A call only the leader serves, whatever the ``requires-leader`` header says (KurrentDB's
    persistent-subscription Create/Update/Delete/Read/ReplayParked on any other node): the not-leader
    answer, or "Server Is Not Ready" while no leader is known."""
    cluster = services.cluster
    if cluster is not None and not cluster.is_leader:
        raise not_leader_error(services)
