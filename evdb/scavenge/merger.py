"""Chunk merging: neighbouring completed chunks whose data fits in one chunk are copied into one
file covering their range (about one chunk size), so many small scavenged chunks do not stay many
small files. Greedy, in passes, until a pass merges nothing. Off with DisableScavengeMerging."""

from __future__ import annotations

import os
import time
import uuid

import numpy as np
import xxhash

from evdb.scavenge.run import ChunkReport, FusedMerge, RunContext, ScavengeStopped
from evdb.storage import disk
from evdb.storage.chunk import FOOTER_SIZE, HEADER_SIZE, Chunk, ChunkFooter, ChunkHeader

__all__ = ["append_copy", "fits_together", "merge_chunks", "plan_merges"]

_BLOCK = 8 << 20  # bytes of a copy hashed at a time by append_copy


def _data_size(chunk: Chunk) -> int:
    """What a chunk brings to a merge: its records and its position map entries."""
    return chunk.physical_end + 16 * (chunk.footer.posmap_count if chunk.footer else 0)


def fits_together(chunks: list[Chunk], chunk_size: int) -> bool:
    """Whether these neighbours' data fits in one chunk (the rule :func:`plan_merges` applies)."""
    return sum(_data_size(c) for c in chunks) <= chunk_size


def plan_merges(chunks: list[Chunk], chunk_size: int) -> list[list[Chunk]]:
    """Groups of two or more neighbours whose data together fits in one chunk."""
    groups: list[list[Chunk]] = []
    current: list[Chunk] = []
    size = 0
    for chunk in chunks:
        data = _data_size(chunk)
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


def append_copy(head: Chunk, tail: Chunk, version: int) -> Chunk:
    """Merge ``tail`` into ``head``, in ``head``'s own file: two scavenged copies this run made
    (under their temporary names, not yet live), ``tail`` covering the chunks right after ``head``'s.
    ``tail``'s records are written after ``head``'s, then the joint position map, the footer and a
    header for the whole range (as ``version``); ``head``'s records are not copied again, only read
    for the new checksum. Returns the merged chunk, under ``head``'s temporary name and not fsynced;
    ``head`` must not be used afterwards. A crash midway leaves a temporary file, deleted at open."""
    assert head.path is not None and head.footer is not None and tail.footer is not None
    if tail.start_number != head.end_number + 1 or tail.chunk_size != head.chunk_size:
        raise ValueError(f"{tail.file_name} does not follow {head.file_name}")
    head_size, tail_size = head.physical_end, tail.physical_end
    head_positions, head_offsets = head.posmap_arrays()
    tail_positions, tail_offsets = tail.posmap_arrays()
    count = len(head_offsets) + len(tail_offsets)
    posmap = (
        np.concatenate((head_positions, tail_positions)).astype("<i8").tobytes()
        + np.concatenate((head_offsets, tail_offsets + head_size)).astype("<i8").tobytes()
    )
    header = ChunkHeader(
        head.chunk_size, head.start_number, tail.end_number, True, uuid.uuid4().bytes, version
    ).encode()
    footer = ChunkFooter(head_size + tail_size, tail.data_end_position, count)
    tail_data = memoryview(tail.buffer)[HEADER_SIZE : HEADER_SIZE + tail_size]
    head_data = memoryview(head.buffer)[HEADER_SIZE : HEADER_SIZE + head_size]
    try:
        # a block at a time, each block's pages let go behind it: the node's RSS holds a block of the
        # two copies, not both, and xxhash (which holds the GIL) lets the appends in between blocks
        hasher = xxhash.xxh3_128(header)
        for start in range(0, head_size, _BLOCK):
            hasher.update(head_data[start : start + _BLOCK])
            head.drop_pages(HEADER_SIZE + start, _BLOCK)
        end = HEADER_SIZE + head_size + tail_size
        fd = disk.current.open(head.path, os.O_WRONLY)
        try:
            for start in range(0, tail_size, _BLOCK):
                block = tail_data[start : start + _BLOCK]
                hasher.update(block)
                disk.write_all(fd, block, HEADER_SIZE + head_size + start)
                block.release()
                tail.drop_pages(HEADER_SIZE + start, _BLOCK)
            hasher.update(posmap)
            tail_bytes = footer.encode_without_checksum()
            hasher.update(tail_bytes)
            tail_bytes += hasher.digest()
            disk.write_all(fd, posmap + tail_bytes, end)
            disk.current.ftruncate(fd, end + len(posmap) + FOOTER_SIZE)
            disk.write_all(fd, header, 0)
        finally:
            os.close(fd)
    finally:
        tail_data.release()
        head_data.release()
    return Chunk.open(head.path, verify=False)


def merge_chunks(ctx: RunContext) -> None:
    log, point = ctx.db.log, ctx.point
    for fused in ctx.fused_merges:  # merged as chunk execution switched them in: reported here
        _report(ctx, fused)
    ctx.fused_merges.clear()
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
    _report(
        ctx, FusedMerge(first.start_number, last.end_number, new.file_name, before, new.file_size, elapsed)
    )
    ctx.throttle.rest_after(elapsed)


def _report(ctx: RunContext, merge: FusedMerge) -> None:
    saved = merge.size_before - merge.size_after
    ctx.progress.bytes_reclaimed += saved
    ctx.progress.chunks.append(
        ChunkReport(
            merge.start_number, merge.end_number, 0.0, True, merge.size_before, merge.size_after, True
        )
    )
    ctx.logger.info(
        "SCAVENGING: Merged chunks %d => %d into %s (%d bytes saved).",
        merge.start_number,
        merge.end_number,
        merge.file_name,
        saved,
    )
    ctx.emit.merge_completed(merge.start_number, merge.end_number, merge.elapsed, saved, True, "")
