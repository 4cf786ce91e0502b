"""Chunk files: the pieces of the transaction log.

Layout of ``chunk-NNNNNN.VVVVVV`` (NNNNNN: first chunk number covered, VVVVVV: version)::

    header (128 bytes) | framed records | [position map] | footer (128 bytes)

While a chunk is active (being appended to) the file is preallocated (sparse) to
``128 + chunk_size + 128`` bytes and has no footer; the writer checkpoint says how much of it is
valid. Completing a chunk writes the footer right after the data (and the position map, for
scavenged and merged chunks), truncates the file to its exact size and fsyncs it. The footer ends
with an xxh3-128 checksum of every byte before it.

A chunk is backed by an ``mmap``: of its file, or anonymous memory when the database is in memory
(MemDb). Readers take slices of the map; a chunk that is switched out stays readable for the readers
that still hold it.
"""

from __future__ import annotations

import mmap
import os
import struct
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import xxhash

from evdb.errors import CorruptedFile
from evdb.index.durable import fsync_dir
from evdb.storage import disk
from evdb.storage import records as rec

__all__ = [
    "FOOTER_SIZE",
    "HEADER_SIZE",
    "Chunk",
    "ChunkBuilder",
    "ChunkFooter",
    "ChunkHeader",
    "chunk_file_name",
    "fsync_dir",
    "parse_chunk_file_name",
]

HEADER_SIZE = 128
FOOTER_SIZE = 128
HEADER_MAGIC = b"EVDBCHNK"
FOOTER_MAGIC = b"EVDBFOOT"
FORMAT_VERSION = 1
# magic, format version, flags(bit0 scavenged), chunk size, start number, end number, chunk id, version
_HEADER = struct.Struct("<8sHHqii16si")
# magic, flags(bit0 completed), physical data size, data end position, posmap count
_FOOTER = struct.Struct("<8sIqqq")
_HASH_SIZE = 16


def chunk_file_name(start_number: int, version: int) -> str:
    return f"chunk-{start_number:06d}.{version:06d}"


def parse_chunk_file_name(name: str) -> tuple[int, int] | None:
    """``chunk-000003.000001`` -> (3, 1); None when the name is not a chunk file name."""
    if not name.startswith("chunk-") or len(name) < 19:
        return None
    number, dot, version = name[6:].partition(".")
    if not dot or not number.isdigit() or not version.isdigit():
        return None
    return int(number), int(version)


@dataclass(frozen=True, slots=True)
class ChunkHeader:
    chunk_size: int
    start_number: int
    end_number: int
    is_scavenged: bool
    chunk_id: bytes
    version: int = 0

    def encode(self) -> bytes:
        raw = _HEADER.pack(
            HEADER_MAGIC,
            FORMAT_VERSION,
            1 if self.is_scavenged else 0,
            self.chunk_size,
            self.start_number,
            self.end_number,
            self.chunk_id,
            self.version,
        )
        return raw.ljust(HEADER_SIZE, b"\0")

    @classmethod
    def decode(cls, buf, where: str) -> ChunkHeader:
        if len(buf) < HEADER_SIZE:
            raise CorruptedFile(where, "file too short for a chunk header")
        magic, fmt, flags, size, start, end, cid, version = _HEADER.unpack_from(buf, 0)
        if magic != HEADER_MAGIC:
            raise CorruptedFile(where, "not a chunk file (bad header magic)")
        if fmt != FORMAT_VERSION:
            raise CorruptedFile(where, f"unsupported chunk format version {fmt}")
        if size <= 0 or start < 0 or end < start:
            raise CorruptedFile(where, "chunk header has an invalid size or range")
        return cls(size, start, end, bool(flags & 1), cid, version)


