"""What the Admin UI's pages show, read from the node: plain values the templates render.

Everything here is blocking (database reads); the routes run it in a thread. Events are shown as
operators need them: a redacted event (record flag ``IsRedacted``) is labelled and its data is never
shown, since it is only 0xFF bytes of the original size.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from evdb.archive.figures import ArchiveFigures, archive_figures, retention_words, upload_lag_words
from evdb.clock import TICKS_PER_SECOND
from evdb.database import Database
from evdb.errors import InvalidInput, StreamNotFound
from evdb.http.common import parse_json
from evdb.persistent import EventSource
from evdb.scavenge.events import SCAVENGES_STREAM, scavenge_stream
from evdb.storage.records import EventRecord
from evdb.streams import is_metastream

__all__ = [
    "ALL",
    "MAX_SHOWN_BYTES",
    "ArchivePage",
    "ArchiveRow",
    "EventView",
    "ScavengeHistoryRow",
    "StreamListPage",
    "StreamPage",
    "StreamSummary",
    "SubscriptionRow",
    "archive_page",
    "archive_row",
    "describe_payload",
    "event_view",
    "read_all_page",
    "read_stream_page",
    "scavenge_history",
    "stream_list",
    "subscription_rows",
    "ticks_to_iso",
]

ALL = "$all"
#: payloads longer than this are cut in the page (the event's size is still shown)
MAX_SHOWN_BYTES = 4096


def ticks_to_iso(ticks: int) -> str:
    """100 ns ticks since the Unix epoch, as ISO 8601 UTC with milliseconds."""
    moment = datetime.fromtimestamp(ticks / TICKS_PER_SECOND, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def describe_payload(data: bytes, is_json: bool) -> str:
    """Readable text for event data or metadata: indented JSON, UTF-8 text, or a hex preview."""
    if not data:
        return ""
    shown = data[:MAX_SHOWN_BYTES]
    cut = len(data) > MAX_SHOWN_BYTES
    if is_json and not cut:  # JSON (the one parser of evdb.http): else, as stored, text
        try:
            return json.dumps(parse_json(data), indent=2, ensure_ascii=False)
        except (InvalidInput, RecursionError):
            pass
    try:
        text = shown.decode()
    except UnicodeDecodeError:
        hexed = shown[:256].hex(" ")
        return f"binary, {len(data)} bytes: {hexed}{' …' if len(data) > 256 else ''}"
    return f"{text} … ({len(data)} bytes in all)" if cut else text


@dataclass(frozen=True)
class EventView:
    stream: str
    number: int
    event_type: str
    position: int
    timestamp: str
    event_id: str
    is_json: bool
    is_redacted: bool
    data_size: int
    data: str  # empty for a redacted event: its bytes are 0xFF, not data
    metadata: str


def event_view(record: EventRecord) -> EventView:
    redacted = record.is_redacted
    return EventView(
        stream=record.stream,
        number=record.event_number,
        event_type=record.event_type,
        position=record.log_position,
        timestamp=ticks_to_iso(record.timestamp),
        event_id=str(record.id),
        is_json=record.is_json,
        is_redacted=redacted,
        data_size=len(record.data),
        data="" if redacted else describe_payload(record.data, record.is_json),
        metadata=describe_payload(record.metadata, _looks_json(record.metadata)),
    )


def _looks_json(data: bytes) -> bool:
    return data[:1] in (b"{", b"[")


# -- a stream's events, newest first -------------------------------------------------------------------
@dataclass(frozen=True)
class StreamPage:
    stream: str
    events: list[EventView]
    count: int
    last_event_number: int
    newer_from: int | None  # event number where the previous (newer) page starts, None at the head
    older_from: int | None  # event number where the next (older) page starts, None at the start


def read_stream_page(db: Database, stream: str, start: int | None, count: int) -> StreamPage:
    """``count`` events of ``stream`` from ``start`` (None: the newest) backwards."""
    page = db.read_stream_backward(stream, start, count)
    last = page.last_event_number
    newest = page.events[0].event_number if page.events else (start if start is not None else last)
    newer = min(newest + count, last) if newest < last else None
    older = page.next_event_number if not page.is_end_of_stream and page.next_event_number >= 0 else None
    return StreamPage(stream, [event_view(e) for e in page.events], count, last, newer, older)


@dataclass(frozen=True)
class AllPage:
    events: list[EventView]
    count: int
    at_head: bool
    older_before: int | None  # position the next (older) page reads back from


def read_all_page(db: Database, before: int | None, count: int) -> AllPage:
    """``count`` events of ``$all`` before ``before`` (None: the end), newest first. Deleted and
    expired events are still here until a scavenge removes them, as in any ``$all`` read."""
    page = db.read_all_backward(before, count)
    older = page.next_position if not page.is_end and page.events else None
    return AllPage([event_view(e) for e in page.events], count, before is None, older)


# -- the streams of the database -------------------------------------------------------------------------
@dataclass(frozen=True)
class StreamSummary:
    name: str
    last_event_number: int  # of the newest event of the stream seen in $all
    last_event_type: str
    last_written: str
    is_system: bool


@dataclass(frozen=True)
class StreamListPage:
    streams: list[StreamSummary]
    more_before: int | None  # $all position to continue the list from, None when $all was read to its start


def stream_list(db: Database, before: int | None, limit: int = 50, max_scan: int = 20_000) -> StreamListPage:
    """Streams in order of their newest event, read from ``$all`` backwards (evdb keeps no ``$streams``
    stream). Stops after ``limit`` streams or ``max_scan`` events, whichever first, so one page stays
    cheap; ``more_before`` continues from there (a stream may then show again with older events)."""
    seen: dict[str, StreamSummary] = {}
    position = before
    scanned = 0
    while len(seen) < limit and scanned < max_scan:
        page = db.read_all_backward(position, 512)
        for record in page.events:
            scanned += 1
            if record.stream not in seen:
                seen[record.stream] = StreamSummary(
                    record.stream,
                    record.event_number,
                    record.event_type,
                    ticks_to_iso(record.timestamp),
                    record.stream.startswith("$") or is_metastream(record.stream),
                )
                if len(seen) >= limit:
                    return StreamListPage(list(seen.values()), record.log_position)
        if page.is_end or not page.events:
            return StreamListPage(list(seen.values()), None)
        position = page.next_position
    return StreamListPage(list(seen.values()), position)


# -- scavenge history from $scavenges --------------------------------------------------------------------
@dataclass(frozen=True)
class ScavengeHistoryRow:
    scavenge_id: str
    stream: str
    started: str
    result: str  # Success, Stopped, Errored, Interrupted; InProgress or Unknown without a completion
    time_taken: str
    space_saved: int | None
    error: str


def scavenge_history(
    db: Database, limit: int = 20, running_id: str | None = None
) -> list[ScavengeHistoryRow]:
    """The latest scavenges, newest first, from the links in ``$scavenges`` and each run's own stream."""
    try:
        links = db.read_stream_backward(SCAVENGES_STREAM, None, limit * 2 + 2).events
    except StreamNotFound:
        return []
    ids: list[str] = []
    for link in links:
        target = link.data.decode(errors="replace").partition("@")[2]
        scavenge_id = target.removeprefix(f"{SCAVENGES_STREAM}-")
        if target.startswith(f"{SCAVENGES_STREAM}-") and scavenge_id not in ids:
            ids.append(scavenge_id)
    return [_history_row(db, i, running_id) for i in ids[:limit]]


