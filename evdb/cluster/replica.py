"""A member's log as replication sees it: what a leader reads for its followers, and how a follower
writes the leader's records and chunk files at exactly the positions they have on the leader.

The cluster's decisions (evdb/cluster/service.py) call a :class:`ReplicationLog`. The real one,
:class:`ChunkLogReplication`, works on a :class:`~evdb.database.Database`: it reads through the
database's public ``log`` and writes only inside the database's writer thread, through its typed
:class:`~evdb.database.WriterContext` (``commit``, ``index``, ``note_epoch``, ...), so the database knows
nothing of clusters. The deterministic simulator (evdb/cluster/sim/disk.py) has an in-memory one.
"""

from __future__ import annotations

import contextlib
import json
import os
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

import xxhash

from evdb.errors import CorruptedFile, StorageError
from evdb.storage import records as rec
from evdb.storage.chunk import HEADER_SIZE, Chunk

if TYPE_CHECKING:
    from evdb.database import Database, DatabaseConfig, WriterContext

__all__ = ["ChunkLogReplication", "ReplicationLog", "record_fingerprint"]


def record_fingerprint(record: rec.EventRecord | rec.SystemRecord) -> int:
    """What identifies a record at its position on every node: position, size and identity (stream,
    number and event id; a system record's kind and payload), not its data, which a redaction may
    have overwritten on one node and not yet on another."""
    if isinstance(record, rec.EventRecord):
        key = b"%d|%d|%d|%s|" % (
            record.log_position,
            record.size,
            record.event_number,
            record.stream.encode(),
        )
        return xxhash.xxh3_64_intdigest(key + record.event_id)
    key = b"%d|%d|%d|" % (record.log_position, record.size, record.kind)
    return xxhash.xxh3_64_intdigest(key + record.payload)


class ReplicationLog(Protocol):
    """What the cluster reads from and writes to a member's log to replicate it."""

    # -- a leader, for its followers
    def read_raw(
        self, position: int, max_bytes: int, upto: int | None = None
    ) -> tuple[int, bytes, int | None]: ...

    def replication_chunk(self, position: int) -> Chunk | None: ...

    def record_checks(self, point: int, floor: int, max_count: int) -> list[tuple[int, int, int]]: ...

    def local_start(self) -> int: ...

    # -- a follower, finding the common point
    def has_record(self, position: int, size: int, fingerprint: int) -> bool: ...

    def completed_chunk_ends(self, floor: int, point: int) -> list[tuple[int, int]]: ...

    def chunk_end_after(self, position: int) -> int | None: ...

    # -- a follower, writing what the leader sent
    def reads_archive(self) -> bool: ...

    def apply_replicated(self, position: int, frames: bytes) -> int: ...

    def apply_replicated_batch(self, pieces: list[tuple[int, bytes]]) -> int: ...

    async def write_replicated_batch(self, pieces: list[tuple[int, bytes]]) -> int:
        """:meth:`apply_replicated_batch`, awaited on the event loop (a follower's stream: the real
        log hands it to the database's writer thread)."""
        ...

    def complete_replicated_chunk(self, chunk_end: int) -> None: ...

    def install_replicated_chunk(
        self, source: str | bytes, *, start_number: int, end_number: int, checksum: bytes | None = None
    ) -> int: ...


