"""The connections of a listening port, counted and bounded (HttpMaxConnections, HttpRequestHeadTimeout).

:class:`ConnectionLimit` counts every connection of a port where it lives; :class:`_Dispatch` is where each
accepted connection starts: it decides what the connection speaks (ALPN, or the HTTP/2 client preface) and
hands it over. The node's HTTP port (evdb/grpc/dispatch.py ``DispatchSite``: HTTP/1.1 on the lean path or
aiohttp's, gRPC) and the node-to-node listener (evdb/cluster/transport.py, on a :class:`LimitedTCPSite`:
HTTP/1.1 only) keep the same rules through this code.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from collections.abc import Callable, Collection
from typing import Protocol

from aiohttp import web

from evdb.http.heads import head_begun_at, http_protocol, waits_for_request

__all__ = [
    "LOG_EVERY_SECONDS",
    "PREFACE",
    "REFUSED",
    "ConnectionLimit",
    "CountedConnections",
    "IdleConnection",
    "LeanConnections",
    "LimitedTCPSite",
    "connection_limit",
]


class IdleConnection(Protocol):
    """An HTTP/1.1 connection between requests, which may be closed to make room."""

    @property
    def idle_since(self) -> float: ...

    @property
    def client(self) -> str: ...

    def close_idle(self) -> None: ...


class LeanConnections(Protocol):
    """The connections of the lean HTTP/1.1 path (evdb/http/lean.py LeanServer)."""

    @property
    def connections(self) -> Collection[object]: ...

    def idle_connection(self) -> IdleConnection | None: ...


class CountedConnections(Protocol):
    """Connections that are counted but never closed to make room (gRPC's: their calls may be long)."""

    def connection_count(self) -> int: ...


PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
#: what a connection past HttpMaxConnections is told (on HTTP/1.1; gRPC clients see the connection end)
REFUSED = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
    b"Retry-After: 1\r\nConnection: close\r\nContent-Length: 62\r\n\r\n"
    b"The node has as many connections open as it allows; try again."
)
#: a refused or evicted connection is logged at most this often (a flood must not flood the log)
LOG_EVERY_SECONDS = 1.0


