"""Calculation: for each stream with accumulated metadata or a tombstone, find its discard point
and add the weight of its removable events to their chunks.

A removal adds 2 to its chunk's weight, and only while the chunk still holds the record (a scavenged
chunk's position map says which it kept): an index entry whose record an earlier run removed weighs
nothing. ``$maxAge`` expires every event of a chunk whose timestamps are all older than the cut-off;
in a chunk straddling it, those whose own timestamp (read from the log) is older. A stream's discard
point moves up to its first event that stays, past the ``$maxAge`` removals too, so their index
entries go with the others. Discard points never move backwards. The last event of a stream before
the scavenge point is always kept, and so is a tombstone (unless UnsafeIgnoreHardDelete).

Weights are kept in the scavenge database until their chunk is executed (a chunk skipped below one
run's threshold is executed by a later run whose threshold its weight passes): a removal below a
discard point is counted once, by the calculation that moves the discard point past it (its index
entry then goes); a ``$maxAge`` removal above it (an older event after a younger one: timestamps out
of order) is counted afresh by each calculation (its entry stays), see ``ScavengeState.add_weights``.
So a run right after a completed scavenge weighs, and executes, nothing.
"""

from __future__ import annotations

import time

import numpy as np

# np.unique looks up numpy.ma, which numpy loads on first use: load it here, with the scavenge service
# at node start, rather than in the scavenge thread's first calculation, where it held the GIL for
# 5-7 ms beside the node's appends (tests/scavenge/test_no_imports_in_scavenge.py)
import numpy.ma

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
    (``batch``: rows with their entries' numbers and positions) add per chunk.

    An entry is removable when it is below the stream's discard point (or a tombstone under
    UnsafeIgnoreHardDelete), or ``$maxAge`` expired its record: every record of a chunk whose
    timestamps are all older than the cut-off, and, in a chunk straddling the cut-off, a record whose
    own timestamp (read from the log) is older. It weighs 2 only while its chunk still holds its record:
    a scavenged chunk's position map says which records it kept, so an entry whose record an earlier
    run removed (an index-only entry: ``$maxAge`` removals keep theirs until the discard point passes
    them) weighs nothing. The discard point then moves up to the stream's first entry that is not
    removable (the last event always stays), so index execution removes the entries below it and no
    later calculation weighs them again; a removable entry above it (timestamps out of order) weighs
    in the age weights, counted afresh by every run, until its chunk is executed."""
    if not batch:
        return {}, {}
    log = ctx.db.log
    chunk_size = log.chunk_size
    weights: dict[int, float] = {}
    age_weights: dict[int, float] = {}
    kept_cache: dict[int, np.ndarray | None] = {}
    plain: list[tuple[np.ndarray, np.ndarray, int]] = []  # streams without a cut-off: judged together
    for row, number, position in batch:
        events = number[number != MAX_EVENT_NUMBER]
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
        # an age too long to count in ticks (saved by an older version) is no limit
        if row.max_age is None or row.max_age > MAX_AGE_SECONDS or is_metastream(row.stream):
            plain.append((number, position, row.discard_point))
        elif len(number):
            cutoff = ctx.point.effective_now - row.max_age * TICKS_PER_SECOND
            _add(
                weights, age_weights, _aged_stream(ctx, row, number, position, cutoff, timestamps, kept_cache)
            )
    if plain:
        number = np.concatenate([n for n, _, _ in plain])
        position = np.concatenate([p for _, p, _ in plain])
        point = np.concatenate([np.full(len(n), d, dtype=np.int64) for n, _, d in plain])
        chunk = position // chunk_size
        tombstone = number == MAX_EVENT_NUMBER
        removable = ~tombstone & (number < point)
        if ctx.unsafe_ignore_hard_delete:
            removable |= tombstone
        held = _held(log, chunk, position, removable, kept_cache)
        _add(weights, age_weights, (_per_chunk(chunk, np.where(held, 2.0, 0.0)), {}))
    return weights, age_weights


def _aged_stream(ctx, row, number, position, cutoff: int, timestamps, kept_cache):
    """The weights of one stream with ``$maxAge`` (see ``_calculate_batch``), its discard point moved
    up to its first entry that stays."""
    order = np.argsort(number, kind="stable")
    number, position = number[order], position[order]
    chunk = position // ctx.db.log.chunk_size
    tombstone = number == MAX_EVENT_NUMBER
    point = row.discard_point
    removable = ~tombstone & (number < point)
    if ctx.unsafe_ignore_hard_delete:
        removable |= tombstone
    aged = ~tombstone & ~removable & (number != row.last_number)
    if aged.any():
        removable |= _expired(ctx, chunk, position, aged, cutoff, timestamps)
    held = _held(ctx.db.log, chunk, position, removable, kept_cache)
    stays = np.flatnonzero(~removable)
    if len(stays):
        row.discard_point = point = max(point, int(number[stays[0]]))
    below = number < point
    if ctx.unsafe_ignore_hard_delete:
        below |= tombstone
    weight = np.where(removable & held, 2.0, 0.0)
    return _per_chunk(chunk, weight * below), _per_chunk(chunk, weight * ~below)


def _expired(
    ctx, chunk: np.ndarray, position: np.ndarray, aged: np.ndarray, cutoff: int, timestamps
) -> np.ndarray:
    """Which of the ``aged`` entries ``$maxAge`` expired: all of a chunk whose timestamps are all older
    than ``cutoff`` (none known: (0, 0)); in a chunk straddling it, those whose record is older (read
    from the log; a record no longer there counts as expired: it is gone already)."""
    lo = np.array([timestamps.get(c, (0, 0))[0] for c in chunk.tolist()], dtype=np.int64)
    hi = np.array([timestamps.get(c, (0, 0))[1] for c in chunk.tolist()], dtype=np.int64)
    expired = aged & (hi < cutoff)
    for i in np.flatnonzero(aged & (hi >= cutoff) & (lo < cutoff)).tolist():
        record = ctx.db.log.read_record(int(position[i]))
        expired[i] = record is None or record.timestamp < cutoff
    return expired


def _held(log, chunk: np.ndarray, position: np.ndarray, removable: np.ndarray, kept_cache) -> np.ndarray:
    """Which of the ``removable`` entries' records their chunk still holds: all of a chunk never
    scavenged; of a scavenged one, those its position map keeps (``kept_cache``: each physical
    chunk's kept positions, by logical chunk number)."""
    held = removable.copy()
    for c in np.unique(chunk[removable]).tolist():
        if c not in kept_cache:
            physical = log.chunk_by_number(c)
            kept_cache[c] = (
                physical.posmap_arrays()[0] if physical is not None and physical.is_scavenged else None
            )
        kept = kept_cache[c]
        if kept is not None:
            mine = removable & (chunk == c)
            held[mine] = np.isin(position[mine], kept)
    return held


def _per_chunk(chunk: np.ndarray, weight: np.ndarray) -> dict[int, float]:
    """Each chunk's sum of ``weight`` (chunk numbers are small: summed by number, without sorting)."""
    sums = np.bincount(chunk, weights=weight)
    chunks = np.flatnonzero(sums)
    return {int(c): float(w) for c, w in zip(chunks.tolist(), sums[chunks].tolist(), strict=True)}
