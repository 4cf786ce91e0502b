"""Reads: streams, single events and ``$all``, as clients see them.

Readers run on any thread. They see only committed records (up to the writer checkpoint), and in a
cluster only what the cluster committed (the read limit), and read the stream state from the index and
the log, never from the writer's private caches.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

from evdb.clock import TICKS_PER_SECOND, Clock
from evdb.errors import InvalidInput, StreamDeleted, StreamNotFound
from evdb.index.existence import StreamExistenceFilter
from evdb.index.hashing import stream_hash
from evdb.index.table_index import TableIndex
from evdb.storage import records as rec
from evdb.storage.log import TransactionLog
from evdb.streams import (
    MAX_EVENT_NUMBER,
    AllSlice,
    StreamMetadata,
    StreamSlice,
    StreamState,
    check_stream_name,
    is_metastream,
    metastream_of,
    original_stream_of,
)

__all__ = ["EventFilter", "ReadScope", "StreamReads", "read_through"]

EventFilter = Callable[[rec.EventRecord], bool]


class ReadScope(Protocol):
    """What the reads ask of their database: where reads stop, the clock of ``$maxAge``, and who is
    told of each read (the metrics' observer, timed with ``timer``)."""

    clock: Clock
    observer: Any
    timer: Callable[[], float]

    @property
    def readable_position(self) -> int: ...

    def visible_limit(self) -> int | None: ...


class StreamReads:
    """The read side of a :class:`~evdb.database.Database` (its public read methods call these)."""

    def __init__(
        self,
        scope: ReadScope,
        log: TransactionLog,
        index: TableIndex,
        existence: StreamExistenceFilter | None,
    ) -> None:
        self._scope = scope
        self._log = log
        self._index = index
        self._existence = existence

    def _stream_records_backward(
        self, stream: str, before: int | None = None, limit: int | None = None
    ) -> Iterator[rec.EventRecord]:
        """This stream's committed records, newest first (tombstone included), collisions filtered;
        none at or past log position ``limit`` when given."""
        entries = self._index.iter_backward(stream_hash(stream), before)
        return self._stream_records(stream, entries, limit)

    def _stream_records_forward(self, stream: str, start: int) -> Iterator[rec.EventRecord]:
        entries = self._index.iter_forward(stream_hash(stream), start)
        return self._stream_records(stream, entries, self._visible_limit())

    def _stream_records(
        self, stream: str, entries: Iterable[tuple[int, int]], limit: int | None
    ) -> Iterator[rec.EventRecord]:
        """The records of ``stream`` at the index's (event number, position) ``entries``, each number
        once (entries of another stream with the same hash are left out), none at or past ``limit``."""
        seen: set[int] = set()
        for number, position in entries:
            if number in seen or (limit is not None and position >= limit):
                continue
            record = self._log.read_record(position)
            if isinstance(record, rec.EventRecord) and record.stream == stream:
                seen.add(number)
                yield record

    def _observe_read(self, events: list[rec.EventRecord], started: float) -> None:
        """Tell the observer (if any) of a read call's events and its time since ``started``."""
        observer = self._scope.observer
        if events and observer is not None:
            observer.read(events, self._scope.timer() - started, self._log.end, self._log.chunk_size)

    def _visible_limit(self) -> int | None:
        """The log position reads stop at, or None when they see all that is committed here."""
        return self._scope.visible_limit()

    def event_at(self, stream: str, number: int, limit: int | None = None) -> rec.EventRecord | None:
        for position in self._index.get(stream_hash(stream), number):
            if limit is not None and position >= limit:
                continue
            record = self._log.read_record(position)
            if isinstance(record, rec.EventRecord) and record.stream == stream:
                return record
        return None

    def _last_record(self, stream: str, limit: int | None = None) -> tuple[int, bool]:
        """(last event number or -1, tombstoned) from the index and the log."""
        if self._existence is not None and not self._existence.might_exist(stream):
            return -1, False
        tombstoned = False
        for record in self._stream_records_backward(stream, None, limit):
            if record.event_number == MAX_EVENT_NUMBER:
                tombstoned = True
                continue
            return record.event_number, tombstoned
        return -1, tombstoned

    def stream_state(self, stream: str, *, all_written: bool = False) -> StreamState:
        """The state of a stream as readers see it (last event number, tombstone, metadata); with
        ``all_written``, as the writer sees it (every record durable here, committed by the cluster
        or not)."""
        limit = None if all_written else self._visible_limit()
        last, tombstoned = self._last_record(stream, limit)
        if is_metastream(stream):
            return StreamState(stream, last, tombstoned, StreamMetadata(max_count=1), -1)
        meta_last, _ = self._last_record(metastream_of(stream), limit)
        metadata = StreamMetadata()
        if meta_last >= 0:
            record = self.event_at(metastream_of(stream), meta_last, limit)
            if record is not None:
                metadata = StreamMetadata.from_bytes(record.data)
        return StreamState(stream, last, tombstoned, metadata, meta_last)

    def get_stream_metadata(self, stream: str) -> tuple[StreamMetadata, int]:
        """(metadata, metastream version); raises StreamDeleted for a tombstoned stream."""
        check_stream_name(stream)
        state = self.stream_state(stream)
        if state.tombstoned:
            raise StreamDeleted(stream)
        return state.metadata, state.metadata_version

    def _visible_range(self, stream: str) -> tuple[StreamState, int, int | None]:
        """(state, first visible event number, oldest visible timestamp in ticks or None)."""
        check_stream_name(stream)
        state = self.stream_state(stream)
        if state.tombstoned:
            raise StreamDeleted(stream)
        if is_metastream(stream) and self._last_record(original_stream_of(stream))[1]:
            raise StreamDeleted(stream)
        if state.last_event_number < 0 or state.soft_deleted:
            raise StreamNotFound(stream)
        meta = state.metadata
        first = 0
        if meta.truncate_before is not None:
            first = meta.truncate_before
        if meta.max_count is not None:
            first = max(first, state.last_event_number - meta.max_count + 1)
        oldest = None
        if meta.max_age is not None:
            oldest = self._scope.clock.ticks() - meta.max_age * TICKS_PER_SECOND
        return state, first, oldest

    def read_stream_forward(
        self, stream: str, from_event_number: int = 0, max_count: int = 4096
    ) -> StreamSlice:
        """Events of ``stream`` from ``from_event_number`` on, oldest first, as clients see them:
        deleted, truncated and expired events are left out."""
        started = self._scope.timer()
        _check_count(max_count)
        if from_event_number < 0:
            raise InvalidInput("The event number to read from must be >= 0.")
        state, first, oldest = self._visible_range(stream)
        last = state.last_event_number
        start = max(from_event_number, first)
        events: list[rec.EventRecord] = []
        next_number = last + 1
        for record in self._stream_records_forward(stream, start):
            if record.event_number > last:
                break
            if oldest is not None and record.timestamp < oldest:
                continue
            events.append(record)
            if len(events) >= max_count:
                next_number = record.event_number + 1
                break
        self._observe_read(events, started)
        return StreamSlice(stream, events, from_event_number, next_number, last, next_number > last)

    def read_stream_backward(
        self, stream: str, from_event_number: int | None = None, max_count: int = 4096
    ) -> StreamSlice:
        """Events of ``stream`` from ``from_event_number`` (None: the end) backwards, newest first."""
        started = self._scope.timer()
        _check_count(max_count)
        state, first, oldest = self._visible_range(stream)
        last = state.last_event_number
        start = last if from_event_number is None or from_event_number < 0 else min(from_event_number, last)
        events: list[rec.EventRecord] = []
        next_number = -1
        for record in self._stream_records_backward(stream, start + 1, self._visible_limit()):
            if record.event_number == MAX_EVENT_NUMBER:
                continue
            if record.event_number < first:
                break
            next_number = record.event_number - 1
            if oldest is not None and record.timestamp < oldest:
                continue
            events.append(record)
            if len(events) >= max_count:
                break
        if next_number < first:
            next_number = -1
        is_end = next_number < 0 or len(events) < max_count
        self._observe_read(events, started)
        return StreamSlice(stream, events, start, next_number if not is_end else -1, last, is_end)

    def read_event(self, stream: str, event_number: int) -> rec.EventRecord:
        """One event as clients see it; -1 means the last. Raises StreamNotFound when not visible."""
        started = self._scope.timer()
        state, first, oldest = self._visible_range(stream)
        number = state.last_event_number if event_number == -1 else event_number
        if number < first or number > state.last_event_number:
            raise StreamNotFound(stream)
        record = self.event_at(stream, number, self._visible_limit())
        if record is None or (oldest is not None and record.timestamp < oldest):
            raise StreamNotFound(stream)
        self._observe_read([record], started)
        return record

    def _check_all_position(self, position: int) -> None:
        if position < 0:
            raise InvalidInput("A position in $all must be >= 0.")
        if position >= self._scope.readable_position:
            return
        chunk = self._log.reading_chunk_for(position)
        if chunk is None or chunk.is_scavenged or position == chunk.start_position:
            return
        if position >= chunk.data_end_position and chunk.is_completed:
            return
        if not self._log.is_record_boundary(position):
            raise InvalidInput(f"Position {position} is not the position of an event in $all.")

    def read_all_forward(
        self,
        position: int = 0,
        max_count: int = 4096,
        event_filter: EventFilter | None = None,
        *,
        max_scan: int | None = None,
    ) -> AllSlice:
        """Events of the whole log from ``position`` (included), in log order.

        Deleted and expired events are still here until a scavenge removes them. ``max_scan`` bounds
        how many events are looked at (for filtered reads that report checkpoints).
        """
        started = self._scope.timer()
        _check_count(max_count)
        self._check_all_position(position)
        events: list[rec.EventRecord] = []
        next_position = max(position, 0)
        scanned = 0
        event_record = rec.EventRecord
        done = False
        end = self._scope.readable_position
        while not done:
            if next_position >= end:
                break
            batch, after = self._log.read_forward_batch(next_position, min(1024, max_count - len(events) + 8))
            if batch and batch[-1].log_position >= end:  # a cluster member: stop at the commit position
                batch = [r for r in batch if r.log_position < end]
                after = batch[-1].next_position if batch else end  # past a chunk's tail: the end
                done = True
            if not batch:
                next_position = max(next_position, min(after, end))
                break
            if event_filter is None and max_scan is None and len(batch) <= max_count - len(events):
                # the common case, without a per-record Python loop
                events.extend([r for r in batch if type(r) is event_record])
                next_position = after
                done = len(events) >= max_count
                continue
            for record in batch:
                if type(record) is not event_record:
                    next_position = record.next_position
                    continue
                next_position = record[0] + record[9]  # log_position + size
                scanned += 1
                if event_filter is None or event_filter(record):
                    events.append(record)
                    if len(events) >= max_count:
                        done = True
                        break
                if max_scan is not None and scanned >= max_scan:
                    done = True
                    break
            else:
                next_position = after
        self._observe_read(events, started)
        return AllSlice(events, position, next_position, next_position >= end)

    def read_all_backward(
        self, position: int | None = None, max_count: int = 4096, event_filter: EventFilter | None = None
    ) -> AllSlice:
        """Events before ``position`` (None: the end), newest first."""
        started = self._scope.timer()
        _check_count(max_count)
        end = self._scope.readable_position
        start = end if position is None or position < 0 else min(position, end)
        self._check_all_position(start)
        events: list[rec.EventRecord] = []
        next_position = start
        for record in self._log.iter_backward(start):
            next_position = record.log_position
            if not isinstance(record, rec.EventRecord):
                continue
            if event_filter is None or event_filter(record):
                events.append(record)
                if len(events) >= max_count:
                    break
        else:
            next_position = 0
        self._observe_read(events, started)
        return AllSlice(events, start, next_position, next_position <= 0)

    def iter_all(self, position: int = 0) -> Iterator[rec.EventRecord]:
        """Every committed event from ``position`` on (a long scan, for catch-up and tools)."""
        self._check_all_position(position)
        end = self._scope.readable_position
        for record in self._log.iter_forward(position):
            if record.log_position >= end:
                return
            if isinstance(record, rec.EventRecord):
                yield record


def _check_count(max_count: int) -> None:
    if isinstance(max_count, bool) or not isinstance(max_count, int) or max_count <= 0:
        raise InvalidInput("The number of events to read must be a positive integer.")


_P = ParamSpec("_P")
_R = TypeVar("_R")


class _Reading(Protocol):
    _reads: StreamReads


def read_through(
    method: Callable[Concatenate[StreamReads, _P], _R],
) -> Callable[Concatenate[_Reading, _P], _R]:
    """A :class:`~evdb.database.Database` method that is ``method`` of its :class:`StreamReads`: the same
    parameters (checked by mypy at every call) and docstring, written once, here."""

    @functools.wraps(method)
    def read(self: _Reading, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        return method(self._reads, *args, **kwargs)

    return read