def _history_row(db: Database, scavenge_id: str, running_id: str | None) -> ScavengeHistoryRow:
    stream = scavenge_stream(scavenge_id)
    started, result, taken, saved, error = "", "Unknown", "", None, ""
    try:
        first = db.read_stream_forward(stream, 0, 1).events
        last = db.read_stream_backward(stream, None, 1).events
    except StreamNotFound:
        first = last = []
    if first:
        started = ticks_to_iso(first[0].timestamp)
    if last and last[0].event_type == "$scavengeCompleted":
        body = _json_object(last[0].data)
        result = str(body.get("result", "Unknown"))
        taken = str(body.get("timeTaken", ""))
        saved = body.get("spaceSaved") if isinstance(body.get("spaceSaved"), int) else None
        error = str(body.get("error") or "")
    elif scavenge_id == running_id:
        result = "InProgress"
    return ScavengeHistoryRow(scavenge_id, stream, started, result, taken, saved, error)


def _json_object(data: bytes) -> dict[str, Any]:
    try:
        value = parse_json(data)
    except InvalidInput:
        return {}
    return value if isinstance(value, dict) else {}


# -- persistent subscriptions ----------------------------------------------------------------------------
@dataclass(frozen=True)
class ConsumerView:
    source: str  # KurrentDB's ``from``
    username: str
    connection_name: str
    in_flight: int
    available_slots: int
    total_items: int


