"""What a group keeps in the log, as KurrentDB keeps it, and the store port it goes through.

- the configuration of every group: ``$PersistentConfig`` events in ``$persistentSubscriptionConfig``
  (``$maxCount`` 2), read at start-up and after a leader change;
- each group's checkpoint: ``$SubscriptionCheckpoint`` events (a JSON string: ``"5"``,
  ``"C:120/P:120"``) in ``$persistentsubscription-<stream>::<group>-checkpoint``;
- parked messages: ``$>`` links (``<number>@<stream>``, metadata ``added``, ``reason``,
  ``subscriptionEventNumber``) in ``$persistentsubscription-<stream>::<group>-parked``; replayed or
  truncated messages are cut off with the stream's ``$tb``.

:class:`SubscriptionStore` is the narrow port the engine reads and writes through; every method blocks
(the engine calls them off the event loop). :class:`DatabaseStore` is it over the node's database.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NamedTuple, Protocol

from evdb.database import Database, EventFilter
from evdb.errors import StreamNotFound
from evdb.persistent.model import (
    CHECKPOINT_EVENT_TYPE,
    CONFIG_EVENT_TYPE,
    CONFIG_STREAM,
    LINK_TO,
    ResolvedEvent,
    needs_resolving,
)
from evdb.projections.links import resolve_link
from evdb.storage.records import EventRecord
from evdb.streams import NewEvent

__all__ = ["DatabaseStore", "ParkedStats", "Parking", "ReadResult", "SubscriptionStore"]

_ADMINS_ONLY = {"$r": "$admins", "$w": "$admins", "$d": "$admins", "$mr": "$admins", "$mw": "$admins"}


@dataclass(frozen=True, slots=True)
class ReadResult:
    """A page of a group's source: events, where the next read starts, whether the end was reached,
    and how many events a filter looked at and left out."""

    events: list[ResolvedEvent]
    next_position: int
    is_end: bool
    skipped: int = 0


class Parking(NamedTuple):
    """One message to park: the event, why (the parked event's ``reason``), its number in the group's
    stream."""

    resolved: ResolvedEvent
    reason: str
    subscription_event_number: int


@dataclass(frozen=True, slots=True)
class ParkedStats:
    truncate_before: int  # the first parked message not yet replayed or truncated
    last_number: int  # -1: none parked
    oldest_ticks: int | None  # the oldest parked message's time (100 ns ticks), None: none


class SubscriptionStore(Protocol):
    """The log, as the persistent subscriptions engine uses it (blocking calls)."""

    def last_position(self) -> int: ...

    def read_stream(self, stream: str, start: int, count: int, resolve_links: bool) -> ReadResult: ...

    def read_all(
        self, position: int, count: int, predicate: EventFilter | None, max_scan: int, resolve_links: bool
    ) -> ReadResult: ...

    def resolve(self, record: EventRecord, resolve_links: bool) -> ResolvedEvent: ...

    def last_event_number(self, stream: str) -> int | None: ...

    def load_config(self) -> dict[str, Any] | None: ...

    def save_config(self, config: dict[str, Any]) -> None: ...

    def load_checkpoint(self, stream: str) -> str | None: ...

    def write_checkpoint(self, stream: str, text: str) -> None: ...

    def park(self, stream: str, parks: Sequence[Parking]) -> int: ...

    def parked_stats(self, stream: str) -> ParkedStats: ...

    def truncate_parked(self, stream: str, before: int) -> None: ...

    def delete_stream(self, stream: str) -> None: ...

    def move_group_streams(self, moves: list[tuple[str, str]]) -> None: ...


class DatabaseStore:
    """:class:`SubscriptionStore` over the node's open database (asked for at each call: a follower
    reopening its database answers DatabaseReopening)."""

    def __init__(self, database: Callable[[], Database], clock_ticks: Callable[[], int]) -> None:
        self._database = database
        self._ticks = clock_ticks

    @property
    def db(self) -> Database:
        return self._database()

    def last_position(self) -> int:
        return self.db.readable_position

    # -- reading sources -------------------------------------------------------------------------------
    def resolve(self, record: EventRecord, resolve_links: bool) -> ResolvedEvent:
        """A ``$>`` link as the event it points at, when asked (evdb/projections/links.py, the one
        rule every read path uses); a link whose event is gone has ``event=None``."""
        if not needs_resolving(record, resolve_links):
            return ResolvedEvent(record)
        resolved = resolve_link(self.db.read_event, record)
        return ResolvedEvent(resolved.event, resolved.link)

    def read_stream(self, stream: str, start: int, count: int, resolve_links: bool) -> ReadResult:
        try:
            page = self.db.read_stream_forward(stream, max(0, start), count)
        except StreamNotFound:  # KurrentDB's NoStream: nothing yet, read again from 0
            return ReadResult([], 0, True)
        events = [self.resolve(r, resolve_links) for r in page.events]
        return ReadResult(events, page.next_event_number, page.is_end_of_stream)

    def read_all(
        self, position: int, count: int, predicate: EventFilter | None, max_scan: int, resolve_links: bool
    ) -> ReadResult:
        looked = 0

        def counting(record: EventRecord) -> bool:
            nonlocal looked
            looked += 1
            return predicate(record) if predicate is not None else True

        page = self.db.read_all_forward(
            max(0, position), count, counting, max_scan=max_scan if predicate is not None else None
        )
        events = [self.resolve(r, resolve_links) for r in page.events]
        skipped = looked - len(page.events) if predicate is not None else 0
        return ReadResult(events, page.next_position, page.is_end, skipped)

    def last_event_number(self, stream: str) -> int | None:
        state = self.db.stream_state(stream)
        return state.last_event_number if state.last_event_number >= 0 else None

    # -- configuration ---------------------------------------------------------------------------------
    def load_config(self) -> dict[str, Any] | None:
        try:
            page = self.db.read_stream_backward(CONFIG_STREAM, None, 1)
        except StreamNotFound:
            return None
        if not page.events:
            return None
        config = json.loads(page.events[0].data)
        if not isinstance(config, dict):
            raise ValueError(f"{CONFIG_STREAM}: the configuration is not a JSON object")
        return config

    def save_config(self, config: dict[str, Any]) -> None:
        db = self.db
        if db.stream_state(CONFIG_STREAM).metadata_version < 0:
            db.set_stream_metadata(CONFIG_STREAM, {"$maxCount": 2})
        data = json.dumps(config, indent=2).encode()
        db.append(CONFIG_STREAM, [NewEvent(CONFIG_EVENT_TYPE, data, is_json=True)])

    # -- checkpoints -----------------------------------------------------------------------------------
    def load_checkpoint(self, stream: str) -> str | None:
        try:
            page = self.db.read_stream_backward(stream, None, 1)
        except StreamNotFound:
            return None
        if not page.events:
            return None
        record = page.events[0]
        if record.event_type not in ("SubscriptionCheckpoint", CHECKPOINT_EVENT_TYPE):
            return None
        value = json.loads(record.data)
        return value if isinstance(value, str) else None

    def write_checkpoint(self, stream: str, text: str) -> None:
        self.db.append(stream, [NewEvent(CHECKPOINT_EVENT_TYPE, json.dumps(text).encode(), is_json=True)])

    # -- parked messages -------------------------------------------------------------------------------
    def park(self, stream: str, parks: Sequence[Parking]) -> int:
        """Write ``parks`` to the parked stream in one append, in their order; the last one's number."""
        added = datetime.fromtimestamp(self._ticks() / 10_000_000, UTC).isoformat()
        events = []
        for resolved, reason, subscription_event_number in parks:
            if resolved.event is None:  # an unresolved link: its own data
                assert resolved.link is not None
                data = resolved.link.data
            else:
                data = f"{resolved.event.event_number}@{resolved.event.stream}".encode()
            metadata = {
                "added": added,
                "reason": reason,
                "subscriptionEventNumber": subscription_event_number,
            }
            events.append(NewEvent(LINK_TO, data, json.dumps(metadata, indent=2).encode(), is_json=False))
        return self.db.append(stream, events).next_expected_version

    def parked_stats(self, stream: str) -> ParkedStats:
        db = self.db
        state = db.stream_state(stream)
        truncate_before = state.metadata.truncate_before or 0
        if state.last_event_number < 0 or state.tombstoned or state.soft_deleted:
            return ParkedStats(truncate_before, -1, None)
        try:
            page = db.read_stream_forward(stream, 0, 1)
        except StreamNotFound:
            return ParkedStats(truncate_before, -1, None)
        if not page.events:  # every parked message is before $tb
            return ParkedStats(truncate_before, -1, None)
        first = page.events[0]
        return ParkedStats(first.event_number, state.last_event_number, first.timestamp)

    def truncate_parked(self, stream: str, before: int) -> None:
        self.db.set_stream_metadata(stream, {"$tb": before, "$acl": _ADMINS_ONLY})

    def delete_stream(self, stream: str) -> None:
        try:
            self.db.delete_stream(stream)
        except StreamNotFound:
            pass

    def move_group_streams(self, moves: list[tuple[str, str]]) -> None:
        """Carry a group's checkpoint and parked streams from the names ``(old, new)`` of each move to
        the new ones (the last checkpoint; the parked messages not yet replayed or truncated, with
        their metadata), then delete the old streams (soft: a group whose new name is an old one
        writes there afresh). Nothing is carried into a new stream that already has events (moved
        before)."""
        db = self.db
        for old, new in moves:
            state = db.stream_state(old)
            if state.last_event_number < 0 or state.tombstoned or state.soft_deleted:
                continue
            if db.stream_state(new).last_event_number >= 0:
                continue
            if old.endswith("-checkpoint"):
                checkpoint = self.load_checkpoint(old)
                if checkpoint is not None:
                    self.write_checkpoint(new, checkpoint)
            else:
                self._copy_parked(old, new)
            self.delete_stream(old)

    def _copy_parked(self, old: str, new: str) -> None:
        db = self.db
        number = 0
        while True:
            try:
                page = db.read_stream_forward(old, number, 500)
            except StreamNotFound:
                return
            events = [
                NewEvent(r.event_type, r.data, r.metadata, is_json=False)
                for r in page.events
                if r.event_type == LINK_TO
            ]
            if events:
                db.append(new, events)
            if page.is_end_of_stream:
                return
            number = page.next_event_number
