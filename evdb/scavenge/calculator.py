"""Calculation: for each stream with accumulated metadata or a tombstone, find its discard point
and add the weight of its removable events to their chunks.

A definite removal adds 2 to its chunk's weight; an event that ``$maxAge`` may have expired adds 1
when its chunk's timestamps straddle the cut-off (the executor then checks the event's own
timestamp). Discard points never move backwards. The last event of a stream before the scavenge
point is always kept, and so is a tombstone (unless UnsafeIgnoreHardDelete).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator

from evdb.clock import TICKS_PER_SECOND
from evdb.index.hashing import stream_hash
from evdb.scavenge.run import RunContext
from evdb.scavenge.state import StreamRow
from evdb.storage.records import MAX_EVENT_NUMBER, EventRecord
from evdb.streams import is_metastream, original_stream_of

__all__ = ["calculate", "stream_entries"]

BATCH = 200


def stream_entries(ctx: RunContext, stream: str, collided: set[str]) -> Iterator[tuple[int, int]]:
    """(event number, position) of a stream's index entries before the scavenge point."""
    db, limit = ctx.db, ctx.point.position
    check_name = stream in collided
    for number, position in db.index.iter_forward(stream_hash(stream), 0):
        if position >= limit:
            continue
        if check_name:
            record = db.log.read_record(position)
            if type(record) is not EventRecord or record.stream != stream:
                continue
        yield number, position


def discard_point(row: StreamRow, last: int, original_tombstoned: bool) -> int:
    """The first event number that survives (everything numbered below it is removed)."""
    if is_metastream(row.stream):
        # a metastream keeps only its last metadata event; a tombstoned stream loses it all
        point = MAX_EVENT_NUMBER if original_tombstoned else (row.meta_number or 0)
    elif row.tombstoned:
        point = MAX_EVENT_NUMBER
    else:
        point = 0
        if row.truncate_before is not None:
            point = max(point, row.truncate_before)
        if row.max_count is not None and last >= 0:
            point = max(point, last - row.max_count + 1)
        point = min(point, last) if last >= 0 else 0  # the last event stays
    return max(point, row.discard_point)


def calculate(ctx: RunContext) -> None:
    state, _point = ctx.state, ctx.point
    checkpoint = state.checkpoint()
    after = checkpoint.get("calculatedAfter")
    if after is None:
        state.clear_weights()
    collided = set(state.collided_streams())
    timestamps = state.chunk_timestamps()
    chunk_size = ctx.db.log.chunk_size
    ctx.progress.streams_total = state.stream_count()
    ctx.progress.streams_done = 0
    tombstoned_cache: dict[str, bool] = {}
    while True:
        ctx.check_stop()
        rows = state.rows_after(after, BATCH)
        if not rows:
            break
        started = time.perf_counter()
        weights: dict[int, float] = defaultdict(float)
        for row in rows:
            _calculate_row(ctx, row, collided, timestamps, chunk_size, weights, tombstoned_cache)
        with state.transaction():
            for row in rows:
                state.save_row(row)
            state.add_weights(weights)
            after = rows[-1].stream
            state.update_checkpoint(calculatedAfter=after)
        ctx.progress.streams_done += len(rows)
        ctx.throttle.rest_after(time.perf_counter() - started)
    ctx.progress.weights = state.weights()


def _calculate_row(ctx, row, collided, timestamps, chunk_size, weights, tombstoned_cache) -> None:
    entries = list(stream_entries(ctx, row.stream, collided))
    numbers = [n for n, _ in entries if n != MAX_EVENT_NUMBER]
    last = max(numbers) if numbers else -1
    original_tombstoned = False
    if is_metastream(row.stream):
        original = original_stream_of(row.stream)
        if original not in tombstoned_cache:
            original_row = ctx.state.row(original)
            tombstoned_cache[original] = bool(original_row and original_row.tombstoned)
        original_tombstoned = tombstoned_cache[original]
    row.last_number = last
    row.discard_point = discard_point(row, last, original_tombstoned)
    cutoff = None
    if row.max_age is not None and not is_metastream(row.stream):
        cutoff = ctx.point.effective_now - row.max_age * TICKS_PER_SECOND
    for number, position in entries:
        chunk = position // chunk_size
        if number == MAX_EVENT_NUMBER:
            if ctx.unsafe_ignore_hard_delete:
                weights[chunk] += 2
            continue
        if number < row.discard_point:
            weights[chunk] += 2
        elif cutoff is not None and number != last:
            lo, hi = timestamps.get(chunk, (0, 0))
            if hi < cutoff:
                weights[chunk] += 2
            elif lo < cutoff:
                weights[chunk] += 1
