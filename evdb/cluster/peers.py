"""The node's one client for calls to other nodes.

Every node-to-node call (gossip, votes, replication, forwarded writes, the auto-scavenge forwarder and
the node scavenges it starts) goes through :class:`PeerClient`: it holds the node's client identity
(its certificate and key) and trusted roots, as loaded at this moment, and one connection pool.

- A reload (``POST /admin/reloadconfig``, SIGHUP) replaces the node's certificates; the next call
  notices and makes a new pool with them, so no path keeps an old trusted root.
- ``ConnectionResetInterval`` applies to all of it: the pool is remade that often.
- Nothing else in evdb makes an SSL context for talking to peers.
"""

from __future__ import annotations

import logging
import ssl
import time
from collections.abc import Callable
from typing import Any

import aiohttp

__all__ = ["PeerClient"]


class PeerClient:
    def __init__(
        self,
        tls: Callable[[], Any],
        *,
        reset_interval: float,
        logger: logging.Logger,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._tls = tls
        self.reset_interval = reset_interval
        self.logger = logger
        self._monotonic = monotonic
        self._ssl: ssl.SSLContext | bool = False
        self._ssl_for: Any = None
        self._session: aiohttp.ClientSession | None = None
        self._session_for: Any = None
        self._session_made = 0.0

    @property
    def secure(self) -> bool:
        return self._tls() is not None

    @property
    def scheme(self) -> str:
        return "https" if self.secure else "http"

    def ssl(self) -> ssl.SSLContext | bool:
        """The client TLS context of the certificates in use now (False without TLS): it verifies the
        other node against the trusted roots and presents this node's certificate."""
        tls = self._tls()
        if tls is None:
            return False
        if self._ssl_for is not tls:
            self._ssl = tls.client_context(check_hostname=False)
            self._ssl_for = tls
        return self._ssl

    async def session(self) -> aiohttp.ClientSession:
        """The connection pool for node-to-node calls: remade when the certificates were reloaded and
        every ConnectionResetInterval."""
        tls = self._tls()
        now = self._monotonic()
        reason = None
        if self._session is None or self._session.closed:
            reason = "new"
        elif self._session_for is not tls:
            reason = "Node-to-node connections are made again with the reloaded certificates"
        elif now - self._session_made > self.reset_interval:
            reason = "Resetting node-to-node connections (ConnectionResetInterval)"
        if reason is not None:
            old = self._session
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=self.ssl()))
            self._session_for = tls
            self._session_made = now
            if old is not None and not old.closed:
                self.logger.info("%s", reason)
                await old.close()
        assert self._session is not None
        return self._session

    async def reset(self) -> None:
        """Close every open connection now; the next call connects again."""
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    async def close(self) -> None:
        await self.reset()
