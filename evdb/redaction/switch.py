"""The node's side of redaction: switching in a redacted chunk (where an event is stored: positions.py).

Both run in a worker thread with the log's chunk lock held by the caller (see service.py).
"""

from __future__ import annotations

import os

import numpy as np
import xxhash

from evdb.errors import CorruptedFile
from evdb.redaction.protocol import RedactionError
from evdb.redaction.rules import is_system_stream, system_stream_refusal
from evdb.storage import records as rec
from evdb.storage.chunk import (
    FOOTER_SIZE,
    HEADER_SIZE,
    Chunk,
    ChunkFooter,
    ChunkHeader,
    chunk_file_name,
    parse_chunk_file_name,
)
from evdb.storage.log import TransactionLog

__all__ = ["checked_replacement", "switch_chunk"]

_FOOTER_MAGIC = b"EVDBFOOT"
_REDACTED = int(rec.RecordFlags.IS_REDACTED)


def _fail(code: str, message: str) -> RedactionError:
    return RedactionError(code, message)


def _check_name(name: object, which: str) -> str:
    if not isinstance(name, str) or not name or "/" in name or "\\" in name or ".." in name or "\0" in name:
        raise _fail("InvalidFileName", f"The {which} file name {name!r} is not a plain file name.")
    return name


def switch_chunk(log: TransactionLog, target_name: object, new_name: object) -> str:
    """Validate ``new_name`` as a replacement of ``target_name`` and switch it in.

    Returns the new chunk's final file name. Raises RedactionError with the code of the first
    check that fails (protocol.SWITCH_ERRORS); nothing changes then.
    """
    directory = log.directory
    if directory is None:
        raise _fail("NotSupported", "The database is in memory (MemDb): there are no chunk files to switch.")
    target = _check_name(target_name, "target")
    new = _check_name(new_name, "new")
    parsed = parse_chunk_file_name(target)
    if parsed is None:
        raise _fail("TargetNotAChunkFile", f"{target} is not a chunk file name (chunk-NNNNNN.VVVVVV).")
    if not new.endswith(".tmp"):
        raise _fail("NewChunkFileNotTmp", f"The new chunk file {new} must end in .tmp.")
    target_path = os.path.join(directory, target)
    new_path = os.path.join(directory, new)
    if not os.path.isfile(target_path):
        raise _fail("TargetChunkFileNotFound", f"{target} is not in {directory}.")
    if not os.path.isfile(new_path):
        raise _fail("NewChunkFileNotFound", f"{new} is not in {directory}.")
    current = log.chunk_by_number(parsed[0])
    if current is None or current.file_name != target:
        in_use = current.file_name if current is not None else "none"
        raise _fail(
            "TargetChunkNotInUse",
            f"{target} is not the chunk in use for chunk {parsed[0]} (in use: {in_use}).",
        )
    if not current.is_completed:
        raise _fail(
            "TargetChunkNotCompleted", f"{target} is the active chunk; only completed chunks can be switched."
        )
    header = _check_new_file(new_path, new, current)
    final = chunk_file_name(header.start_number, header.version)
    if os.path.exists(os.path.join(directory, final)):
        raise _fail("NewChunkVersionInUse", f"{final} exists already; give the new chunk a higher version.")
    chunk = _open_checked(current, new_path, new)
    log.switch_chunk(chunk)
    return chunk.file_name


def checked_replacement(current: Chunk, path: str, name: str) -> Chunk:
    """The completed chunk file at ``path`` opened, when it may replace ``current``: the switch's
    checks of the new file (header, footer, chunk range and size, a higher version, the checksum)
    and of its redacted events (none of a system stream that ``current`` does not redact already).
    RedactionError with the code of the first check that fails. Also the rule of a redacted
    archived chunk (evdb/redaction/archived.py)."""
    _check_new_file(path, name, current)
    return _open_checked(current, path, name)


def _open_checked(current: Chunk, path: str, name: str) -> Chunk:
    """The new file (checked by _check_new_file) opened, once its redacted events pass the rules."""
    chunk = Chunk.open(path, verify=False)  # verified by _check_new_file
    try:
        _check_redacted_events(current, chunk, name)
    except BaseException:
        chunk.close()
        raise
    return chunk


