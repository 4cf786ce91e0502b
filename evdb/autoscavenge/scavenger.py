"""Driving one node's scavenge through that node's own HTTP endpoints (as KurrentDB's auto-scavenge
does): ``POST /admin/scavenge`` to start, ``GET /admin/scavenge/last`` to watch,
``DELETE /admin/scavenge/{id}`` to stop (a 404 there means it is not running any more)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from evdb.cluster.peers import PeerClient, PeerError
from evdb.errors import StreamNotFound
from evdb.scavenge.events import scavenge_stream

__all__ = ["HttpNodeScavenger", "LastScavenge", "NodeScavenger", "NodeUnreachable"]


class NodeUnreachable(Exception):
    """The node did not answer (down, restarting, or refusing): the caller retries or times out."""


@dataclass(frozen=True)
class LastScavenge:
    scavenge_id: str
    result: str  # Unknown | InProgress | Success | Stopped | Errored | Interrupted


class NodeScavenger(Protocol):
    async def start(self, endpoint: str) -> str: ...

    async def last(self, endpoint: str) -> LastScavenge: ...

    async def stop(self, endpoint: str, scavenge_id: str | None) -> None: ...

    def result_from_stream(self, scavenge_id: str) -> str | None: ...

    async def close(self) -> None: ...


class HttpNodeScavenger:
    def __init__(
        self,
        *,
        peers: PeerClient,
        authorization: Callable[[], Awaitable[str]],
        db: Callable[[], object],
        request_timeout: float = 10.0,
    ) -> None:
        self._peers = peers  # the node's one node-to-node client: reloads reach these calls too
        self._authorization = authorization
        self._db = db
        self.request_timeout = request_timeout

    async def _call(self, method: str, endpoint: str, path: str, timeout: float | None = None):
        headers = {"Accept": "application/json", "Authorization": await self._authorization()}
        try:
            answer = await self._peers.request(
                method,
                endpoint,
                path,
                headers=headers,
                data=b"{}" if method == "POST" else None,
                timeout=timeout or self.request_timeout,
            )
        except PeerError as exc:  # names the node and the reason (a certificate, say)
            raise NodeUnreachable(str(exc)) from exc
        return answer.status, answer.text()

    @staticmethod
    def _json(text: str) -> object:
        try:
            return json.loads(text)
        except ValueError:
            return None

    async def start(self, endpoint: str) -> str:
        """Start (or resume) the node's scavenge; its id. A scavenge already running is adopted."""
        status, text = await self._call("POST", endpoint, "/admin/scavenge")
        if status == 200:
            body = self._json(text)
            if isinstance(body, dict) and body.get("scavengeId"):
                return str(body["scavengeId"])
        if status == 400 and "already running" in text:
            status, text = await self._call("GET", endpoint, "/admin/scavenge/current")
            body = self._json(text)
            if status == 200 and isinstance(body, dict) and body.get("scavengeId"):
                return str(body["scavengeId"])
        raise NodeUnreachable(f"POST /admin/scavenge on {endpoint} answered {status}: {text[:200]}")

    async def last(self, endpoint: str) -> LastScavenge:
        status, text = await self._call("GET", endpoint, "/admin/scavenge/last")
        body = self._json(text)
        if status != 200 or not isinstance(body, dict):
            raise NodeUnreachable(f"GET /admin/scavenge/last on {endpoint} answered {status}: {text[:200]}")
        return LastScavenge(str(body.get("scavengeId") or ""), str(body.get("scavengeResult") or "Unknown"))

    async def stop(self, endpoint: str, scavenge_id: str | None) -> None:
        """Return once the node scavenge has stopped (or was not running)."""
        status, text = await self._call(
            "DELETE", endpoint, f"/admin/scavenge/{scavenge_id or 'current'}", timeout=120.0
        )
        if status not in (200, 404):
            raise NodeUnreachable(f"DELETE /admin/scavenge on {endpoint} answered {status}: {text[:200]}")

    def result_from_stream(self, scavenge_id: str) -> str | None:
        """The result in ``$scavenges-{id}`` on this (the leader's) copy of the log, if it is there."""
        db = self._db()
        if db is None:
            return None
        try:
            events = db.read_stream_backward(scavenge_stream(scavenge_id), None, 20).events  # type: ignore[attr-defined]
        except StreamNotFound:
            return None
        for event in events:
            if event.event_type == "$scavengeCompleted":
                try:
                    return str(json.loads(event.data).get("result") or "Unknown")
                except ValueError:
                    return None
        return None

    async def close(self) -> None:
        pass  # the connections belong to the node's peer client, closed when the node stops