@dataclass(frozen=True, slots=True)
class ChunkFooter:
    physical_data_size: int
    data_end_position: int  # global logical position just after the last record the chunk covers
    posmap_count: int
    checksum: bytes = b""

    def encode_without_checksum(self) -> bytes:
        raw = _FOOTER.pack(
            FOOTER_MAGIC, 1, self.physical_data_size, self.data_end_position, self.posmap_count
        )
        return raw.ljust(FOOTER_SIZE - _HASH_SIZE, b"\0")

    @classmethod
    def decode(cls, buf, offset: int, where: str) -> ChunkFooter:
        magic, flags, physical, end_pos, count = _FOOTER.unpack_from(buf, offset)
        if magic != FOOTER_MAGIC or not flags & 1:
            raise CorruptedFile(where, "chunk footer missing or damaged")
        checksum = bytes(buf[offset + FOOTER_SIZE - _HASH_SIZE : offset + FOOTER_SIZE])
        return cls(physical, end_pos, count, checksum)


def _posmap_bytes(count: int) -> int:
    return count * 16


class Chunk:
    """One chunk file (or memory region) holding the records of one or more logical chunks."""

    def __init__(
        self,
        *,
        path: str | None,
        header: ChunkHeader,
        footer: ChunkFooter | None,
        buf: mmap.mmap,
        physical_end: int,
        fd: int | None = None,
    ) -> None:
        self.path = path
        self.header = header
        self.footer = footer
        self._buf = buf
        self.physical_end = physical_end  # valid data bytes (active: grows as the writer appends)
        self._fd = fd
        self._hasher: xxhash.xxh3_128 | None = None
        self._posmap_positions: np.ndarray | None = None
        self._posmap_offsets: np.ndarray | None = None
        self._lock = threading.Lock()
        #: a file-backed active chunk: bytes appended since :meth:`write_out` last gave them to the file
        #: (one pwrite per commit group, not per append), and their offset
        self._unwritten = bytearray()
        self._unwritten_at = 0
        #: how far the file has been given bytes (a rollback zeroes no further: past it the file holds
        #: only zeros, and writing them could fail on a full disk where nothing needs writing)
        self._file_end = physical_end
        if footer is not None and footer.posmap_count:
            self._load_posmap()

    # -- identity -------------------------------------------------------------------------------------
    @property
    def start_number(self) -> int:
        return self.header.start_number

    @property
    def end_number(self) -> int:
        return self.header.end_number

    @property
    def chunk_size(self) -> int:
        return self.header.chunk_size

    @property
    def start_position(self) -> int:
        return self.header.start_number * self.header.chunk_size

    @property
    def end_position(self) -> int:
        """Exclusive logical end of the range of logical chunks this chunk covers."""
        return (self.header.end_number + 1) * self.header.chunk_size

    @property
    def is_completed(self) -> bool:
        return self.footer is not None

    @property
    def is_scavenged(self) -> bool:
        return self.header.is_scavenged

    @property
    def version(self) -> int:
        return self.header.version

    @property
    def file_name(self) -> str:
        return os.path.basename(self.path) if self.path else chunk_file_name(self.start_number, self.version)

    @property
    def file_version(self) -> int:
        """The version in the file name (which decides between versions at open). The same as the
        header's, except for a chunk installed from the leader: it keeps the leader's exact bytes
        (header included) under a version above every older one this node had."""
        parsed = parse_chunk_file_name(os.path.basename(self.path)) if self.path else None
        return parsed[1] if parsed is not None else self.header.version

    @property
    def data_end_position(self) -> int:
        """Global logical position just after the last record this chunk holds or held."""
        if self.footer is not None:
            return self.footer.data_end_position
        return self.start_position + self.physical_end

    @property
    def file_size(self) -> int:
        if self.footer is None:
            return HEADER_SIZE + self.chunk_size + FOOTER_SIZE
        return HEADER_SIZE + self.physical_end + _posmap_bytes(self.footer.posmap_count) + FOOTER_SIZE

    @property
    def buffer(self) -> mmap.mmap:
        return self._buf

    def __repr__(self) -> str:
        state = "completed" if self.is_completed else "active"
        return f"<Chunk {self.file_name} {self.start_number}-{self.end_number} {state}>"

    # -- creation and opening -------------------------------------------------------------------------
    @classmethod
    def create_active(cls, directory: str | None, chunk_size: int, number: int, version: int = 0) -> Chunk:
        """Create a new, empty active chunk; durable under its final name before it is returned."""
        header = ChunkHeader(chunk_size, number, number, False, uuid.uuid4().bytes, version)
        size = HEADER_SIZE + chunk_size + FOOTER_SIZE
        if directory is None:
            buf = mmap.mmap(-1, size)
            buf[:HEADER_SIZE] = header.encode()
            chunk = cls(path=None, header=header, footer=None, buf=buf, physical_end=0)
        else:
            final = os.path.join(directory, chunk_file_name(number, version))
            tmp = os.path.join(directory, f"{uuid.uuid4().hex}.chunk.tmp")
            fd = disk.current.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                disk.write_all(fd, header.encode(), 0)
                disk.current.ftruncate(fd, size)
                _allocate(fd, size, final)
                disk.current.fsync(fd)
                disk.current.rename(tmp, final)
            except OSError as exc:
                os.close(fd)
                _unlink_quietly(tmp)
                if exc.filename is None:  # a write or sync on the descriptor: name the chunk
                    raise OSError(exc.errno, exc.strerror, final) from exc
                raise
            except BaseException:
                os.close(fd)
                _unlink_quietly(tmp)
                raise
            fsync_dir(directory)
            buf = mmap.mmap(fd, size, access=mmap.ACCESS_READ)
            chunk = cls(path=final, header=header, footer=None, buf=buf, physical_end=0, fd=fd)
        chunk._hasher = xxhash.xxh3_128(header.encode())
        return chunk

    @classmethod
    def open(cls, path: str, *, verify: bool = True, writable: bool = False) -> Chunk:
        """Open a chunk file. A completed chunk is checked (sizes; checksum unless ``verify`` is off).

        An active chunk (no footer) is opened for appending when ``writable``; its valid length is
        set afterwards by :meth:`recover_active` from the writer checkpoint.
        """
        fd = disk.current.open(path, os.O_RDWR) if writable else os.open(path, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            if size < HEADER_SIZE + FOOTER_SIZE:
                raise CorruptedFile(path, f"file is {size} bytes, too short for a chunk")
            if writable:
                # the active chunk may be sparse (made by ftruncate alone): its blocks now, before the
                # map's first read of a hole would need one (SIGBUS on a full tmpfs)
                _allocate(fd, size, path)
            buf = mmap.mmap(fd, size, access=mmap.ACCESS_READ)
            header = ChunkHeader.decode(buf, path)
            footer = _try_footer(buf, size, header, path)
            if footer is None:
                if size != HEADER_SIZE + header.chunk_size + FOOTER_SIZE:
                    raise CorruptedFile(path, "active chunk has the wrong size (truncated?)")
                if not writable:
                    raise CorruptedFile(path, "chunk is not completed")
                return cls(path=path, header=header, footer=None, buf=buf, physical_end=0, fd=fd)
            if verify:
                digest = xxhash.xxh3_128(memoryview(buf)[: size - _HASH_SIZE]).digest()
                if digest != footer.checksum:
                    raise CorruptedFile(path, "chunk checksum mismatch")
            chunk = cls(
                path=path, header=header, footer=footer, buf=buf, physical_end=footer.physical_data_size
            )
            os.close(fd)
            if verify:
                chunk.drop_pages()  # the checksum touched every page: they stay in the page cache only
            return chunk
        except BaseException:
            try:
                os.close(fd)
            except OSError:
                pass
            raise

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> Chunk:
        """A completed chunk from the exact bytes of its file, in anonymous memory (an in-memory
        database's copy of a chunk file sent by the leader); size and checksum are checked."""
        if len(data) < HEADER_SIZE + FOOTER_SIZE:
            raise CorruptedFile(where, f"{len(data)} bytes, too short for a chunk")
        buf = mmap.mmap(-1, len(data))
        buf[:] = data
        header = ChunkHeader.decode(buf, where)
        footer = _try_footer(buf, len(data), header, where)
        if footer is None:
            raise CorruptedFile(where, "chunk is not completed (no footer)")
        if xxhash.xxh3_128(memoryview(buf)[: len(data) - _HASH_SIZE]).digest() != footer.checksum:
            raise CorruptedFile(where, "chunk checksum mismatch")
        return cls(path=None, header=header, footer=footer, buf=buf, physical_end=footer.physical_data_size)

    def recover_active(self, physical_end: int, *, verify: bool = True) -> None:
        """Set the valid length of an active chunk after a restart, and rebuild its running checksum.

        With ``verify`` every record up to ``physical_end`` is decoded (CRC checked), so a damaged
        active chunk is reported by name rather than served.
        """
        if physical_end < 0 or physical_end > self.chunk_size:
            raise CorruptedFile(
                self.path or "memory", f"writer checkpoint {physical_end} is outside the chunk"
            )
        if verify:
            offset = 0
            while offset < physical_end:
                _, offset = self.read_at(offset, limit=physical_end)
            if offset != physical_end:
                raise CorruptedFile(self.path or "memory", "writer checkpoint is not on a record boundary")
        self.physical_end = physical_end
        self._hasher = xxhash.xxh3_128(memoryview(self._buf)[: HEADER_SIZE + physical_end])

    def scan_valid_end(self, start: int) -> int:
        """Where the log really ends in an active chunk, from ``start`` (the writer checkpoint).

        The writer checkpoint is not fsynced with every append (the chunk is), so records after it
        may be durable and acknowledged. They count when every one of their frames verifies, each
        claims the position it sits at, and their append is whole (from its TransactionBegin record
        to its TransactionEnd record). The first torn or stale frame ends the scan.
        """
        offset = end = start
        in_append = False
        while offset < self.chunk_size:
            try:
                record, nxt = self.read_at(offset, limit=self.chunk_size)
            except CorruptedFile:
                break
            if record.log_position != self.start_position + offset:
                break
            if isinstance(record, rec.SystemRecord):
                if in_append:
                    break
                end = nxt
            else:
                if record.flags & rec.RecordFlags.TRANSACTION_BEGIN:
                    if in_append:
                        break
                    in_append = True
                elif not in_append:
                    break
                if record.flags & rec.RecordFlags.TRANSACTION_END:
                    in_append = False
                    end = nxt
            offset = nxt
        return end

    def zero_tail(self, start: int, end: int) -> None:
        """Overwrite ``[start, end)`` of the data with zeros (so stale records can never be taken
        for valid ones after a rollback or a truncation)."""
        if end <= start or self.footer is not None:
            return
        zeros = bytes(min(end - start, 1 << 20))
        offset = start
        while offset < end:
            piece = zeros[: min(len(zeros), end - offset)]
            if self._fd is None:
                self._buf[HEADER_SIZE + offset : HEADER_SIZE + offset + len(piece)] = piece
            else:
                disk.write_all(self._fd, piece, HEADER_SIZE + offset)
            offset += len(piece)
        if self._fd is not None:
            disk.current.fdatasync(self._fd)

    # -- appending (active chunk only; one writer) -----------------------------------------------------
    def space_left(self) -> int:
        return self.chunk_size - self.physical_end

    def write(self, data: bytes) -> int:
        """Append bytes at the end of the data; returns the physical offset they start at."""
        if self.footer is not None:
            raise RuntimeError("cannot write to a completed chunk")
        offset = self.physical_end
        if offset + len(data) > self.chunk_size:
            raise ValueError("data does not fit in the chunk")
        if self._fd is None:
            self._buf[HEADER_SIZE + offset : HEADER_SIZE + offset + len(data)] = data
        else:  # the file gets them at write_out (before the sync that commits them, and any read)
            if not self._unwritten:
                self._unwritten_at = offset
            self._unwritten += data
        assert self._hasher is not None
        self._hasher.update(data)
        self.physical_end = offset + len(data)
        return offset

    def write_out(self) -> None:
        """Give the file what :meth:`write` appended since the last call, in one pwrite (the writer
        calls it once per commit group, before the records are shipped or synced: a GIL release and a
        system call per group instead of per append). Nothing is durable before :meth:`flush`."""
        if not self._unwritten:
            return
        assert self._fd is not None
        data, self._unwritten = self._unwritten, bytearray()
        view = memoryview(data)
        written = 0
        at = HEADER_SIZE + self._unwritten_at
        while written < len(data):
            written += disk.current.pwrite(self._fd, view[written:], at + written)
            self._file_end = max(self._file_end, self._unwritten_at + written)

    def rollback(self, physical_end: int) -> None:
        """Forget data written after ``physical_end`` (it was never committed)."""
        if self.footer is not None and physical_end == self.physical_end:
            return  # nothing after the end of a completed chunk (its successor could not be created)
        if self.footer is not None or not 0 <= physical_end <= self.physical_end:
            raise ValueError("cannot roll back a completed chunk or past its end")
        self._unwritten = bytearray()  # never given to the file
        # zero what the file was given past the new end (part of a write_out that failed included)
        end = self.physical_end if self._fd is None else min(self._file_end, self.physical_end)
        self.zero_tail(physical_end, end)
        self._file_end = min(self._file_end, physical_end)
        self.physical_end = physical_end
        self._hasher = xxhash.xxh3_128(memoryview(self._buf)[: HEADER_SIZE + physical_end])

    def flush(self) -> None:
        if self._fd is not None:
            self.write_out()
            disk.current.fdatasync(self._fd)

    def complete(self) -> None:
        """Write the footer, cut the file to its exact size and make it durable.

        The footer is synced before the cut: a power loss then leaves either a full-size file (an
        active chunk, its footer after the data taken for a torn record and zeroed at the next open)
        or the exact size with a whole footer. Cut first, a lost or torn footer left a short file
        with no footer, which no open accepts (found by tests/storage/test_power_loss.py)."""
        if self.footer is not None:
            return
        if self._fd is not None:
            self.write_out()  # the data before the footer that follows it
        assert self._hasher is not None
        footer = ChunkFooter(self.physical_end, self.start_position + self.physical_end, 0)
        tail = footer.encode_without_checksum()
        self._hasher.update(tail)
        checksum = self._hasher.digest()
        footer_bytes = tail + checksum
        end = HEADER_SIZE + self.physical_end + FOOTER_SIZE
        if self._fd is None:
            self._buf[HEADER_SIZE + self.physical_end : end] = footer_bytes
        else:
            disk.write_all(self._fd, footer_bytes, HEADER_SIZE + self.physical_end)
            disk.current.fdatasync(self._fd)
            disk.current.ftruncate(self._fd, end)
            disk.current.fsync(self._fd)
            self._buf = mmap.mmap(self._fd, end, access=mmap.ACCESS_READ)
            os.close(self._fd)
            self._fd = None
        self.footer = ChunkFooter(footer.physical_data_size, footer.data_end_position, 0, checksum)
        self._hasher = None

    def drop_pages(self, offset: int = 0, length: int | None = None) -> None:
        """Unmap the file's pages from ``offset`` for ``length`` bytes (to the end by default) from
        this process (``madvise(MADV_DONTNEED)``; whole pages: ``offset`` is rounded down to one)
        without unmapping the file: they stay in the page cache, and the next read maps them again
        (a minor fault), so nothing changes for readers but this process's RSS. Only a completed
        chunk's file: an in-memory chunk's pages are its data, and an active chunk's map is written
        to. Used after a whole-file read (the checksum at open, a scavenge's pass), so RSS as ``ps``
        shows it does not hold every byte of the database."""
        if self.path is None or self.footer is None or self._fd is not None:
            return
        disk.drop_pages(self._buf, offset, length)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    # -- reading ---------------------------------------------------------------------------------------
    def _load_posmap(self) -> None:
        assert self.footer is not None
        count = self.footer.posmap_count
        base = HEADER_SIZE + self.footer.physical_data_size
        raw = np.frombuffer(self._buf, dtype="<i8", count=2 * count, offset=base)
        self._posmap_positions = raw[:count]
        self._posmap_offsets = raw[count:]

    def posmap_offsets(self) -> np.ndarray | None:
        """The physical offsets of a scavenged or merged chunk's records (its position map, which
        lists every record it holds); None for a chunk without one."""
        return self._posmap_offsets

    def posmap_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(logical positions, physical offsets) of a scavenged or merged chunk's records, from its
        position map (empty arrays for a chunk without one)."""
        if self._posmap_positions is None or self._posmap_offsets is None:
            return np.zeros(0, dtype="<i8"), np.zeros(0, dtype="<i8")
        return self._posmap_positions, self._posmap_offsets

    def physical_offset(self, position: int) -> int | None:
        """Physical offset of the record at logical ``position``; None when no record starts there."""
        positions, offsets = self._posmap_positions, self._posmap_offsets  # both set, or neither
        if positions is None or offsets is None:
            if self.is_scavenged:
                return None  # a scavenged chunk that kept nothing
            offset = position - self.start_position
            return offset if 0 <= offset < self.physical_end else None
        i = int(np.searchsorted(positions, position))
        if i < len(positions) and int(positions[i]) == position:
            return int(offsets[i])
        return None

    def physical_offset_at_or_after(self, position: int) -> int:
        """Physical offset of the first record whose logical position is >= ``position``.

        For an unscavenged chunk ``position`` must be a record boundary (or the chunk start).
        """
        positions, offsets = self._posmap_positions, self._posmap_offsets  # both set, or neither
        if positions is None or offsets is None:
            if self.is_scavenged:
                return self.physical_end
            return max(0, min(position - self.start_position, self.physical_end))
        i = int(np.searchsorted(positions, position))
        return int(offsets[i]) if i < len(offsets) else self.physical_end

    def read_at(
        self, offset: int, limit: int | None = None
    ) -> tuple[rec.EventRecord | rec.SystemRecord, int]:
        """Decode the record at physical ``offset``; returns it and the next record's physical offset."""
        end = self.physical_end if limit is None else limit
        record, after = rec.read_frame(
            self._buf, HEADER_SIZE + offset, HEADER_SIZE + end, where=self.path or self.file_name
        )
        return record, after - HEADER_SIZE

    def read_batch(self, offset: int, limit: int, max_records: int) -> tuple[list, int]:
        """Up to ``max_records`` records from physical ``offset``; returns them and the next offset."""
        records, end = rec.read_frames(
            self._buf,
            HEADER_SIZE + offset,
            HEADER_SIZE + limit,
            max_records,
            where=self.path or self.file_name,
        )
        return records, end - HEADER_SIZE

    def read_before(self, offset: int) -> tuple[rec.EventRecord | rec.SystemRecord, int]:
        """Decode the record that ends at physical ``offset``; returns it and its physical start."""
        record, begin = rec.read_frame_before(
            self._buf, HEADER_SIZE + offset, HEADER_SIZE, where=self.path or self.file_name
        )
        return record, begin - HEADER_SIZE

    def raw_frame(self, offset: int) -> bytes:
        """The framed bytes of the record at physical ``offset`` (for copying into a new chunk)."""
        size = rec.frame_size_at(self._buf, HEADER_SIZE + offset)
        return bytes(self._buf[HEADER_SIZE + offset : HEADER_SIZE + offset + size])

    def iter_records(
        self, offset: int = 0, limit: int | None = None
    ) -> Iterator[rec.EventRecord | rec.SystemRecord]:
        end = self.physical_end if limit is None else limit
        buf = self._buf
        where = self.path or self.file_name
        pos = HEADER_SIZE + offset
        stop = HEADER_SIZE + end
        while pos < stop:
            record, pos = rec.read_frame(buf, pos, stop, where=where)
            yield record


def _try_footer(buf, size: int, header: ChunkHeader, path: str) -> ChunkFooter | None:
    """The footer of a completed chunk, or None for an active (preallocated) one."""
    offset = size - FOOTER_SIZE
    if bytes(buf[offset : offset + 8]) != FOOTER_MAGIC:
        return None
    footer = ChunkFooter.decode(buf, offset, path)
    expected = HEADER_SIZE + footer.physical_data_size + _posmap_bytes(footer.posmap_count) + FOOTER_SIZE
    if expected != size:
        raise CorruptedFile(path, f"chunk file is {size} bytes but its footer says {expected}")
    return footer


class ChunkBuilder:
    """Writes a new completed chunk (scavenged or merged) under a temporary name.

    Records are added in log order with their logical positions; :meth:`finish` writes the position
    map and the footer, fsyncs, and returns the chunk, still under its temporary name. The log's
    ``switch_chunk`` makes it the live version.
    """

    def __init__(
        self,
        directory: str | None,
        *,
        chunk_size: int,
        start_number: int,
        end_number: int,
        version: int,
        data_end_position: int,
        temp_suffix: str = ".scavenge.tmp",
    ) -> None:
        self.header = ChunkHeader(chunk_size, start_number, end_number, True, uuid.uuid4().bytes, version)
        self.data_end_position = data_end_position
        self.directory = directory
        self.temp_suffix = temp_suffix
        self.path = os.path.join(directory, uuid.uuid4().hex + temp_suffix) if directory is not None else None
        self._positions: list[int] = []
        self._offsets: list[int] = []
        self._position_parts: list[np.ndarray] = []  # blocks added by add_records, in order
        self._offset_parts: list[np.ndarray] = []
        self._size = 0
        self._hasher = xxhash.xxh3_128()
        #: seconds spent in the checksum (the scavenge worker reports it with its copy's other times)
        self.hash_seconds = 0.0
        self._parts: list[bytes] = []
        self._file: disk.SequentialWriter | None = None  # closed in finish/abort
        if self.path is not None:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
            self._file = disk.SequentialWriter(disk.current.open(self.path, flags, 0o644))
        self._emit(self.header.encode())

    def _emit(self, data) -> None:
        started = time.perf_counter()
        self._hasher.update(data)
        self.hash_seconds += time.perf_counter() - started
        if self._file is not None:
            self._file.write(data)
        else:
            self._parts.append(bytes(data))

    @property
    def physical_size(self) -> int:
        return self._size

    def add(self, frame: bytes, logical_position: int) -> None:
        self._positions.append(logical_position)
        self._offsets.append(self._size)
        self._emit(frame)
        self._size += len(frame)

    def _flush_listed(self) -> None:
        if self._positions:
            self._position_parts.append(np.array(self._positions, dtype="<i8"))
            self._offset_parts.append(np.array(self._offsets, dtype="<i8"))
            self._positions, self._offsets = [], []

    def add_records(
        self,
        buf,
        offsets: np.ndarray,
        sizes: np.ndarray,
        positions: np.ndarray,
        should_stop: Callable[[], bool] = lambda: False,
    ) -> None:
        """Add the framed records at ``offsets`` (absolute offsets into ``buf``, in log order) with
        their ``sizes`` and logical ``positions``. Runs of neighbouring records are copied as one
        slice each, in pieces of at most 8 MiB (``should_stop`` is checked before the first piece
        and then once per 8 MiB copied: a scavenge worker's check costs a system call or two, and a
        chunk of short runs has thousands of them)."""
        count = len(offsets)
        if not count:
            return
        self._flush_listed()
        offsets = np.asarray(offsets, dtype=np.int64)
        sizes = np.asarray(sizes, dtype=np.int64)
        new_offsets = np.empty(count, dtype="<i8")
        new_offsets[0] = 0
        np.cumsum(sizes[:-1], out=new_offsets[1:])
        new_offsets += self._size
        self._position_parts.append(np.asarray(positions, dtype="<i8").copy())
        self._offset_parts.append(new_offsets)
        ends = offsets + sizes
        breaks = np.nonzero(offsets[1:] != ends[:-1])[0] + 1
        run_starts = np.concatenate(([0], breaks)).tolist()
        run_ends = np.concatenate((breaks, [count])).tolist()
        view = memoryview(buf)
        piece = 8 << 20
        unchecked = piece  # bytes copied since should_stop was last asked
        for a, b in zip(run_starts, run_ends, strict=True):
            start, stop = int(offsets[a]), int(ends[b - 1])
            while start < stop:
                if unchecked >= piece:
                    if should_stop():
                        raise InterruptedError("copy stopped")
                    unchecked = 0
                end = min(stop, start + piece)
                self._emit(view[start:end])
                self._size += end - start
                unchecked += end - start
                start = end
        view.release()

    def finish(self, *, sync: bool = True) -> Chunk:
        """Write the position map and the footer; fsync the file unless ``sync`` is off (the caller
        then fsyncs it before anything makes it live: the scavenge does, while the next copy is made)."""
        self._flush_listed()
        positions = np.concatenate(self._position_parts) if self._position_parts else np.zeros(0, "<i8")
        offsets = np.concatenate(self._offset_parts) if self._offset_parts else np.zeros(0, "<i8")
        count = len(positions)
        posmap = positions.astype("<i8").tobytes() + offsets.astype("<i8").tobytes()
        self._emit(posmap)
        footer = ChunkFooter(self._size, self.data_end_position, count)
        tail = footer.encode_without_checksum()
        self._emit(tail)
        checksum = self._hasher.digest()
        if self._file is not None:
            assert self.path is not None  # the file was opened at self.path
            self._file.write(checksum)
            self._file.flush()
            if sync:
                disk.current.fsync(self._file.fd)
            os.close(self._file.fd)
            self._file = None
            fd = os.open(self.path, os.O_RDONLY)
            try:
                buf = mmap.mmap(fd, os.fstat(fd).st_size, access=mmap.ACCESS_READ)
            finally:
                os.close(fd)
        else:
            data = b"".join(self._parts) + checksum
            buf = mmap.mmap(-1, len(data))
            buf[:] = data
            self._parts = []
        return Chunk(
            path=self.path,
            header=self.header,
            footer=ChunkFooter(self._size, self.data_end_position, count, checksum),
            buf=buf,
            physical_end=self._size,
        )

    def copy_from(
        self,
        chunk: Chunk,
        discard: Callable[[rec.EventRecord | rec.SystemRecord], bool] | None = None,
        should_stop: Callable[[], bool] = lambda: False,
    ) -> int:
        """Copy ``chunk``'s records (keeping their positions), except those ``discard`` rejects.

        Returns how many were discarded; checks ``should_stop`` between batches of records.
        """
        removed = 0
        offset = 0
        buf = chunk.buffer
        while offset < chunk.physical_end:
            if should_stop():
                raise InterruptedError("copy stopped")
            time.sleep(0)  # let other threads (appends) have the GIL between batches
            records, _ = chunk.read_batch(offset, chunk.physical_end, 256)
            for record in records:
                size = record.size
                if discard is not None and discard(record):
                    removed += 1
                else:
                    self.add(
                        bytes(buf[HEADER_SIZE + offset : HEADER_SIZE + offset + size]), record.log_position
                    )
                offset += size
        return removed

    def abort(self) -> None:
        file, self._file = self._file, None
        try:
            if file is not None:
                os.close(file.fd)  # what is still buffered is thrown away with the copy
        finally:
            if self.path:
                _unlink_quietly(self.path)


def _allocate(fd: int, size: int, path: str) -> None:
    """Every block of an active chunk's ``size`` bytes, so reading any part of its map never needs
    one: an OSError ENOSPC naming ``path`` when the disk cannot hold them."""
    try:
        disk.current.fallocate(fd, 0, size)
    except OSError as exc:
        raise OSError(exc.errno, f"{exc.strerror}; an active chunk takes {size} bytes", path) from None


def _unlink_quietly(path: str) -> None:
    try:
        disk.current.unlink(path)
    except FileNotFoundError:
        pass
