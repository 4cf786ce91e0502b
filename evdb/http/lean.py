"""The lean HTTP/1.1 path: ``POST /streams/{stream}`` answered without aiohttp's per-request machinery.

A connection that speaks HTTP/1.1 (evdb/grpc/dispatch.py decides) starts here. :class:`LeanAppends`
answers the appends it can answer itself, one request at a time, and hands the connection, with every
byte not yet answered, to aiohttp's request handler at a request boundary for anything else. It never
takes the connection back.

What it answers itself: a request in a strict subset of HTTP/1.1 (the request line ``POST
/streams/<name> HTTP/1.1``, the name of plain characters; token header names, printable ASCII values,
no repeated header; ``Host``, ``Content-Type`` and ``Content-Length`` present, the body no larger than
the app's limit; no ``Transfer-Encoding``, ``Expect``, ``Upgrade`` or ``Content-Encoding``;
``Connection`` absent, ``keep-alive`` or ``close``), on a node that has its database open and leads
(or runs alone), from a client under its concurrency limit whose ``Authorization`` is known without
waiting (:func:`evdb.http.answers.authenticate_now`), when the append's own checks pass and the
writer takes it (evdb/http/streams.py ``begin_append`` and ``submit_append``). Anything else, or any
of those raising, goes to aiohttp with the request's bytes untouched: nothing has happened yet (no
write, no count, no log line), and aiohttp answers it through the same functions.

Once the writer has the append, the answer is this path's: :func:`evdb.http.streams.appended`, or
:func:`evdb.http.answers.error_answer` for a refusal, written as aiohttp writes a ``web.Response``
(its status line, the answer's headers, Content-Length, Date, Server, ``Connection: close`` when the
client asked for it), counted by ``observe_http``. A connection lost before the answer cancels the
wait, as aiohttp's handler cancellation does (the write itself goes on). The webui's
``on_response_prepare`` hook changes only 401 answers, which this path never gives.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable
from functools import partial
from http import HTTPStatus
from typing import TYPE_CHECKING, cast

from aiohttp import web
from aiohttp.helpers import parse_content_type, rfc822_formatted_time
from aiohttp.http import SERVER_SOFTWARE

from evdb.http.answers import Answer, authenticate_now, error_answer, remote_of
from evdb.http.app import CLIENT_LIMIT
from evdb.http.common import LOOP, SERVICES
from evdb.http.heads import MAX_HEADERS
from evdb.http.streams import PendingAppend, appended, begin_append, submit_append
from evdb.streams import AppendResult

if TYPE_CHECKING:
    from evdb.services import ApiServices

__all__ = ["KEEPALIVE_TIMEOUT", "LeanAppends", "LeanServer"]

#: aiohttp's RequestHandler's own idle timeout (its default); the node sets HttpKeepAliveTimeout for
#: both paths
KEEPALIVE_TIMEOUT = 3630.0
#: a request head (request line and headers) longer than this goes to aiohttp (its line limit), and so
#: does one of more than MAX_HEADERS headers: aiohttp answers both (evdb/http/heads.py)
HEAD_LIMIT = 8190
#: the strict subset of a request head this path reads; anything else is aiohttp's. The stream name:
#: characters that stand for themselves in a path (no ``%``, no query), never ``.`` or ``..``
_HEAD = re.compile(
    rb"POST /streams/([A-Za-z0-9\-_.~$@:]+) HTTP/1\.1\r\n"
    rb"((?:[!#$%&'*+\-.^_`|~0-9A-Za-z]+:[ ]*[\x21-\x7e](?:[\x20-\x7e]*[\x21-\x7e])?\r\n)*)\r\n"
)
_PREFIX = b"POST /streams/"
#: headers that change how aiohttp reads the request or the connection: theirs
_AIOHTTP_ONLY = frozenset({"transfer-encoding", "expect", "upgrade", "content-encoding"})
_MAX_LENGTH_DIGITS = 12


class _Method:
    """What ``NodeMetrics.observe_http`` reads of a request: its method."""

    __slots__ = ("method",)

    def __init__(self, method: str) -> None:
        self.method = method


_POST = cast(web.Request, _Method("POST"))


class _Request:
    """One complete request this path answers: what the append's functions read."""

    __slots__ = ("body", "close", "content_type", "end", "headers", "host", "stream")

    def __init__(self, stream: str, headers: dict[str, str], body: bytes, end: int, close: bool) -> None:
        self.stream = stream
        self.headers = headers
        self.host = headers["host"]
        self.content_type = parse_content_type(headers["content-type"])[0]  # as request.content_type
        self.body = body
        self.end = end
        self.close = close

    def get(self, name: str) -> str | None:
        return self.headers.get(name.lower())


