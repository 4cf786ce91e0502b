"""The mirror's two sides: endpoints, their HTTP sessions, the settings, and its errors."""

from __future__ import annotations

import base64
import json
import ssl
from dataclasses import dataclass
from typing import Any

import aiohttp

from evdb.mirror.state import MirrorPaths

__all__ = ["CONNECTION_ERRORS", "Endpoint", "MirrorError", "MirrorSettings", "Reply", "Side", "Transient"]


class MirrorError(Exception):
    """The mirror cannot go on (refused credentials, a secondary that diverged, ...): it stops."""


class Transient(Exception):
    """A connection or server problem worth retrying (the mirror reconnects and resumes)."""


@dataclass(frozen=True)
class Endpoint:
    """One side: its base URL, its credentials and how to verify its certificate."""

    url: str
    user: str | None = "admin"
    password: str | None = "changeit"
    ca: str | None = None
    verify_tls: bool = True

    def side(self, *, read_timeout: float | None = 30.0, connections: int = 4) -> Side:
        return Side(self, read_timeout, connections)


@dataclass
class Reply:
    status: int
    headers: Any
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode(errors="replace")

    def json(self) -> Any:
        return json.loads(self.body)


class Side:
    """An aiohttp session to one side (aiohttp: about twice the requests per second of httpx here)."""

    def __init__(self, endpoint: Endpoint, read_timeout: float | None, connections: int = 4) -> None:
        self.endpoint = endpoint
        #: where requests go now: the endpoint's URL, or the leader it sent the mirror on to
        self.base = endpoint.url.rstrip("/")
        #: the cluster members this side named in its gossip (asked who leads when the base is gone)
        self.members: list[str] = [self.base]
        tls: ssl.SSLContext | bool = endpoint.verify_tls  # True: aiohttp's default verification
        if endpoint.ca:
            tls = ssl.create_default_context(cafile=endpoint.ca)
        headers = {}
        if endpoint.user is not None:
            token = base64.b64encode(f"{endpoint.user}:{endpoint.password or ''}".encode()).decode()
            headers["Authorization"] = f"Basic {token}"
        self.session = aiohttp.ClientSession(
            headers=headers,
            connector=aiohttp.TCPConnector(ssl=tls, limit=max(4, connections)),
            timeout=aiohttp.ClientTimeout(total=None, connect=10.0, sock_read=read_timeout),
        )

    async def __aenter__(self) -> Side:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.session.close()

    async def request(self, method: str, path: str, **kwargs: Any) -> Reply:
        async with self.session.request(
            method, self.base + path, allow_redirects=False, **kwargs
        ) as response:
            return Reply(response.status, response.headers, await response.read())

    def stream(self, path: str, **kwargs: Any):
        return self.session.get(self.base + path, **kwargs)


CONNECTION_ERRORS = (aiohttp.ClientError, TimeoutError, OSError)


@dataclass
class MirrorSettings:
    source: Endpoint
    target: Endpoint
    paths: MirrorPaths
    start_from: int | None = None  # with no checkpoint yet: copy the events from this position on
    metrics_port: int | None = None  # None: no endpoint; 0: a free port
    metrics_host: str = "127.0.0.1"
    status_line_seconds: float = 10.0  # 0: no status lines in the log
    status_seconds: float = 1.0  # status file and primary head refresh
    checkpoint_seconds: float = 1.0
    checkpoint_events: int = 1000
    batch_bytes: int = 1 << 20
    batch_events: int = 2000
    max_backoff: float = 5.0
    # a not-leader answer of the secondary (or its node gone) is tried again, at the leader it or
    # another member names, for this long before the mirror reconnects (evdb/client_retry.py)
    leader_retry_seconds: float = 30.0
    # 1: one append at a time, in $all order. N > 1: the user streams of a batch are appended N at a
    # time, each stream's events in one append (its order kept, $all's order across streams not).
    parallel: int = 1
