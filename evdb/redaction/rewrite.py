"""The tool's side of redaction: a redacted copy of a chunk file.

The copy keeps every byte of the original except, for each redacted event, its data (now 0xFF
bytes of the same length), its record flags (``IsRedacted`` set) and its record checksum; and the
chunk header's version (one above the original's, so the switched-in file gets a new name) and the
chunk checksum. Sizes and offsets do not change, so log positions and the position map stay valid.
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass

import xxhash

from evdb.redaction.protocol import RedactionError
from evdb.storage import records as rec
from evdb.storage.chunk import HEADER_SIZE, Chunk, ChunkHeader, fsync_dir

__all__ = ["TEMP_SUFFIX", "EventToRedact", "RedactedCopy", "write_redacted_copy"]

TEMP_SUFFIX = ".redact.tmp"
_LEN = struct.Struct("<I")
_FLAGS = struct.Struct("<H")
_REDACTED = int(rec.RecordFlags.IS_REDACTED)


@dataclass(frozen=True)
class EventToRedact:
    stream: str
    event_number: int
    log_position: int
    offset: int  # physical offset of the record after the chunk header


@dataclass(frozen=True)
class RedactedCopy:
    path: str
    version: int
    redacted: list[EventToRedact]
    already: list[EventToRedact]  # were redacted before: left as they are


def write_redacted_copy(
    source: str,
    temp_path: str,
    events: list[EventToRedact],
    *,
    step: Callable[[str], None] = lambda name: None,
) -> RedactedCopy:
    """Copy the completed chunk ``source`` to ``temp_path`` with ``events`` redacted; fsynced.

    The source is verified first (a damaged chunk is not redacted). ``step`` is called with
    ``"copied"`` and ``"redacted"`` as the work passes those points. On any error the temporary
    file is removed and the error raised.
    """
    original = Chunk.open(source, verify=True)
    if not original.is_completed:
        raise RedactionError("ChunkNotCompleted", f"{source} is not a completed chunk.")
    fd = os.open(temp_path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        _copy(source, fd)
        step("copied")
        size = os.fstat(fd).st_size
        with mmap.mmap(fd, size) as buf:
            redacted, already = [], []
            for event in events:
                if _redact_record(buf, original, event, source):
                    redacted.append(event)
                else:
                    already.append(event)
            version = original.file_version + 1  # above the name's version (see Chunk.file_version)
            header = original.header
            buf[:HEADER_SIZE] = ChunkHeader(
                header.chunk_size,
                header.start_number,
                header.end_number,
                header.is_scavenged,
                header.chunk_id,
                version,
            ).encode()
            buf[size - 16 : size] = xxhash.xxh3_128(memoryview(buf)[: size - 16]).digest()
            buf.flush()
        os.fsync(fd)
        step("redacted")
    except BaseException:
        os.close(fd)
        _unlink_quietly(temp_path)
        raise
    os.close(fd)
    fsync_dir(os.path.dirname(temp_path) or ".")
    return RedactedCopy(temp_path, version, redacted, already)


def _copy(source: str, fd: int) -> None:
    with open(source, "rb") as src:
        total = os.fstat(src.fileno()).st_size
        copied = 0
        while copied < total:
            try:
                n = os.copy_file_range(src.fileno(), fd, total - copied)
            except (AttributeError, OSError):
                n = 0
            if n == 0:
                break
            copied += n
        if copied < total:  # copy_file_range unavailable or refused: plain reads and writes
            src.seek(copied)
            os.lseek(fd, copied, os.SEEK_SET)
            while block := src.read(1 << 20):
                os.write(fd, block)


def _redact_record(buf: mmap.mmap, original: Chunk, event: EventToRedact, where: str) -> bool:
    """Redact one event record in place; False when it was redacted already."""
    start = HEADER_SIZE + event.offset
    record, _ = rec.read_frame(buf, start, HEADER_SIZE + original.physical_end, where=where)
    if (
        not isinstance(record, rec.EventRecord)
        or record.stream != event.stream
        or record.event_number != event.event_number
        or record.log_position != event.log_position
    ):
        raise RedactionError(
            "UnexpectedRecord",
            f"{where}: the record at offset {event.offset} is not event {event.event_number}@{event.stream}.",
        )
    if record.flags & _REDACTED:
        return False
    body = start + 4
    (length,) = _LEN.unpack_from(buf, start)
    stream_len, type_len, data_len, _meta_len = struct.unpack_from("<HHII", buf, body + 44)
    data = body + rec.EVENT_HEADER.size + stream_len + type_len
    buf[data : data + data_len] = b"\xff" * data_len
    _FLAGS.pack_into(buf, body + 2, record.flags | _REDACTED)
    _LEN.pack_into(buf, body + length, xxhash.xxh32_intdigest(bytes(buf[body : body + length])))
    return True


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
