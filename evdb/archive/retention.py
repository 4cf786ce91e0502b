"""Local chunk files leave a node's disk during a scavenge, under the retention policy (issue 37).

``RetainAtLeast: {Days: D, LogicalBytes: B}``: a local chunk file may go only when

- it is completed and wholly before the archive checkpoint (``archive.chk``: uploaded and verified);
- it is outside **both** bounds: its newest record is more than D days old (the node's clock), and at
  least B logical bytes of the log follow its end (to the log's end);
- its archived objects are verified against it: for a file of one chunk as written (not scavenged),
  the object's size and footer checksum (the xxh3-128 of every byte before it) are the local file's
  when the object holds its exact bytes (the archiver's own file, or one its leader sent whole);
  otherwise (another node's file of the same records: its header's chunk id differs) the archived
  chunk is downloaded and checked whole (header: this chunk and chunk size; footer: the checksum of
  every byte) into the read cache, where reads find it next, and its records must be the local
  file's byte for byte; a scavenged or merged file holds fewer records than the archived originals,
  so each archived chunk it covers is downloaded and checked whole;
- every older chunk goes too: the chunks left to the archive are always the log's first ones.

:meth:`Retention.plan` says which files would go (the stats show it); :meth:`Retention.apply`, called by
a scavenge when it has finished its work, deletes them through
:meth:`~evdb.storage.log.TransactionLog.leave_to_archive` (``archived.chk`` first, then the files:
crash-safe) and logs each file deleted. An archive that cannot be reached deletes nothing (a warning
says so) and the scavenge's result is not changed by it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from evdb.archive.archiver import Archiver, archived_as, chunk_object_name, read_checkpoint
from evdb.archive.reads import ArchiveReads
from evdb.archive.store import ArchiveStore
from evdb.clock import TICKS_PER_SECOND, Clock
from evdb.errors import ArchiveError, ArchiveUnavailable
from evdb.storage.chunk import HEADER_SIZE, Chunk
from evdb.storage.log import TransactionLog

__all__ = ["PANEL_SECONDS", "Retention", "RetentionPlan", "newest_timestamp"]

_DAY_TICKS = 24 * 3600 * TICKS_PER_SECOND
#: how often the stats' archive panel asks the archive (its checkpoint) at most
PANEL_SECONDS = 10.0


@dataclass(frozen=True)
class RetentionPlan:
    """The local chunk files outside the policy and in the archive (not yet checked against it)."""

    archive_checkpoint: int
    chunks: tuple[Chunk, ...]

    @property
    def bytes(self) -> int:
        return sum(c.file_size for c in self.chunks)


def newest_timestamp(chunk: Chunk) -> int | None:
    """The timestamp (ticks) of the chunk's last record, or None when it holds none."""
    offset = chunk.physical_end
    if offset <= 0:
        return None
    record, _ = chunk.read_before(offset)
    return record.timestamp


def same_records(archived: Chunk, local: Chunk) -> bool:
    """Whether two unscavenged files of one chunk hold the same records, byte for byte (their headers'
    chunk ids differ from node to node)."""
    end = local.physical_end
    return (
        archived.physical_end == end
        and archived.data_end_position == local.data_end_position
        and memoryview(archived.buffer)[HEADER_SIZE : HEADER_SIZE + end]
        == memoryview(local.buffer)[HEADER_SIZE : HEADER_SIZE + end]
    )


def _records_in(chunk: Chunk, number: int) -> int:
    """How many records of logical chunk ``number`` the completed ``chunk`` holds (its position map;
    a chunk as written, without one, is walked by the scavenge's frame scan)."""
    positions, _ = chunk.posmap_arrays()
    if not chunk.is_scavenged and not len(positions):
        from evdb.scavenge.chunkscan import record_table  # (numpy over the whole chunk)

        positions = record_table(chunk, verify=False, streams=False).positions
    size = chunk.chunk_size
    first, last = np.searchsorted(positions, [number * size, (number + 1) * size])
    return int(last - first)