def _read_request(buffer: bytearray, body_limit: int) -> _Request | bool:
    """The request at the start of ``buffer``: a :class:`_Request`, False when more bytes are needed
    for a request this path may answer, True when aiohttp must have it."""
    head_end = buffer.find(b"\r\n\r\n", 0, HEAD_LIMIT)
    if head_end < 0:  # more to come, unless what came already is not for this path
        return (
            len(buffer) >= HEAD_LIMIT
            or not _PREFIX.startswith(buffer[: len(_PREFIX)])
            or buffer.count(b"\n") != buffer.count(b"\r\n")  # a line not ended by CRLF
        )
    match = _HEAD.fullmatch(buffer, 0, head_end + 4)
    if match is None:
        return True
    stream = match.group(1).decode("ascii")
    if stream in (".", ".."):
        return True
    lines = match.group(2).decode("ascii").split("\r\n")
    lines.pop()  # after the last CRLF
    headers: dict[str, str] = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.lower()] = value.lstrip(" ")
    if len(headers) != len(lines) or len(lines) > MAX_HEADERS or not _AIOHTTP_ONLY.isdisjoint(headers):
        return True  # a repeated header, aiohttp's; past its header count, its 431 (evdb/http/heads.py)
    length_text = headers.get("content-length")
    if (
        length_text is None
        or not length_text.isdigit()
        or len(length_text) > _MAX_LENGTH_DIGITS
        or "host" not in headers
        or "content-type" not in headers
    ):
        return True
    length = int(length_text)
    if length > body_limit:
        return True  # aiohttp's 413
    connection = headers.get("connection", "keep-alive").lower()
    if connection not in ("keep-alive", "close"):
        return True
    end = head_end + 4 + length
    if len(buffer) < end:
        return False
    return _Request(stream, headers, bytes(buffer[head_end + 4 : end]), end, connection == "close")


def render(answer: Answer, close: bool) -> bytes:
    """An answer's bytes as aiohttp writes a ``web.Response`` with a body to an HTTP/1.1 request."""
    status = answer.status
    lines = [f"HTTP/1.1 {status} {HTTPStatus(status).phrase}"]
    lines.extend(f"{name}: {value}" for name, value in answer.headers)
    lines.append(f"Content-Length: {len(answer.body)}")
    lines.append(f"Date: {rfc822_formatted_time()}")
    lines.append(f"Server: {SERVER_SOFTWARE}")
    if close:
        lines.append("Connection: close")
    lines.append("\r\n")
    return "\r\n".join(lines).encode() + answer.body


class LeanServer:
    """The lean path of one listening site: makes each connection's protocol, knows the live ones and
    ends them when the site stops (idle ones at once, one waiting for its answer after it)."""

    def __init__(self, app: web.Application, fallback: Callable[[], asyncio.Protocol]) -> None:
        self.app = app
        self.services: ApiServices = app[SERVICES]
        self.limit = app[CLIENT_LIMIT]
        self.body_limit = self.services.options.http_max_request_body_size
        self.fallback = fallback
        options = self.services.options
        # as the node's runner gives aiohttp's handlers (evdb/node/__init__.py)
        self.keepalive_timeout = float(options.http_keep_alive_timeout)
        #: a request head begun and not complete this long closes the connection (HttpRequestHeadTimeout)
        self.head_timeout = float(options.http_request_head_timeout)
        self.connections: set[LeanAppends] = set()
        self.closing = False
        #: connections given to aiohttp so far (an operator's and the tests' view of the path's reach)
        self.handed_off = 0

    def protocol(self) -> asyncio.Protocol:
        if self.closing:
            return self.fallback()
        return LeanAppends(self)

    def loop(self) -> asyncio.AbstractEventLoop:
        return self.app[LOOP].running()

    def idle_connection(self) -> LeanAppends | None:
        """The connection idle longest (no request in progress, nothing unanswered), if any: the one
        evdb/http/connections.py's ConnectionLimit closes to make room at HttpMaxConnections."""
        idle = [c for c in self.connections if c.idle]
        return min(idle, key=lambda c: c.idle_since) if idle else None

    async def close(self, timeout: float = 2.0) -> None:
        """End every connection still on this path: idle ones now, the others once answered (within
        ``timeout``, as the runner's shutdown_timeout gives aiohttp's handlers)."""
        self.closing = True
        for connection in list(self.connections):
            connection.close_when_idle()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self.connections and loop.time() < deadline:
            waiter = loop.create_future()
            for connection in self.connections:
                connection.closed_waiters.append(waiter)
            await asyncio.wait([waiter], timeout=max(0.0, deadline - loop.time()))
        for connection in list(self.connections):
            connection.abort()


