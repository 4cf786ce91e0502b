"""The writer's stream rules: appends and deletes checked against each stream's state (expected
versions, tombstones, soft deletes, idempotent retries) and encoded into the log, with the writer's
private caches of stream states and recent appends. Runs only in the writer (see
:mod:`evdb.database.writer`); its records are committed with the writer's current segment."""

from __future__ import annotations

import itertools
import json
import uuid
from collections import OrderedDict
from collections.abc import Sequence
from typing import Protocol

from evdb.clock import Clock
from evdb.database.answers import Append, Delete
from evdb.database.config import DatabaseConfig
from evdb.database.reads import StreamReads
from evdb.errors import EventTooLarge, InvalidInput, StreamDeleted, StreamNotFound, WrongExpectedVersion
from evdb.index.hashing import stream_hash
from evdb.storage import records as rec
from evdb.storage.log import TransactionLog
from evdb.streams import (
    ANY,
    MAX_EVENT_NUMBER,
    MAX_NAME_BYTES,
    NO_STREAM,
    STREAM_EXISTS,
    AppendResult,
    NewEvent,
    StreamMetadata,
    StreamState,
    is_metastream,
    metastream_of,
    original_stream_of,
    random_ids,
)

__all__ = ["Pending", "Segment", "StreamWrites", "check_events"]

_DATA = int(rec.RecordFlags.DATA)
_COMMITTED = int(rec.RecordFlags.IS_COMMITTED)
_BEGIN = int(rec.RecordFlags.TRANSACTION_BEGIN)
_END = int(rec.RecordFlags.TRANSACTION_END)
_FRAME_FIXED = rec.FRAME_OVERHEAD + rec.EVENT_HEADER.size


class Pending:
    """Records written in the current segment, waiting for the fsync that commits them."""

    __slots__ = ("answers", "entries", "names")

    def __init__(self) -> None:
        self.entries: list[tuple[int, int, int]] = []
        self.names: set[str] = set()
        self.answers: list = []  # (answer, result)


class Segment(Protocol):
    """The writer's current segment, as the stream rules see it."""

    @property
    def pending(self) -> Pending: ...

    def commit_segment(self) -> None:
        """Make what is written so far durable (before the active chunk is completed)."""


