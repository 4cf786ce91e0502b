"""Chunk execution: rewrite each chunk whose weight is above the threshold without its removable
records, and switch the new version in (its weight then starts again from 0; a skipped chunk keeps
its weight in the scavenge database for a later run). Up to ``threads`` copies are made at once (in worker
processes for big chunks: evdb/scavenge/workers.py); each is fsynced and switched in by the scavenge
thread, in log order, while the next ones are made, and checkpointed when done."""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import os
import time
from dataclasses import dataclass

from evdb.index.durable import fsync_file
from evdb.logs import n0
from evdb.scavenge.chunkscan import DecisionTable
from evdb.scavenge.decisions import Decider
from evdb.scavenge.merger import append_copy, fits_together
from evdb.scavenge.run import ChunkReport, FusedMerge, RunContext, ScavengeStopped, timespan
from evdb.storage import disk
from evdb.storage.chunk import Chunk

__all__ = ["execute_chunks", "should_execute"]


def should_execute(weight: float, threshold: int) -> bool:
    """-1: every chunk; 0: chunks with anything to remove; N > 0: chunks whose weight is above N."""
    return threshold < 0 or weight > threshold


@dataclass
class _Part:
    """One chunk's scavenged copy, made and not yet live."""

    chunk: Chunk  # the version it replaces
    weight: float
    size_after: int  # its copy's file size
    removed: int
    started: float


@dataclass
class _Held:
    """Copies made and not yet switched in, merged into one file (``new``, under a temporary name):
    held while the next copy is made, which joins them when the merging phase would merge it with
    them anyway (its records are then written after theirs, and theirs are not written again)."""

    parts: list[_Part]
    new: Chunk
    synced: bool  # ``new`` is fsynced as it is now
    merge_time: float = 0.0


def execute_chunks(ctx: RunContext, decider: Decider) -> None:
    log, point = ctx.db.log, ctx.point
    weights = ctx.state.weights()
    ctx.progress.weights = weights
    done_through = ctx.state.checkpoint().get("executedThrough", -1)
    eligible = [c for c in log.distinct_chunks() if c.is_completed and c.start_position < point.position]
    chunks = [c for c in eligible if c.start_number > done_through]
    # this phase's own count (accumulation counted its chunks in the same fields): the chunks a stopped
    # run already executed are done, the rest to do
    ctx.progress.chunks_done = len(eligible) - len(chunks)
    ctx.progress.chunks_total = len(eligible)
    ctx.progress.executed_through = done_through
    del eligible  # (it would keep every switched-out version, and its pages, until the phase ends)
    threshold = point.threshold
    decisions = DecisionTable.from_decider(decider)
    # a pipeline: up to ``threads`` copies are made at once (in worker processes, or threads), and
    # while they are, the scavenge thread fsyncs the copy before them and switches it in, in order
    pending: collections.deque[tuple[Chunk, float, concurrent.futures.Future | None]] = collections.deque()
    # held here only until they are handed out: an old version's file is freed (its pages dropped, its
    # blocks released) as soon as it is switched out, not all at once at the end of the phase
    upcoming = collections.deque(chunks)
    del chunks
    held: _Held | None = None
    ctx.throttle.mark()
    with (
        concurrent.futures.ThreadPoolExecutor(
            max_workers=ctx.threads, thread_name_prefix="evdb-scavenge"
        ) as pool,
        concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="evdb-scavenge-free"
        ) as freeing,
    ):

        def fill() -> None:
            while len(pending) < ctx.threads and upcoming:
                chunk = upcoming.popleft()
                weight = sum(weights.get(n, 0.0) for n in range(chunk.start_number, chunk.end_number + 1))
                future = None
                if should_execute(weight, threshold) and not ctx.stop.is_set():
                    future = pool.submit(_copy, ctx, decisions, chunk, weight)
                else:
                    _remove_handoff(_handoff_of(ctx, chunk))
                pending.append((chunk, weight, future))

        def release() -> None:
            """Switch the held copies in; the versions they replace are let go on another thread
            (the last reference to an unlinked file frees its pages and blocks, tens of
            milliseconds for a big chunk)."""
            nonlocal held
            if held is None:
                return
            group, held = held, None
            switched = _switch_group(ctx, group)
            freeing.submit(_let_go, [part.chunk for part in group.parts])
            with ctx.state.transaction() as state:
                if switched:  # executed: their weights start again from 0 (a skipped chunk keeps its own)
                    for part in group.parts:
                        state.reset_weights(part.chunk.start_number, part.chunk.end_number)
                state.update_checkpoint(executedThrough=group.parts[-1].chunk.end_number)
            del group

        try:
            fill()
            while pending:
                ctx.check_stop()
                chunk, weight, future = pending.popleft()
                if future is None:
                    release()
                    _skipped(ctx, chunk, weight, threshold)
                    end_number = chunk.end_number
                    freeing.submit(_let_go, [chunk])
                    del chunk
                    ctx.state.update_checkpoint(executedThrough=end_number)
                    fill()
                    continue
                new, removed, started = future.result()
                del future
                if not ctx.throttle.active:
                    fill()  # the next copy is made while this one is synced and switched in
                part = _Part(chunk, weight, new.file_size, removed, started)
                del chunk
                if held is not None and _joins(ctx, held, new):
                    held = _merge_into(ctx, held, part, new)
                else:
                    release()
                    held = _Held([part], new, synced=False)
                del new, part
                # keep the copy back only when the next copy may join it (the merging phase would
                # merge them); else, or when the next one does not fit, it goes live now
                if not _may_grow(ctx, held, pending):
                    release()
                elif not held.synced:  # its bytes reach the disk while the next copy is made
                    _sync(held)
                # throttled, the next copy starts only after this one's rest: work done during a rest
                # would not be throttled
                fill()
            release()
            ctx.db.log.sync_directory()
        except BaseException:
            if held is not None:
                _discard(held.new)
            _abandon(pending)
            raise


