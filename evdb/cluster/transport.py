"""How cluster members talk: the transport port and its real implementation over HTTP and WebSockets.

The cluster's decisions (evdb/cluster/service.py) never touch a socket. They call a :class:`Transport`:
``gossip`` (a peer's ``GET /gossip``), ``vote`` and ``write`` (the node-to-node listener's
``/internal/vote`` and ``/internal/write``) and ``replicate`` (the replication stream, a
:class:`Channel` of JSON and binary messages); and they serve the same three calls through
:class:`PeerHandlers`. :class:`HttpTransport` is the real one (aiohttp, TLS with client
certificates); the deterministic simulator (evdb/cluster/sim.py) has an in-memory one, so the same
decision code runs under a seed with message delay, loss, partitions and crashes.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import aiohttp
from aiohttp import web

from evdb.cluster.peers import PeerError, tls_failure
from evdb.errors import InvalidInput, status_of
from evdb.http.bodies import read_body

if TYPE_CHECKING:
    import logging

    from evdb.clock import Clock
    from evdb.cluster.peers import PeerClient
    from evdb.http.connections import ConnectionLimit
    from evdb.tls.reload import ReloadableSettings, SwappableServerContext

__all__ = [
    "Channel",
    "HttpTransport",
    "Message",
    "PeerError",
    "PeerHandlers",
    "Transport",
    "tls_failure",
]


@dataclass(frozen=True)
class Message:
    """One replication message: ``text`` carries a JSON value (already decoded), ``binary`` bytes."""

    text: Any = None
    binary: bytes | None = None


class Channel(Protocol):
    """One replication stream between a follower and its leader, in either direction."""

    async def send_json(self, value: Any) -> None: ...

    async def send_bytes(self, data: bytes) -> None: ...

    def post_bytes(self, data: bytes) -> None:
        """Send a small binary message now, before anything sent after this call returns (no wait for
        the peer to read: a few bytes, never a stream's worth). PeerError when the stream is closed."""

    async def receive(self, timeout: float | None = None) -> Message | None:
        """The next message; None once the other side closed (or the connection broke)."""

    async def close(self) -> None: ...

    @property
    def closed(self) -> bool: ...


class PeerHandlers(Protocol):
    """What a member serves to its peers on the node-to-node listener."""

    async def handle_vote(self, body: dict) -> dict: ...

    async def handle_write(self, body: dict) -> dict: ...

    async def handle_replication(self, channel: Channel) -> None: ...


class Transport(Protocol):
    async def start(self, handlers: PeerHandlers) -> int:
        """Serve ``handlers`` to peers; returns the node-to-node port."""

    async def stop(self) -> None: ...

    async def gossip(self, seed: tuple[str, int], timeout: float) -> dict:
        """A peer's ``GET /gossip`` answer; PeerError when it cannot be had."""

    async def vote(self, endpoint: tuple[str, int], body: dict, timeout: float) -> dict: ...

    async def write(self, endpoint: tuple[str, int], body: dict, timeout: float) -> dict: ...

    def replicate(
        self, endpoint: tuple[str, int], heartbeat: float
    ) -> contextlib.AbstractAsyncContextManager:
        """``async with transport.replicate(leader) as channel``: the follower's end of a stream."""

    async def reset(self) -> None:
        """Close every open connection (ConnectionResetInterval); new calls connect again."""


class _WebSocketChannel:
    """A Channel over an aiohttp WebSocket (client or server side)."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse | web.WebSocketResponse) -> None:
        self._ws = ws

    async def send_json(self, value: Any) -> None:
        try:
            await self._ws.send_json(value)
        except (OSError, RuntimeError) as exc:  # closing or closed: aiohttp's ways of saying so
            raise PeerError(f"the replication stream is closed: {exc}") from exc

    async def send_bytes(self, data: bytes) -> None:
        try:
            await self._ws.send_bytes(data)
        except (OSError, RuntimeError) as exc:
            raise PeerError(f"the replication stream is closed: {exc}") from exc

    def post_bytes(self, data: bytes) -> None:
        # aiohttp writes an uncompressed frame to the transport before send_bytes first awaits (the
        # replication stream negotiates no compression); driving that coroutine's first step here
        # writes it now. A coroutine that would go on to wait (the transport's buffer is over its
        # limit) is closed: the frame is already written and only its drain is skipped (aiohttp counts
        # the output again from zero, so a later send_bytes drains once a further limit's worth has
        # gone out: an 8-byte message lets the buffer run at most that much over).
        # tests/cluster/test_follower_read_your_writes.py pins the write against the aiohttp installed.
        if self._ws.closed:
            raise PeerError("the replication stream is closed")
        coroutine = self._ws.send_bytes(data)
        try:
            coroutine.send(None)
        except StopIteration:
            return
        except (OSError, RuntimeError) as exc:
            raise PeerError(f"the replication stream is closed: {exc}") from exc
        coroutine.close()  # only the flow-control drain was left: the next send waits for it

    async def receive(self, timeout: float | None = None) -> Message | None:
        try:
            message = await self._ws.receive(timeout=timeout)
        except TimeoutError:
            return None  # as the Channel port says: nothing came, the stream is over
        if message.type == aiohttp.WSMsgType.TEXT:
            import json

            try:
                return Message(text=json.loads(message.data))
            except ValueError:
                return None  # not this protocol: the stream is over
        if message.type == aiohttp.WSMsgType.BINARY:
            return Message(binary=message.data)
        return None

    async def close(self) -> None:
        await self._ws.close()

    @property
    def closed(self) -> bool:
        return self._ws.closed


#: the largest request body the node-to-node listener reads (raw or inflated: evdb/http/bodies.py)
PEER_BODY_LIMIT = 64 * 1024 * 1024


@dataclass(frozen=True)
class ListenerLimits:
    """The node-to-node listener's connection rules, the HTTP port's options (a node passes its own):
    HttpMaxConnections (0: half the open-file limit), HttpRequestHeadTimeout, HttpKeepAliveTimeout."""

    max_connections: int = 0
    head_timeout: float = 30.0
    keepalive_timeout: float = 130.0


class HttpTransport:
    """The real transport: gossip over the public HTTP API, votes, forwarded writes and replication on
    the node-to-node listener (TLS with client certificates when the node has TLS)."""

    def __init__(
        self,
        *,
        host: str,
        port: int,
        settings: ReloadableSettings,
        clock: Clock,
        logger: logging.Logger,
        client: PeerClient,
        limits: ListenerLimits | None = None,
    ) -> None:
        """``settings``: the certificates, trusted roots and CertificateReservedNodeCommonName in effect,
        read at each use (the node's NodeSettings), so a reload reaches the listener's next connection."""
        self.host = host
        self.port = port
        self._settings = settings
        self._clock = clock
        self.logger = logger
        self.client = client  # the node's one node-to-node client (evdb/cluster/peers.py)
        self.limits = limits or ListenerLimits()
        self.connections: ConnectionLimit | None = None  # the listener's, once started
        self.listener_tls: SwappableServerContext | None = None  # the listener's (evdb/tls/reload.py)
        self._runner: web.AppRunner | None = None
        self._handlers: PeerHandlers | None = None

    @property
    def secure(self) -> bool:
        return self._settings.tls is not None

    @property
    def reserved_common_name(self) -> str:
        """The common name peers' certificates must carry now (CertificateReservedNodeCommonName)."""
        return str(self._settings.options.certificate_reserved_node_common_name)

    # -- serving -----------------------------------------------------------------------------------
    async def start(self, handlers: PeerHandlers) -> int:
        self._handlers = handlers
        from evdb.http.connections import ConnectionLimit, LimitedTCPSite, connection_limit
        from evdb.http.heads import ServerLog

        app = web.Application(
            middlewares=[self._peer_certificate_middleware], client_max_size=PEER_BODY_LIMIT
        )
        app.router.add_post("/internal/vote", self._vote)
        app.router.add_post("/internal/write", self._write)
        app.router.add_get("/internal/replicate", self._replicate)
        # the client port's rules, through the same code: bodies inflated with a bound by
        # evdb/http/bodies.py (not whole by aiohttp), unparseable requests answered by evdb/http/heads.py,
        # connections limited and timed out by evdb/http/connections.py's ConnectionLimit
        limits = self.limits
        self._runner = web.AppRunner(
            app,
            access_log=None,
            handler_cancellation=True,
            auto_decompress=False,
            keepalive_timeout=limits.keepalive_timeout,
            logger=ServerLog(self.logger, self._clock),
        )
        await self._runner.setup()
        self.connections = ConnectionLimit(
            connection_limit(limits.max_connections), limits.head_timeout, self.logger
        )
        context = None
        tls = self._settings.tls
        if tls is not None:
            from evdb.tls.reload import SwappableServerContext

            self.listener_tls = SwappableServerContext(tls, require_client_cert=True)
            context = self.listener_tls.context
        site = LimitedTCPSite(self._runner, self.host, self.port, limit=self.connections, ssl_context=context)
        await site.start()
        sock = site._server.sockets[0]  # type: ignore[union-attr]
        self.port = sock.getsockname()[1]
        self.logger.info(
            "Node-to-node listener on %s:%d (%s)",
            self.host,
            self.port,
            "TLS with client certificates" if context else "plain TCP",
        )
        return self.port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @web.middleware
    async def _peer_certificate_middleware(self, request: web.Request, handler):
        if self._settings.tls is not None:
            from evdb.tls.loading import CertificateError, check_peer_node_certificate

            ssl_object = request.transport.get_extra_info("ssl_object") if request.transport else None
            der = ssl_object.getpeercert(binary_form=True) if ssl_object else None
            try:
                if not der:
                    raise CertificateError("The peer presented no client certificate.")
                check_peer_node_certificate(der, self.reserved_common_name)
            except CertificateError as exc:
                self.logger.error("Refused a node-to-node connection from %s: %s", request.remote, exc)
                return web.Response(status=403, text=str(exc))
        return await handler(request)

    async def _vote(self, request: web.Request) -> web.Response:
        assert self._handlers is not None
        try:
            body = await _json_body(request)
        except InvalidInput as exc:
            status = status_of(exc)
            reason = f"bad request: {exc}"
            return web.json_response(
                {"granted": False, "reason": reason}, status=status[0] if status else 400
            )
        return web.json_response(await self._handlers.handle_vote(body))

    async def _write(self, request: web.Request) -> web.Response:
        assert self._handlers is not None
        try:
            body = await _json_body(request)
        except InvalidInput as exc:
            status = status_of(exc)
            return web.json_response(
                {"error": "InvalidInput", "message": f"Bad forwarded write: {exc}"},
                status=status[0] if status else 400,
            )
        return web.json_response(await self._handlers.handle_write(body))

    async def _replicate(self, request: web.Request) -> web.StreamResponse:
        assert self._handlers is not None
        ws = web.WebSocketResponse(heartbeat=5.0, max_msg_size=0)
        await ws.prepare(request)
        await self._handlers.handle_replication(_WebSocketChannel(ws))
        if not ws.closed:
            await ws.close()
        return ws

    # -- calling (through the node's one peer client: it names the peer in every failure) ----------
    async def reset(self) -> None:
        await self.client.reset()

    async def gossip(self, seed: tuple[str, int], timeout: float) -> dict:
        answer = await self.client.request(
            "GET", seed, "/gossip", timeout=timeout, what=f"gossip with {seed[0]}:{seed[1]}"
        )
        return _json_answer(answer, f"gossip with {seed[0]}:{seed[1]}")

    async def _post(self, endpoint: tuple[str, int], path: str, body: dict, timeout: float) -> dict:
        what = f"{path} on {endpoint[0]}:{endpoint[1]}"
        answer = await self.client.request("POST", endpoint, path, json=body, timeout=timeout, what=what)
        return _json_answer(answer, what)

    async def vote(self, endpoint: tuple[str, int], body: dict, timeout: float) -> dict:
        return await self._post(endpoint, "/internal/vote", body, timeout)

    async def write(self, endpoint: tuple[str, int], body: dict, timeout: float) -> dict:
        return await self._post(endpoint, "/internal/write", body, timeout)

    @contextlib.asynccontextmanager
    async def replicate(self, endpoint: tuple[str, int], heartbeat: float) -> AsyncIterator[Channel]:
        ws = await self.client.websocket(
            endpoint,
            "/internal/replicate",
            heartbeat=heartbeat,
            what=f"replication from {endpoint[0]}:{endpoint[1]}",
        )
        try:
            yield _WebSocketChannel(ws)
        finally:
            await ws.close()


async def _json_body(request: web.Request) -> Any:
    """A peer's JSON request body, read by the client port's rules (evdb/http/bodies.py: a compressed
    body inflated with a bound, 415 for another coding); InvalidInput when it is not JSON."""
    import json

    raw = await read_body(request)  # aiohttp's 413 past PEER_BODY_LIMIT, raw or inflated
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise InvalidInput(f"the body is not JSON: {exc}") from None


def _json_answer(answer: Any, what: str) -> dict:
    """A peer's JSON answer; PeerError when it is not JSON (a proxy, a 403 page, a node mid-restart)."""
    import json

    try:
        return json.loads(answer.body)
    except ValueError:
        raise PeerError(f"{what}: answered {answer.status} {answer.text()[:200]!r}, not JSON") from None
