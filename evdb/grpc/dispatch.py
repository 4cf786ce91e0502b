"""One port, two protocols: each accepted connection goes to gRPC (HTTP/2) or to the HTTP API.

As KurrentDB does: with TLS the server offers ALPN ``h2`` and ``http/1.1`` and a connection that
chose ``h2`` speaks gRPC; without TLS (or without ALPN) the first bytes decide: the HTTP/2 client
preface ``PRI * HTTP/2.0`` means gRPC, anything else is HTTP/1.1 for aiohttp.

``DispatchSite`` replaces aiohttp's ``SockSite`` for a bound socket; stopping the site (the runner's
cleanup does) also ends the node's gRPC calls and connections. An HTTP/1.1 connection starts on the lean
path for appends (evdb/http/lean.py), which hands it to aiohttp's request handler for anything else;
``lean=False`` gives every HTTP/1.1 connection to aiohttp at once.

grpclib writes each HTTP/2 piece of an answer (headers, each DATA frame, trailers, window updates) to
the transport as it makes it: a ``send()`` (and over TLS a record) each. A gRPC connection's transport
is handed to grpclib behind :class:`_JoinedWrites`, which joins what one step of the event loop writes
into one write at the end of that step: a unary answer's headers, message and trailers go out together.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from collections.abc import Callable
from typing import TYPE_CHECKING

from aiohttp import web

from evdb.http.connections import ConnectionLimit, _Dispatch, connection_limit

if TYPE_CHECKING:
    from evdb.http.lean import LeanServer
    from evdb.services import GrpcServices

__all__ = ["ALPN", "JOIN_LIMIT", "DispatchSite", "GrpcServer"]
#: In the server's order of preference: a client offering both (a browser, curl) gets HTTP/1.1, which
#: the HTTP API and the Admin UI speak; gRPC clients offer only h2 and get it.
ALPN = ["http/1.1", "h2"]
_log = logging.getLogger("evdb.grpc")
#: :class:`_JoinedWrites` passes its writes on at once when this many bytes wait, so the transport's
#: flow control (pause_writing at its high-water mark) sees a large answer as it is made
JOIN_LIMIT = 256 * 1024


class GrpcServer:
    """The node's gRPC services (grpclib handlers) and the live gRPC connections."""

    def __init__(self, services: GrpcServices) -> None:
        from evdb.grpc.cluster import GossipService, OperationsService
        from evdb.grpc.persistent import PersistentSubscriptionsService
        from evdb.grpc.server import KurrentServer
        from evdb.grpc.streams import StreamsService

        self.services = services
        handlers: list[object] = [
            StreamsService(services),
            GossipService(services),
            PersistentSubscriptionsService(services),
            OperationsService(services),
        ]
        if services.projections is not None:  # RunProjections System or All, as KurrentDB serves it
            from evdb.grpc.projections import ProjectionsService

            handlers.append(ProjectionsService(services))
        # KurrentServer: grpclib's, with KurrentDB's error trailers, deadlines and ServerFeatures
        self._server = KurrentServer(
            handlers,
            max_message=services.options.http_max_request_body_size,
            calls=services.metrics.grpc_calls,
        )
        self._transports: set[asyncio.BaseTransport] = set()
        self._closed = False
        options = services.options
        #: the node's one count of its HTTP port's connections, shared by its listening sites
        self.connections = ConnectionLimit(
            connection_limit(options.http_max_connections),
            float(options.http_request_head_timeout),
            services.logger,
        )
        self.connections.grpc = self

    def protocol(self, transport: asyncio.BaseTransport) -> asyncio.Protocol:
        """A grpclib HTTP/2 protocol for a new connection (this server's handlers)."""
        self._transports.add(transport)
        return self._server._protocol_factory()

    def forget(self, transport: asyncio.BaseTransport) -> None:
        self._transports.discard(transport)

    def connection_count(self) -> int:
        """The gRPC connections open now (counted by the port's ConnectionLimit, never closed by it)."""
        return len(self._transports)

    async def close(self) -> None:
        """Cancel every running call (subscriptions included) and close the connections."""
        if self._closed:
            return
        self._closed = True
        handlers = list(self._server._handlers)
        for handler in handlers:
            handler.close()
        for transport in list(self._transports):
            transport.close()
        self._transports.clear()
        waits = [h.wait_closed() for h in handlers]
        if waits:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*waits, return_exceptions=True), timeout=5)