def _may_grow(ctx: RunContext, held: _Held, pending) -> bool:
    """Whether the next copy could join the held ones: merging is on, the next chunk is being
    copied and follows them, and the held copies leave room in a chunk."""
    if not ctx.merging or not pending or held.new.path is None:
        return False
    chunk, _, future = pending[0]
    return (
        future is not None
        and chunk.start_number == held.new.end_number + 1
        and fits_together([held.new], held.new.chunk_size - 1)
    )


def _joins(ctx: RunContext, held: _Held, new: Chunk) -> bool:
    return (
        ctx.merging
        and new.path is not None
        and new.start_number == held.new.end_number + 1
        and fits_together([held.new, new], held.new.chunk_size)
    )


def _merge_into(ctx: RunContext, held: _Held, part: _Part, new: Chunk) -> _Held:
    """The next copy joins the held ones: its records are written after theirs, in their file."""
    started = time.perf_counter()
    first = held.parts[0].chunk
    covered = [p.chunk for p in held.parts] + [part.chunk]
    version = max(c.file_version for c in covered) + 1  # above every version of the chunks it covers
    try:
        merged = append_copy(held.new, new, version)
    except BaseException:
        _discard(new)
        raise
    _discard(new)
    ctx.verified.pop(id(held.new), None)
    ctx.logger.info(
        "SCAVENGING: Merging the scavenged copy of chunk %d into the copy of chunks %d => %d.",
        part.chunk.start_number,
        first.start_number,
        held.new.end_number,
    )
    return _Held(
        [*held.parts, part],
        merged,
        synced=False,
        merge_time=held.merge_time + time.perf_counter() - started,
    )


def _sync(held: _Held) -> None:
    if held.new.path:
        fsync_file(held.new.path)
    held.synced = True


def _discard(new: Chunk) -> None:
    """Remove a copy that will not go live (through the disk seam, as every change to the log's files)."""
    if new.path:
        with contextlib.suppress(OSError):
            disk.current.unlink(new.path)


def _let_go(held: list) -> None:
    held.clear()


def _abandon(pending) -> None:
    """After a stop or a failure: wait for the copies still being made and remove them."""
    for _, _, future in pending:
        if future is None or future.cancel():
            continue
        try:
            new, _, _ = future.result()
        except BaseException:
            continue  # it removed its own file
        _discard(new)


def _skipped(ctx: RunContext, chunk: Chunk, weight: float, threshold: int) -> None:
    name = chunk.file_name
    ctx.logger.info(
        "SCAVENGING: Skipped physical chunk: %s with weight %s. The threshold is %s.",
        name,
        n0(weight),
        threshold,
    )
    ctx.progress.current_chunk = name
    ctx.progress.current_weight = weight
    ctx.progress.chunks.append(
        ChunkReport(chunk.start_number, chunk.end_number, weight, False, chunk.file_size, chunk.file_size)
    )
    ctx.progress.chunks_done += 1
    # no $scavengeChunksCompleted: KurrentDB writes one only for a chunk it scavenged


