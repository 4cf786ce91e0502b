"""Cutting the log at a position (``TransactionLog._truncate``, a follower whose tail diverged): the
epoch a cut log ends in, and a completed chunk cut short. Functions of what they are given, so the log
keeps one place for its state."""

from __future__ import annotations

import json
from collections.abc import Callable

from evdb.errors import CorruptedFile
from evdb.storage import disk
from evdb.storage import records as rec
from evdb.storage.chunk import HEADER_SIZE, Chunk, ChunkBuilder

__all__ = ["cut_completed_chunk", "epoch_before"]


def epoch_before(chunk_for: Callable[[int], Chunk | None], epoch: int, position: int) -> int:
    """Position of the newest epoch record before ``position``: from ``epoch`` (``epoch.chk``) back
    through each epoch's ``previousEpochPosition`` (-1 when there is none or the chain cannot be read;
    ``chunk_for``: the log's local chunk of a position). A node that keeps its epochs after a cut can
    still show the cluster which history it shares."""
    while epoch >= position:
        chunk = chunk_for(epoch)
        if chunk is None:
            return -1
        offset, limit = chunk.physical_offset(epoch), chunk.physical_end
        if offset is None:
            return -1
        try:
            record, _ = chunk.read_at(offset, limit)
            if not isinstance(record, rec.SystemRecord) or record.kind != rec.SystemRecordKind.EPOCH:
                return -1
            previous = json.loads(record.payload).get("previousEpochPosition", -1)
        except (CorruptedFile, ValueError, AttributeError):  # AttributeError: JSON but not an object
            return -1
        if not isinstance(previous, int) or previous >= epoch:
            return -1
        epoch = previous
    return epoch


def cut_completed_chunk(
    chunk: Chunk,
    position: int,
    directory: str | None,
    chunk_size: int,
    rename_into_place: Callable[[Chunk], Chunk],
) -> Chunk:
    """Replace a completed chunk by one holding only its records before ``position`` (its file is
    unlinked; ``rename_into_place``: the log's, for a scavenged chunk rebuilt under a temporary name)."""
    if not chunk.is_scavenged:
        new = Chunk.create_active(directory, chunk_size, chunk.start_number, chunk.file_version + 1)
        length = position - chunk.start_position
        new.write(bytes(chunk.buffer[HEADER_SIZE : HEADER_SIZE + length]))
        new.flush()
    else:
        end_number = (position - 1) // chunk_size
        builder = ChunkBuilder(
            directory,
            chunk_size=chunk_size,
            start_number=chunk.start_number,
            end_number=end_number,
            version=chunk.file_version + 1,
            data_end_position=position,
        )
        offset = 0
        while offset < chunk.physical_end:
            record, nxt = chunk.read_at(offset)
            if record.log_position >= position:
                break
            builder.add(chunk.raw_frame(offset), record.log_position)
            offset = nxt
        new = rename_into_place(builder.finish())
    if chunk.path:
        disk.current.unlink(chunk.path)
    return new
