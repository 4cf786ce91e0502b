"""Accumulation: read the chunks added since the previous scavenge, up to the scavenge point, and
store what decides removals — metadata, tombstones, stream-hash users, chunk timestamp ranges —
in the scavenge database. Each logical chunk is accumulated once, in one transaction."""

from __future__ import annotations

import time

from evdb.clock import TICKS_PER_SECOND
from evdb.index.hashing import stream_hash
from evdb.scavenge.run import RunContext, ScavengeStopped
from evdb.scavenge.state import HashUsers, StreamRow
from evdb.scavenge.workers import Summary
from evdb.storage.chunk import HEADER_SIZE
from evdb.storage.records import MAX_EVENT_NUMBER, EventRecord
from evdb.streams import StreamMetadata, is_metastream, original_stream_of

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
    summaries: dict[int, Summary] = {}  # of the logical chunks of the chunk file being read
    while position < point.position:
        ctx.check_stop()
        started = time.perf_counter()
        chunk_number = position // chunk_size
        chunk_end = min((chunk_number + 1) * chunk_size, point.position)
        ctx.progress.current_chunk = f"chunk {chunk_number}"
        rows: dict[str, StreamRow] = {}
        physical = log.chunk_for(position)
        completed = physical if physical is not None and physical.is_completed else None
        if completed is not None and chunk_number not in summaries:
            # a merged chunk file covers several logical chunks: read it once for all of them
            numbers = list(range(chunk_number, min(completed.end_number, last_chunk) + 1))
            ranges = [
                (max(position, n * chunk_size), min((n + 1) * chunk_size, point.position)) for n in numbers
            ]
            try:
                summaries = dict(zip(numbers, ctx.workers.summarise(completed, ranges), strict=True))
            except InterruptedError:
                raise ScavengeStopped() from None
        with state.transaction():
            if completed is not None:
                lo, hi = _accumulate_summary(state, rows, users, completed, summaries.pop(chunk_number))
                position = chunk_end
            else:
                position, lo, hi = _accumulate_records(ctx, state, rows, users, position, chunk_end)
            for row in rows.values():
                state.save_row(row)
            if lo is not None:
                state.extend_chunk_timestamps(chunk_number, lo, hi)
            state.update_checkpoint(accumulatedTo=position)
        ctx.progress.chunks_done += 1
        ctx.progress.hash_cache_misses = users.misses
        ctx.progress.hash_collisions = users.collisions
        ctx.throttle.rest_after(time.perf_counter() - started)
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


def _accumulate_summary(state, rows, users, chunk, summary: Summary):
    """One logical chunk from its summary: each stream once; tombstones; metadata records."""
    for name in summary.names:
        users.observe(stream_hash(name), name)
    for tombstone, name, offset in summary.special:
        if tombstone:
            _row(state, rows, name).tombstoned = True
            continue
        record, _ = chunk.read_at(offset - HEADER_SIZE)
        if record.event_type == "$metadata":
            _accumulate_metadata(state, rows, record)
    return summary.lo, summary.hi


def _accumulate_records(ctx, state, rows, users, position: int, chunk_end: int):
    """One logical chunk (or the part of the active chunk before the point), record by record."""
    log = ctx.db.log
    lo = hi = None
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
            ts = record.timestamp
            lo = ts if lo is None or ts < lo else lo
            hi = ts if hi is None or ts > hi else hi
            if record.is_tombstone:
                _row(state, rows, record.stream).tombstoned = True
            elif is_metastream(record.stream) and record.event_type == "$metadata":
                _accumulate_metadata(state, rows, record)
        position = min(after, chunk_end)
    return position, lo, hi


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