class _JoinedWrites:
    """The part of a transport grpclib uses (write, close, is_closing, get_extra_info), with the writes
    of one event-loop step passed on as one write when the step ends (``call_soon``), or at once when
    ``JOIN_LIMIT`` bytes wait or the connection is closed. Order is kept: every write goes through
    here, and the transport's own buffer and flow control are untouched."""

    __slots__ = ("_loop", "_pending", "_scheduled", "_size", "_transport")

    def __init__(self, transport: asyncio.WriteTransport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []
        self._size = 0
        self._scheduled = False

    def write(self, data: bytes) -> None:
        if not data:
            return
        self._pending.append(data)
        self._size += len(data)
        if self._size >= JOIN_LIMIT:
            self.flush()
        elif not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._flush_scheduled)

    def _flush_scheduled(self) -> None:
        self._scheduled = False
        self.flush()

    def flush(self) -> None:
        if not self._pending:
            return
        data = self._pending[0] if len(self._pending) == 1 else b"".join(self._pending)
        self._pending.clear()
        self._size = 0
        self._transport.write(data)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def get_extra_info(self, name: str, default: object = None) -> object:
        return self._transport.get_extra_info(name, default)


class _TrackedGrpc(asyncio.Protocol):
    """grpclib's protocol, with the transport known to the server until the connection ends."""

    def __init__(self, server: GrpcServer, transport: asyncio.BaseTransport) -> None:
        self._server = server
        self._transport = transport
        self._inner = server.protocol(transport)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        joined = _JoinedWrites(transport, asyncio.get_running_loop())  # type: ignore[arg-type]
        self._inner.connection_made(joined)  # type: ignore[arg-type]

    def data_received(self, data: bytes) -> None:
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received()

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self._server.forget(self._transport)
        self._inner.connection_lost(exc)


class DispatchSite(web.SockSite):
    """aiohttp's ``SockSite``, serving gRPC on the same socket (see the module docstring)."""

    __slots__ = ("_grpc", "_lean", "_lean_server")

    def __init__(
        self,
        runner: web.BaseRunner,
        sock: socket.socket,
        *,
        grpc: GrpcServer,
        ssl_context: ssl.SSLContext | None = None,
        backlog: int = 128,
        lean: bool = True,
    ) -> None:
        if ssl_context is not None:
            ssl_context.set_alpn_protocols(ALPN)
        super().__init__(runner, sock, ssl_context=ssl_context, backlog=backlog)
        self._grpc = grpc
        self._lean = lean
        self._lean_server: LeanServer | None = None

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registers the site with the runner
        from evdb.http.heads import http_protocol

        assert self._runner.server is not None
        # aiohttp's handlers, answering a request they cannot parse briefly (evdb/http/heads.py)
        limit = self._grpc.connections
        http: Callable[[], asyncio.Protocol] = http_protocol(self._runner.server, lambda: limit.head_timeout)
        if self._lean and isinstance(self._runner, web.AppRunner):
            from evdb.http.lean import LeanServer

            self._lean_server = LeanServer(self._runner.app, http)
            self._grpc.connections.lean.append(self._lean_server)
            http = self._lean_server.protocol
        grpc = self._grpc
        if isinstance(self._runner.server, web.Server):
            grpc.connections.http = self._runner.server
        # a TLS handshake not done within HttpRequestHeadTimeout ends the connection too
        handshake = grpc.connections.head_timeout if self._ssl_context is not None else None
        self._server = await asyncio.get_running_loop().create_server(
            lambda: _Dispatch(http, grpc.connections, lambda transport: _TrackedGrpc(grpc, transport)),
            sock=self._sock,
            ssl=self._ssl_context,
            backlog=self._backlog,
            ssl_handshake_timeout=handshake,
        )

    async def stop(self) -> None:
        await super().stop()
        await self._grpc.close()
        if self._lean_server is not None:
            await self._lean_server.close()
            with contextlib.suppress(ValueError):
                self._grpc.connections.lean.remove(self._lean_server)