class ChunkLogReplication:
    """:class:`ReplicationLog` over a database's chunk files."""

    def __init__(self, db: Database) -> None:
        self.db = db

    # -- a leader, for its followers ----------------------------------------------------------------
    def read_raw(
        self, position: int, max_bytes: int, upto: int | None = None
    ) -> tuple[int, bytes, int | None]:
        """Framed records of the committed log from ``position`` (a record boundary), for followers;
        with ``upto``, also the records written up to there and not yet synced (a leader ships a
        group while it syncs it: ``upto`` is an end the writer announced through
        ``Database.before_sync``, whole records that nothing rolls back unless that sync fails).

        Returns ``(position, frames, completed_chunk_end)``: ``frames`` may be empty; when ``position``
        is the end of a completed chunk the position moves to the next chunk and its end is returned so
        the follower completes its chunk there too.
        """
        log = self.db.log
        shippable = log.committed if upto is None else max(log.committed, min(upto, log.end))
        chunk = log.chunk_for(position)
        if chunk is None or position >= shippable:
            return position, b"", None
        if chunk.is_completed and position >= chunk.data_end_position:
            return chunk.end_position, b"", chunk.end_position
        if chunk.is_scavenged:
            raise StorageError(
                f"Chunk {chunk.file_name} was scavenged: its records cannot be streamed from position {position}."
            )
        offset = position - chunk.start_position
        limit = (
            chunk.physical_end
            if chunk.is_completed
            else min(chunk.physical_end, shippable - chunk.start_position)
        )
        buf = chunk.buffer
        end = offset
        while end < limit and end - offset < max_bytes:
            end += rec.frame_size_at(buf, HEADER_SIZE + end)
        return position, bytes(buf[HEADER_SIZE + offset : HEADER_SIZE + end]), None

    def replication_chunk(self, position: int) -> Chunk | None:
        """The completed chunk a follower whose log ends at ``position`` takes as a whole file, or None
        when records are streamed to it (:meth:`read_raw`).

        A whole file goes when the follower has none of the chunk (``position`` is its start: one
        sequential copy instead of record by record), and whenever the chunk was scavenged or merged:
        its removed records cannot be streamed, and the follower's partial copy of it is an older
        version that the file replaces. A follower in the middle of a completed chunk that was not
        scavenged gets the rest of it as records, so a short disconnect never costs a whole chunk.
        """
        log = self.db.log
        chunk = log.chunk_for(position)
        if chunk is None or not chunk.is_completed or position >= log.committed:
            return None
        if chunk.is_scavenged or position == chunk.start_position:
            return chunk
        return None

    def record_checks(self, point: int, floor: int, max_count: int) -> list[tuple[int, int, int]]:
        """``(position, size, fingerprint)`` of the committed records that end at or before ``point``,
        newest first, none starting before ``floor``, at most ``max_count``: what a leader sends a
        follower to find the last record both logs share (see :meth:`has_record`)."""
        out: list[tuple[int, int, int]] = []
        if max_count <= 0:
            return out
        log = self.db.log
        for record in log.iter_backward(min(point, log.committed)):
            if record.log_position < floor:
                break
            if record.next_position > point:
                continue
            out.append((record.log_position, record.size, record_fingerprint(record)))
            if len(out) >= max_count:
                break
        return out

    def local_start(self) -> int:
        """Where this log's local chunks start: the chunks before are in the archive only
        (``archived.chk``), and a leader cannot stream them to a follower (evdb/archive/catchup.py)."""
        return self.db.log.local_start

    # -- a follower, finding the common point -------------------------------------------------------
    def has_record(self, position: int, size: int, fingerprint: int) -> bool:
        """Whether this log holds, at ``position``, a committed record of ``size`` bytes with that
        fingerprint (a record boundary both logs share). Never raises for a position inside a record."""
        log = self.db.log
        if position < 0 or position + size > log.committed:
            return False
        try:
            record = log.read_record(position)
        except (CorruptedFile, ValueError, IndexError, struct.error, UnicodeDecodeError):
            return False  # not a record boundary in this log: its bytes are no record (an I/O error raises)
        return record is not None and record.size == size and record_fingerprint(record) == fingerprint

    def completed_chunk_ends(self, floor: int, point: int) -> list[tuple[int, int]]:
        """``(data end, chunk end)`` of this log's completed, unscavenged chunks ending in
        ``(floor, point]``: where a log that stops at a chunk's end agrees past its last record. The
        chunk ending at ``point`` counts also when it is in the archive only (read through the archive:
        the record checks read it too): a follower that caught up from the archive, or was restored
        from it, ends there."""
        log = self.db.log
        ends = [
            (chunk.data_end_position, chunk.end_position)
            for chunk in log.distinct_chunks()
            if chunk.is_completed and not chunk.is_scavenged and floor < chunk.end_position <= point
        ]
        if floor < point <= log.local_start and point % log.chunk_size == 0:
            archived = log.reading_chunk_for(point - 1)
            if archived is not None and not archived.is_scavenged:
                ends.append((archived.data_end_position, archived.end_position))
        return ends

    def chunk_end_after(self, position: int) -> int | None:
        """The end of this log's completed, unscavenged chunk whose records end exactly at
        ``position``, or None (a chunk in the archive only is read through the archive)."""
        log = self.db.log
        if position <= 0 or position > log.committed:
            return None
        chunk = log.reading_chunk_for(position - 1)
        if chunk is None or not chunk.is_completed or chunk.is_scavenged:
            return None
        if chunk.data_end_position != position or chunk.end_position > log.committed:
            return None
        return chunk.end_position

    # -- a follower, writing what the leader sent ---------------------------------------------------
    def reads_archive(self) -> bool:
        """Whether this node reads chunks in the archive only (Archive: Enabled): a follower behind its
        leader's local chunks can then take them from the archive (evdb/archive/catchup.py)."""
        return self.db.log.archive is not None

    def apply_replicated(self, position: int, frames: bytes) -> int:
        """Write records copied from the leader's log at exactly the positions they have there.

        ``frames`` are whole framed records starting at ``position``; a position at the start of the
        next chunk completes the active one first, as the leader did. Returns the committed end.
        """
        return self.apply_replicated_batch([(position, frames)])

    def apply_replicated_batch(self, pieces: list[tuple[int, bytes]]) -> int:
        """Write several consecutive messages of the leader's records (each as :meth:`apply_replicated`
        takes them) and make them durable together: one writer call, one fdatasync. Returns the
        committed end, the highest durable position.

        Each piece is checked whole (its start is this log's end, its frames decode, every record is at
        the position it claims) before any of its bytes are written or indexed; a piece that fails
        raises StorageError after the pieces before it were committed, and nothing of it is kept.
        """
        return self.db.call_in_writer(_batch_writer(pieces))

    async def write_replicated_batch(self, pieces: list[tuple[int, bytes]]) -> int:
        """:meth:`apply_replicated_batch` from the event loop: queued for the writer thread and answered
        with one loop wake-up (a thread of the loop's pool and a concurrent future cost a follower's loop
        about as much again per batch)."""
        return await self.db.call_in_writer_on_loop(_batch_writer(pieces))

    def complete_replicated_chunk(self, chunk_end: int) -> None:
        """The leader completed the chunk ending at ``chunk_end``: complete ours at the same point."""

        def complete(ctx: WriterContext) -> None:
            if ctx.log.end < chunk_end and ctx.log.active_chunk.end_position == chunk_end:
                ctx.complete_active_chunk()

        self.db.call_in_writer(complete)

    def install_replicated_chunk(
        self,
        source: str | bytes,
        *,
        start_number: int,
        end_number: int,
        checksum: bytes | None = None,
    ) -> int:
        """Install a completed chunk file sent whole by the leader; returns the new committed end.

        ``source`` is the received file (written under a temporary ``*.tmp`` name in the database
        folder and fsynced) or, for an in-memory database, its bytes. It is checked before anything
        is changed: footer checksum (and ``checksum``, the leader's footer checksum, when given),
        sizes, chunk size, the chunk numbers it was announced for, and every record (decodable, at a
        position inside the chunk, the position map in step). A refused file is deleted and nothing
        changes. Then :meth:`TransactionLog.install_chunk` renames it into place (replacing this
        node's older versions and partial copy of those chunks), the records this node did not have
        are indexed with their logical positions, and the writer and chaser checkpoints move to the
        chunk's end (see docs/storage-format.md, "Chunk files sent by the leader").
        """
        where = source if isinstance(source, str) else f"chunk {start_number}-{end_number} from the leader"
        try:
            chunk = _verified_replicated_chunk(
                source, where, self.db.config, start_number, end_number, checksum
            )
        except BaseException:
            if isinstance(source, str):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(source)
            raise

        def install(ctx: WriterContext) -> int:
            log = ctx.log
            ctx.commit()
            if log.end == chunk.start_position and log.active_chunk.end_position == log.end:
                ctx.complete_active_chunk()  # a full active chunk just before the installed one
            try:
                before = log.install_chunk(chunk, source if isinstance(source, str) else None)
            except ValueError as exc:
                raise StorageError(f"Cannot install chunk file {chunk.file_name}: {exc}") from None
            ctx.forget_append_in_progress()
            epoch: tuple[int, int] | None = None
            for record in chunk.iter_records(chunk.physical_offset_at_or_after(before)):
                if isinstance(record, rec.EventRecord):
                    ctx.index(record, follow_appends=False)
                elif record.kind == rec.SystemRecordKind.EPOCH:
                    epoch = (record.log_position, _epoch_number(record))
            ctx.commit()
            ctx.index_up_to(log.committed)  # nothing of the chunk left to index
            log.checkpoints.chaser.write(log.committed)
            if epoch is not None:
                ctx.note_epoch(*epoch)
            return log.committed

        try:
            return self.db.call_in_writer(install)
        finally:
            if isinstance(source, str):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(source)  # still there only when the install failed before its rename


