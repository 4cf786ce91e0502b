"""Requests aiohttp cannot parse: a short answer that repeats none of the client's bytes, and a log
that a flood cannot grow.

aiohttp refuses a request head past its limits (a request line or one header field over
:data:`MAX_LINE` bytes, more than :data:`MAX_HEADERS` headers) and any malformed request with a 400
whose body quotes the offending bytes, and logs "Error handling request" with a traceback at error
level for each one: any anonymous client could fill a node's log. :class:`HttpRequestHandler` (the
node's HTTP port and the node-to-node listener: :func:`http_protocol`) answers
instead:

- a head past a limit: ``431 Request Header Fields Too Large`` (Kestrel's answer, KurrentDB's server,
  for a header section too large or with too many headers; evdb gives it for an over-long request line
  too, as aiohttp's parser does not tell the two apart), naming the limits;
- any other request that does not parse: ``400 Bad Request``, "Malformed HTTP request.";

both ``text/plain``, ``Connection: close``; and logs one warning line naming the client's address at
most once a second per listener (:class:`RefusedRequests`, in the :class:`ServerLog` the runner gives
aiohttp), with the count of the refusals not logged.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError, LineTooLong
from aiohttp.web_protocol import RequestHandler

from evdb.clock import Clock, SystemClock

__all__ = [
    "MAX_HEADERS",
    "MAX_LINE",
    "HttpRequestHandler",
    "RefusedRequests",
    "ServerLog",
    "head_begun_at",
    "http_protocol",
    "refusal_answer",
    "waits_for_request",
]

#: aiohttp's limits, which the node keeps (its defaults): a request line or one header field, bytes
MAX_LINE = 8190
#: headers in one request
MAX_HEADERS = 128
#: a refused request is logged at most this often (per logger, so per node)
LOG_EVERY_SECONDS = 1.0
_TOO_MANY_HEADERS = "Too many headers received"  # aiohttp's BadHttpMessage for MAX_HEADERS
_HEAD_TOO_LARGE = (
    f"Request header fields too large: a request line or header field over {MAX_LINE} bytes, "
    f"or more than {MAX_HEADERS} headers."
)


def refusal_answer(exc: BaseException) -> tuple[int, str, str]:
    """The status, body and what to log for a request aiohttp's parser refused with ``exc``."""
    if isinstance(exc, LineTooLong) or (
        isinstance(exc, HttpProcessingError) and exc.message == _TOO_MANY_HEADERS
    ):
        return 431, _HEAD_TOO_LARGE, "its request head is past the limits (431)"
    return 400, "Malformed HTTP request.", f"it does not parse as HTTP/1.1 (400, {type(exc).__name__})"


class RefusedRequests:
    """Counts the requests refused as unparseable and logs them, at most one line a second."""

    def __init__(self, logger: logging.Logger, clock: Clock) -> None:
        self._log = logger
        self._clock = clock
        self.count = 0
        self._unlogged = 0
        self._logged_at = float("-inf")

    def note(self, peer: object, what: str) -> None:
        self.count += 1
        now = self._clock.monotonic()
        if now - self._logged_at < LOG_EVERY_SECONDS:
            self._unlogged += 1
            return
        self._logged_at = now
        unlogged, self._unlogged = self._unlogged, 0
        self._log.warning(
            "Refused a request from %s: %s (%d such refusals not logged since the last line, "
            "%d in all; one line a second at most)",
            peer,
            what,
            unlogged,
            self.count,
        )


class ServerLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    """The logger a runner gives aiohttp's handlers (``AppRunner(logger=)``): the node's own, with the
    count of the requests that runner's handlers refused (:class:`RefusedRequests`)."""

    def __init__(self, logger: logging.Logger, clock: Clock) -> None:
        super().__init__(logger, {})
        self.refusals = RefusedRequests(logger, clock)


#: for a handler whose runner gave no ServerLog
_AIOHTTP_REFUSALS = RefusedRequests(logging.getLogger("aiohttp.server"), SystemClock())

