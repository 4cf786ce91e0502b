"""The transaction log: an ordered set of chunks, appended to by one writer.

Positions are global and logical: ``chunk number × chunk size + offset``. The log answers reads by
position for any committed record, whichever chunk version holds it now, and offers the primitives
that scavenge, merge, truncation and redaction build on: completing the active chunk, switching a new
chunk version in atomically, and truncating the tail at start.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterator
from typing import Protocol

from evdb.errors import ArchiveUnavailable, CorruptedFile, EventTooLarge
from evdb.storage import disk
from evdb.storage import records as rec
from evdb.storage.checkpoints import Checkpoint, Checkpoints
from evdb.storage.chunk import (
    Chunk,
    ChunkBuilder,
    chunk_file_name,
    fsync_dir,
)
from evdb.storage.recovery import FileInfo, check_checkpoints, choose_files, find_end, scan_files
from evdb.storage.truncation import cut_completed_chunk, epoch_before

__all__ = ["ARCHIVED_CHECKPOINT", "ArchivedChunks", "TransactionLog"]

#: the file that says which chunks are in the archive only: every chunk before the position it holds
#: (a chunk boundary) has left this node's disk, or is leaving it (a deletion a crash interrupted is
#: finished at the next open); it is written, synced, before the first file of a deletion is unlinked
ARCHIVED_CHECKPOINT = "archived.chk"


class ArchivedChunks(Protocol):
    """Where the log reads the chunks it keeps in the archive only (evdb/archive/reads.py)."""

    def chunk(self, number: int, *, wait: bool = True) -> Chunk:
        """Logical chunk ``number``, completed and verified; ArchiveUnavailable when it cannot be had.
        ``wait`` false: ArchiveUnavailable at once when the chunk must be downloaded first (the
        download starts, so a later try finds it)."""
        ...


# After recovery, this many bytes past the end are zeroed, so that a torn append that happened to
# leave whole frames behind can never be picked up by a later recovery.
_STALE_TAIL_CHECK = 1 << 20

_log = logging.getLogger("evdb.storage")


class TransactionLog:
    """Chunks plus checkpoints. ``committed`` is the durable end that readers may see."""

    def __init__(
        self, directory: str | None, chunk_size: int, checkpoints: Checkpoints, logger: logging.Logger
    ):
        self.directory = directory
        self.chunk_size = chunk_size
        self.checkpoints = checkpoints
        self.logger = logger
        #: index: logical chunk number -> the local chunk covering it; None before ``archived_chunks``
        self._chunks: list[Chunk | None] = []
        self._lock = threading.RLock()  # guards the chunk table; held briefly
        self.chunk_lock = threading.Lock()  # held by scavenge and redaction while they switch chunks
        self.committed = 0
        self.truncated_to: int | None = None  # set when the open cut the log (index must be checked)
        self.archived = Checkpoint(
            os.path.join(directory, ARCHIVED_CHECKPOINT) if directory is not None else None, 0
        )
        #: how many chunks (from 0) are in the archive only; read before a chunk's slot, set before it
        self.archived_chunks = 0
        #: where those are read (set by the node when its archive is on; None: such reads fail clearly)
        self.archive: ArchivedChunks | None = None
        self._no_archive_waits = threading.local()  # see without_archive_waits

    # -- opening ---------------------------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        directory: str | None,
        *,
        chunk_size: int,
        verify: bool = True,
        logger: logging.Logger | None = None,
    ) -> TransactionLog:
        if directory is not None:
            os.makedirs(directory, exist_ok=True)
        log = cls(directory, chunk_size, Checkpoints(directory), logger or _log)
        try:
            log._open_chunks(verify)
        except BaseException:
            log.close()
            raise
        return log

    def _open_chunks(self, verify: bool) -> None:
        """Open the chunks, find the end of the log and check every checkpoint against them, all
        without changing a file; only then clear leftovers away, cut the log to ``truncate.chk`` and
        make the end durable. A damaged checkpoint is refused naming its file and value, and the
        folder is left exactly as it was (so the node can be started again once it is fixed)."""
        if self.directory is None:
            self._chunks = [Chunk.create_active(None, self.chunk_size, 0)]
            self.committed = 0
            return
        infos, leftovers = scan_files(self.directory, self.chunk_size)
        self.archived_chunks = self._archived_count()
        archived_files = self._archived_files(infos)
        chosen, superseded = choose_files(infos, self.directory, first=self.archived_chunks)
        if self.archived_chunks and not chosen:
            raise CorruptedFile(
                os.path.join(self.directory, chunk_file_name(self.archived_chunks, 0)),
                f"chunk {self.archived_chunks} is missing: {ARCHIVED_CHECKPOINT} leaves the chunks before it "
                "to the archive, and this node must keep the rest",
            )
        chunks = []
        for i, info in enumerate(chosen):
            last = i == len(chosen) - 1
            chunk = Chunk.open(info.path, verify=verify, writable=last)
            chunks.append(chunk)
            if not chunk.is_completed and not last:
                raise CorruptedFile(info.path, "only the last chunk may be incomplete")
        self._install(chunks)
        end = find_end(self, verify)
        check_checkpoints(self, end)
        # -- nothing has changed on disk up to here ---------------------------------------------------
        for path in leftovers:
            self.logger.info("Removing leftover temporary file %s", path)
            disk.current.unlink(path)
        for path in superseded:
            self.logger.info("Removing superseded chunk file %s", path)
            disk.current.unlink(path)
        for path in archived_files:
            self.logger.info("Removing chunk file %s: in the archive only (%s)", path, ARCHIVED_CHECKPOINT)
            disk.current.unlink(path)
        self.checkpoints.create_missing()
        # also makes durable the names a crash (kill -9) may have left only in the page cache
        fsync_dir(self.directory)
        truncate = self.checkpoints.truncate.value
        if truncate >= 0:
            self._truncate(truncate)
            end = find_end(self, verify)
        self._finish_recovery(end)

    def _archived_count(self) -> int:
        """The number of chunks ``archived.chk`` leaves to the archive (checked: a chunk boundary)."""
        value = self.archived.value
        if value < 0 or value % self.chunk_size:
            raise CorruptedFile(
                self.archived.path or ARCHIVED_CHECKPOINT,
                f"position {value} is not a chunk boundary of chunks of {self.chunk_size} bytes",
            )
        return value // self.chunk_size

    def _archived_files(self, infos: list[FileInfo]) -> list[str]:
        """The files of chunks in the archive only (a deletion a crash interrupted): taken out of
        ``infos``; a file reaching across the boundary is refused (a deletion removes whole files)."""
        first = self.archived_chunks
        gone = [i for i in infos if i.end < first]
        for info in infos:
            if info.start < first <= info.end:
                raise CorruptedFile(
                    info.path,
                    f"holds chunks {info.start}-{info.end}, across {ARCHIVED_CHECKPOINT}'s chunk {first}",
                )
        infos[:] = [i for i in infos if i.end >= first]
        return [i.path for i in gone]

    def _install(self, chunks: list[Chunk]) -> None:
        table: list[Chunk | None] = [None] * self.archived_chunks
        for chunk in chunks:
            table.extend([chunk] * (chunk.end_number - chunk.start_number + 1))
        self._chunks = table

    def _finish_recovery(self, end: int) -> None:
        """Make the end found by :meth:`_find_end` the log's end on disk: start the next chunk after a
        completed last one, zero what lies after the end, and move the checkpoints to it."""
        if not self._chunks:
            self._chunks = [Chunk.create_active(self.directory, self.chunk_size, 0)]
        last = self.active_chunk
        if last.is_completed:
            self._chunks.append(Chunk.create_active(self.directory, self.chunk_size, last.end_number + 1))
        else:
            offset = end - last.start_position
            last.zero_tail(offset, min(last.chunk_size, offset + _STALE_TAIL_CHECK))
        if end != self.checkpoints.writer.value:
            self.checkpoints.writer.write(end)
        if self.checkpoints.chaser.value > end:
            self.checkpoints.chaser.write(end)
        self.committed = end

    def _truncate(self, position: int) -> None:
        """Cut the log at ``position`` (a record boundary): everything from there on is removed."""
        self.logger.warning("Truncating the log to position %d (truncate.chk)", position)
        if self.is_archived_only(position - 1):
            raise CorruptedFile(
                self.checkpoints.truncate.path or "truncate.chk",
                f"position {position} is inside the chunks this node keeps in the archive only "
                f"({ARCHIVED_CHECKPOINT}: {self.archived.value})",
            )
        # read before the cut removes the later epochs
        last_epoch = epoch_before(self.chunk_for, self.checkpoints.epoch.value, position)
        keep: list[Chunk] = []
        for chunk in self.distinct_chunks():
            if chunk.start_position >= position:
                chunk.close()
                if chunk.path:
                    self.logger.info("Truncation removes chunk file %s", chunk.path)
                    disk.current.unlink(chunk.path)
                continue
            if not chunk.is_completed:
                # cut the active chunk: zero what lies after the cut so that no scan revives it
                chunk.zero_tail(position - chunk.start_position, chunk.chunk_size)
                keep.append(chunk)
                continue
            if chunk.data_end_position <= position:
                keep.append(chunk)
                continue
            keep.append(
                cut_completed_chunk(chunk, position, self.directory, self.chunk_size, self._rename_into_place)
            )
        if self.directory is not None:
            fsync_dir(self.directory)
        self._install(keep)
        if not keep:  # cut at or before the archive's end: the log goes on after the archived chunks
            self._chunks.append(Chunk.create_active(self.directory, self.chunk_size, self.archived_chunks))
        # _find_end moves the writer past a completed (scavenged) last chunk
        self.checkpoints.writer.write(position)
        if self.checkpoints.chaser.value > position:
            self.checkpoints.chaser.write(position)
        if self.checkpoints.epoch.value != last_epoch:
            self.checkpoints.epoch.write(last_epoch)
        self.checkpoints.truncate.write(-1)
        self.truncated_to = position

    # -- state -----------------------------------------------------------------------------------------
    @property
    def active_chunk(self) -> Chunk:
        chunk = self._chunks[-1]
        assert chunk is not None  # the last chunk is never in the archive only
        return chunk

    @property
    def has_chunks(self) -> bool:
        return bool(self._chunks)

    @property
    def end(self) -> int:
        """Position where the next record goes (may be ahead of ``committed`` inside a write group)."""
        last = self.active_chunk
        return last.start_position + last.physical_end

    def distinct_chunks(self) -> list[Chunk]:
        """The local chunks, in log order (none of those in the archive only)."""
        with self._lock:
            out: list[Chunk] = []
            for chunk in self._chunks:
                if chunk is not None and (not out or out[-1] is not chunk):
                    out.append(chunk)
            return out

    def chunk_for(self, position: int) -> Chunk | None:
        """The local chunk holding ``position`` (None past the log, or in the archive only)."""
        number = position // self.chunk_size
        chunks = self._chunks
        return chunks[number] if 0 <= number < len(chunks) else None

    def chunk_by_number(self, number: int) -> Chunk | None:
        chunks = self._chunks
        return chunks[number] if 0 <= number < len(chunks) else None

    def is_archived_only(self, position: int) -> bool:
        """Whether ``position`` lies in a chunk this node reads from the archive."""
        return 0 <= position < self.archived_chunks * self.chunk_size

    @property
    def local_start(self) -> int:
        """Where the local chunks start: the chunks before are in the archive only."""
        return self.archived_chunks * self.chunk_size

    def reading_chunk_for(self, position: int) -> Chunk | None:
        """The chunk reads of ``position`` use: the local one, or the archive's for a chunk in the
        archive only (fetched through :attr:`archive` on its own threads; no lock of the log is held
        meanwhile, so reads of local chunks go on). None past the log."""
        number = position // self.chunk_size
        archived = self.archived_chunks  # read before the slot: a deletion sets it before the slot
        chunks = self._chunks
        chunk = chunks[number] if 0 <= number < len(chunks) else None
        if chunk is not None or not 0 <= number < archived:
            return chunk
        if self.archive is None:
            raise ArchiveUnavailable(
                f"Chunk {number} of {self.directory} is in the archive only ({ARCHIVED_CHECKPOINT}) and this "
                "node has no archive configured (Archive: Enabled)"
            )
        return self.archive.chunk(number, wait=not getattr(self._no_archive_waits, "on", False))

    @contextlib.contextmanager
    def without_archive_waits(self) -> Iterator[None]:
        """Reads made inside, on this thread, never wait for a chunk to come from the archive: one that
        is not in the read cache is ArchiveUnavailable (try again) at once while its download goes on
        (the writer's reads of stream states: appends never queue behind a download)."""
        local = self._no_archive_waits
        before = getattr(local, "on", False)
        local.on = True
        try:
            yield
        finally:
            local.on = before

    # -- writing (one writer thread) --------------------------------------------------------------------
    def space_left(self) -> int:
        chunk = self.active_chunk
        # a completed last chunk: completing it worked but creating the next failed (disk full);
        # no room, so the next write calls complete_active_chunk again, which creates the next one
        return 0 if chunk.is_completed else chunk.space_left()

    def write(self, data: bytes) -> int:
        """Append framed records at :attr:`end`; they must fit in the active chunk."""
        chunk = self.active_chunk
        if len(data) > chunk.chunk_size:
            raise EventTooLarge(f"{len(data)} bytes do not fit in a chunk of {chunk.chunk_size} bytes")
        offset = chunk.write(data)
        return chunk.start_position + offset

    def write_out(self) -> None:
        """Give the active chunk's file what was written since the last call (one pwrite for a commit
        group; :meth:`flush` does it too): before anything reads records not yet committed."""
        self.active_chunk.write_out()

    def flush(self) -> None:
        """Make everything written durable and visible to readers.

        One fsync: the chunk's. The writer checkpoint is written but synced only at chunk
        completion and close; a restart finds appends made durable after it by scanning on.
        """
        chunk = self.active_chunk
        end = chunk.start_position + chunk.physical_end
        if end != self.committed:
            chunk.flush()
            self.checkpoints.writer.write(end, flush=False)
            self.committed = end

    def complete_active_chunk(self) -> None:
        """Flush, complete the active chunk and start the next one (even if the active one is empty)."""
        self.flush()
        self.checkpoints.writer.flush()
        with self._lock:
            chunk = self.active_chunk
            chunk.complete()
            new = Chunk.create_active(self.directory, self.chunk_size, chunk.end_number + 1)
            self._chunks.append(new)
            # the end moves to the new chunk first: a failed checkpoint write below leaves a log whose
            # writer can roll back to its start (the next open finds the same end from the chunks)
            self.committed = new.start_position
        self.checkpoints.writer.write(new.start_position)

    def ensure_space(self, size: int) -> None:
        """Complete the active chunk if ``size`` more bytes do not fit in it."""
        if size > self.chunk_size:
            raise EventTooLarge(f"{size} bytes do not fit in a chunk of {self.chunk_size} bytes")
        if self.space_left() < size:
            self.complete_active_chunk()

    # -- switching chunk versions (scavenge, merge, redaction) ------------------------------------------
    def new_chunk_builder(
        self, start_number: int, end_number: int, *, temp_suffix: str = ".scavenge.tmp"
    ) -> ChunkBuilder:
        covered = {id(c): c for c in self._local_range(start_number, end_number)}
        version = max(c.file_version for c in covered.values()) + 1
        last = self._local_range(end_number, end_number)[0]
        return ChunkBuilder(
            self.directory,
            chunk_size=self.chunk_size,
            start_number=start_number,
            end_number=end_number,
            version=version,
            data_end_position=last.data_end_position,
            temp_suffix=temp_suffix,
        )

    def _local_range(self, start_number: int, end_number: int) -> list[Chunk]:
        """The local chunks of numbers ``start_number``-``end_number`` (one entry a number); a number in
        the archive only is refused (scavenge, merge and redaction change local chunks only)."""
        table = self._chunks[start_number : end_number + 1]
        if any(c is None for c in table) or len(table) != end_number - start_number + 1:
            raise ValueError(f"chunks {start_number}-{end_number} are not all on this node's disk")
        return [c for c in table if c is not None]

    def _rename_into_place(self, chunk: Chunk) -> Chunk:
        if self.directory is None or chunk.path is None:
            return chunk
        final = os.path.join(self.directory, chunk_file_name(chunk.start_number, chunk.version))
        disk.current.rename(chunk.path, final)
        fsync_dir(self.directory)
        chunk.path = final
        return chunk

    def switch_chunk(self, new: Chunk, *, sync_removals: bool = True) -> list[Chunk]:
        """Make a completed chunk (from a builder) the live version of the chunks it covers.

        The new file is renamed to its final name and made durable before the old files are
        deleted; a crash in between leaves both, and the next open keeps the newer version.
        ``sync_removals=False`` leaves the deletions' folder fsync to the caller (one
        :meth:`sync_directory` after a batch of switches): a deletion lost to a power cut leaves an
        older version beside the new one, which the next open deletes.
        Returns the chunks that were replaced (still readable by readers that hold them).
        """
        if not new.is_completed:
            raise ValueError("only a completed chunk can be switched in")
        with self._lock:
            old: list[Chunk] = []
            for chunk, number in zip(
                self._local_range(new.start_number, new.end_number),
                range(new.start_number, new.end_number + 1),
                strict=True,
            ):
                if not chunk.is_completed:
                    raise ValueError(f"chunk {number} is active and cannot be replaced")
                if not old or old[-1] is not chunk:
                    old.append(chunk)
            if old[0].start_number != new.start_number or old[-1].end_number != new.end_number:
                raise ValueError("the new chunk's range does not line up with existing chunk boundaries")
            self._rename_into_place(new)
            for number in range(new.start_number, new.end_number + 1):
                self._chunks[number] = new
        for chunk in old:
            if chunk.path and chunk.path != new.path:
                # its blocks are freed a step at a time once no map of it is left (disk.Reclaimer):
                # freed at once, they held up the appends' fdatasync for tens of milliseconds
                disk.reclaimer.delete(chunk.path, chunk.file_size, chunk.buffer)
        if sync_removals:
            self.sync_directory()
        return old

    def leave_to_archive(self, before_number: int) -> list[str]:
        """Make chunks up to ``before_number`` (excluded) archive-only: delete their local files.

        The caller has checked that the archive holds each of them, verified (evdb/archive/retention.py).
        Crash-safe: ``archived.chk`` is written and synced first (the marker), then the files are
        unlinked; a power cut before the marker leaves every file in place, after it the next open
        deletes the files still there and reads those chunks from the archive. ``before_number`` must
        be the end of a local file (not of the active chunk). Returns the paths deleted. The caller
        holds :attr:`chunk_lock` (no scavenge or redaction switches a chunk meanwhile).
        """
        first = self.archived_chunks
        if before_number <= first:
            return []
        with self._lock:
            table = self._local_range(first, before_number - 1)
            after = self._chunks[before_number] if before_number < len(self._chunks) else None
        if after is None or after is table[-1] or not all(c.is_completed for c in table):
            raise ValueError(
                f"chunks {first}-{before_number - 1} cannot leave the disk: not whole completed chunk files"
            )
        self.archived.write(before_number * self.chunk_size)  # the marker, synced
        self.sync_directory()  # its name too, the first time
        with self._lock:
            self.archived_chunks = before_number  # before the slots: see reading_chunk_for
            for number in range(first, before_number):
                self._chunks[number] = None
        deleted: list[str] = []
        for chunk in dict.fromkeys(table):
            if chunk.path:
                # a reader that holds the chunk reads on from its map (the blocks go once it is gone)
                disk.reclaimer.delete(chunk.path, chunk.file_size, chunk.buffer)
                deleted.append(chunk.path)
        self.sync_directory()
        return deleted

    def drop_pages(self) -> None:
        """Let go of the pages this process has mapped of every completed chunk (they stay in the page
        cache; see :meth:`Chunk.drop_pages`): after a long read at open, RSS does not hold it."""
        for chunk in self.distinct_chunks():
            chunk.drop_pages()

    def sync_directory(self) -> None:
        """Make the log folder's entries (files created, renamed, deleted) durable."""
        if self.directory is not None:
            fsync_dir(self.directory)

    def install_chunk(self, new: Chunk, temp_path: str | None = None) -> int:
        """Put a completed chunk copied from the leader in place of this log's tail from its start.

        The log must end inside the range ``new`` covers (a follower that is behind): its chunks from
        ``new.start_number`` on (older versions, and the active chunk with the part of that range it
        has) are replaced, the next chunk is started after ``new`` and the writer checkpoint moved to
        it. ``temp_path`` is the verified, fsynced file; it is renamed to a chunk file name whose
        version is above every file it replaces, which is the commit point: a crash before the rename
        leaves the old log (and a ``*.tmp`` file deleted at the next open), after it the next open
        keeps the new file and drops the ones it supersedes. Returns the log's end before the install
        (the records from there on are new to this node).
        """
        start, end_number = new.start_number, new.end_number
        if new.chunk_size != self.chunk_size or not new.is_completed:
            raise ValueError("only a completed chunk of this log's chunk size can be installed")
        with self.chunk_lock:
            before = self.end
            if before != self.committed:
                raise ValueError("the log has uncommitted records")
            if not new.start_position <= before < new.end_position:
                raise ValueError(
                    f"the log ends at {before}, outside chunks {start}-{end_number} "
                    f"({new.start_position}-{new.end_position})"
                )
            if start < self.archived_chunks:
                raise ValueError(f"chunk {start} is in the archive only ({ARCHIVED_CHECKPOINT})")
            with self._lock:
                table = list(self._chunks)
            replaced: list[Chunk] = []
            for chunk in table[start:]:
                assert chunk is not None  # after the archived chunks, every slot is a local chunk
                if not replaced or replaced[-1] is not chunk:
                    replaced.append(chunk)
            straddling = replaced[0] if replaced and replaced[0].start_number < start else None
            version = max([new.version] + [c.file_version + 1 for c in replaced if c.start_number == start])
            if self.directory is not None and temp_path is not None:
                final = os.path.join(self.directory, chunk_file_name(start, version))
                disk.current.rename(temp_path, final)  # the commit point
                fsync_dir(self.directory)
                new.path = final
            head = table[:start]
            if straddling is not None:
                # a merged chunk of this node's own reaching into the new range: keep its first part
                cut = cut_completed_chunk(
                    straddling, new.start_position, self.directory, self.chunk_size, self._rename_into_place
                )
                head = [c if c is not straddling else cut for c in head]
            for chunk in replaced:
                if chunk is straddling:
                    continue
                chunk.close()
                if chunk.path and chunk.path != new.path:
                    try:
                        disk.current.unlink(chunk.path)
                    except FileNotFoundError:
                        pass
            active = Chunk.create_active(self.directory, self.chunk_size, end_number + 1)
            if self.directory is not None:
                fsync_dir(self.directory)
            with self._lock:
                self._chunks = head + [new] * (end_number - start + 1) + [active]
            self.checkpoints.writer.write(active.start_position)
            self.committed = active.start_position
        return before

    # -- reading ---------------------------------------------------------------------------------------
    def _limit(self, chunk: Chunk) -> int:
        if chunk.is_completed:
            return chunk.physical_end
        return min(chunk.physical_end, self.committed - chunk.start_position)

    def read_record(self, position: int) -> rec.EventRecord | rec.SystemRecord | None:
        """The record at exactly ``position``, or None when no committed record starts there."""
        if position < 0 or position >= self.committed:
            return None
        chunk = self.reading_chunk_for(position)
        if chunk is None:
            return None
        offset = chunk.physical_offset(position)
        if offset is None:
            return None
        limit = self._limit(chunk)
        if offset >= limit:
            return None
        record, _ = chunk.read_at(offset, limit)
        if record.log_position != position:
            raise CorruptedFile(
                chunk.path or "memory", f"record at offset {offset} claims position {record.log_position}"
            )
        return record

    def is_record_boundary(self, position: int) -> bool:
        """Whether ``position`` is where a committed record starts, or the committed end."""
        if position == self.committed:
            return True
        try:
            return self.read_record(position) is not None
        except CorruptedFile:
            return False

    def iter_forward(self, position: int) -> Iterator[rec.EventRecord | rec.SystemRecord]:
        """Committed records with log position >= ``position``, in log order.

        The committed end is read as each chunk is entered, so a long iteration sees records
        committed while it runs.
        """
        position = max(0, position)
        while position < self.committed:
            chunk = self.reading_chunk_for(position)
            if chunk is None:
                return
            offset = chunk.physical_offset_at_or_after(position)
            limit = self._limit(chunk)
            yield from chunk.iter_records(offset, limit)
            if not chunk.is_completed:
                position = chunk.start_position + limit
                if position >= self.committed:
                    return
                continue
            position = chunk.end_position

    def read_forward_batch(self, position: int, max_records: int) -> tuple[list, int]:
        """Up to ``max_records`` committed records from ``position`` on, and the position after them."""
        records: list = []
        position = max(0, position)
        while position < self.committed and len(records) < max_records:
            chunk = self.reading_chunk_for(position)
            if chunk is None:
                break
            offset = chunk.physical_offset_at_or_after(position)
            limit = self._limit(chunk)
            batch, end = chunk.read_batch(offset, limit, max_records - len(records))
            records.extend(batch)
            if end < limit:  # stopped by max_records inside the chunk
                return records, records[-1].next_position
            position = chunk.end_position if chunk.is_completed else chunk.start_position + limit
        return records, position

    def iter_backward(self, position: int, stop: int = 0) -> Iterator[rec.EventRecord | rec.SystemRecord]:
        """Committed records with log position < ``position``, newest first; none of the chunks before
        the one holding ``stop`` (a chunk start, say :attr:`local_start`: the local chunks only)."""
        position = min(position, self.committed)
        while position > stop:
            chunk = self.reading_chunk_for(position - 1)
            if chunk is None:
                return
            limit = self._limit(chunk)
            if chunk.is_scavenged:
                offset = chunk.physical_offset_at_or_after(position)
            else:
                offset = min(position - chunk.start_position, limit)
            offset = min(offset, limit)
            while offset > 0:
                record, offset = chunk.read_before(offset)
                yield record
            position = chunk.start_position

    # -- closing ---------------------------------------------------------------------------------------
    def close(self) -> None:
        for chunk in self.distinct_chunks():
            chunk.close()
        for checkpoint in self.checkpoints.all():
            checkpoint.flush()
        self.checkpoints.close()
        self.archived.close()