class StreamWrites:
    """Appends, deletes and system records, in the writer thread."""

    def __init__(
        self, config: DatabaseConfig, clock: Clock, log: TransactionLog, reads: StreamReads, segment: Segment
    ) -> None:
        self._config = config
        self._clock = clock
        self._log = log
        self._reads = reads
        self._segment = segment
        self.states: OrderedDict[str, StreamState] = OrderedDict()
        #: lookups of ``states`` that found / did not find the stream (kurrentdb_cache_hits_misses_total)
        self.hits = 0
        self.misses = 0
        # first event id of a recent append -> (stream, first event number, all its ids, last position)
        self.recent_appends: dict[bytes, tuple[str, int, tuple[bytes, ...], int]] = {}
        #: the append being replicated: [stream, first number, event ids, last position] (followers)
        self.replicated_batch: list | None = None

    def forget(self, *, recent_appends: bool = True) -> None:
        """Drop the cached stream states (and the recent appends' ids unless told not to)."""
        self.states.clear()
        if recent_appends:
            self.recent_appends.clear()

    def state_for_write(self, stream: str) -> StreamState:
        state = self.states.get(stream)
        if state is not None:
            self.hits += 1
            self.states.move_to_end(stream)
            return state
        self.misses += 1
        state = self._reads.stream_state(stream, all_written=True)
        self.cache_state(state)
        return state

    def _live_state(self, stream: str) -> StreamState:
        """The state of a stream a write goes to; StreamDeleted when it is tombstoned."""
        state = self.state_for_write(stream)
        if state.tombstoned:
            raise StreamDeleted(stream)
        return state

    def cache_state(self, state: StreamState) -> None:
        self.states[state.stream] = state
        self.states.move_to_end(state.stream)
        while len(self.states) > self._config.stream_cache_capacity:
            self.states.popitem(last=False)

    def _remember_append(self, ids: list[bytes], stream: str, first: int, last_position: int) -> None:
        """Remember a recent append by its first event id (idempotency of any-version appends)."""
        recent = self.recent_appends
        recent[ids[0]] = (stream, first, tuple(ids), last_position)
        capacity = self._config.idempotency_cache_capacity
        if len(recent) > capacity + capacity // 4:
            # dicts keep insertion order: keep the newest ``capacity``
            self.recent_appends = dict(itertools.islice(recent.items(), len(recent) - capacity, None))

    # -- appends and deletes --------------------------------------------------------------------------
    def _find_duplicate(self, request: Append, state: StreamState) -> AppendResult | None:
        """The original result when ``request`` repeats events already written (idempotency).

        With an exact expected version (or no-stream) the events after that version are compared;
        with any/stream-exists the recent-event-id cache says where the first event went. A batch
        that matches only in part is a wrong expected version, as in KurrentDB.
        """
        events = request.events
        if not events or any(e.event_id is None for e in events):
            return None  # events without ids cannot be recognised as repeats
        ids = [e.event_id.bytes for e in events if e.event_id is not None]
        expected = request.expected_version
        stream = request.stream
        if expected < NO_STREAM:  # any, stream exists: ask the recent-append cache
            seen = self.recent_appends.get(ids[0])
            if seen is None or seen[0] != stream:
                return None
            if seen[2] != tuple(ids):
                raise WrongExpectedVersion(stream, expected, state.last_event_number)
            return AppendResult(seen[1] + len(ids) - 1, seen[3], seen[1], duplicate=True)
        first = expected + 1  # an exact version (or no-stream): compare with what follows it
        if state.last_event_number < first:
            return None
        position = -1
        for i, event_id in enumerate(ids):
            record = self._reads.event_at(stream, first + i)
            if record is None or record.event_id != event_id:
                if i == 0:
                    return None
                raise WrongExpectedVersion(stream, expected, state.last_event_number)
            position = record.log_position
        return AppendResult(first + len(ids) - 1, position, first, duplicate=True)

    def apply_append(self, request: Append) -> AppendResult:
        stream, expected = request.stream, request.expected_version
        state = self._live_state(stream)
        last = state.last_event_number
        soft_deleted = state.soft_deleted
        visible_last = state.visible_last_event_number
        if not _expected_version_holds(expected, state):
            duplicate = self._find_duplicate(request, state)
            if duplicate is not None:
                return duplicate
            raise WrongExpectedVersion(stream, expected, visible_last)
        if expected in (ANY, STREAM_EXISTS):
            duplicate = self._find_duplicate(request, state)
            if duplicate is not None:
                return duplicate
        events = request.events
        if not events:
            return AppendResult(last, -1, last + 1)
        now = self._clock.ticks()
        first = last + 1
        stream_bytes = stream.encode()
        n = len(events)
        client_ids = all(e.event_id is not None for e in events)
        ids = _event_ids(events)  # the client's ids, fresh ones where it gave none
        base_flags = _DATA | _COMMITTED
        if request.event_types is None:
            request.event_types, request.payload_size = check_events(
                list(events), self._config.max_append_size
            )
        event_types = request.event_types
        size = (_FRAME_FIXED + len(stream_bytes)) * n + request.payload_size
        recreate_meta: bytes | None = None
        meta_stream = metastream_of(stream)
        if soft_deleted:
            # recreating a soft-deleted stream: the same append rewrites $tb to its first new event
            raw = dict(state.metadata.raw)
            raw["$tb"] = first
            recreate_meta = json.dumps(raw, separators=(",", ":")).encode()
            size += rec.event_frame_size(len(meta_stream.encode()), len("$metadata"), len(recreate_meta), 0)
        self._make_room(size)
        start = self._log.end
        block, positions = rec.encode_events(
            position=start,
            first_number=first,
            stream=stream_bytes,
            events=events,
            ids=ids,
            timestamp=now,
            base_flags=base_flags,
            end_flag=0 if soft_deleted else _END,
            event_types=event_types,
        )
        h = stream_hash(stream)
        pending = self._segment.pending
        entries = pending.entries
        numbers = range(first, first + n)
        entries.extend(zip(itertools.repeat(h), numbers, positions))
        if client_ids:
            self._remember_append(ids, stream, first, positions[-1])
        pending.names.add(stream)
        last_position = positions[-1]
        new_state = StreamState(stream, first + n - 1, False, state.metadata, state.metadata_version)
        if recreate_meta is not None:
            meta_state = self.state_for_write(meta_stream)
            meta_number = meta_state.last_event_number + 1
            position = start + len(block)
            meta_block, _ = rec.encode_events(
                position=position,
                first_number=meta_number,
                stream=meta_stream.encode(),
                events=[NewEvent("$metadata", recreate_meta, b"", None, True)],
                ids=random_ids(1),
                timestamp=now,
                base_flags=base_flags,
                end_flag=_END,
                begin_flag=0,  # it continues the append
            )
            block += meta_block
            entries.append((stream_hash(meta_stream), meta_number, position))
            pending.names.add(meta_stream)
            metadata = StreamMetadata.from_bytes(recreate_meta)
            new_state = StreamState(stream, first + n - 1, False, metadata, meta_number)
            self.cache_state(StreamState(meta_stream, meta_number, False, StreamMetadata(max_count=1), -1))
        self._log.write(block)
        self.cache_state(new_state)
        if is_metastream(stream):
            self._metadata_written(stream, events[-1].data, new_state.last_event_number)
        return AppendResult(first + n - 1, last_position, first)

    def _metadata_written(self, metastream: str, data: bytes, number: int) -> None:
        """Keep the cached state of the original stream in step with its new metadata."""
        original = original_stream_of(metastream)
        state = self.states.get(original)
        if state is not None:
            self.cache_state(
                StreamState(
                    original,
                    state.last_event_number,
                    state.tombstoned,
                    StreamMetadata.from_bytes(data),
                    number,
                )
            )

    def _make_room(self, size: int) -> None:
        if size > self._config.chunk_size:
            raise EventTooLarge(
                f"The append needs {size} bytes in the log, more than a chunk holds ({self._config.chunk_size} bytes)."
            )
        if self._log.space_left() < size:
            self._segment.commit_segment()
            self._log.complete_active_chunk()

    def write_system(self, kind: int, payload: bytes) -> int:
        size = rec.FRAME_OVERHEAD + rec.SYSTEM_HEADER.size + len(payload)
        self._make_room(size)
        position = self._log.end
        self._log.write(
            rec.encode_system(
                log_position=position, kind=kind, timestamp=self._clock.ticks(), payload=payload
            )
        )
        return position

    def apply_delete(self, request: Delete) -> AppendResult:
        stream, expected = request.stream, request.expected_version
        state = self._live_state(stream)
        last = state.last_event_number
        if not request.hard:
            if last < 0 and state.metadata_version < 0:  # never existed (KurrentDB: not even metadata)
                raise StreamNotFound(stream)
            if state.soft_deleted and expected == STREAM_EXISTS:
                raise StreamDeleted(stream)
        if not _expected_version_holds(expected, state):
            raise WrongExpectedVersion(stream, expected, state.visible_last_event_number)
        if not request.hard:
            raw = dict(state.metadata.raw)
            raw["$tb"] = MAX_EVENT_NUMBER
            event = NewEvent("$metadata", json.dumps(raw, separators=(",", ":")).encode(), is_json=True)
            return self.apply_append(
                Append(stream=metastream_of(stream), events=[event], expected_version=ANY)
            )
        now = self._clock.ticks()
        size = rec.event_frame_size(len(stream.encode()), len("$streamDeleted"), 0, 0)
        self._make_room(size)
        position = self._log.end
        flags = (
            rec.RecordFlags.DATA
            | rec.RecordFlags.STREAM_DELETE
            | rec.RecordFlags.IS_COMMITTED
            | rec.RecordFlags.TRANSACTION_BEGIN
            | rec.RecordFlags.TRANSACTION_END
        )
        frame = rec.encode_event(
            log_position=position,
            event_number=MAX_EVENT_NUMBER,
            stream=stream,
            event_type="$streamDeleted",
            event_id=uuid.uuid4().bytes,
            timestamp=now,
            flags=flags,
            data=b"",
            metadata=b"",
        )
        self._log.write(frame)
        self._segment.pending.entries.append((stream_hash(stream), MAX_EVENT_NUMBER, position))
        self._segment.pending.names.add(stream)
        self.cache_state(StreamState(stream, last, True, state.metadata, state.metadata_version))
        return AppendResult(last, position, last + 1)

    def follow_replicated_append(self, record: rec.EventRecord) -> None:
        """Rebuild the recent-append cache from replicated records (their TransactionBegin/End flags
        mark each append), so that this node, once leader, answers a retried append idempotently."""
        batch = self.replicated_batch
        if record.flags & _BEGIN:
            batch = self.replicated_batch = [record.stream, record.event_number, [record.event_id], 0]
        elif batch is not None and batch[0] == record.stream:
            batch[2].append(record.event_id)
        elif batch is not None:  # the $$stream record that ends the recreation of a soft-deleted stream
            self._remember_append(batch[2], batch[0], batch[1], batch[3])
            self.replicated_batch = None
            return
        else:
            return
        batch[3] = record.log_position
        if record.flags & _END:
            self._remember_append(batch[2], batch[0], batch[1], batch[3])
            self.replicated_batch = None


