"""What the system projections keep and know: their streams, checkpoint tags, persisted state and
each projection's run-time record (see service.py's docstring for the log's layout)."""

from __future__ import annotations

import asyncio
import json
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from evdb.projections.config import DEFAULT_CONFIG, ProjectionConfig
from evdb.projections.standard import Emitted, StandardProjection
from evdb.storage.records import EventRecord

REGISTRATION_STREAM = "$projections-$all"
SUBSYSTEM_VERSION = 4  # KurrentDB's ProjectionConstants.SubsystemVersion, the 4th part of "$v"


def state_stream(name: str) -> str:
    return f"$projections-{name}"


def checkpoint_stream(name: str) -> str:
    return f"$projections-{name}-checkpoint"


def json_bytes(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def tfpos(position: int) -> str:
    """KurrentDB's ``TFPos.ToString()``: commit and prepare positions (one and the same in evdb; the
    zero tag, nothing processed yet, is ``C:0/P:-1``)."""
    commit, prepare = tag_positions(position)
    return f"C:{commit}/P:{prepare}"


class Tag(NamedTuple):
    """A checkpoint tag read back from an event's metadata."""

    projection_id: int
    epoch: int
    version: int
    position: int


def tag_positions(position: int) -> tuple[int, int]:
    """The ``$c`` and ``$p`` of a tag at ``position`` (-1: nothing processed yet, KurrentDB's zero tag
    ``C:0/P:-1``)."""
    return (position, position) if position >= 0 else (0, -1)


def parse_tag(metadata: bytes) -> Tag | None:
    """The ``$v`` and ``$c`` of a projection-written event's metadata; None when it has none. The zero
    tag (``$p`` -1) reads as position -1."""
    try:
        parsed = json.loads(metadata) if metadata else None
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(parsed, dict):
        return None
    version, commit = parsed.get("$v"), parsed.get("$c")
    if not isinstance(version, str) or isinstance(commit, bool) or not isinstance(commit, int):
        return None
    parts = version.split(":")
    try:
        projection_id, epoch, number = (int(p) for p in parts[:3])
    except ValueError:
        return None
    if parsed.get("$p") == -1 and commit == 0:
        commit = -1
    return Tag(projection_id, epoch, number, commit)


@dataclass(slots=True)
class Persisted:
    enabled: bool
    epoch: int
    version: int
    config: ProjectionConfig = DEFAULT_CONFIG
    #: KurrentDB's ``checkpointsDisabled``: set by a reset made while the checkpoint stream is deleted
    #: (tombstoned); the projection then keeps its checkpoints in memory only
    checkpoints_disabled: bool = False


@dataclass(slots=True)
class Target:
    """What a projection knows of one stream it writes to."""

    last_number: int  # its last event number (-1: none)
    last_source: int  # position of the source event of the last event written in this epoch (-1: none)
    metadata: dict[str, Any] | None  # metadata to write before its next event (a new logical stream)
    skip: bool = False  # not a valid name: nothing is written to it


class ProjectionFaulted(Exception):
    """A projection met a state it must not write over (KurrentDB faults it)."""


class Planned(NamedTuple):
    """One event a projection is about to write, at the tag of ``position``."""

    position: int  # the source event's log position (or the checkpoint's)
    source: EventRecord | None  # the event that caused it (None: a checkpoint's own event)
    emitted: Emitted
    repeatable: bool = False  # a checkpoint's: written again at the same tag (KurrentDB does at a start)


@dataclass
class Runtime:
    """One projection on this leader."""

    definition: StandardProjection
    projection_id: int
    persisted: Persisted
    status: str = "Stopped"
    reason: str = ""
    position: int = -1  # the last event processed (-1: none)
    next_position: int = 0  # where the next read of $all starts
    checkpoint: int = -1
    unchecked: int = 0  # events handled since the last checkpoint
    last_passed: int = -1  # the last event handled, or the checkpoint (the unhandled bytes count from it)
    checkpoint_at: float = 0.0
    processed: int = 0  # events handled since this node took office
    processing_seconds: float = 0.0
    checkpoint_metadata_written: bool = False
    checkpoint_deleted: bool = False  # the checkpoint stream is tombstoned: no checkpoint is written
    targets: OrderedDict[str, Target] = field(default_factory=OrderedDict)
    task: asyncio.Task[None] | None = None
    stopping: bool = False
    write_checkpoint_on_stop: bool = True
    #: done when the runner is to stop: waited on with the commit and the timer, stays done (set by
    #: _stop_runner; a new one per start)
    wakeup: asyncio.Future[None] | None = None
    # the wait for the next suggested checkpoint (a clock sleep ending at timer_deadline), kept across
    # the runner's waits for commits: one per checkpoint period, not a task per commit
    timer: asyncio.Task[None] | None = None
    timer_deadline: float = 0.0

    @property
    def name(self) -> str:
        return self.definition.name

    def start_at(self, position: int) -> None:
        self.position = position
        self.next_position = max(position, 0)
        self.checkpoint = position
        self.unchecked = 0
        self.last_passed = position
        self.targets.clear()


def checkpoint_deleted_reason(name: str) -> str:
    return (
        f"Its checkpoint stream {checkpoint_stream(name)} is deleted (tombstoned). Reset the projection to "
        "run it again: it starts from the beginning of $all and keeps its checkpoints in memory only."
    )


def projection_statistics(rt: Runtime, end: int, subsystem_fault: str | None) -> dict[str, Any]:
    """KurrentDB's ``ProjectionStatistics`` of one projection; ``end``: the readable end of the log (its
    progress), ``subsystem_fault``: a fault of the whole subsystem, shown on every projection."""
    status = rt.status
    if status != "Running" and rt.persisted.enabled and status in ("Stopped", "Faulted"):
        status += " (Enabled)"
    progress = 100.0 if end <= 0 else round(min(100.0, 100.0 * rt.next_position / end), 1)
    return {
        "coreProcessingTime": int(rt.processing_seconds * 1000),
        "version": rt.persisted.version,
        "epoch": rt.persisted.epoch,
        "effectiveName": rt.name,
        "writesInProgress": 0,
        "readsInProgress": 0,
        "partitionsCached": 1,
        "status": status,
        # a fault of the subsystem (its registration stream tombstoned) shows on every projection
        "stateReason": rt.reason or subsystem_fault or "",
        "name": rt.name,
        "mode": "Continuous",
        "position": tfpos(rt.position),
        "progress": progress,
        "lastCheckpoint": tfpos(rt.checkpoint),
        "eventsProcessedAfterRestart": rt.processed,
        "checkpointStatus": "",
        "bufferedEvents": 0,
        "writePendingEventsBeforeCheckpoint": 0,
        "writePendingEventsAfterCheckpoint": 0,
    }