def _redacted_system_events(chunk: Chunk) -> dict[int, str]:
    """The redacted events of system streams in ``chunk``: log position -> ``<number>@<stream>``."""
    from evdb.scavenge.chunkscan import record_table  # numpy over the whole chunk, no per-record decode

    table = record_table(chunk, verify=False)
    out = {}
    for i in np.nonzero((table.flags & _REDACTED) != 0)[0].tolist():
        stream = table.run_names[int(table.run_of[i])]
        if is_system_stream(stream):
            out[int(table.positions[i])] = f"{int(table.numbers[i])}@{stream}"
    return out


def _check_redacted_events(current: Chunk, new_chunk: Chunk, name: str) -> None:
    """The new chunk redacts no event of a system stream that the chunk in use does not (a client
    that made its own copy, bypassing getEventPositions, is held to the rules of rules.py too)."""
    try:
        new_events = _redacted_system_events(new_chunk)
    except CorruptedFile as exc:
        raise _fail("NewChunkRecordsInvalid", f"{name}: {exc}") from None
    if not new_events:
        return
    try:
        already = _redacted_system_events(current)
    except CorruptedFile:
        already = {}  # the chunk in use does not scan: every redacted system event counts as new
    added = [event for position, event in sorted(new_events.items()) if position not in already]
    if added:
        stream = added[0].partition("@")[2]
        raise _fail(
            "NewChunkRedactsSystemStream",
            f"{name}: {system_stream_refusal(added[0], stream)}"
            + (f" ({len(added)} such events)" if len(added) > 1 else "")
            + ".",
        )


def _check_new_file(path: str, name: str, current: Chunk) -> ChunkHeader:
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        head = f.read(HEADER_SIZE)
        try:
            header = ChunkHeader.decode(head, name)
        except Exception as exc:
            raise _fail("NewChunkHeaderInvalid", f"{name}: {exc}") from None
        if size < HEADER_SIZE + FOOTER_SIZE:
            raise _fail("NewChunkNotCompleted", f"{name} is too short to hold a footer.")
        f.seek(size - FOOTER_SIZE)
        tail = f.read(FOOTER_SIZE)
        if tail[:8] != _FOOTER_MAGIC:
            raise _fail("NewChunkNotCompleted", f"{name} has no footer: it is not a completed chunk.")
        try:
            footer = ChunkFooter.decode(tail, 0, name)
        except Exception as exc:
            raise _fail("NewChunkFooterInvalid", f"{name}: {exc}") from None
        expected = HEADER_SIZE + footer.physical_data_size + 16 * footer.posmap_count + FOOTER_SIZE
        if expected != size or footer.physical_data_size < 0 or footer.posmap_count < 0:
            raise _fail("NewChunkFooterInvalid", f"{name} is {size} bytes but its footer says {expected}.")
        if (header.start_number, header.end_number) != (current.start_number, current.end_number):
            raise _fail(
                "ChunkRangeMismatch",
                f"{name} covers chunks {header.start_number}-{header.end_number}, the target "
                f"{current.file_name} covers {current.start_number}-{current.end_number}.",
            )
        if header.chunk_size != current.chunk_size:
            raise _fail(
                "ChunkSizeMismatch",
                f"{name} was made for chunk size {header.chunk_size}, the node uses {current.chunk_size}.",
            )
        if header.version <= current.file_version:
            raise _fail(
                "NewChunkVersionTooLow",
                f"{name} has version {header.version}; it must be above the target's {current.file_version}.",
            )
        f.seek(0)
        hasher = xxhash.xxh3_128()
        remaining = size - 16
        while remaining > 0:
            block = f.read(min(remaining, 1 << 20))
            if not block:
                break
            hasher.update(block)
            remaining -= len(block)
        if hasher.digest() != footer.checksum:
            raise _fail("NewChunkChecksumMismatch", f"{name}: the chunk checksum does not verify.")
    return header
