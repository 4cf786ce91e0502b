"""What both HTTP/1.1 paths share, transport-neutral: the answer's shape, the error → answer rules, the
sign-ins known without waiting and the per-client limit.

aiohttp's middlewares (evdb/http/app.py) and the lean path for appends (evdb/http/lean.py) call these,
so each rule has one place: an :class:`Answer` becomes aiohttp's ``web.Response`` or the lean path's
bytes, the same status, headers and body.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from aiohttp import web

from evdb.auth import ANONYMOUS, Principal
from evdb.autoscavenge.nodeauth import NODE_SCHEME
from evdb.errors import DatabaseReopening, EvdbError, WrongExpectedVersion, resource_status, status_of

if TYPE_CHECKING:
    from evdb.services import ApiServices

__all__ = ["REOPENING", "Answer", "ClientLimit", "authenticate_now", "error_answer"]

#: what ``web.Response(text=...)`` makes its Content-Type
TEXT_TYPE = "text/plain; charset=utf-8"


@dataclass(frozen=True, slots=True)
class Answer:
    """An HTTP answer before a transport writes it: status, headers in order, body. Content-Length,
    Date, Server and Connection are the transport's (as aiohttp adds them)."""

    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes

    def response(self) -> web.Response:
        return web.Response(status=self.status, headers=list(self.headers), body=self.body)


def _text(status: int, text: str, *headers: tuple[str, str]) -> Answer:
    return Answer(status, (*headers, ("Content-Type", TEXT_TYPE)), text.encode())


#: the node has no open database for a moment (a follower cutting a diverged tail): try again
REOPENING = _text(503, DatabaseReopening.MESSAGE, ("Retry-After", "1"))


def error_answer(
    services: ApiServices, exc: BaseException, method: str, path: str, generation: int
) -> Answer:
    """The answer to a request whose handling failed with ``exc`` (``generation``: the open database's
    ``generation`` when the request began). A database closed or reopened under the request is a 503
    (nothing of it was acknowledged); evdb's errors get their status from the one table
    (evdb/errors.py STATUSES, shared with gRPC); anything unexpected is logged and a 500."""
    if services.database.db is None or services.database.generation != generation:
        services.logger.info("Request %s %s met the database reopening: %s", method, path, exc)
        return REOPENING
    if isinstance(exc, WrongExpectedVersion):
        current = str(exc.current_version)
        return _text(
            400,
            "Wrong expected EventNumber",
            ("Kurrent-CurrentVersion", current),
            ("ES-CurrentVersion", current),
        )
    if isinstance(exc, EvdbError):
        known = status_of(exc)
        if known is None:
            services.logger.error("Request %s %s failed: %s", method, path, exc)
        retry = getattr(exc, "retry_after", None)
        return _text(known[0] if known else 500, str(exc), *([("Retry-After", str(retry))] if retry else []))
    resource = resource_status(exc)
    if resource is not None:
        # a full disk (the database logged it and rolled the write back), no descriptor left: not
        # logged per request (a flood of them would flood the log)
        status, _, message = resource
        return _text(status, message, *((("Retry-After", "1"),) if status == 503 else ()))
    services.logger.error("Unhandled error in %s %s", method, path, exc_info=exc)
    return _text(500, "Internal server error; see the node's log.")


def authenticate_now(services: ApiServices, header: str | None) -> Principal | None:
    """The caller of a request with this ``Authorization`` header when it is known without waiting:
    anonymous (no header), or Basic credentials that signed in before (the users' caches). None: the
    auth middleware decides, taking its time (a sign-in to run, the node scheme, a malformed header)."""
    if not header:
        return ANONYMOUS
    if header.startswith(f"{NODE_SCHEME} "):
        return None
    return services.database.users.principal_now(header)


class ClientLimit:
    """At most ``limit`` requests in progress per remote address (HttpMaxConcurrentRequestsPerClient),
    counted across both HTTP paths of the node's app."""

    __slots__ = ("_in_progress", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._in_progress: dict[str, int] = {}

    def full(self, client: str) -> bool:
        return self._in_progress.get(client, 0) >= self.limit

    def enter(self, client: str) -> None:
        self._in_progress[client] = self._in_progress.get(client, 0) + 1

    def leave(self, client: str) -> None:
        left = self._in_progress[client] - 1
        if left:
            self._in_progress[client] = left
        else:
            del self._in_progress[client]


def remote_of(peername: object) -> str:
    """The client's address as aiohttp's ``request.remote`` gives it ("" for none): the limit's key."""
    if peername is None:
        return ""
    if isinstance(peername, list | tuple):
        return str(peername[0])
    return str(peername)