def _checked_frames(position: int, frames: bytes, log_end: int) -> list[rec.EventRecord | rec.SystemRecord]:
    """The records of one replicated message, refused whole (StorageError) unless it starts at this
    log's end, holds whole records only, and every record is at the position it claims."""
    if position != log_end:
        raise StorageError(f"Replicated records start at {position} but this log ends at {log_end}.")
    records, end = rec.read_frames(frames, 0, len(frames), len(frames), where="replication")
    if end != len(frames):
        raise StorageError("Replicated data does not end on a record boundary.")
    expected = position
    for record in records:
        if record.log_position != expected:
            raise StorageError(f"Replicated record at {record.log_position} was expected at {expected}.")
        expected = record.next_position
    return records


def _epoch_number(record: rec.SystemRecord) -> int:
    return int(json.loads(record.payload).get("epochNumber", 0))


def _verified_replicated_chunk(
    source: str | bytes,
    where: str,
    config: DatabaseConfig,
    start_number: int,
    end_number: int,
    checksum: bytes | None,
) -> Chunk:
    """Open a chunk file received from the leader and check everything about it before it is used."""
    chunk = Chunk.open(source, verify=True) if isinstance(source, str) else Chunk.from_bytes(source, where)
    footer = chunk.footer
    assert footer is not None  # Chunk.open/from_bytes refuse an incomplete chunk file
    if checksum is not None and footer.checksum != checksum:
        raise CorruptedFile(where, "chunk checksum differs from the one the leader announced")
    if (chunk.start_number, chunk.end_number) != (start_number, end_number):
        raise CorruptedFile(
            where,
            f"chunk covers {chunk.start_number}-{chunk.end_number}, announced as {start_number}-{end_number}",
        )
    if chunk.chunk_size != config.chunk_size:
        raise CorruptedFile(
            where, f"chunk size {chunk.chunk_size} differs from this node's ChunkSize {config.chunk_size}"
        )
    if not chunk.start_position <= footer.data_end_position <= chunk.end_position:
        raise CorruptedFile(where, f"data end position {footer.data_end_position} is outside the chunk")
    offset = 0
    previous = -1
    while offset < chunk.physical_end:
        record, after = chunk.read_at(offset)
        position = record.log_position
        if not max(previous + 1, chunk.start_position) <= position < footer.data_end_position or (
            chunk.physical_offset(position) != offset
        ):
            raise CorruptedFile(where, f"record at offset {offset} claims position {position}")
        previous, offset = position, after
    return chunk


def _batch_writer(pieces: list[tuple[int, bytes]]) -> Callable[[WriterContext], int]:
    """What :meth:`ChunkLogReplication.apply_replicated_batch` runs in the writer thread."""

    def apply(ctx: WriterContext) -> int:
        log = ctx.log
        epochs: list[tuple[int, int]] = []

        def commit() -> None:
            ctx.commit()  # what was written is durable before an epoch checkpoint names it
            for epoch in epochs:
                ctx.note_epoch(*epoch)

        for position, frames in pieces:
            active = log.active_chunk
            if position == active.end_position and not active.is_completed:
                # the leader went on in the next chunk: this one is complete, also when its
                # records filled it to the last byte (the leader then sends no completion)
                ctx.complete_active_chunk()
            try:
                records = _checked_frames(position, frames, log.end)
            except StorageError:
                commit()  # the pieces before this one are whole and the leader's: keep them
                raise
            for record in records:
                if isinstance(record, rec.EventRecord):
                    ctx.index(record)
                elif record.kind == rec.SystemRecordKind.EPOCH:
                    epochs.append((record.log_position, _epoch_number(record)))
            log.write(frames)
        commit()
        return log.committed

    return apply
