"""evdb's errors in the shapes KurrentDB's gRPC clients parse.

The status of each error is evdb/errors.py's (STATUSES, read through ``status_of``: the one table, shared
with HTTP); here they get KurrentDB's messages and trailing metadata (see the reference
``kurrentdb-grpc-clients.md`` and KurrentDB's ``RpcExceptions``): ``exception`` (``stream-deleted``,
``wrong-expected-version``, ``access-denied``, ``not-leader``, ...) and the facts beside it
(``stream-name``, ``expected-version``, ``actual-version``, ``leader-endpoint-host``/``-port``, ...), from
``trailers_of``: the Node.js client and its Rust bridge choose their error class from them. A wrong
expected version on Delete/Tombstone and a deleted stream are ``FAILED_PRECONDITION`` with KurrentDB's
messages (which kurrentdbclient reads); "not leader" is ``NOT_FOUND`` "Leader info available" with the
``not-leader`` trailers naming the leader's address (KurrentDB's ``RpcExceptions.LeaderInfo``)."""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from grpclib import GRPCError
from grpclib.const import Status

from evdb.errors import (
    AccessDenied,
    DatabaseReopening,
    EventTooLarge,
    NotLeader,
    resource_status,
    status_of,
    trailers_of,
)

if TYPE_CHECKING:
    from evdb.services import GrpcServices

__all__ = [
    "KurrentError",
    "access_denied",
    "grpc_error",
    "kurrent_error",
    "not_leader_error",
]


def access_denied() -> GRPCError:
    """KurrentDB's ``RpcExceptions.AccessDenied``: PERMISSION_DENIED with ``exception: access-denied``."""
    return kurrent_error(Status.PERMISSION_DENIED, "Access Denied", trailers_of(AccessDenied()))


def not_leader_error(services: GrpcServices) -> GRPCError:
    """KurrentDB's ``RpcExceptions.LeaderInfo``: NOT_FOUND "Leader info available" with the
    ``not-leader`` trailers naming the leader's address, as KurrentDB answers a requires-leader call on
    a follower; UNAVAILABLE "Server Is Not Ready" when no leader is known."""
    cluster = services.cluster
    # the leader's address as clients are told it (AdvertiseHostToClientAs), as KurrentDB
    leader = cluster.leader_client_endpoint() if cluster is not None else None
    if leader is None:
        return GRPCError(Status.UNAVAILABLE, "Server Is Not Ready")
    host, port = leader
    return kurrent_error(Status.NOT_FOUND, "Leader info available", trailers_of(NotLeader(host, port)))


def grpc_error(services: GrpcServices, exc: BaseException) -> GRPCError:
    """evdb's errors as the gRPC statuses KurrentDB answers with (messages and trailers included)."""
    if isinstance(exc, GRPCError):
        return exc
    if isinstance(exc, NotLeader):
        return not_leader_error(services)  # with the leader's endpoint, as KurrentDB's clients expect
    if isinstance(exc, AccessDenied):
        return access_denied()
    if isinstance(exc, EventTooLarge) and exc.limit is None:
        # KurrentDB's trailer names the limit (the Node.js client reads it): the database's MaxAppendSize
        db = services.database.db
        if db is not None:
            exc = EventTooLarge(str(exc), limit=min(db.config.max_append_size, 2**31 - 1))
    known = status_of(exc)  # the one table of statuses (evdb/errors.py), shared with HTTP
    if known is not None:
        return kurrent_error(Status[known[1]], str(exc), trailers_of(exc))
    if services.database.db is None:  # a follower cutting a diverged tail: a moment, not a fault
        return GRPCError(Status.UNAVAILABLE, DatabaseReopening.MESSAGE)
    resource = resource_status(exc)  # a full disk, no descriptor left: the same rule as HTTP's
    if resource is not None:
        return GRPCError(Status[resource[1]], resource[2])
    services.logger.exception("gRPC call failed unexpectedly", exc_info=exc)
    return GRPCError(Status.INTERNAL, f"Internal error: {exc}")


# -- KurrentDB's error shapes on the wire ----------------------------------------------------------------
class KurrentError(GRPCError):
    """A ``GRPCError`` with KurrentDB's trailing metadata (``exception`` and the facts beside it).

    grpclib sends no custom trailers for a raised error; :class:`KurrentServer` sends these."""

    def __init__(
        self, status: Status, message: str, trailers: Mapping[str, str], details: Any = None
    ) -> None:
        super().__init__(status, message, details)
        # HTTP/2 (grpclib) carries no empty value: a fact KurrentDB sends empty is left out
        self.trailers = {key: _metadata_value(value) for key, value in trailers.items() if value}


def kurrent_error(
    status: Status, message: str, trailers: Mapping[str, str], details: Any = None
) -> GRPCError:
    """The error a handler raises: with trailers when KurrentDB sends some, else a plain GRPCError."""
    if not trailers:
        return GRPCError(status, message, details)
    return KurrentError(status, message, trailers, details)


def _metadata_value(value: str) -> str:
    """A trailer value as HTTP/2 carries it: printable ASCII as it is, anything else percent-encoded
    (UTF-8), as gRPC encodes ``grpc-message``."""
    if all(" " <= ch <= "~" for ch in value):
        return value
    return urllib.parse.quote(value, safe=" !\"#$&'()*+,/:;=?@[]^`{|}~<>")
