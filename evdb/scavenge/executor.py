"""Chunk execution: rewrite each chunk whose weight is above the threshold without its removable
records, and switch the new version in. Runs on ``threads`` worker threads; each chunk is one unit
of work, checkpointed when done."""

from __future__ import annotations

import concurrent.futures
import os
import time

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
    chunks = [
        c
        for c in log.distinct_chunks()
        if c.is_completed and c.start_position < point.position and c.start_number > done_through
    ]
    ctx.progress.chunks_total = len(chunks) + ctx.progress.chunks_done
    threshold = point.threshold
    decisions = DecisionTable.from_decider(decider)
    with concurrent.futures.ThreadPoolExecutor(
        max_workers=ctx.threads, thread_name_prefix="evdb-scavenge"
    ) as pool:
        for i in range(0, len(chunks), ctx.threads):
            ctx.check_stop()
            batch = chunks[i : i + ctx.threads]
            futures = [
                pool.submit(_execute_one, ctx, decisions, chunk, weights, threshold) for chunk in batch
            ]
            failures = []
            for future in futures:
                try:
                    future.result()
                except BaseException as exc:
                    failures.append(exc)
            if failures:
                raise failures[0]
            ctx.state.update_checkpoint(executedThrough=batch[-1].end_number)


def _execute_one(
    ctx: RunContext, decisions: DecisionTable, chunk: Chunk, weights: dict[int, float], threshold: int
) -> None:
    started = time.perf_counter()
    weight = sum(weights.get(n, 0.0) for n in range(chunk.start_number, chunk.end_number + 1))
    name = chunk.file_name
    ctx.progress.current_chunk = name
    ctx.progress.current_weight = weight
    if not should_execute(weight, threshold):
        ctx.logger.info(
            "SCAVENGING: Skipped physical chunk: %s with weight %s. The threshold is %s.",
            name,
            weight,
            threshold,
        )
        ctx.progress.chunks.append(
            ChunkReport(chunk.start_number, chunk.end_number, weight, False, chunk.file_size, chunk.file_size)
        )
        ctx.progress.chunks_done += 1
        ctx.emit.chunks_completed(chunk.start_number, chunk.end_number, 0.0, False, 0, "")
        return
    ctx.logger.info(
        "SCAVENGING: Started to scavenge physical chunk: %s with weight %s. %d => %d (%d => %d)",
        name,
        weight,
        chunk.start_number,
        chunk.end_number,
        chunk.start_position,
        chunk.end_position,
    )
    log = ctx.db.log
    builder = log.new_chunk_builder(chunk.start_number, chunk.end_number)
    try:
        new, removed = ctx.workers.copy([chunk], builder, decisions)  # aborts the builder when it fails
    except InterruptedError:
        raise ScavengeStopped() from None
    with log.chunk_lock:
        if log.chunk_by_number(chunk.start_number) is not chunk:
            # switched meanwhile (a redaction): nothing removed here this time
            if new.path:
                os.unlink(new.path)
            ctx.logger.warning(
                "SCAVENGING: Chunk %s changed while it was scavenged; it is left for the next scavenge.", name
            )
            return
        log.switch_chunk(new)
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
    ctx.throttle.rest_after(elapsed)
