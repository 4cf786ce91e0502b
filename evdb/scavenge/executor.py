"""Chunk execution: rewrite each chunk whose weight is above the threshold without its removable
records, and switch the new version in. Up to ``threads`` copies are made at once (in worker
processes for big chunks: evdb/scavenge/workers.py); each is fsynced and switched in by the scavenge
thread, in log order, while the next ones are made, and checkpointed when done."""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import os
import time

from evdb.index.durable import fsync_file
from evdb.scavenge.chunkscan import DecisionTable
from evdb.scavenge.decisions import Decider
from evdb.scavenge.run import ChunkReport, RunContext, ScavengeStopped, timespan
from evdb.storage.chunk import Chunk

__all__ = ["execute_chunks", "should_execute"]


def should_execute(weight: float, threshold: int) -> bool:
    """-1: every chunk; 0: chunks with anything to remove; N > 0: chunks whose weight is above N."""
    return threshold < 0 or weight > threshold


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
    threshold = point.threshold
    decisions = DecisionTable.from_decider(decider)
    # a pipeline: up to ``threads`` copies are made at once (in worker processes, or threads), and
    # while they are, the scavenge thread fsyncs the copy before them and switches it in, in order
    pending: collections.deque[tuple[Chunk, float, concurrent.futures.Future | None]] = collections.deque()
    # held here only until they are handed out: an old version's file is freed (its pages dropped, its
    # blocks released) as soon as it is switched out, not all at once at the end of the phase
    upcoming = collections.deque(chunks)
    del chunks
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
                pending.append((chunk, weight, future))

        try:
            fill()
            while pending:
                ctx.check_stop()
                chunk, weight, future = pending.popleft()
                if future is None:
                    _skipped(ctx, chunk, weight, threshold)
                else:
                    new, removed, started = future.result()
                    if not ctx.throttle.active:
                        # the next copy is made while this one is synced and switched in; throttled,
                        # only after this one's rest (work done during a rest is not throttled)
                        fill()
                    _switch_in(ctx, chunk, weight, new, removed, started)
                    del new
                end_number = chunk.end_number
                # the switched-out version is let go on another thread: the last reference to an
                # unlinked file frees its pages and blocks, tens of milliseconds for a big chunk
                freeing.submit(_let_go, [chunk])
                del chunk, future
                ctx.state.update_checkpoint(executedThrough=end_number)
                fill()
        except BaseException:
            _abandon(pending)
            raise


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
        if new.path:
            with contextlib.suppress(OSError):
                os.unlink(new.path)


def _skipped(ctx: RunContext, chunk: Chunk, weight: float, threshold: int) -> None:
    name = chunk.file_name
    ctx.logger.info(
        "SCAVENGING: Skipped physical chunk: %s with weight %s. The threshold is %s.",
        name,
        weight,
        threshold,
    )
    ctx.progress.current_chunk = name
    ctx.progress.current_weight = weight
    ctx.progress.chunks.append(
        ChunkReport(chunk.start_number, chunk.end_number, weight, False, chunk.file_size, chunk.file_size)
    )
    ctx.progress.chunks_done += 1
    ctx.emit.chunks_completed(chunk.start_number, chunk.end_number, 0.0, False, 0, "")


def _copy(ctx: RunContext, decisions: DecisionTable, chunk: Chunk, weight: float) -> tuple[Chunk, int, float]:
    """Chunk ``chunk``'s copy without its removable records, not yet fsynced (on a worker thread)."""
    started = time.perf_counter()
    name = chunk.file_name
    ctx.progress.current_chunk = name
    ctx.progress.current_weight = weight
    ctx.logger.info(
        "SCAVENGING: Started to scavenge physical chunk: %s with weight %s. %d => %d (%d => %d)",
        name,
        weight,
        chunk.start_number,
        chunk.end_number,
        chunk.start_position,
        chunk.end_position,
    )
    builder = ctx.db.log.new_chunk_builder(chunk.start_number, chunk.end_number)
    verified = ctx.verified.get(id(chunk)) is chunk  # accumulation checked its checksum in this run
    try:
        # aborts the builder when it fails
        new, removed = ctx.workers.copy([chunk], builder, decisions, verify=not verified, sync=False)
    except InterruptedError:
        raise ScavengeStopped() from None
    return new, removed, started


def _switch_in(
    ctx: RunContext, chunk: Chunk, weight: float, new: Chunk, removed: int, started: float
) -> None:
    """Make the copy durable, then the live version of ``chunk`` (in the scavenge thread)."""
    log = ctx.db.log
    name = chunk.file_name
    try:
        if new.path:
            fsync_file(new.path)
        with log.chunk_lock:
            if log.chunk_by_number(chunk.start_number) is not chunk:
                # switched meanwhile (a redaction): nothing removed here this time
                if new.path:
                    os.unlink(new.path)
                ctx.logger.warning(
                    "SCAVENGING: Chunk %s changed while it was scavenged; it is left for the next scavenge.",
                    name,
                )
                return
            log.switch_chunk(new)
        ctx.verified.pop(id(chunk), None)  # (its file goes once the last reader lets it go)
        ctx.verified[id(new)] = new  # made by this run: a merge copies it without checking it again
    except BaseException:
        if new.path and os.path.exists(new.path):
            with contextlib.suppress(OSError):
                os.unlink(new.path)
        raise
    elapsed = time.perf_counter() - started
    saved = chunk.file_size - new.file_size
    ctx.progress.bytes_reclaimed += saved
    ctx.progress.records_removed += removed
    ctx.progress.chunks.append(
        ChunkReport(chunk.start_number, chunk.end_number, weight, True, chunk.file_size, new.file_size)
    )
    ctx.progress.chunks_done += 1
    ctx.emit.chunks_completed(chunk.start_number, chunk.end_number, elapsed, True, saved, "")
    ctx.logger.info(
        "SCAVENGING: Scavenged physical chunk %s: %d records removed, %d bytes saved, took %s.",
        name,
        removed,
        saved,
        timespan(elapsed),
    )
    # the work since the last rest: a chunk's own ``elapsed`` began before the rest taken for the chunk
    # before it (the copies overlap), and resting for it made each rest longer than the last
    ctx.throttle.rest_after_work()
