"""Chunk execution in the archive: a scavenge rewrites the archived copies of chunks too, with the same
scavenge point, decisions and weights as the local ones (issue 37).

At the start of chunk execution (before the local chunks, whose execution resets their weights) the
run takes the chunks wholly in the archive (before ``archive.chk``) and before the scavenge point that

- have a weight that passes the run's threshold (the test local execution makes), whether the node
  still has the chunk's file or keeps it in the archive only; or
- are scavenged in a local file while the archived object is not (an upload of another node's
  unscavenged file after this node's earlier run, or an archive older than this code): rewritten even
  when nothing more goes, so the archived copy holds no record the local one dropped.

Each is downloaded and verified, copied without the records the decisions remove (the same copy as a
local chunk's: evdb/scavenge/workers.py), and put over the archived object under the archive's
rewrite lease (evdb/archive/archive_rewrite.py: atomic, checked, one rewrite at a time across the
cluster; the download comes after the lease, so a redaction made meanwhile is kept). A copy that
removes nothing is not uploaded. Then the chunk's marker (``scavenged/chunk-NNNNNN.json``) records the
scavenge point and the object: another node's scavenge to the same point (or an earlier one) skips the
chunk without downloading it, as long as the object is still the one the marker names. The node's read cache forgets the chunk; a chunk kept in the archive
only has its weight reset here (it has no local execution). A stop or a kill between chunks leaves
every object whole; the resumed run finds the rewritten ones with nothing left to remove. When the
step ends, cached chunks another node rewrote are dropped (the cache is keyed by checksum).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from typing import Protocol

from evdb.archive.archive_rewrite import (
    RewriteLease,
    archived_header,
    download_archived,
    mark_scavenged,
    put_rewritten,
    scavenged_to,
    work_folder,
)
from evdb.archive.archiver import chunk_object_name, read_checkpoint
from evdb.archive.cache import ArchiveCache
from evdb.archive.store import ArchiveStore
from evdb.errors import ArchiveUnavailable
from evdb.logs import n0
from evdb.scavenge.chunkscan import DecisionTable
from evdb.scavenge.decisions import Decider
from evdb.scavenge.executor import should_execute
from evdb.scavenge.run import RunContext, ScavengeStopped
from evdb.storage.chunk import ChunkBuilder

__all__ = ["ArchiveAccess", "archive_candidates", "execute_archived"]


class ArchiveAccess(Protocol):
    """What the scavenge uses of the node's archive (evdb/archive/reads.py's ArchiveReads)."""

    @property
    def store(self) -> ArchiveStore: ...

    @property
    def cache(self) -> ArchiveCache: ...


def archive_candidates(ctx: RunContext, store: ArchiveStore) -> dict[int, bool]:
    """The archived chunks this run rewrites: number -> whether it is uploaded even when its copy
    removes nothing (see the module)."""
    log, point = ctx.db.log, ctx.point
    size = log.chunk_size
    archived = read_checkpoint(store).position // size
    last = min(archived, -(-point.position // size))  # numbers below: archived and before the point
    chosen = {
        n: False
        for n, weight in ctx.state.weights().items()
        if 0 <= n < last and weight > 0 and should_execute(weight, point.threshold)
    }
    for chunk in log.distinct_chunks():
        if chunk.start_number >= last:
            break
        if not chunk.is_scavenged or not chunk.is_completed:
            continue
        for n in range(chunk.start_number, min(chunk.end_number + 1, last)):
            if n not in chosen:
                header = archived_header(store, n)
                if header is not None and not header.is_scavenged:
                    chosen[n] = True
    return chosen


def execute_archived(ctx: RunContext, decider: Decider) -> None:
    """Scavenge the archive's copies (see the module). An archive that cannot be reached leaves them to
    the next scavenge, with a warning naming it, and the local work goes on: the weights of chunks in
    the archive only are kept, and a local file scavenged meanwhile is found again by its header (and
    retention keeps it until its archived copy is rewritten)."""
    archive: ArchiveAccess | None = ctx.archive
    log = ctx.db.log
    if archive is None or log.directory is None:
        return
    try:
        _execute_archived(ctx, decider, archive)
    except ArchiveUnavailable as exc:
        if ctx.stop.is_set():
            raise ScavengeStopped() from None
        ctx.logger.warning(
            "SCAVENGING: The archive %s cannot be reached (%s): its chunks are left to the next "
            "scavenge; the local chunks are scavenged now.",
            archive.store.description,
            exc,
        )


def _execute_archived(ctx: RunContext, decider: Decider, archive: ArchiveAccess) -> None:
    log = ctx.db.log
    assert log.directory is not None
    store = archive.store
    chosen = archive_candidates(ctx, store)
    if chosen:
        ctx.logger.info(
            "SCAVENGING: Scavenging %d chunks in the archive %s: %s.",
            len(chosen),
            store.description,
            ", ".join(str(n) for n in sorted(chosen)),
        )
        work = work_folder(log.directory, "scavenge")
        decisions = DecisionTable.from_decider(decider)
        weights = ctx.state.weights()
        lease = RewriteLease(
            store, node=f"{ctx.node or 'a node'} (scavenge of {log.directory})", now=ctx.clock.time
        )
        try:
            for number in sorted(chosen):
                ctx.check_stop()
                lease.acquire(ctx.stop.wait, ctx.logger, f"The scavenge of archived chunk {number}")
                try:
                    done = None if chosen[number] else scavenged_to(store, number)
                    if done is not None and done >= ctx.point.number:
                        ctx.logger.info(
                            "SCAVENGING: Archived chunk %d is scavenged to scavenge point %d already.",
                            number,
                            done,
                        )
                    else:
                        _rewrite(
                            ctx,
                            archive,
                            decisions,
                            number,
                            weights.get(number, 0.0),
                            chosen[number],
                            work,
                            lease,
                        )
                        mark_scavenged(store, number, ctx.point.number, lease.node)
                finally:
                    lease.release()
                if log.chunk_by_number(number) is None:  # in the archive only: no local execution
                    with ctx.state.transaction() as state:
                        state.reset_weights(number, number)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    dropped = archive.cache.drop_stale()
    if dropped:
        ctx.logger.info(
            "SCAVENGING: The archive read cache dropped chunks %s: the archive holds newer copies.",
            ", ".join(str(n) for n in dropped),
        )


def _rewrite(
    ctx: RunContext,
    archive: ArchiveAccess,
    decisions: DecisionTable,
    number: int,
    weight: float,
    always: bool,
    work: str,
    lease: RewriteLease,
) -> None:
    store, name = archive.store, chunk_object_name(number)
    original = download_archived(store, number, ctx.db.log.chunk_size, work)
    try:
        builder = ChunkBuilder(
            work,
            chunk_size=original.chunk_size,
            start_number=number,
            end_number=number,
            version=original.version + 1,
            data_end_position=original.data_end_position,
            temp_suffix=".scavenge.tmp",
        )
        try:
            new, removed = ctx.workers.copy([original], builder, decisions, verify=False, sync=True)
        except InterruptedError:
            raise ScavengeStopped() from None
        try:
            if removed == 0 and not always:
                ctx.logger.info(
                    "SCAVENGING: Archived chunk %d (%s) has nothing to remove: left as it is.", number, name
                )
                return
            put_rewritten(store, number, new, lease)
            archive.cache.drop(number)
            ctx.progress.records_removed += removed
            ctx.logger.info(
                "SCAVENGING: Scavenged archived chunk %d (%s in %s) with weight %s: %d records removed, "
                "%d => %d bytes.",
                number,
                name,
                store.description,
                n0(weight),
                removed,
                original.file_size,
                new.file_size,
            )
        finally:
            new.close()
            if new.path is not None:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(new.path)
    finally:
        original.close()
        if original.path is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(original.path)
