"""The dashboard's one way to the nodes: a typed port with one method per request it makes.

:class:`NodeClient` names every request (its method and path live in :data:`ROUTES`, nowhere else);
:class:`HttpNodeClient` makes them over httpx. Each answer is the node's own ``httpx.Response`` (status,
body): the dashboard shows what the node said, so it never gets a summary of it. A request that gets
no answer raises ``httpx.HTTPError``.

The contract every implementation keeps is tests/tui/contract_client.py (a real in-process node and the
fake nodes of tests/tui pass the same suite).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote

import httpx

from tui.calls import PlannedCall

__all__ = ["ATOM", "JSON", "ROUTES", "HttpNodeClient", "NodeClient", "Route", "as_node_client"]

JSON = {"Accept": "application/json"}
ATOM = {"Accept": "application/vnd.kurrent.atom+json"}
#: the longest a changing call may take (a scavenge stop answers once it has stopped)
CALL_TIMEOUT = 120.0


@dataclass(frozen=True)
class Route:
    """One read of the port: its HTTP method and path template (``{}`` fields from the arguments)."""

    method: str
    path: str


#: the reads of :class:`NodeClient`, by method name: the one place their requests are written
ROUTES: dict[str, Route] = {
    "gossip": Route("GET", "/gossip"),
    "info": Route("GET", "/info"),
    "options": Route("GET", "/info/options"),
    "scavenge_current": Route("GET", "/admin/scavenge/current"),
    "scavenge_progress": Route("GET", "/admin/scavenge/progress"),
    "scavenge_last": Route("GET", "/admin/scavenge/last"),
    "metrics": Route("GET", "/metrics"),
    "read_stream": Route("GET", "/streams/{stream}/{start}/{direction}/{count}"),
    "auto_scavenge_status": Route("GET", "/auto-scavenge/status"),
    "auto_scavenge_progress": Route("GET", "/auto-scavenge/progress"),
    "backup_current": Route("GET", "/admin/backup/current"),
    "certificates": Route("GET", "/admin/certificates"),
    "subscriptions": Route("GET", "/subscriptions"),
    "subscription_info": Route("GET", "/subscriptions/{stream}/{group}/info"),
    "mirror_status": Route("GET", "/status"),
    "stats": Route("GET", "/stats"),
}


class NodeClient(Protocol):
    """Every request the dashboard makes to a node (``node``: its base URL, ``http://host:port``)."""

    async def gossip(self, node: str) -> httpx.Response: ...
    async def info(self, node: str) -> httpx.Response: ...
    async def options(self, node: str) -> httpx.Response: ...
    async def scavenge_current(self, node: str) -> httpx.Response: ...
    async def scavenge_progress(self, node: str) -> httpx.Response: ...
    async def scavenge_last(self, node: str) -> httpx.Response: ...
    async def metrics(self, node: str) -> httpx.Response: ...
    async def read_stream(
        self,
        node: str,
        stream: str,
        start: int | str = "head",
        direction: str = "backward",
        count: int = 20,
        *,
        embed: bool = True,
        timeout: float | None = None,
    ) -> httpx.Response:
        """A page of a stream's Atom feed, newest first (``embed``: with the events' data; ``timeout``:
        longer than a poll's, for a long page)."""
        ...

    async def auto_scavenge_status(self, node: str) -> httpx.Response: ...
    async def auto_scavenge_progress(self, node: str) -> httpx.Response: ...
    async def backup_current(self, node: str) -> httpx.Response: ...
    async def certificates(self, node: str) -> httpx.Response: ...
    async def subscriptions(self, node: str) -> httpx.Response: ...
    async def subscription_info(self, node: str, stream: str, group: str) -> httpx.Response: ...
    async def stats(self, node: str) -> httpx.Response:
        """KurrentDB's ``/stats``; evdb's ``es.archive`` holds the archive's figures (Archive: Enabled)."""
        ...

    async def mirror_status(self, url: str) -> httpx.Response:
        """``GET <url>/status`` of an ``evdb mirror --metrics-port``, without the nodes' credentials."""
        ...

    async def send(self, call: PlannedCall) -> httpx.Response:
        """A confirmed changing call, byte for byte as its confirmation showed it."""
        ...

    async def aclose(self) -> None: ...


class HttpNodeClient:
    """:class:`NodeClient` over one ``httpx.AsyncClient`` (its credentials, trust and transport)."""

    def __init__(self, client: httpx.AsyncClient, *, timeout: float = 2.0) -> None:
        self.http = client
        self.timeout = timeout

    async def _read(
        self, node: str, name: str, headers: dict[str, str] = JSON, **fields: Any
    ) -> httpx.Response:
        route = ROUTES[name]
        path = route.path.format(**{k: quote(str(v), safe="") for k, v in fields.items()})
        return await self.http.request(
            route.method, f"{node.rstrip('/')}{path}", headers=headers, timeout=self.timeout
        )

    async def gossip(self, node: str) -> httpx.Response:
        return await self._read(node, "gossip")

    async def info(self, node: str) -> httpx.Response:
        return await self._read(node, "info")

    async def options(self, node: str) -> httpx.Response:
        return await self._read(node, "options")

    async def scavenge_current(self, node: str) -> httpx.Response:
        return await self._read(node, "scavenge_current")

    async def scavenge_progress(self, node: str) -> httpx.Response:
        return await self._read(node, "scavenge_progress")

    async def scavenge_last(self, node: str) -> httpx.Response:
        return await self._read(node, "scavenge_last")

    async def metrics(self, node: str) -> httpx.Response:
        return await self._read(node, "metrics", {"Accept": "text/plain"})

    async def read_stream(
        self,
        node: str,
        stream: str,
        start: int | str = "head",
        direction: str = "backward",
        count: int = 20,
        *,
        embed: bool = True,
        timeout: float | None = None,
    ) -> httpx.Response:
        route = ROUTES["read_stream"]
        path = route.path.format(stream=quote(stream, safe=""), start=start, direction=direction, count=count)
        return await self.http.request(
            route.method,
            f"{node.rstrip('/')}{path}",
            headers=ATOM,
            params={"embed": "body"} if embed else None,
            timeout=timeout or self.timeout,
        )

    async def auto_scavenge_status(self, node: str) -> httpx.Response:
        return await self._read(node, "auto_scavenge_status")

    async def auto_scavenge_progress(self, node: str) -> httpx.Response:
        return await self._read(node, "auto_scavenge_progress")

    async def backup_current(self, node: str) -> httpx.Response:
        return await self._read(node, "backup_current")

    async def certificates(self, node: str) -> httpx.Response:
        return await self._read(node, "certificates")

    async def subscriptions(self, node: str) -> httpx.Response:
        return await self._read(node, "subscriptions")

    async def subscription_info(self, node: str, stream: str, group: str) -> httpx.Response:
        return await self._read(node, "subscription_info", stream=stream, group=group)

    async def stats(self, node: str) -> httpx.Response:
        return await self._read(node, "stats")

    async def mirror_status(self, url: str) -> httpx.Response:
        # no credentials: the mirror's status endpoint has none, and the nodes' are not its business
        url = url.rstrip("/").removesuffix("/status")
        return await self.http.get(
            f"{url}{ROUTES['mirror_status'].path}", headers=JSON, timeout=self.timeout, auth=None
        )

    async def send(self, call: PlannedCall) -> httpx.Response:
        return await self.http.request(
            call.method,
            call.url,
            headers=dict(call.headers),
            json=call.json_body,
            timeout=max(self.timeout, CALL_TIMEOUT),
        )

    async def aclose(self) -> None:
        await self.http.aclose()


def as_node_client(client: NodeClient | httpx.AsyncClient, timeout: float = 2.0) -> NodeClient:
    """The port of a bare ``httpx.AsyncClient`` (its credentials and trust), or the port itself."""
    if isinstance(client, httpx.AsyncClient):
        return HttpNodeClient(client, timeout=timeout)
    return client