def _handoff_of(ctx: RunContext, chunk: Chunk) -> str | None:
    """The hand-off this run's accumulation wrote of ``chunk`` (only of the very chunk it read, whose
    checksum it checked), taken from the run's list: it is read once."""
    if ctx.verified.get(id(chunk)) is not chunk:
        return None
    return ctx.handoffs.pop(id(chunk), None)


def _remove_handoff(path: str | None) -> None:
    """(not state: the folder is emptied as each run ends anyway; removed at once to free its space)"""
    if path is not None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def _copy(ctx: RunContext, decisions: DecisionTable, chunk: Chunk, weight: float) -> tuple[Chunk, int, float]:
    """Chunk ``chunk``'s copy without its removable records, not yet fsynced (on a worker thread);
    what this run's accumulation wrote of its records is used when there is such a hand-off (then the
    chunk is not walked again)."""
    started = time.perf_counter()
    name = chunk.file_name
    ctx.progress.current_chunk = name
    ctx.progress.current_weight = weight
    ctx.logger.info(
        "SCAVENGING: Started to scavenge physical chunk: %s with weight %s. %d => %d (%d => %d)",
        name,
        n0(weight),
        chunk.start_number,
        chunk.end_number,
        chunk.start_position,
        chunk.end_position,
    )
    builder = ctx.db.log.new_chunk_builder(chunk.start_number, chunk.end_number)
    verified = ctx.verified.get(id(chunk)) is chunk  # accumulation checked its checksum in this run
    handoff = _handoff_of(ctx, chunk)
    try:
        # aborts the builder when it fails
        new, removed = ctx.workers.copy(
            [chunk], builder, decisions, verify=not verified, sync=False,
            handoffs=[handoff] if handoff is not None else None,
        )  # fmt: skip
    except InterruptedError:
        raise ScavengeStopped() from None
    finally:
        _remove_handoff(handoff)
    return new, removed, started


def _switch_group(ctx: RunContext, held: _Held) -> bool:
    """Make the held copy durable, then the live version of the chunks it covers (in the scavenge
    thread); report each chunk, and the merge when it covers several copies. False when a chunk was
    switched meanwhile and the copy was discarded."""
    log = ctx.db.log
    new = held.new
    originals = [part.chunk for part in held.parts]
    try:
        if not held.synced:
            _sync(held)
        with log.chunk_lock:
            if any(log.chunk_by_number(c.start_number) is not c for c in originals):
                # switched meanwhile (a redaction): nothing removed here this time
                _discard(new)
                for chunk in originals:
                    ctx.logger.warning(
                        "SCAVENGING: Chunk %s changed while it was scavenged; it is left for the next scavenge.",
                        chunk.file_name,
                    )
                return False
            # the folder fsync that makes the old versions' deletions durable is made once, when the
            # phase ends (execute_chunks): a lost deletion leaves an older version the next open deletes
            log.switch_chunk(new, sync_removals=False)
        for chunk in originals:
            ctx.verified.pop(id(chunk), None)  # (its file goes once the last reader lets it go)
        ctx.verified[id(new)] = new  # made by this run: a merge copies it without checking it again
    except BaseException:
        if new.path and os.path.exists(new.path):
            _discard(new)
        raise
    for part in held.parts:
        _report_chunk(ctx, part)
    if len(held.parts) > 1:
        ctx.fused_merges.append(
            FusedMerge(
                held.parts[0].chunk.start_number,
                held.parts[-1].chunk.end_number,
                new.file_name,
                sum(part.size_after for part in held.parts),
                new.file_size,
                held.merge_time,
            )
        )
    return True


def _report_chunk(ctx: RunContext, part: _Part) -> None:
    chunk = part.chunk
    elapsed = time.perf_counter() - part.started
    saved = chunk.file_size - part.size_after
    ctx.progress.bytes_reclaimed += saved
    ctx.progress.records_removed += part.removed
    ctx.progress.chunks.append(
        ChunkReport(chunk.start_number, chunk.end_number, part.weight, True, chunk.file_size, part.size_after)
    )
    ctx.progress.chunks_done += 1
    ctx.emit.chunks_completed(chunk.start_number, chunk.end_number, elapsed, True, saved, "")
    ctx.logger.info(
        "SCAVENGING: Scavenged physical chunk %s: %d records removed, %d bytes saved, took %s.",
        chunk.file_name,
        part.removed,
        saved,
        timespan(elapsed),
    )
    # the work since the last rest: a chunk's own ``elapsed`` began before the rest taken for the chunk
    # before it (the copies overlap), and resting for it made each rest longer than the last
    ctx.throttle.rest_after_work()
