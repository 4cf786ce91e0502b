"""Writing to a cluster's leader as KurrentDB's clients do: a not-leader answer is tried again, at the
leader, for a bounded time.

A write carries ``Kurrent-RequireLeader: true`` (:data:`REQUIRE_LEADER`): a follower then answers
``307`` with the leader's address instead of forwarding it, and the client goes on with the leader.
With no leader known (an election, a resign) a node answers ``503 This node is not the leader``; the
client asks the members it knows who leads now (``GET /gossip``) and tries again after a short wait,
until :class:`LeaderRetry`'s time is spent. These functions decide; the callers do the I/O (the mirror
with aiohttp, ``evdb certs rotate`` with httpx).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from evdb.clock import Clock

__all__ = [
    "REQUIRE_LEADER",
    "LeaderRetry",
    "NotLeaderAnswer",
    "leader_from_gossip",
    "member_urls",
    "not_leader",
]

#: the header that makes a follower answer a write with a redirect to the leader
REQUIRE_LEADER = {"Kurrent-RequireLeader": "true"}

_LEADER_IS_AT = re.compile(r"Leader is at (\[[^\]]+\]|[^\s:]+):(\d+)")


@dataclass(frozen=True)
class NotLeaderAnswer:
    """A node said it is not the leader; ``leader`` is the leader's base URL when the answer named it."""

    leader: str | None


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def not_leader(
    status: int, headers: Mapping[str, str], body: bytes | str, base_url: str
) -> NotLeaderAnswer | None:
    """Whether an answer to a write sent to ``base_url`` says "not the leader" (None: it does not)."""
    if status in (307, 308):
        location = headers.get("Location") or headers.get("location")
        return NotLeaderAnswer(_origin(location) if location else None)
    if status != 503:
        return None
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    if "not the leader" not in text:
        return None
    found = _LEADER_IS_AT.search(text)
    if found is None:
        return NotLeaderAnswer(None)
    return NotLeaderAnswer(f"{urlsplit(base_url).scheme}://{found.group(1)}:{found.group(2)}")


def leader_from_gossip(gossip: Any, scheme: str) -> str | None:
    """The base URL of the live member a ``GET /gossip`` answer names as leader, if any."""
    for member in _members(gossip):
        if member.get("state") == "Leader" and member.get("isAlive"):
            return _member_url(member, scheme)
    return None


def member_urls(gossip: Any, scheme: str) -> list[str]:
    """The base URLs of every member of a ``GET /gossip`` answer (to ask again when one is gone)."""
    return [url for member in _members(gossip) if (url := _member_url(member, scheme))]


def _members(gossip: Any) -> Iterable[dict[str, Any]]:
    members = gossip.get("members") if isinstance(gossip, dict) else None
    return [m for m in members if isinstance(m, dict)] if isinstance(members, list) else []


def _member_url(member: dict[str, Any], scheme: str) -> str | None:
    host, port = member.get("httpEndPointIp"), member.get("httpEndPointPort")
    if not host or not port:
        return None
    host = f"[{host}]" if ":" in str(host) else str(host)
    return f"{scheme}://{host}:{int(port)}"


class LeaderRetry:
    """How long a write keeps being tried again while no leader answers it: waits of ``first`` seconds,
    doubling up to ``most``, until ``limit`` seconds have passed since the first not-leader answer.
    ``follows`` bounds how many times in a row a write may be sent on to another node (a redirect
    loop ends)."""

    def __init__(
        self,
        limit: float = 30.0,
        *,
        first: float = 0.1,
        most: float = 1.0,
        follows: int = 5,
        clock: Clock,
    ) -> None:
        self.limit = limit
        self.first = first
        self.most = most
        self.follows = follows
        self._clock = clock
        self._started: float | None = None
        self._wait = first
        self._followed = 0

    def follow(self) -> bool:
        """A node named the leader: may the write be sent there now?"""
        self._followed += 1
        return self._followed <= self.follows

    def next_wait(self) -> float | None:
        """Seconds to wait before the next try; None once the time is spent."""
        now = self._clock.monotonic()
        if self._started is None:
            self._started = now
        if now - self._started >= self.limit:
            return None
        wait = min(self._wait, self.most, self.limit - (now - self._started))
        self._wait = min(self.most, self._wait * 2)
        self._followed = 0
        return wait

    @property
    def spent(self) -> float:
        """Seconds since the first not-leader answer (0 before it)."""
        return 0.0 if self._started is None else self._clock.monotonic() - self._started
