"""How the mirror turns a batch of the primary's ``$all`` into steps (see mirror.py's docstring)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from evdb.streams import MAX_EVENT_NUMBER, is_metastream, original_stream_of

__all__ = ["Action", "is_barrier", "is_primary_own_stream", "plan_actions", "plan_segments"]


def is_primary_own_stream(stream: str) -> bool:
    """System streams (and their metastreams) belong to the primary and are not copied."""
    original = original_stream_of(stream) if is_metastream(stream) else stream
    return original.startswith("$")


@dataclass
class Action:
    """One step of a batch: an append of a run of events, a tombstone, or nothing (skipped events).
    ``last`` is the last event of the batch the step covers: once it is done, the mirror's position
    moves to ``last["position"]``."""

    kind: str  # "append" | "tombstone" | "skip"
    last: dict[str, Any]
    stream: str = ""
    events: list[dict[str, Any]] = field(default_factory=list)
    skipped: int = 0  # events of the primary's system streams the step covers


def _raw_size(event: dict[str, Any]) -> int:
    return (len(event.get("dataBase64", "")) + len(event.get("metaDataBase64", ""))) * 3 // 4 + 64


def plan_actions(items: Iterable[dict[str, Any]], batch_bytes: int = 1 << 20) -> list[Action]:
    """Turn events of ``$all`` (in order) into steps, grouping consecutive events of one stream."""
    actions: list[Action] = []
    run: Action | None = None
    run_bytes = 0
    for event in items:
        stream = event["streamId"]
        if is_primary_own_stream(stream):
            step = (
                run if run is not None else (actions[-1] if actions and actions[-1].kind == "skip" else None)
            )
            if step is None:
                step = Action("skip", event)
                actions.append(step)
            step.last = event  # the skipped event is done once the step is
            step.skipped += 1
            continue
        size = _raw_size(event)
        if event["eventNumber"] == MAX_EVENT_NUMBER:
            run = None
            actions.append(Action("tombstone", event, stream))
            continue
        if (
            run is not None
            and run.stream == stream
            and run.events[-1]["eventNumber"] + 1 == event["eventNumber"]
            and run_bytes + size <= batch_bytes
        ):
            run.events.append(event)
            run.last = event
            run_bytes += size
            continue
        run = Action("append", event, stream, [event])
        run_bytes = size
        actions.append(run)
    return actions


def is_barrier(action: Action) -> bool:
    """A step that must run alone, after every step before it: a tombstone, or a metadata event
    (a soft delete, $maxCount, ...: it changes how the secondary treats its stream's appends)."""
    return action.kind == "tombstone" or (action.kind == "append" and is_metastream(action.stream))


def plan_segments(actions: list[Action], batch_bytes: int = 1 << 20) -> list[list[Action]]:
    """Split the steps of a batch (plan_actions) for parallel copying: each barrier step alone, and
    between two barriers one segment whose appends are regrouped by stream (a stream's events of the
    whole segment in as few appends as ``batch_bytes`` allows, in order). A segment's last step is
    the one whose ``last`` event the position moves to once the segment is done."""
    segments: list[list[Action]] = []
    pending: list[Action] = []

    def flush() -> None:
        if not pending:
            return
        per_stream: dict[str, list[dict[str, Any]]] = {}
        for action in pending:
            if action.kind == "append":
                per_stream.setdefault(action.stream, []).extend(action.events)
        merged = [run for events in per_stream.values() for run in plan_actions(events, batch_bytes)]
        end = pending[-1]
        # the marker step carries the segment's end position (and its skipped events), copies nothing
        segments.append([*merged, Action("skip", end.last, skipped=sum(a.skipped for a in pending))])
        pending.clear()

    for action in actions:
        if is_barrier(action):
            flush()
            segments.append([action])
        else:
            pending.append(action)
    flush()
    return segments