#: the handlers partway through receiving a request head: when its first bytes came (event-loop
#: time). Kept here because a handler has no room for it (aiohttp's ``__slots__``); an entry goes
#: when the head is complete or the connection ends.
_HEAD_BEGUN: dict[RequestHandler, float] = {}
#: each handler's HttpRequestHeadTimeout (from :func:`http_protocol`) and its armed timer
_HEAD_TIMEOUT: dict[RequestHandler, float] = {}
_HEAD_TIMERS: dict[RequestHandler, asyncio.TimerHandle] = {}
_log = logging.getLogger("evdb.http")


def waits_for_request(handler: object) -> bool:
    """Whether an aiohttp request handler has no request in progress or queued (it waits for one);
    False when that cannot be told (its private state read defensively)."""
    waiter = getattr(handler, "_waiter", None)
    return (
        getattr(handler, "_request_in_progress", True) is False
        and not getattr(handler, "_messages", True)
        and waiter is not None
        and not waiter.done()
    )


def head_begun_at(handler: object) -> float | None:
    """When the request head ``handler`` is receiving began (event-loop time); None when no head is
    partway in (the handler is between requests, or in one)."""
    return _HEAD_BEGUN.get(handler)  # type: ignore[call-overload]


class HttpRequestHandler(RequestHandler):
    """aiohttp's request handler, answering the requests its parser refuses as the module says.

    Made by :func:`http_protocol` from the handler aiohttp's ``web.Server`` makes (same layout:
    nothing added), so every option the runner gives aiohttp applies."""

    __slots__ = ()

    def data_received(self, data: bytes) -> None:
        parsed = getattr(self, "_request_count", 0)
        super().data_received(data)
        if (
            getattr(self, "_request_count", 0) == parsed
            and getattr(self, "_request_in_progress", True) is False
            and not getattr(self, "_messages", True)
        ):  # bytes came, no request is complete, queued or under way: a head partway in
            if self not in _HEAD_BEGUN:
                loop = asyncio.get_running_loop()
                _HEAD_BEGUN[self] = loop.time()
                timeout = _HEAD_TIMEOUT.get(self)
                if timeout is not None:
                    _HEAD_TIMERS[self] = loop.call_later(timeout, self._head_expired)
        else:
            self._head_done()

    def _head_done(self) -> None:
        _HEAD_BEGUN.pop(self, None)
        timer = _HEAD_TIMERS.pop(self, None)
        if timer is not None:
            timer.cancel()

    def _head_expired(self) -> None:
        """A request head begun HttpRequestHeadTimeout ago is still not complete: close the connection
        (aiohttp times out only the wait between requests, after a first one)."""
        _HEAD_TIMERS.pop(self, None)
        if self not in _HEAD_BEGUN:
            return
        transport = self.transport
        peer = transport.get_extra_info("peername") if transport is not None else None
        _log.info(
            "Closed a connection from %s: its request head did not come within %g s (HttpRequestHeadTimeout)",
            peer,
            _HEAD_TIMEOUT.get(self, 0.0),
        )
        self._head_done()
        self.force_close()
        if transport is not None:
            transport.close()

    def connection_lost(self, exc: BaseException | None) -> None:
        self._head_done()
        _HEAD_TIMEOUT.pop(self, None)
        super().connection_lost(exc)

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if not isinstance(exc, HttpProcessingError):  # an error of a handler: aiohttp's answer
            return super().handle_error(request, status, exc, message)
        status, text, what = refusal_answer(exc)
        log = self.logger
        refusals = log.refusals if isinstance(log, ServerLog) else _AIOHTTP_REFUSALS
        refusals.note(request.remote, what)
        response = web.Response(status=status, text=text, content_type="text/plain")
        response.force_close()
        return response


def http_protocol(server: web.Server, head_timeout: Callable[[], float] | None = None) -> Callable[[], Any]:
    """A protocol factory for ``server``'s connections: its handlers, as :class:`HttpRequestHandler`;
    ``head_timeout`` (HttpRequestHeadTimeout, read as each connection comes): a request head begun and
    not complete this long closes the connection."""

    def make() -> RequestHandler:
        handler = server()
        handler.__class__ = HttpRequestHandler
        if head_timeout is not None:
            _HEAD_TIMEOUT[handler] = head_timeout()
        return handler

    return make
