"""Opening the transaction log: which chunk files make it, where it ends, and whether its checkpoints
are ones a crash can leave. Reads only: :meth:`TransactionLog.open` changes files once all of it is
checked."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Protocol

from evdb.errors import CorruptedFile
from evdb.storage.checkpoints import Checkpoints
from evdb.storage.chunk import HEADER_SIZE, Chunk, ChunkHeader, chunk_file_name, parse_chunk_file_name

__all__ = [
    "FileInfo",
    "OpeningLog",
    "check_checkpoints",
    "choose_files",
    "find_end",
    "is_cut_point",
    "scan_files",
]


class OpeningLog(Protocol):
    """The log being opened (evdb.storage.log.TransactionLog), as its checks read it."""

    checkpoints: Checkpoints
    logger: logging.Logger

    @property
    def has_chunks(self) -> bool: ...

    @property
    def active_chunk(self) -> Chunk: ...

    def chunk_for(self, position: int) -> Chunk | None: ...

    def chunk_by_number(self, number: int) -> Chunk | None: ...


@dataclass(frozen=True, slots=True)
class FileInfo:
    path: str
    start: int
    end: int
    version: int


def scan_files(directory: str, chunk_size: int) -> tuple[list[FileInfo], list[str]]:
    """The chunk files (headers checked) and the leftover temporary files; changes nothing."""
    infos = []
    leftovers = []
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if name.endswith(".tmp"):
            leftovers.append(path)
            continue
        parsed = parse_chunk_file_name(name)
        if parsed is None:
            continue
        with open(path, "rb") as f:
            header = ChunkHeader.decode(f.read(HEADER_SIZE), path)
        if header.start_number != parsed[0]:
            raise CorruptedFile(path, f"file name says chunk {parsed[0]}, header says {header.start_number}")
        if header.chunk_size != chunk_size:
            raise CorruptedFile(
                path,
                f"chunk size {header.chunk_size} differs from the configured ChunkSize {chunk_size}",
            )
        infos.append(FileInfo(path, header.start_number, header.end_number, parsed[1]))
    return infos, leftovers


def choose_files(infos: list[FileInfo], directory: str, first: int = 0) -> tuple[list[FileInfo], list[str]]:
    """The chunk files that make the log from chunk ``first`` on (those before it are in the archive
    only), in order, and the paths of those a newer version (or a merged chunk) supersedes; refuses
    conflicting versions and a missing chunk."""
    infos.sort(key=lambda i: (i.start, -i.version))
    chosen: list[FileInfo] = []
    superseded: list[str] = []
    covered = first  # next chunk number not yet covered
    for info in infos:
        if info.start < covered:
            # an older version, or a chunk a newer merged chunk covers
            winner = chosen[-1]
            if info.version > winner.version and info.start == winner.start:
                raise CorruptedFile(info.path, "conflicting chunk versions")
            superseded.append(info.path)
            continue
        if info.start != covered:
            missing = os.path.join(directory, chunk_file_name(covered, 0))
            raise CorruptedFile(
                missing, f"chunk {covered} is missing (the next file starts at chunk {info.start})"
            )
        chosen.append(info)
        covered = info.end + 1
    return chosen, superseded


def find_end(log: OpeningLog, verify: bool) -> int:
    """The end of the log: the writer checkpoint, moved forward over appends that were made durable
    after the checkpoint was last written (see :meth:`Chunk.scan_valid_end`). Sets the active
    chunk's valid length in memory; changes no file."""
    w = log.checkpoints.writer.value
    writer_path = log.checkpoints.writer.path or "writer.chk"
    if w < 0:
        raise CorruptedFile(writer_path, f"writer checkpoint {w} is negative")
    if not log.has_chunks:
        if w != 0:
            raise CorruptedFile(writer_path, f"writer checkpoint {w} but no chunks")
        return 0
    last = log.active_chunk
    if last.is_completed:
        # a completed chunk is whole (its checksum verified): the writer is past it
        if w > last.end_position:
            raise CorruptedFile(writer_path, f"writer checkpoint {w} is beyond the log")
        return last.end_position
    if w < last.start_position:
        prev = log.chunk_by_number(last.start_number - 1) if last.start_number > 0 else None
        if prev is None or not prev.is_completed:
            raise CorruptedFile(writer_path, f"writer checkpoint {w} is behind the log's chunks")
        w = last.start_position
    if w > last.end_position:
        raise CorruptedFile(writer_path, f"writer checkpoint {w} is beyond the log")
    start = w - last.start_position
    if start > 0:
        try:
            last.recover_active(start, verify=verify)
        except CorruptedFile as exc:  # the records, or the checkpoint that says where they end
            raise CorruptedFile(
                exc.path, f"{exc.reason} (reading up to writer checkpoint {w} from {writer_path})"
            ) from None
    end = last.scan_valid_end(start)
    if end != start:
        log.logger.info("Recovered %d bytes of appends written after the writer checkpoint", end - start)
    last.recover_active(end, verify=False)
    return last.start_position + end


def check_checkpoints(log: OpeningLog, end: int) -> None:
    """Refuse checkpoint values no crash can leave, naming the file and the value."""
    chk = log.checkpoints

    def refuse(checkpoint, reason: str) -> None:
        raise CorruptedFile(checkpoint.path or "checkpoint", reason)

    if chk.chaser.value < 0:
        refuse(chk.chaser, f"chaser checkpoint {chk.chaser.value} is negative")
    if chk.proposal.value < -1:
        refuse(chk.proposal, f"proposal checkpoint {chk.proposal.value} is negative (only -1, none, is)")
    truncate = chk.truncate.value
    if truncate < -1:
        refuse(chk.truncate, f"truncate checkpoint {truncate} is negative (only -1, none, is)")
    if truncate > end:
        refuse(chk.truncate, f"truncate checkpoint {truncate} is beyond the end of the log ({end})")
    if truncate >= 0 and not is_cut_point(log, truncate, end):
        chunk = log.chunk_for(truncate)
        where = f" (inside {chunk.file_name})" if chunk is not None else ""
        refuse(chk.truncate, f"truncate checkpoint {truncate} is not a record boundary{where}")
    epoch = chk.epoch.value
    if epoch < -1:
        refuse(chk.epoch, f"epoch checkpoint {epoch} is negative (only -1, none, is)")
    if epoch >= end and truncate < 0:
        refuse(chk.epoch, f"epoch checkpoint {epoch} is beyond the end of the log ({end})")


def is_cut_point(log: OpeningLog, position: int, end: int) -> bool:
    """Whether the log can be cut at ``position`` (at most ``end``): the start of a record, the end
    of a chunk's data, or the end of the log. In a scavenged chunk any position up to its data end
    is one (the positions of the records it removed are not known; the cut keeps those before)."""
    if position == end:
        return True
    chunk = log.chunk_for(position)
    if chunk is None:
        return False
    if position == chunk.start_position:
        return True
    if chunk.is_scavenged:
        return position <= chunk.data_end_position
    offset = position - chunk.start_position
    if offset > chunk.physical_end:
        return False
    at = 0
    try:
        while at < offset:
            _, at = chunk.read_batch(at, offset, 4096)
    except CorruptedFile:  # the last record before it runs past it
        return False
    return at == offset
