"""Accumulation: read the chunks added since the previous scavenge, up to the scavenge point, and
store what decides removals — metadata, tombstones, stream-hash users, chunk timestamp ranges —
in the scavenge database. Each logical chunk is accumulated once, in one transaction."""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor  # (loaded here: the package loads it lazily)

from evdb.clock import TICKS_PER_SECOND
from evdb.index.hashing import stream_hash
from evdb.scavenge.handoff import path_for
from evdb.scavenge.run import RunContext, ScavengeStopped
from evdb.scavenge.state import HashUsers, StreamRow
from evdb.scavenge.workers import Summary
from evdb.storage.chunk import HEADER_SIZE
from evdb.storage.records import MAX_EVENT_NUMBER, EventRecord
from evdb.streams import StreamMetadata, is_metastream, metastream_of, original_stream_of

__all__ = ["MAX_AGE_SECONDS", "accumulate", "scavenge_limits"]

#: The longest ``$maxAge`` the scavenge can apply: longer ages, in ticks, do not fit the signed 64-bit
#: numbers the scavenge database and the chunk scans hold, and no event can be that old anyway.
MAX_AGE_SECONDS = MAX_EVENT_NUMBER // TICKS_PER_SECOND


def accumulate(ctx: RunContext) -> None:
    state, log, point = ctx.state, ctx.db.log, ctx.point
    chunk_size = log.chunk_size
    position = state.checkpoint().get("accumulatedTo", 0)
    users = HashUsers(state, ctx.hash_users_cache_capacity)
    first_chunk = position // chunk_size
    last_chunk = max(first_chunk, (point.position - 1) // chunk_size) if point.position > 0 else first_chunk
    ctx.progress.chunks_total = max(0, last_chunk - first_chunk + 1) if position < point.position else 0
    ctx.progress.chunks_done = 0
    plan = _completed_files(log, position, point.position, last_chunk)
    with _Summaries(ctx, plan) as summaries:
        for completed, numbers, ranges in plan:
            ctx.check_stop()
            started = time.perf_counter()
            ctx.progress.current_chunk = f"chunk {numbers[0]}"
            for chunk_number, summary, (_, chunk_end) in zip(numbers, summaries.next(), ranges, strict=True):
                ctx.progress.current_chunk = f"chunk {chunk_number}"
                rows: dict[str, StreamRow] = {}
                with state.transaction():
                    lo, hi = _accumulate_summary(state, rows, users, completed, summary)
                    _save(state, rows, chunk_number, lo, hi)
                    state.update_checkpoint(accumulatedTo=chunk_end)
                position = chunk_end
                _chunk_done(ctx, users, started)
                started = time.perf_counter()
    # the part of the active chunk before the point, record by record
    while position < point.position:
        ctx.check_stop()
        started = time.perf_counter()
        chunk_number = position // chunk_size
        chunk_end = min((chunk_number + 1) * chunk_size, point.position)
        ctx.progress.current_chunk = f"chunk {chunk_number}"
        rows = {}
        with state.transaction():
            position, lo, hi = _accumulate_records(ctx, state, rows, users, position, chunk_end)
            _save(state, rows, chunk_number, lo, hi)
            state.update_checkpoint(accumulatedTo=position)
        _chunk_done(ctx, users, started)
    if users.misses:
        ctx.logger.info(
            "SCAVENGING: Accumulation looked up %d stream hashes: %d cache hits, %d cache misses "
            "(ScavengeHashUsersCacheCapacity %d), %d collisions.",
            users.hits + users.misses,
            users.hits,
            users.misses,
            ctx.hash_users_cache_capacity,
            users.collisions,
        )


def _completed_files(log, position: int, limit: int, last_chunk: int):
    """(chunk file, logical chunk numbers, [start, end) of each) of the completed chunk files from
    ``position`` to the point, in log order; a merged file covers several logical chunks and is read
    once for all of them."""
    chunk_size = log.chunk_size
    plan = []
    while position < limit:
        physical = log.chunk_for(position)
        if physical is None or not physical.is_completed:
            break
        first = position // chunk_size
        numbers = list(range(first, min(physical.end_number, last_chunk) + 1))
        ranges = [(max(position, n * chunk_size), min((n + 1) * chunk_size, limit)) for n in numbers]
        plan.append((physical, numbers, ranges))
        position = ranges[-1][1]
    return plan


class _Summaries:
    """The summaries of the planned chunk files, in order, read ahead: while the scavenge thread
    stores one file's, the next ones (``threads`` at a time) are read in the worker processes."""

    def __init__(self, ctx: RunContext, plan) -> None:
        self._ctx = ctx
        self._plan = list(plan)
        self._next = 0
        self._pending: list[Future] = []
        self._pool = ThreadPoolExecutor(
            max_workers=max(1, ctx.threads), thread_name_prefix="evdb-scavenge-read"
        )

    def __enter__(self) -> _Summaries:
        self._fill()
        return self

    def _fill(self) -> None:
        while len(self._pending) < max(1, self._ctx.threads) and self._next < len(self._plan):
            chunk, _, ranges = self._plan[self._next]
            # what execution needs of the chunk's records goes to a hand-off file as it is read
            handoff = path_for(self._ctx.handoff_dir, chunk) if self._ctx.handoff_dir else None
            self._pending.append(self._pool.submit(self._ctx.workers.summarise, chunk, ranges, handoff))
            self._next += 1

    def next(self) -> list[Summary]:
        future = self._pending.pop(0)
        index = self._next - len(self._pending) - 1
        try:
            summaries, handed_off = future.result()
        except InterruptedError:
            raise ScavengeStopped() from None
        self._fill()  # the next file is read while this one is stored
        chunk = self._plan[index][0]
        self._ctx.verified[id(chunk)] = chunk  # summarising checked its checksum
        if handed_off:
            assert self._ctx.handoff_dir is not None  # asked for
            self._ctx.handoffs[id(chunk)] = path_for(self._ctx.handoff_dir, chunk)
        return summaries

    def __exit__(self, *exc: object) -> None:
        for future in self._pending:
            future.cancel()
        self._pool.shutdown(wait=True)


def _save(state, rows: dict[str, StreamRow], chunk_number: int, lo, hi) -> None:
    for row in rows.values():
        state.save_row(row)
    if lo is not None:
        state.extend_chunk_timestamps(chunk_number, lo, hi)


def _chunk_done(ctx: RunContext, users: HashUsers, started: float) -> None:
    ctx.progress.chunks_done += 1
    ctx.progress.hash_cache_misses = users.misses
    ctx.progress.hash_collisions = users.collisions
    ctx.throttle.rest_after(time.perf_counter() - started)


def _accumulate_summary(state, rows, users, chunk, summary: Summary):
    """One logical chunk from its summary: each stream once; tombstones; metadata records."""
    users.observe_all([(stream_hash(name), name) for name in summary.names])
    state.mark_changed(summary.names)  # new events: their last number moves (calculation works on them)
    _prefetch(state, rows, [name for tombstone, name, _ in summary.special if tombstone])
    tombstoned = []
    for tombstone, name, offset in summary.special:
        if tombstone:
            _row(state, rows, name).tombstoned = True
            tombstoned.append(metastream_of(name))
            continue
        record, _ = chunk.read_at(offset - HEADER_SIZE)
        if record.event_type == "$metadata":
            _accumulate_metadata(state, rows, record)
    state.mark_changed(tombstoned)  # a tombstoned stream loses its metadata too
    return summary.lo, summary.hi


def _accumulate_records(ctx, state, rows, users, position: int, chunk_end: int):
    """One logical chunk (or the part of the active chunk before the point), record by record."""
    log = ctx.db.log
    lo = hi = None
    seen: set[str] = set()
    while position < chunk_end:
        time.sleep(0)  # let other threads (appends) have the GIL between batches
        records, after = log.read_forward_batch(position, 256)
        if not records:
            position = chunk_end
            break
        for record in records:
            if record.log_position >= chunk_end:
                break
            if type(record) is not EventRecord:
                continue
            users.observe(stream_hash(record.stream), record.stream)
            seen.add(record.stream)
            ts = record.timestamp
            lo = ts if lo is None or ts < lo else lo
            hi = ts if hi is None or ts > hi else hi
            if record.is_tombstone:
                _tombstone(state, rows, record.stream)
            elif is_metastream(record.stream) and record.event_type == "$metadata":
                _accumulate_metadata(state, rows, record)
        position = min(after, chunk_end)
    state.mark_changed(seen)
    return position, lo, hi


def _tombstone(state, rows: dict[str, StreamRow], stream: str) -> None:
    _row(state, rows, stream).tombstoned = True
    state.mark_changed([metastream_of(stream)])  # a tombstoned stream loses its metadata too


def _prefetch(state, rows: dict[str, StreamRow], streams: list[str]) -> None:
    """The rows of ``streams`` that ``rows`` lacks, read in one query (``_row`` then finds them)."""
    lacking = [s for s in streams if s not in rows]
    if lacking:
        found = state.rows_of(lacking)
        for stream in lacking:
            rows[stream] = found.get(stream) or StreamRow(stream)


def _row(state, rows: dict[str, StreamRow], stream: str) -> StreamRow:
    row = rows.get(stream)
    if row is None:
        row = state.row(stream) or StreamRow(stream)
        rows[stream] = row
    return row


def _accumulate_metadata(state, rows: dict[str, StreamRow], record: EventRecord) -> None:
    """The newest metadata wins; the metastream remembers its last metadata event."""
    metadata = StreamMetadata.from_bytes(record.data)
    original = _row(state, rows, original_stream_of(record.stream))
    original.max_age, original.max_count, original.truncate_before = scavenge_limits(metadata)
    meta = _row(state, rows, record.stream)
    meta.meta_number = max(meta.meta_number or 0, record.event_number)


def scavenge_limits(metadata: StreamMetadata) -> tuple[int | None, int | None, int | None]:
    """(max age, max count, truncate before) as the scavenge applies them. Validation refuses values
    beyond signed 64 bits, but a log written by an older version may hold any integer: an age too long
    to count in ticks is no limit, and a count or ``$tb`` past the largest event number is that number
    (the same removals: at most the last event stays)."""
    max_age = metadata.max_age
    if max_age is not None and max_age > MAX_AGE_SECONDS:
        max_age = None
    max_count = metadata.max_count
    if max_count is not None:
        max_count = min(max_count, MAX_EVENT_NUMBER)
    truncate_before = metadata.truncate_before
    if truncate_before is not None:
        truncate_before = min(truncate_before, MAX_EVENT_NUMBER)
    return max_age, max_count, truncate_before
