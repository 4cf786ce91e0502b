"""Calculation: for each stream with accumulated metadata or a tombstone, find its discard point
and add the weight of its removable events to their chunks.

A definite removal adds 2 to its chunk's weight; an event that ``$maxAge`` may have expired adds 1
when its chunk's timestamps straddle the cut-off (the executor then checks the event's own
timestamp). Discard points never move backwards. The last event of a stream before the scavenge
point is always kept, and so is a tombstone (unless UnsafeIgnoreHardDelete).

Weights are kept in the scavenge database until their chunk is executed (a chunk skipped below one
run's threshold is executed by a later run whose threshold its weight passes): a removal below a
discard point is counted once, by the calculation that moves the discard point past it (its index
entry then goes); a ``$maxAge`` removal is counted afresh by each calculation (its entry stays), see
``ScavengeState.add_weights``.
"""

from __future__ import annotations

import time

import numpy as np

from evdb.clock import TICKS_PER_SECOND
from evdb.index.hashing import stream_hash
from evdb.scavenge.accumulator import MAX_AGE_SECONDS
from evdb.scavenge.run import RunContext
from evdb.scavenge.state import StreamRow
from evdb.storage.records import MAX_EVENT_NUMBER, EventRecord
from evdb.streams import is_metastream, original_stream_of

__all__ = ["calculate", "stream_entries"]

BATCH = 200  # streams per transaction
ENTRIES_AT_ONCE = 1 << 18  # index entries judged in one numpy pass (bounds the memory it takes)
RELEASE_EVERY = 16  # streams read from the index between two lets-go of its pages


def stream_entries(ctx: RunContext, stream: str, collided: set[str]) -> tuple[np.ndarray, np.ndarray]:
    """(event numbers, positions) of a stream's index entries before the scavenge point, as arrays."""
    db, limit = ctx.db, ctx.point.position
    numbers, positions = db.index.entry_arrays(stream_hash(stream))
    before = positions < limit
    numbers, positions = numbers[before], positions[before]
    if stream in collided:  # another stream shares the hash: keep the entries whose record is this one's
        mine = np.zeros(len(positions), dtype=bool)
        for i, position in enumerate(positions.tolist()):
            record = db.log.read_record(position)
            mine[i] = type(record) is EventRecord and record.stream == stream
        numbers, positions = numbers[mine], positions[mine]
    return numbers, positions


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
    """Work on the streams whose row or events changed since the last calculation, and those with
    ``$maxAge`` (see ``ScavengeState.rows_to_calculate``): another stream's discard point is what it
    was, and the entries below it went from the index at the scavenge that set it, so it would add no
    weight. Each batch of streams is judged at once with numpy over their index entries."""
    state = ctx.state
    checkpoint = state.checkpoint()
    after = checkpoint.get("calculatedAfter")
    if after is None:
        state.clear_age_weights()  # counted again below; the others stay until their chunk is executed
    collided = set(state.collided_streams())
    timestamps = state.chunk_timestamps()
    ctx.progress.streams_total = state.count_to_calculate()
    ctx.progress.streams_done = 0
    tombstoned_cache: dict[str, bool] = {}
    while True:
        ctx.check_stop()
        rows = state.rows_to_calculate(after, BATCH)
        if not rows:
            break
        started = time.perf_counter()
        weights: dict[int, float] = {}
        age_weights: dict[int, float] = {}
        batch: list[tuple[StreamRow, np.ndarray, np.ndarray]] = []
        entries = 0
        for k, row in enumerate(rows, 1):  # judged in bulk, a bounded number of index entries at a time
            numbers, positions = stream_entries(ctx, row.stream, collided)
            batch.append((row, numbers, positions))
            entries += len(numbers)
            if entries >= ENTRIES_AT_ONCE:
                _add(weights, age_weights, _calculate_batch(ctx, batch, timestamps, tombstoned_cache))
                batch, entries = [], 0
            if k % RELEASE_EVERY == 0:
                # the entries were copied out: RSS need not keep the index pages they were read from
                # (a read maps the page-cache folio around it, up to 2 MiB a column of each table)
                ctx.db.index.release_pages()
        _add(weights, age_weights, _calculate_batch(ctx, batch, timestamps, tombstoned_cache))
        ctx.db.index.release_pages()
        with state.transaction():
            for row in rows:
                state.save_row(row, dirty=False)
            state.add_weights(weights, age_weights)
            after = rows[-1].stream
            state.update_checkpoint(calculatedAfter=after)
        ctx.progress.streams_done += len(rows)
        ctx.throttle.rest_after(time.perf_counter() - started)
    ctx.progress.weights = state.weights()