def _expected_version_holds(expected: int, state: StreamState) -> bool:
    """Whether a write expecting ``expected`` may go on a stream in ``state`` (a soft-deleted stream
    has no events for no-stream and stream-exists; an exact version is its last number)."""
    visible_last = state.visible_last_event_number
    return (
        expected == ANY
        or (expected == NO_STREAM and visible_last == -1)
        or (expected == STREAM_EXISTS and visible_last >= 0)
        or (expected >= 0 and expected == state.last_event_number)
    )


def _event_ids(events: Sequence[NewEvent]) -> list[bytes]:
    missing = sum(e.event_id is None for e in events)
    fresh = iter(random_ids(missing) if missing else ())
    return [e.event_id.bytes if e.event_id is not None else next(fresh) for e in events]


def check_events(events: list[NewEvent], max_append_size: int) -> tuple[list[bytes], int]:
    """Validate events before they are queued; returns their encoded event types and the bytes
    their types, data and metadata take (what the writer needs to size the append)."""
    types: list[bytes] = []
    payload = 0
    for e in events:
        if type(e) is not NewEvent and not isinstance(e, NewEvent):
            raise InvalidInput("Events must be NewEvent values.")
        event_type, data, metadata = e.event_type, e.data, e.metadata
        if type(event_type) is not str or not event_type:
            raise InvalidInput(f"Every event needs an event type of 1 to {MAX_NAME_BYTES} bytes.")
        encoded = event_type.encode()
        if len(encoded) > MAX_NAME_BYTES:
            raise InvalidInput(f"Every event needs an event type of 1 to {MAX_NAME_BYTES} bytes.")
        if type(data) is not bytes or type(metadata) is not bytes:
            raise InvalidInput("Event data and metadata must be bytes.")
        types.append(encoded)
        payload += len(data) + len(metadata)
    if payload > max_append_size:
        raise EventTooLarge(
            f"The append carries {payload} bytes of data and metadata; the limit (MaxAppendSize) is "
            f"{max_append_size} bytes."
        )
    return types, payload + sum(map(len, types))
