"""The node's one client for calls to other nodes.

Every node-to-node call (gossip, votes, replication, forwarded writes, the auto-scavenge forwarder and
the node scavenges it starts) goes through :class:`PeerClient`: it holds the node's client identity
(its certificate and key) and trusted roots, as loaded at this moment, and one connection pool.

- A reload (``POST /admin/reloadconfig``, SIGHUP) replaces the node's certificates; the next call
  notices and makes a new pool with them, so no path keeps an old trusted root. The certificates and
  ``ConnectionResetInterval`` are read at each use from the node's settings (the
  :class:`~evdb.tls.reload.ReloadableSettings` port): no copy to keep up to date.
- ``ConnectionResetInterval`` applies to all of it: the pool is remade that often.
- Nothing else in evdb makes an SSL context for talking to peers.
- Every failed call becomes a :class:`PeerError` naming the peer and the reason; the client keeps the
  last failure of each peer (:meth:`PeerClient.failures`, served as ``peerErrors`` by
  ``GET /admin/certificates`` for the dashboard) until a call to that peer succeeds, and logs a
  certificate failure as an error naming the peer when it starts, changes, and once a minute while it lasts.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import aiohttp

if TYPE_CHECKING:
    from evdb.clock import Clock
    from evdb.tls.reload import ReloadableSettings

__all__ = ["PeerAnswer", "PeerClient", "PeerError", "PeerFailure", "peer_name", "tls_failure"]

#: how often a lasting certificate failure of one peer is logged again
REPEAT_LOG_SECONDS = 60.0

_FAILURES = (TimeoutError, aiohttp.ClientError, OSError, ValueError)


class PeerError(Exception):
    """A call to a peer failed: unreachable, timed out, refused, or a bad answer. ``certificate`` is
    True when the TLS handshake failed on a certificate (the log says so, naming the peer)."""

    def __init__(self, message: str, *, certificate: bool = False) -> None:
        super().__init__(message)
        self.certificate = certificate


@dataclass(frozen=True)
class PeerAnswer:
    status: int
    body: bytes
    content_type: str

    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


@dataclass
class PeerFailure:
    """The last failed call to one peer (cleared by the next call to it that succeeds)."""

    peer: str
    reason: str
    certificate: bool
    since: float  # wall-clock seconds: the first failure of this run of failures
    last: float
    count: int = 1
    _logged: float = 0.0

    def to_json(self) -> dict[str, Any]:
        from datetime import UTC, datetime

        def iso(t: float) -> str:
            return datetime.fromtimestamp(t, UTC).isoformat()

        return {
            "peer": self.peer,
            "reason": self.reason,
            "certificate": self.certificate,
            "since": iso(self.since),
            "last": iso(self.last),
            "failures": self.count,
        }


def peer_name(endpoint: tuple[str, int] | str) -> str:
    """``host:port`` (``[v6]:port``) of a peer, as logs and ``peerErrors`` name it."""
    if isinstance(endpoint, str):
        return endpoint
    host, port = endpoint
    return f"[{host}]:{int(port)}" if ":" in str(host) else f"{host}:{int(port)}"


def tls_failure(exc: BaseException) -> str:
    """Why a node-to-node TLS handshake failed, in words an operator can search for."""
    detail = getattr(exc, "certificate_error", None) or exc  # aiohttp wraps the ssl error
    if isinstance(exc, ssl.SSLCertVerificationError) or isinstance(detail, ssl.SSLCertVerificationError):
        return (
            "certificate chain validation failed: the other node's certificate does not chain to a "
            f"trusted root of this node ({detail})"
        )
    if "unknown ca" in str(detail).lower() or "certificate" in str(detail).lower():
        return (
            "certificate chain validation failed: the other node does not trust this node's "
            f"certificate ({detail})"
        )
    return str(detail)


def _is_certificate_failure(exc: BaseException) -> bool:
    return isinstance(exc, ssl.SSLError) or getattr(exc, "certificate_error", None) is not None


class PeerClient:
    def __init__(self, settings: ReloadableSettings, *, logger: logging.Logger, clock: Clock) -> None:
        """``settings``: the certificates and ConnectionResetInterval in effect, read at each call."""
        self._settings = settings
        self.logger = logger
        self._clock = clock
        self._failures: dict[str, PeerFailure] = {}
        self._ssl: ssl.SSLContext | bool = False
        self._ssl_for: Any = None
        self._session: aiohttp.ClientSession | None = None
        self._closing: set[asyncio.Future[None]] = set()  # replaced pools being closed
        self._session_for: Any = None
        self._session_made = 0.0

    @property
    def reset_interval(self) -> float:
        """ConnectionResetInterval in effect: the pool is remade that often."""
        return float(self._settings.options.connection_reset_interval)

    @property
    def secure(self) -> bool:
        return self._settings.tls is not None

    @property
    def scheme(self) -> str:
        return "https" if self.secure else "http"

    def ssl(self) -> ssl.SSLContext | bool:
        """The client TLS context of the certificates in use now (False without TLS): it verifies the
        other node against the trusted roots and presents this node's certificate."""
        tls = self._settings.tls
        if tls is None:
            return False
        if self._ssl_for is not tls:
            self._ssl = tls.client_context(check_hostname=False)
            self._ssl_for = tls
        return self._ssl

    async def session(self) -> aiohttp.ClientSession:
        """The connection pool for node-to-node calls: remade when the certificates were reloaded and
        every ConnectionResetInterval."""
        tls = self._settings.tls
        now = self._clock.monotonic()
        reason = None
        if self._session is None or self._session.closed:
            reason = "new"
        elif self._session_for is not tls:
            reason = "Node-to-node connections are made again with the reloaded certificates"
        elif now - self._session_made > self.reset_interval:
            reason = "Resetting node-to-node connections (ConnectionResetInterval)"
        if reason is None:
            assert self._session is not None
            return self._session
        # no await from the check above to the return: a concurrent call or reset() cannot come between
        # (it made the pool vanish under a gossip round during a node restart)
        old = self._session
        new = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=self.ssl()))
        self._session, self._session_for, self._session_made = new, tls, now
        if old is not None and not old.closed:
            self.logger.info("%s", reason)
            self._close_later(old)
        return new

    def _close_later(self, session: aiohttp.ClientSession) -> None:
        task = asyncio.ensure_future(session.close())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def reset(self) -> None:
        """Close every open connection now; the next call connects again."""
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    async def close(self) -> None:
        await self.reset()
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)

    # -- calls ---------------------------------------------------------------------------------------
    def url(self, endpoint: tuple[str, int] | str, path: str, *, websocket: bool = False) -> str:
        scheme = ("wss" if self.secure else "ws") if websocket else self.scheme
        return f"{scheme}://{peer_name(endpoint)}{path}"

    async def request(
        self,
        method: str,
        endpoint: tuple[str, int] | str,
        path: str,
        *,
        timeout: float,
        json: Any = None,
        data: bytes | None = None,
        headers: dict[str, str] | None = None,
        what: str | None = None,
    ) -> PeerAnswer:
        """One call to a peer; its answer whatever the status. PeerError (naming the peer, and recorded as
        its last failure) when there is no answer: unreachable, timed out, or refused on a certificate."""
        peer = peer_name(endpoint)
        session = await self.session()
        try:
            async with session.request(
                method,
                self.url(peer, path),
                json=json,
                data=data,
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=timeout),
            ) as response:
                body = await response.read()
                answer = PeerAnswer(response.status, body, response.headers.get("Content-Type", ""))
        except _FAILURES as exc:
            raise self.failed(peer, exc, what or f"{method} {path} on {peer}") from exc
        self.succeeded(peer)
        return answer

    async def websocket(
        self, endpoint: tuple[str, int], path: str, *, heartbeat: float, what: str
    ) -> aiohttp.ClientWebSocketResponse:
        peer = peer_name(endpoint)
        session = await self.session()
        try:
            ws = await session.ws_connect(
                self.url(peer, path, websocket=True), heartbeat=heartbeat, max_msg_size=0
            )
        except _FAILURES as exc:
            raise self.failed(peer, exc, what) from exc
        self.succeeded(peer)
        return ws

    # -- failures ------------------------------------------------------------------------------------
    def failed(self, peer: str, exc: BaseException, what: str) -> PeerError:
        """Record a failed call to ``peer`` (``what``: the call, naming the peer) and the PeerError to raise."""
        certificate = _is_certificate_failure(exc)
        if certificate:
            reason = f"certificate validation error: {tls_failure(exc)}"
        else:
            reason = str(exc) or type(exc).__name__
        now = self._clock.time()
        failure = self._failures.get(peer)
        changed = failure is None or failure.reason != reason
        if failure is None or changed:
            failure = PeerFailure(peer, reason, certificate, since=now, last=now)
            self._failures[peer] = failure
        else:
            failure.last = now
            failure.count += 1
        if certificate and (changed or now - failure._logged >= REPEAT_LOG_SECONDS):
            failure._logged = now
            self.logger.error("Call to %s failed: %s: %s", peer, what, reason)
        return PeerError(f"{what}: {reason}", certificate=certificate)

    def succeeded(self, peer: str) -> None:
        failure = self._failures.pop(peer, None)
        if failure is not None and failure.certificate:
            self.logger.info("Calls to %s succeed again (after: %s)", peer, failure.reason)

    def failures(self) -> list[PeerFailure]:
        """The last failure of each peer that has not answered since, oldest first."""
        return sorted(self._failures.values(), key=lambda f: f.since)