class LeanAppends(asyncio.Protocol):
    """One HTTP/1.1 connection on the lean path (see the module docstring)."""

    def __init__(self, server: LeanServer) -> None:
        self._server = server
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._scheme = "http"
        self._client = ""
        self._busy: PendingAppend | None = None
        self._writing_paused = False
        self._reading_paused = False
        self._closing = False
        self._last_active = 0.0
        self._head_since = 0.0  # when the unanswered bytes in the buffer began to come
        self._idle_timer: asyncio.TimerHandle | None = None
        self._idle_due = 0.0
        self.closed_waiters: list[asyncio.Future[None]] = []

    # -- asyncio.Protocol ---------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        # as aiohttp's request sees them: https on a TLS transport, the peer's address
        self._scheme = "https" if transport.get_extra_info("sslcontext") else "http"
        self._client = remote_of(transport.get_extra_info("peername"))
        self._server.connections.add(self)
        loop = self._server.loop()
        self._last_active = loop.time()
        self._arm(self._last_active + self._server.keepalive_timeout)

    def _arm(self, due: float) -> None:
        """The idle check at ``due`` or sooner."""
        if self._idle_timer is not None:
            if self._idle_due <= due:
                return
            self._idle_timer.cancel()
        self._idle_due = due
        self._idle_timer = self._server.loop().call_at(due, self._idle_check)

    def data_received(self, data: bytes) -> None:
        if not self._buffer:
            self._head_since = self._server.loop().time()
            self._arm(self._head_since + self._server.head_timeout)
        self._buffer += data
        if self._busy is None:
            self._serve()
        if len(self._buffer) > HEAD_LIMIT + self._server.body_limit and not self._reading_paused:
            # a client pipelining far ahead of the answers (one waits for the writer, or the client
            # reads none: writing paused); reading resumes with the next answer or the hand-off
            self._reading_paused = True
            assert self._transport is not None
            self._transport.pause_reading()

    def eof_received(self) -> bool | None:
        if self._buffer and self._busy is None and self._transport is not None and not self._closing:
            # a partial request, then the end: aiohttp says what that is
            return self._hand_off().eof_received()  # type: ignore[attr-defined, no-any-return]
        # the transport closes (as aiohttp's handler lets it): a waiting append's answer is dropped
        return None

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        if self._busy is None:
            self._serve()

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        pending = self._busy
        if pending is not None:
            self._busy = None
            self._server.limit.leave(self._client)
            pending.future.cancel()  # what aiohttp's handler cancellation does to the handler's wait
        self._forget()

    # -- the requests -------------------------------------------------------------------------------
    def _serve(self) -> None:
        """Answer the complete requests in the buffer, one at a time, until one waits for the writer."""
        while self._busy is None and self._buffer and not self._writing_paused and not self._closing:
            request = _read_request(self._buffer, self._server.body_limit)
            if request is False:
                return
            if request is True or not self._start(cast(_Request, request)):
                self._hand_off()
                return

    def _start(self, request: _Request) -> bool:
        """Hand the append to the writer; False (nothing done) when aiohttp must answer it."""
        server = self._server
        services = server.services
        cluster = services.cluster
        if (
            services.database.db is None
            or (cluster is not None and not cluster.is_leader)
            or server.limit.full(self._client)
        ):
            return False  # aiohttp's 503, forwarding or redirect, 429 (and its log line)
        started = time.perf_counter()
        principal = authenticate_now(services, request.get("Authorization"))
        if principal is None:
            return False
        generation = services.database.generation
        try:
            db = begin_append(services, principal, request.stream)
            pending = submit_append(
                services,
                db,
                request.stream,
                request.content_type,
                request.body,
                request.get,
                server.loop(),
                len(request.body),
            )
        except Exception:
            return False  # refused before anything was written: aiohttp answers it the same way
        del self._buffer[: request.end]
        self._head_since = server.loop().time()  # what is left (pipelined) began by now
        server.limit.enter(self._client)
        self._busy = pending
        pending.future.add_done_callback(partial(self._answered, request, started, generation))
        return True

    def _answered(
        self, request: _Request, started: float, generation: int, future: asyncio.Future[AppendResult]
    ) -> None:
        pending = self._busy
        if pending is None or pending.future is not future:
            return  # the connection was lost and the wait cancelled
        self._busy = None
        server = self._server
        server.limit.leave(self._client)
        services = server.services
        transport = self._transport
        assert transport is not None
        if future.cancelled():  # the database gave the wait up (closing): aiohttp's handler would end
            transport.close()
            return
        exc = future.exception()
        if exc is None:
            answer = appended(services, pending, future.result(), f"{self._scheme}://{request.host}")
        else:
            answer = error_answer(services, exc, "POST", f"/streams/{request.stream}", generation)
        services.metrics.observe_http(_POST, answer.status, time.perf_counter() - started)
        close = request.close
        transport.write(render(answer, close))
        self._last_active = server.loop().time()
        if close:
            self._buffer.clear()
            transport.close()
            return
        if self._reading_paused:
            self._reading_paused = False
            transport.resume_reading()
        if self._closing:
            transport.close()
            return
        self._serve()

    # -- the connection -----------------------------------------------------------------------------
    @property
    def idle(self) -> bool:
        transport = self._transport
        return (
            transport is not None and not transport.is_closing() and self._busy is None and not self._buffer
        )

    @property
    def idle_since(self) -> float:
        return self._last_active

    @property
    def client(self) -> str:
        return self._client

    def close_idle(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def _hand_off(self) -> asyncio.Protocol:
        """aiohttp's request handler takes the connection and every byte not answered here."""
        transport = self._transport
        assert transport is not None and self._busy is None
        self._forget()
        self._server.handed_off += 1
        target = self._server.fallback()
        transport.set_protocol(target)
        target.connection_made(transport)
        if self._writing_paused:
            target.pause_writing()  # type: ignore[attr-defined]
        if self._reading_paused:
            self._reading_paused = False
            transport.resume_reading()
        data, self._buffer = bytes(self._buffer), bytearray()
        if data:
            target.data_received(data)
        return target

    def _idle_check(self) -> None:
        """Close a connection idle for the keep-alive timeout (as aiohttp does), or one whose request
        head, begun, is not complete within the head timeout."""
        self._idle_timer = None
        transport = self._transport
        if transport is None:
            return
        server = self._server
        loop = server.loop()
        now = loop.time()
        due = self._last_active + server.keepalive_timeout
        if self._busy is None and not self._buffer and now >= due:
            transport.close()
            return
        if self._busy is None and self._buffer and self._buffer.find(b"\r\n\r\n", 0, HEAD_LIMIT) < 0:
            head_due = self._head_since + server.head_timeout
            if now >= head_due:
                services = server.services
                services.logger.info(
                    "Closed a connection from %s: its request head did not come within %g s "
                    "(HttpRequestHeadTimeout)",
                    self._client,
                    server.head_timeout,
                )
                transport.close()
                return
            due = min(due, head_due)
        self._arm(max(due, now + 1.0))

    def close_when_idle(self) -> None:
        self._closing = True
        if self._busy is None and self._transport is not None:
            self._transport.close()

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()
        self._forget()

    def _forget(self) -> None:
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        self._server.connections.discard(self)
        waiters, self.closed_waiters = self.closed_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)