@dataclass
class Retention:
    """The policy of ``RetainAtLeast`` (``days``, ``logical_bytes``) over the archive ``reads`` reads."""

    reads: ArchiveReads
    days: int
    logical_bytes: int
    clock: Clock
    logger: logging.Logger
    #: (monotonic time, log end, the archive's part of the panel) of the last look (see panel)
    _panel_cache: tuple[float, int, dict[str, Any]] | None = field(default=None, init=False, repr=False)

    @property
    def store(self) -> ArchiveStore:
        return self.reads.store

    def outside(self, chunk: Chunk, log_end: int, now_ticks: int) -> bool:
        """Whether ``chunk`` is outside both bounds of the policy (the edges: exactly D days old or
        exactly B bytes before the end is outside)."""
        if log_end - chunk.end_position < self.logical_bytes:
            return False
        newest = newest_timestamp(chunk)
        return newest is None or newest <= now_ticks - self.days * _DAY_TICKS

    def plan(self, log: TransactionLog) -> RetentionPlan:
        """The local files that may go, oldest first (reads the archive checkpoint: ArchiveError)."""
        checkpoint = read_checkpoint(self.store).position
        now, end = self.clock.ticks(), log.committed
        chunks: list[Chunk] = []
        for chunk in log.distinct_chunks():
            if not chunk.is_completed or chunk.end_position > checkpoint or not self.outside(chunk, end, now):
                break
            chunks.append(chunk)
        return RetentionPlan(checkpoint, tuple(chunks))

    def panel(self, log: TransactionLog, archiver: Archiver | None = None) -> dict[str, Any]:
        """The archive's figures for a node's stats (``es.archive``; the dashboard's archive panel):
        local against archived bytes, the archive checkpoint and what the next scavenge would free
        (files not yet checked against the archive); on the archiver node (``archiver`` given) its own
        figures too, ``archiver`` (:meth:`Archiver.figures`: its upload lag). The archive is asked at
        most every ``PANEL_SECONDS`` (the stats are polled); when it cannot be reached,
        ``archiveError`` says why; on the archiver node it is asked again as soon as the archiver moved
        the checkpoint, so the node's figures never lag its own archiver's."""
        now = self.clock.monotonic()
        cached = self._panel_cache
        own = archiver.figures() if archiver is not None else None
        moved = (
            own is not None
            and cached is not None
            and own["checkpoint"] >= 0
            and own["checkpoint"] != cached[2].get("archiveCheckpoint")
        )
        if cached is None or now - cached[0] >= PANEL_SECONDS or cached[1] != log.committed or moved:
            try:
                plan = self.plan(log)
                found: dict[str, Any] = {
                    "archiveCheckpoint": plan.archive_checkpoint,
                    "nextScavengeFrees": {"chunkFiles": len(plan.chunks), "bytes": plan.bytes},
                }
            except ArchiveError as exc:
                found = {"archiveCheckpoint": -1, "archiveError": str(exc)}
            cached = self._panel_cache = (now, log.committed, found)
        local = log.distinct_chunks()
        cache = self.reads.cache
        return {
            "location": self.store.description,
            "retainAtLeast": {"days": self.days, "logicalBytes": self.logical_bytes},
            "localChunkFiles": len(local),
            "localBytes": sum(c.file_size for c in local),
            "localLogicalBytes": log.committed - log.local_start,
            "archivedOnlyChunks": log.archived_chunks,
            "archivedLogicalBytes": max(cached[2]["archiveCheckpoint"], 0),
            "readCache": {
                "bytes": cache.cached_bytes,
                "downloads": cache.stats.downloads,
                "hits": cache.stats.hits,
            },
            **cached[2],
            **({"archiver": own} if own is not None else {}),
        }

    def _verified(self, chunk: Chunk) -> bool:
        """Whether the archive holds ``chunk``'s records, checked (see the module); a warning names
        the file and the object when not."""
        as_written = not chunk.is_scavenged and chunk.footer is not None
        for number in range(chunk.start_number, chunk.end_number + 1):
            name = chunk_object_name(number)
            if as_written:
                assert chunk.footer is not None
                if archived_as(self.store, name) == (chunk.file_size, chunk.footer.checksum):
                    continue  # the archiver's own file, or one sent whole by the leader: the same bytes
            # downloaded and verified whole (or found so); a file as written on another node differs
            # from the archiver's in its header's chunk id only: its records must be the archived ones
            try:
                archived = self.reads.cache.chunk(number)
                if as_written:
                    # (a copy a scavenge or a redaction rewrote has the next version and fewer or
                    # blanked records: evdb/archive/archive_rewrite.py)
                    if same_records(archived, chunk) or archived.version > chunk.version:
                        continue
                    problem = "its records differ from the local file's"
                else:
                    behind = _records_in(archived, number) - _records_in(chunk, number)
                    if behind <= 0:
                        continue
                    # (an upload of another node's unscavenged file after this node's scavenge)
                    problem = (
                        f"it holds {behind} more records than this file: records this node's scavenge "
                        "removed (the next scavenge rewrites it)"
                    )
            except ArchiveUnavailable:
                raise
            except ArchiveError as exc:  # damaged, or missing
                problem = str(exc)
            self.logger.warning(
                "Retention: chunk file %s stays: the archived %s in %s does not match it (%s)",
                chunk.path,
                name,
                self.store.description,
                problem,
            )
            return False
        return True

    def apply(self, log: TransactionLog) -> list[str]:
        """Delete the local files the policy lets go (see the module); the paths deleted."""
        try:
            plan = self.plan(log)
            verified = []
            for chunk in plan.chunks:
                if not self._verified(chunk):
                    break
                verified.append(chunk)
        except ArchiveError as exc:
            self.logger.warning("Retention: no chunk file deleted this time: %s", exc)
            return []
        if not verified:
            return []
        with log.chunk_lock:  # no redaction switches a chunk meanwhile
            if any(log.chunk_by_number(c.start_number) is not c for c in verified):
                self.logger.info("Retention: chunks changed while they were checked; deleting none this time")
                return []
            deleted = log.leave_to_archive(verified[-1].end_number + 1)
        for chunk in verified:
            self.logger.info(
                "Retention: deleted chunk file %s (chunks %d-%d, %d bytes): read from the archive %s from now on",
                chunk.path,
                chunk.start_number,
                chunk.end_number,
                chunk.file_size,
                self.store.description,
            )
        return deleted
