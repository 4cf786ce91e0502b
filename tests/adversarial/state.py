"""What a refused request must leave alone: the leader's log.

Every change a client can make (events, stream metadata and deletions, users and their groups,
persistent subscription groups, scavenges) is written to the leader's log, so a request changed
nothing when the log's end did not move, or moved only for events the node writes on its own
(:data:`BACKGROUND_STREAMS`). One ``GET /gossip`` reads the end; the streams written are read
from ``$all`` only when it moved.
"""

from __future__ import annotations

import re
from typing import Any

import httpx
from waiting import wait_until

#: streams a node writes on its own (not for the request at hand): they may grow between two requests
BACKGROUND_STREAMS = re.compile(
    r"^(\$scavenges|\$\$\$scavenges|\$scavengePoints$|\$auto-scavenge|\$epochs$|\$persistentsubscription-|"
    r"\$\$\$persistentsubscription-.*-checkpoint$|\$projections-|\$ce-|\$et-|\$bc-|\$category-|\$streams$|\$stats-)"
)


class Leader:
    """The leader's log as an admin reads it."""

    def __init__(self, client: httpx.Client) -> None:
        self.client = client

    def _json(self, path: str) -> Any:
        """The leader's answer to an admin's GET (a 503 while it is busy is waited out, bounded)."""

        def answer() -> httpx.Response | None:
            response = self.client.get(path, headers={"Accept": "application/json"})
            return response if response.status_code != 503 else None

        response = wait_until(answer, 20, f"the leader to answer GET {path}")
        assert response.status_code == 200, (path, response.status_code, response.text)
        return response.json()

    def position(self) -> int:
        """The end of the leader's committed log."""
        return self._json("/gossip")["members"][0]["writerCheckpoint"]

    def streams_written_since(self, position: int) -> list[str]:
        """The streams of the events written at or after ``position`` (the last 200 at most)."""
        page = self._json("/streams/$all/head/backward/200")
        return [e["streamId"] for e in page["entries"] if e["position"] >= position]

    def written_since(self, before: int) -> list[str]:
        """The streams a client's request wrote since ``before`` (the node's own writes aside)."""
        if self.position() == before:
            return []
        return sorted({s for s in self.streams_written_since(before) if not BACKGROUND_STREAMS.match(s)})
