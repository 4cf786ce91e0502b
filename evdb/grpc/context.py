"""Who a gRPC call comes from and what it reaches: the caller (``authorization: Basic``, X.509 user
certificates, the insecure mode's ``$system``), whether it insists on the leader, and the node's open
database and scavenge service (UNAVAILABLE while a follower reopens them)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from grpclib import GRPCError
from grpclib.const import Status
from grpclib.server import Stream

from evdb.auth import ADMINS, OPS, Principal, parse_basic_authorization
from evdb.errors import (
    DatabaseReopening,
    UsersNotReady,
)
from evdb.tls.user_certificates import certificate_principal

if TYPE_CHECKING:
    from evdb.database import Database
    from evdb.scavenge.service import ScavengeService
    from evdb.services import GrpcServices

__all__ = [
    "SYSTEM",
    "CallContext",
    "call_context",
    "database",
    "scavenge_service",
]


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


async def call_context(services: GrpcServices, stream: Stream, *, public: bool = False) -> CallContext:
    """Authenticate the call (``authorization: Basic``); wrong credentials are UNAUTHENTICATED.
    ``public``: a call anyone may make (gossip): on a member without a sign-in lease it is answered as
    to an anonymous caller rather than UNAVAILABLE (the HTTP API's rule for its public routes)."""
    metadata: Mapping[str, Any] = stream.metadata or {}
    header = metadata.get("authorization")
    requires_leader = str(metadata.get("requires-leader", "false")).lower() == "true"
    if isinstance(header, bytes):
        header = header.decode("latin-1")
    if header:
        users = services.database.users
        principal = users.principal_now(header)  # signed in before: no wait (as the HTTP API)
        if principal is None and public and not users.may_judge_now():
            return CallContext(_ANONYMOUS, requires_leader)
        if principal is None:
            parsed = parse_basic_authorization(header)
            if parsed is None:
                raise GRPCError(Status.UNAUTHENTICATED, "Malformed authorization header.")
            # one rule with HTTP (UserStore.sign_in): cached sign-ins stay on the loop
            try:
                principal = await users.sign_in_header(header, *parsed)
            except UsersNotReady as exc:  # no users yet: the client tries again
                raise GRPCError(Status.UNAVAILABLE, str(exc)) from None
            if principal is None:
                raise GRPCError(Status.UNAUTHENTICATED, "Bad credentials.")
        return CallContext(principal, requires_leader)
    if services.options.user_certificates_enabled and stream.peer is not None:  # X.509 user certificates
        by_certificate = await certificate_principal(
            stream.peer._transport,
            settings=services.settings,
            license=services.license,
            clock=services.clock,
            users=services.database.users,
        )
        if by_certificate is not None:
            return CallContext(by_certificate, requires_leader)
    return CallContext(SYSTEM if services.options.insecure else _ANONYMOUS, requires_leader)


def database(services: GrpcServices) -> Database:
    """The node's open database (Node.open_db); UNAVAILABLE while a follower reopens it."""
    try:
        return services.database.open_db()
    except DatabaseReopening as exc:
        raise GRPCError(Status.UNAVAILABLE, str(exc)) from None


def scavenge_service(services: GrpcServices) -> ScavengeService:
    """The node's scavenge service (Node.open_scavenge); UNAVAILABLE while a follower reopens it."""
    try:
        return services.database.open_scavenge()
    except DatabaseReopening as exc:
        raise GRPCError(Status.UNAVAILABLE, str(exc)) from None
