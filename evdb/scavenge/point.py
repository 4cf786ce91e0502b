"""Scavenge points: ``$scavengePoint`` events in ``$scavengePoints``.

A point's log position is the exclusive upper bound of what its scavenge may remove; its timestamp is
EffectiveNow (the time ``$maxAge`` is judged against); ``{"threshold": N}`` is its data. Being log
records, points replicate: a node scavenged later reaches the same point and gets the same effect.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Protocol, cast

from evdb.clock import TICKS_PER_SECOND
from evdb.database import Database
from evdb.errors import ScavengeError, StreamNotFound
from evdb.storage.records import EventRecord
from evdb.streams import NewEvent

__all__ = ["SCAVENGE_POINTS_STREAM", "SCAVENGE_POINT_TYPE", "ScavengePoint", "latest_point", "write_point"]

SCAVENGE_POINTS_STREAM = "$scavengePoints"
SCAVENGE_POINT_TYPE = "$scavengePoint"


@dataclass(frozen=True)
class ScavengePoint:
    number: int
    position: int  # log position of the point record: discards happen only before it
    effective_now: int  # ticks
    threshold: int

    @property
    def name(self) -> str:
        return f"SP-{self.number}"

    @property
    def effective_now_seconds(self) -> float:
        return self.effective_now / TICKS_PER_SECOND

    def to_json(self) -> dict:
        return {
            "number": self.number,
            "position": self.position,
            "effectiveNow": self.effective_now,
            "threshold": self.threshold,
        }

    @classmethod
    def from_json(cls, data: dict) -> ScavengePoint:
        return cls(data["number"], data["position"], data["effectiveNow"], data["threshold"])

    @classmethod
    def from_record(cls, record: EventRecord) -> ScavengePoint:
        try:
            threshold = int(json.loads(record.data).get("threshold", 0))
        except (ValueError, AttributeError, TypeError):
            threshold = 0
        return cls(record.event_number, record.log_position, record.timestamp, threshold)


def latest_point(db: Database) -> ScavengePoint | None:
    try:
        events = db.read_stream_backward(SCAVENGE_POINTS_STREAM, None, 1).events
    except StreamNotFound:
        return None
    return ScavengePoint.from_record(events[0]) if events else None


class _PointForwarder(Protocol):
    """What a follower's ``Database.remote_writer`` (evdb.cluster.forwarding.RemoteWriter) does here."""

    def write_scavenge_point(self, threshold: int) -> int: ...


def write_point(db: Database, threshold: int) -> ScavengePoint:
    """Write a new scavenge point and complete the active chunk, in one step of the writer, so the
    chunk holding the point (and everything before it) can be scavenged."""

    # Database annotates remote_writer as a bare callable; the cluster installs a RemoteWriter
    remote = cast("_PointForwarder | None", db.remote_writer)
    if remote is not None:  # a follower: the leader writes the point; wait until its chunk is complete here
        position = remote.write_scavenge_point(threshold)
        _wait_for_completed_chunk(db, position)
        point = latest_point(db)
        assert point is not None
        return point

    def write(ctx) -> None:
        event = NewEvent(SCAVENGE_POINT_TYPE, json.dumps({"threshold": threshold}).encode(), is_json=True)
        ctx.append(SCAVENGE_POINTS_STREAM, [event])
        ctx.complete_active_chunk()
        return None

    db.call_in_writer(write)
    point = latest_point(db)
    assert point is not None
    return point


def _wait_for_completed_chunk(db: Database, position: int, timeout: float = 30.0) -> None:
    """On a follower: the leader completed the chunk holding a new point; wait for ours to be too."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        chunk = db.log.chunk_for(position)
        if chunk is not None and chunk.is_completed:
            return
        time.sleep(0.01)
    raise ScavengeError(
        f"The scavenge point at {position} did not arrive from the leader in {timeout:.0f} s."
    )
