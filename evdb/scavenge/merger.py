"""Chunk merging: neighbouring completed chunks whose data fits in one chunk are copied into one
file covering their range (about one chunk size), so many small scavenged chunks do not stay many
small files. Greedy, in passes, until a pass merges nothing. Off with DisableScavengeMerging."""

from __future__ import annotations

import os
import time

from evdb.scavenge.run import ChunkReport, RunContext, ScavengeStopped
from evdb.storage.chunk import Chunk

__all__ = ["merge_chunks", "plan_merges"]


def plan_merges(chunks: list[Chunk], chunk_size: int) -> list[list[Chunk]]:
    """Groups of two or more neighbours whose data together fits in one chunk."""
    groups: list[list[Chunk]] = []
    current: list[Chunk] = []
    size = 0
    for chunk in chunks:
        data = chunk.physical_end + 16 * (chunk.footer.posmap_count if chunk.footer else 0)
        if current and size + data <= chunk_size:
            current.append(chunk)
            size += data
            continue
        if len(current) > 1:
            groups.append(current)
        current, size = [chunk], data
    if len(current) > 1:
        groups.append(current)
    return groups


def merge_chunks(ctx: RunContext) -> None:
    log, point = ctx.db.log, ctx.point
    while True:
        ctx.check_stop()
        chunks = [c for c in log.distinct_chunks() if c.is_completed and c.start_position < point.position]
        groups = plan_merges(chunks, log.chunk_size)
        if not groups:
            return
        for group in groups:
            ctx.check_stop()
            _merge(ctx, group)


def _merge(ctx: RunContext, group: list[Chunk]) -> None:
    started = time.perf_counter()
    log = ctx.db.log
    first, last = group[0], group[-1]
    builder = log.new_chunk_builder(first.start_number, last.end_number, temp_suffix=".merge.scavenge.tmp")
    verified = all(ctx.verified.get(id(c)) is c for c in group)  # read or written whole by this run
    try:
        # aborts the builder when it fails
        new, _ = ctx.workers.copy(group, builder, None, verify=not verified)
    except InterruptedError:
        raise ScavengeStopped() from None
    before = sum(c.file_size for c in group)
    with log.chunk_lock:
        if any(log.chunk_by_number(c.start_number) is not c for c in group):
            if new.path:
                os.unlink(new.path)
            return
        log.switch_chunk(new)
    for chunk in group:
        ctx.verified.pop(id(chunk), None)
    ctx.verified[id(new)] = new
    elapsed = time.perf_counter() - started
    saved = before - new.file_size
    ctx.progress.bytes_reclaimed += saved
    ctx.progress.chunks.append(
        ChunkReport(first.start_number, last.end_number, 0.0, True, before, new.file_size, True)
    )
    ctx.logger.info(
        "SCAVENGING: Merged chunks %d => %d into %s (%d bytes saved).",
        first.start_number,
        last.end_number,
        new.file_name,
        saved,
    )
    ctx.emit.merge_completed(first.start_number, last.end_number, elapsed, saved, True, "")
    ctx.throttle.rest_after(elapsed)
