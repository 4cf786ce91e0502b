"""The scavenge's own streams: ``$scavenges-{id}`` for each run, with its start and completion
linked into ``$scavenges`` (event types and fields as KurrentDB writes them).

The history is written best effort, as KurrentDB's scavenge log is: an event that cannot be written
(on a cluster member while no leader is known, say) is logged and the scavenge carries on."""

from __future__ import annotations

import json
import logging
from typing import Any

from evdb.database import Database
from evdb.errors import EvdbError
from evdb.scavenge.run import timespan
from evdb.streams import NewEvent

__all__ = ["SCAVENGES_STREAM", "ScavengeEvents", "scavenge_stream"]

SCAVENGES_STREAM = "$scavenges"


def scavenge_stream(scavenge_id: str) -> str:
    return f"{SCAVENGES_STREAM}-{scavenge_id}"


class ScavengeEvents:
    def __init__(
        self,
        db: Database,
        scavenge_id: str,
        node_endpoint: str,
        history_max_age_days: int,
        logger: logging.Logger | None = None,
    ) -> None:
        self.db = db
        self.logger = logger or logging.getLogger(__name__)
        self.scavenge_id = scavenge_id
        self.node_endpoint = node_endpoint
        self.stream = scavenge_stream(scavenge_id)
        self._metadata = {"$maxAge": history_max_age_days * 86400, "$acl": {"$r": "$ops"}}

    def _not_written(self, what: str, stream: str, exc: EvdbError) -> None:
        self.logger.warning("SCAVENGING: could not write %s to %s: %s", what, stream, exc)

    def _append(self, event_type: str, data: dict[str, Any]) -> int | None:
        body = {"scavengeId": self.scavenge_id, "nodeEndpoint": self.node_endpoint, **data}
        try:
            result = self.db.append(
                self.stream, [NewEvent(event_type, json.dumps(body).encode(), is_json=True)]
            )
        except EvdbError as exc:
            self._not_written(event_type, self.stream, exc)
            return None
        return result.next_expected_version

    def _link(self, number: int | None) -> None:
        if number is None:
            return
        link = NewEvent("$>", f"{number}@{self.stream}".encode())
        try:
            self.db.append(SCAVENGES_STREAM, [link])
        except EvdbError as exc:
            self._not_written("the link", SCAVENGES_STREAM, exc)

    def started(self) -> None:
        for stream in (SCAVENGES_STREAM, self.stream):
            try:
                metadata, _version = self.db.get_stream_metadata(stream)
                if metadata.raw != self._metadata:
                    self.db.set_stream_metadata(stream, self._metadata)
            except EvdbError as exc:
                self._not_written("the metadata", stream, exc)
        self._link(self._append("$scavengeStarted", {}))

    def chunks_completed(
        self, start: int, end: int, seconds: float, scavenged: bool, saved: int, error: str
    ) -> None:
        self._append(
            "$scavengeChunksCompleted",
            {
                "chunkStartNumber": start,
                "chunkEndNumber": end,
                "timeTaken": timespan(seconds),
                "wasScavenged": scavenged,
                "spaceSaved": saved,
                "errorMessage": error,
            },
        )

    def merge_completed(
        self, start: int, end: int, seconds: float, saved: int, merged: bool, error: str
    ) -> None:
        self._append(
            "$scavengeMergeCompleted",
            {
                "chunkStartNumber": start,
                "chunkEndNumber": end,
                "timeTaken": timespan(seconds),
                "spaceSaved": saved,
                "wasMerged": merged,
                "errorMessage": error,
            },
        )

    def index_completed(
        self,
        level: int,
        index: int,
        seconds: float,
        deleted: int,
        kept: int,
        saved: int,
        scavenged: bool,
        error: str,
    ) -> None:
        self._append(
            "$scavengeIndexCompleted",
            {
                "level": level,
                "index": index,
                "timeTaken": timespan(seconds),
                "entriesDeleted": deleted,
                "entriesKept": kept,
                "spaceSaved": saved,
                "wasScavenged": scavenged,
                "errorMessage": error,
            },
        )

    def completed(self, result: str, error: str | None, seconds: float, saved: int, max_chunk: int) -> None:
        number = self._append(
            "$scavengeCompleted",
            {
                "result": result,
                "error": error,
                "timeTaken": timespan(seconds),
                "spaceSaved": saved,
                "maxChunkScavenged": max_chunk,
            },
        )
        self._link(number)