def _add(
    weights: dict[int, float], age_weights: dict[int, float], more: tuple[dict[int, float], dict[int, float]]
) -> None:
    for into, found in zip((weights, age_weights), more, strict=True):
        for chunk, weight in found.items():
            into[chunk] = into.get(chunk, 0.0) + weight


def _calculate_batch(ctx, batch, timestamps, tombstoned_cache) -> tuple[dict[int, float], dict[int, float]]:
    """Each row's last number and discard point (set on the row); the weights its removable entries
    (``batch``: rows with their entries' numbers and positions) add per chunk: those below discard
    points (and tombstones under UnsafeIgnoreHardDelete), and those ``$maxAge`` may remove."""
    if not batch:
        return {}, {}
    numbers, positions, points, lasts, cutoffs = [], [], [], [], []
    no_cutoff = np.iinfo(np.int64).min  # nothing is older than it
    for row, n, p in batch:
        events = n[n != MAX_EVENT_NUMBER]
        last = int(events.max()) if len(events) else -1
        original_tombstoned = False
        if is_metastream(row.stream):
            original = original_stream_of(row.stream)
            if original not in tombstoned_cache:
                original_row = ctx.state.row(original)
                tombstoned_cache[original] = bool(original_row and original_row.tombstoned)
            original_tombstoned = tombstoned_cache[original]
        row.last_number = last
        row.discard_point = discard_point(row, last, original_tombstoned)
        cutoff = no_cutoff
        # an age too long to count in ticks (saved by an older version) is no limit
        if row.max_age is not None and row.max_age <= MAX_AGE_SECONDS and not is_metastream(row.stream):
            cutoff = max(no_cutoff + 1, ctx.point.effective_now - row.max_age * TICKS_PER_SECOND)
        numbers.append(n)
        positions.append(p)
        points.append(np.full(len(n), row.discard_point, dtype=np.int64))
        lasts.append(np.full(len(n), last, dtype=np.int64))
        cutoffs.append(np.full(len(n), cutoff, dtype=np.int64))
    number, position = np.concatenate(numbers), np.concatenate(positions)
    if not len(number):
        return {}, {}
    point, lasts_, cutoffs_ = np.concatenate(points), np.concatenate(lasts), np.concatenate(cutoffs)
    chunk = position // ctx.db.log.chunk_size
    tombstone = number == MAX_EVENT_NUMBER
    weight = np.zeros(len(number), dtype=np.float64)
    if ctx.unsafe_ignore_hard_delete:
        weight[tombstone] = 2
    definite = ~tombstone & (number < point)
    weight[definite] = 2
    age_weight = np.zeros(len(number), dtype=np.float64)
    maybe = ~tombstone & ~definite & (cutoffs_ != no_cutoff) & (number != lasts_)
    if maybe.any():
        # a chunk whose timestamps are all older than the cut-off: a definite removal; straddling it: a
        # maybe (the executor checks each record's own time); no timestamps known: (0, 0)
        lo = np.array([timestamps.get(c, (0, 0))[0] for c in chunk.tolist()], dtype=np.int64)
        hi = np.array([timestamps.get(c, (0, 0))[1] for c in chunk.tolist()], dtype=np.int64)
        age_weight[maybe & (hi < cutoffs_)] = 2
        age_weight[maybe & (hi >= cutoffs_) & (lo < cutoffs_)] = 1
    return _per_chunk(chunk, weight), _per_chunk(chunk, age_weight)


def _per_chunk(chunk: np.ndarray, weight: np.ndarray) -> dict[int, float]:
    """Each chunk's sum of ``weight`` (chunk numbers are small: summed by number, without sorting)."""
    sums = np.bincount(chunk, weights=weight)
    chunks = np.flatnonzero(sums)
    return {int(c): float(w) for c, w in zip(chunks.tolist(), sums[chunks].tolist(), strict=True)}
