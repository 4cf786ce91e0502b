"""Accumulation: read the chunks added since the previous scavenge, up to the scavenge point, and
store what decides removals — metadata, tombstones, stream-hash users, chunk timestamp ranges —
in the scavenge database. Each logical chunk is accumulated once, in one transaction."""

from __future__ import annotations

import time

from evdb.index.hashing import stream_hash
from evdb.scavenge.run import RunContext
from evdb.scavenge.state import HashUsers, StreamRow
from evdb.storage.records import EventRecord
from evdb.streams import StreamMetadata, is_metastream, original_stream_of

__all__ = ["accumulate"]


def accumulate(ctx: RunContext) -> None:
    state, log, point = ctx.state, ctx.db.log, ctx.point
    chunk_size = log.chunk_size
    position = state.checkpoint().get("accumulatedTo", 0)
    users = HashUsers(state, ctx.hash_users_cache_capacity)
    first_chunk = position // chunk_size
    last_chunk = max(first_chunk, (point.position - 1) // chunk_size) if point.position > 0 else first_chunk
    ctx.progress.chunks_total = max(0, last_chunk - first_chunk + 1) if position < point.position else 0
    ctx.progress.chunks_done = 0
    while position < point.position:
        ctx.check_stop()
        started = time.perf_counter()
        chunk_number = position // chunk_size
        chunk_end = min((chunk_number + 1) * chunk_size, point.position)
        ctx.progress.current_chunk = f"chunk {chunk_number}"
        rows: dict[str, StreamRow] = {}
        lo = hi = None
        with state.transaction():
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
    original.max_age = metadata.max_age
    original.max_count = metadata.max_count
    original.truncate_before = metadata.truncate_before
    meta = _row(state, rows, record.stream)
    meta.meta_number = max(meta.meta_number or 0, record.event_number)
