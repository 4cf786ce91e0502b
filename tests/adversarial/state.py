"""What a refused request must leave alone: the leader's log.

Every change a client can make (events, stream metadata and deletions, users and their groups,
persistent subscription groups, scavenges) is written to the leader's log, so a request changed
nothing when the log's end did not move, or moved only for events the node writes on its own
(:data:`BACKGROUND_STREAMS`). One ``GET /gossip`` reads the end; the streams written are read
from ``$all`` only when it moved.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

import httpx
from waiting import wait_until

#: streams a node writes on its own (not for the request at hand): they may grow between two requests
BACKGROUND_STREAMS = re.compile(
    r"^(\$scavenges|\$\$\$scavenges|\$scavengePoints$|\$auto-scavenge|\$epochs$|\$persistentsubscription-|"
    r"\$\$\$persistentsubscription-.*-checkpoint$|\$projections-|\$ce-|\$et-|\$bc-|\$category-|\$streams$|\$stats-)"
)


class LeaderChanged(Exception):
    """The node read as the leader is no longer the leader (an election): its log end lags behind."""


class Leader:
    """The leader's log as an admin reads it."""

    def __init__(self, client: httpx.Client) -> None:
        self.client = client

    def answer(self, path: str) -> Any:
        """The leader's answer to an admin's GET of ``path`` once it is not 503 (bounded)."""
        return self._json(path)

    def _json(self, path: str) -> Any:
        """The leader's answer to an admin's GET (a 503 while it is busy is waited out, bounded)."""

        def answer() -> httpx.Response | None:
            response = self.client.get(path, headers={"Accept": "application/json"})
            return response if response.status_code != 503 else None

        response = wait_until(answer, 20, f"the leader to answer GET {path}")
        assert response.status_code == 200, (path, response.status_code, response.text)
        return response.json()

    def position(self) -> int:
        """The end of the leader's committed log; LeaderChanged when the node no longer leads."""
        own = self._json("/gossip")["members"][0]
        if own["state"] != "Leader":
            raise LeaderChanged(f"{self.client.base_url} is {own['state']}")
        return own["writerCheckpoint"]

    def events_written_since(self, position: int, not_before: float = 0.0) -> list[dict]:
        """The events written at or after ``position`` (the last 200 at most), and at or after the time
        ``not_before`` (seconds since the epoch, this machine's clock and the node's)."""
        page = self._json("/streams/$all/head/backward/200")
        return [
            e
            for e in page["entries"]
            if e["position"] >= position and datetime.fromisoformat(e["updated"]).timestamp() >= not_before
        ]

    def streams_written_since(self, position: int, not_before: float = 0.0) -> list[str]:
        return [e["streamId"] for e in self.events_written_since(position, not_before)]

    def written_since(self, before: int, not_before: float = 0.0) -> list[str]:
        """The streams a client's request wrote since ``before`` (and the time ``not_before``: what a
        request still in progress after its client gave up on it wrote earlier is not counted), the
        node's own writes aside."""
        if self.position() == before:
            return []
        written = self.streams_written_since(before, not_before)
        return sorted({s for s in written if not BACKGROUND_STREAMS.match(s)})