@dataclass(frozen=True)
class SubscriptionRow:
    """A persistent subscription group as the Admin UI lists it (its statistics, KurrentDB's names)."""

    stream: str
    group: str
    status: str
    strategy: str
    last_checkpointed: str  # an event number, or ``C:…/P:…`` for $all; "" when none yet
    last_known: str
    lag: int | None  # how far the checkpoint is behind the last known event: events, or bytes of $all
    lag_unit: str
    in_flight: int
    outstanding: int
    parked: int
    consumers: list[ConsumerView]


def subscription_rows(groups: list[dict[str, Any]]) -> list[SubscriptionRow]:
    """Rows of the groups' statistics (``PersistentSubscriptionService.list``), in its order."""
    rows = []
    for stats in groups:
        source = EventSource.of(str(stats["eventSource"]))
        checkpointed, known = stats.get("lastCheckpointedEventPosition"), stats.get("lastKnownEventPosition")
        lag = None
        if checkpointed is not None and known is not None:
            lag = max(0, source.parse(known) - source.parse(checkpointed))
        rows.append(
            SubscriptionRow(
                stream=source.stream,
                group=str(stats["groupName"]),
                status=str(stats["status"]),
                strategy=str(stats["namedConsumerStrategy"]),
                last_checkpointed=checkpointed or "",
                last_known=known or "",
                lag=lag,
                lag_unit="bytes" if source.is_all else "events",
                in_flight=int(stats["totalInFlightMessages"]),
                outstanding=int(stats["outstandingMessagesCount"]),
                parked=int(stats["parkedMessageCount"]),
                consumers=[
                    ConsumerView(
                        source=str(c["from"]),
                        username=str(c.get("username") or ""),
                        connection_name=str(c.get("connectionName") or ""),
                        in_flight=int(c["inFlightMessages"]),
                        available_slots=int(c["availableSlots"]),
                        total_items=int(c["totalItems"]),
                    )
                    for c in stats["connections"]
                ],
            )
        )
    return rows


# -- the archive: every member's figures ------------------------------------------------------------------
@dataclass(frozen=True)
class ArchiveRow:
    """One member's archive figures (its ``/stats`` ``es.archive``, read by evdb/archive/figures.py), or
    why they are not shown (not alive, no answer, the archive off there)."""

    node: str  # host:port, or this node's name
    role: str
    this_node: bool
    figures: ArchiveFigures | None
    problem: str = ""


@dataclass(frozen=True)
class ArchivePage:
    rows: list[ArchiveRow]
    shown: ArchiveFigures | None  # this node's figures (else the first member's): the archive and its policy
    retention: str
    archive_checkpoint: int | None  # the furthest any member read
    archiver: ArchiveRow | None  # the member that reports the archiver's figures
    upload_lag: str  # the archiver's upload lag in words ("" without an archiver)


def archive_row(node: str, role: str, this_node: bool, stats: Any, problem: str = "") -> ArchiveRow:
    """A member's row from its ``/stats`` body (None with ``problem``: it could not be read)."""
    figures = archive_figures(stats) if stats is not None else None
    if stats is not None and figures is None:
        problem = "archive off on this node (its /stats has no es.archive)"
    return ArchiveRow(node, role, this_node, figures, problem)


def archive_page(rows: list[ArchiveRow], human_bytes: Any, now: float) -> ArchivePage:
    """What the archive page shows of the members' rows (``human_bytes`` writes a byte count; ``now``:
    epoch seconds, for the upload lag's age)."""
    reported = [r for r in rows if r.figures is not None]
    own = next((r.figures for r in reported if r.this_node), None)
    shown = own or (reported[0].figures if reported else None)
    checkpoints = [
        r.figures.archive_checkpoint
        for r in reported
        if r.figures and r.figures.archive_checkpoint is not None
    ]
    archiver = next((r for r in reported if r.figures and r.figures.archiver), None)
    return ArchivePage(
        rows=rows,
        shown=shown,
        retention=retention_words(shown, human_bytes) if shown is not None else "",
        archive_checkpoint=max(checkpoints) if checkpoints else None,
        archiver=archiver,
        upload_lag=upload_lag_words(archiver.figures.archiver, now, human_bytes)
        if archiver is not None and archiver.figures is not None and archiver.figures.archiver is not None
        else "",
    )