def connection_limit(configured: int, soft_nofile: int | None = None) -> int:
    """HttpMaxConnections as the node applies it: ``configured``, or 0 for half the open-file limit
    (RLIMIT_NOFILE's soft limit), at least 16."""
    if configured > 0:
        return configured
    if soft_nofile is None:
        import resource

        soft_nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if soft_nofile == resource.RLIM_INFINITY:
            soft_nofile = 1 << 20
    return max(16, soft_nofile // 2)


class ConnectionLimit:
    """Every connection accepted on the node's HTTP port (all its listening sites), counted where each
    one lives: undecided (:class:`_Dispatch`, nothing read yet), on the lean path, aiohttp's, gRPC's.

    At ``limit`` (HttpMaxConnections) a new connection first closes the connection that has waited
    longest doing nothing (:meth:`_close_one_idle`: one that has sent nothing yet, else an HTTP/1.1 one
    between requests; one partway through sending a request head is busy until HttpRequestHeadTimeout
    has passed since it began); when every one is busy it is refused (:data:`REFUSED`, then closed: a client
    that had already sent its request may see the connection reset instead). A connection that sends
    nothing for ``head_timeout`` seconds (HttpRequestHeadTimeout) is closed. So silent or idle
    connections cannot take every descriptor, and the clients that talk get in."""

    def __init__(self, limit: int, head_timeout: float, logger: logging.Logger) -> None:
        self.limit = limit
        self.head_timeout = head_timeout
        self._log = logger
        self.pending: dict[_Dispatch, None] = {}  # undecided connections, oldest first
        self.lean: list[LeanConnections] = []
        self.http: web.Server | None = None
        self.grpc: CountedConnections | None = None
        #: connections refused at the limit, silent ones closed to make room or at the head timeout
        self.refused = 0
        self.evicted = 0
        self.timed_out = 0
        self._logged_at = float("-inf")

    def open_count(self) -> int:
        count = len(self.pending)
        for lean in self.lean:
            count += len(lean.connections)
        if self.http is not None:
            count += len(self.http._connections)
        if self.grpc is not None:
            count += self.grpc.connection_count()
        return count

    def admit(self, connection: _Dispatch, peer: object) -> bool:
        """Whether a new connection may stay (it is then counted as undecided)."""
        if self.open_count() >= self.limit:
            closed = self._close_one_idle()
            if closed is not None:
                self.evicted += 1
                self._note("Closed %s to make room for one from %s", closed, peer)
            else:
                self.refused += 1
                self._note("Refused a connection from %s: %d are open (HttpMaxConnections)", peer, self.limit)
                return False
        self.pending[connection] = None
        return True

    def forget(self, connection: _Dispatch) -> None:
        self.pending.pop(connection, None)

    def _close_one_idle(self) -> str | None:
        """Close the connection that has waited longest doing nothing: one that has sent nothing yet,
        else an HTTP/1.1 one between requests (lean path or aiohttp's); what it was, or None when every
        connection is busy (gRPC connections are never taken: their calls may be long-lived)."""
        if self.pending:
            oldest = next(iter(self.pending))
            oldest.close()  # forgets itself
            return f"a silent connection (from {oldest.peer})"
        candidates: list[tuple[float, str, Callable[[], None]]] = []
        for lean in self.lean:
            idle = lean.idle_connection()
            if idle is not None:
                candidates.append(
                    (idle.idle_since, f"an idle connection (from {idle.client})", idle.close_idle)
                )
        if self.http is not None:
            now = asyncio.get_running_loop().time()
            for handler, transport in self.http._connections.items():
                if not transport.is_closing() and _aiohttp_idle(handler, now, self.head_timeout):
                    # its keep-alive deadline less the timeout: when it last finished a request
                    since = getattr(handler, "_next_keepalive_close_time", 0.0) - handler.keepalive_timeout
                    candidates.append(
                        (
                            since,
                            f"an idle connection (from {transport.get_extra_info('peername')})",
                            handler.force_close,
                        )
                    )
        if not candidates:
            return None
        _, what, close = min(candidates, key=lambda c: c[0])
        close()
        return what

    def _note(self, message: str, *args: object) -> None:
        now = asyncio.get_running_loop().time()
        if now - self._logged_at >= LOG_EVERY_SECONDS:
            self._logged_at = now
            self._log.warning(
                message + " (%d refused, %d closed to make room so far)", *args, self.refused, self.evicted
            )


def _aiohttp_idle(handler: object, now: float, head_timeout: float) -> bool:
    """Whether an aiohttp request handler may be closed to make room: it waits for a request (none in
    progress or queued) and receives no request head, or one begun ``head_timeout``
    (HttpRequestHeadTimeout) or more ago. A head partway in is a request under way: closing it would
    drop a client that is talking (as the lean path's rule, evdb/http/lean.py ``idle``)."""

    if not waits_for_request(handler):
        return False
    begun = head_begun_at(handler)
    return begun is None or now - begun >= head_timeout


class _Dispatch(asyncio.Protocol):
    """Decides what a connection speaks, then hands the transport (and what it read) over."""

    def __init__(
        self,
        http: Callable[[], asyncio.Protocol],
        limit: ConnectionLimit,
        grpc: Callable[[asyncio.BaseTransport], asyncio.Protocol] | None,
    ) -> None:
        """``http``: the HTTP/1.1 protocol a connection goes to; ``grpc``: the protocol of an HTTP/2
        connection for its transport (None: every connection is HTTP/1.1's, the node-to-node listener)."""
        self._http = http
        self._grpc = grpc
        self._limit = limit
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._target: asyncio.Protocol | None = None
        self._timer: asyncio.TimerHandle | None = None
        self.peer: object = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        self.peer = transport.get_extra_info("peername")
        if not self._limit.admit(self, self.peer):
            ssl_object = transport.get_extra_info("ssl_object")
            if ssl_object is None or ssl_object.selected_alpn_protocol() != "h2":
                transport.write(REFUSED)  # type: ignore[attr-defined]
            transport.close()
            return
        self._timer = asyncio.get_running_loop().call_later(self._limit.head_timeout, self._silent)
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            # asyncio and grpclib skip TCP_NODELAY on sockets made without proto=IPPROTO_TCP (the
            # node's are); without it small HTTP/2 frames wait for delayed ACKs (~40 ms a call)
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        ssl_object = transport.get_extra_info("ssl_object")
        alpn = ssl_object.selected_alpn_protocol() if ssl_object is not None else None
        if alpn == "h2":
            self._hand_over(grpc=True)
        elif alpn == "http/1.1":
            self._hand_over(grpc=False)

    def data_received(self, data: bytes) -> None:
        if self._target is not None:  # pragma: no cover - the transport calls the target directly
            self._target.data_received(data)
            return
        self._buffer += data
        n = min(len(self._buffer), len(PREFACE))
        if self._buffer[:n] != PREFACE[:n]:
            self._hand_over(grpc=False)
        elif len(self._buffer) >= len(PREFACE):
            self._hand_over(grpc=True)

    def eof_received(self) -> bool | None:
        if self._target is None:
            self._hand_over(grpc=False)
        assert self._target is not None
        return self._target.eof_received()  # type: ignore[attr-defined]

    def connection_lost(self, exc: Exception | None) -> None:
        self._forget()
        if self._target is not None:  # pragma: no cover - the transport calls the target directly
            self._target.connection_lost(exc)

    def _silent(self) -> None:
        """Nothing came within HttpRequestHeadTimeout: close the connection."""
        self._timer = None
        if self._target is None:
            self._limit.timed_out += 1
            self.close()

    def close(self) -> None:
        self._forget()
        if self._transport is not None:
            self._transport.close()

    def _forget(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._limit.forget(self)

    def _hand_over(self, *, grpc: bool) -> None:
        transport = self._transport
        assert transport is not None
        self._forget()  # counted where it goes from now
        target = self._grpc(transport) if grpc and self._grpc is not None else self._http()
        self._target = target
        transport.set_protocol(target)
        target.connection_made(transport)
        if self._buffer:
            data, self._buffer = bytes(self._buffer), bytearray()
            target.data_received(data)


class LimitedTCPSite(web.TCPSite):
    """aiohttp's ``TCPSite`` under the HTTP port's connection rules, through the same code: a
    :class:`ConnectionLimit` of its own (at the limit the connection idle longest is closed, else the
    new one is refused; one that sends nothing, or does not finish its TLS handshake, within the head
    timeout is closed) and the request handlers of evdb/http/heads.py. The node-to-node listener
    (evdb/cluster/transport.py) serves on one; it speaks HTTP/1.1 only."""

    __slots__ = ("_limit",)

    def __init__(
        self,
        runner: web.BaseRunner,
        host: str,
        port: int,
        *,
        limit: ConnectionLimit,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        super().__init__(runner, host, port, ssl_context=ssl_context)
        self._limit = limit

    async def start(self) -> None:

        await web.BaseSite.start(self)  # registers the site with the runner
        server = self._runner.server
        assert isinstance(server, web.Server)
        limit = self._limit
        limit.http = server
        http = http_protocol(server, lambda: limit.head_timeout)
        self._server = await asyncio.get_running_loop().create_server(
            lambda: _Dispatch(http, limit, None),
            self._host,
            self._port,
            ssl=self._ssl_context,
            backlog=self._backlog,
            reuse_address=self._reuse_address,
            ssl_handshake_timeout=limit.head_timeout if self._ssl_context is not None else None,
        )
