"""PTables: immutable files of index entries sorted by (hash, event number, log position).

A table is named by a GUID in its standard lowercase form (``0f8fad5b-d9cb-469f-a165-70867728950e``),
the names the spec's backup procedure copies. Layout (little-endian)::

    0          64 bytes   header: magic "EVDBPTBL", u16 format version, u16 level, u32 zero,
                          u64 entry count n, 40 zero bytes
    64         8n bytes   stream hashes, u64, ascending
    64+8n      8n bytes   event numbers, i64 (ascending within one hash)
    64+16n     8n bytes   log positions, i64 (ascending within one (hash, number))
    64+24n     32 bytes   footer: magic "EVDBPEND", u64 n again, xxh3-128 of bytes [0, 64+24n+16)

Column-wise, so that ``numpy.searchsorted`` on the memory-mapped hash column finds a stream's range
in O(log n) pages without reading or copying the rest. The checksum is verified when a table is
opened: a flipped byte or a short file raises ``CorruptedFile`` naming the table.

A table is written under ``<GUID>.tmp``, fsynced, renamed, and the folder fsynced; its
``.bloomfilter`` sidecar likewise, before any indexmap names the table. It never changes again.
"""

from __future__ import annotations

import logging
import mmap
import os
import re
import struct
import uuid
from collections.abc import Iterator

import numpy as np
import xxhash

from evdb.errors import CorruptedFile
from evdb.index.bloom import (
    BloomSidecar,
    build_bloom,
    read_sidecar,
    sidecar_path,
    sidecar_size,
    write_sidecar,
)
from evdb.index.durable import TMP_SUFFIX, fsync_dir, remove_durably, replace_durably
from evdb.index.memtable import Entries
from evdb.index.merge import is_sorted

__all__ = [
    "ENTRY_SIZE",
    "FOOTER_SIZE",
    "HEADER_SIZE",
    "TABLE_NAME",
    "PTable",
    "TableWriter",
    "new_table_name",
    "write_table",
]

MAGIC = b"EVDBPTBL"
END_MAGIC = b"EVDBPEND"
FORMAT_VERSION = 1
_HEADER = struct.Struct("<8sHHIQ")
HEADER_SIZE = 64
_FOOTER_HEAD = struct.Struct("<8sQ")
FOOTER_SIZE = 32
DIGEST_SIZE = 16
ENTRY_SIZE = 24
INT64_MAX = (1 << 63) - 1
INT64_MIN = -(1 << 63)
_UINT64_MAX = (1 << 64) - 1
TABLE_NAME = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_CHECKSUM_BLOCK = 8 << 20
_log = logging.getLogger("evdb.index")


def new_table_name() -> str:
    return str(uuid.uuid4())


def table_file_size(count: int) -> int:
    return HEADER_SIZE + ENTRY_SIZE * count + FOOTER_SIZE


class PTable:
    """One immutable sorted table: memory-mapped from its file, or plain arrays for an in-memory index."""

    __slots__ = ("bloom", "bloom_size", "digest", "hashes", "level", "name", "numbers", "path", "positions")

    def __init__(
        self,
        name: str,
        level: int,
        entries: Entries,
        digest: bytes,
        sidecar: BloomSidecar,
        *,
        path: str | None = None,
        bloom_size: int = 0,
    ) -> None:
        self.name = name
        self.level = level
        self.hashes, self.numbers, self.positions = entries
        self.digest = digest
        self.bloom = sidecar.bloom
        self.bloom_size = bloom_size
        self.path = path

    def __len__(self) -> int:
        return len(self.hashes)

    def __repr__(self) -> str:
        return f"<PTable {self.name} level {self.level}, {len(self)} entries>"

    @property
    def entries(self) -> Entries:
        return self.hashes, self.numbers, self.positions

    @property
    def size(self) -> int:
        """Bytes on disk: the table and its bloom filter (what the file form would take, in memory)."""
        return table_file_size(len(self)) + self.bloom_size

    # -- opening ---------------------------------------------------------------------------------------
    @classmethod
    def open(cls, directory: str, name: str) -> PTable:
        """Map a table and verify its checksum; rebuild its bloom filter when that is not right."""
        path = os.path.join(directory, name)
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size < HEADER_SIZE + FOOTER_SIZE:
                    raise CorruptedFile(path, f"index table is {size} bytes: truncated")
                buffer = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except FileNotFoundError:
            raise CorruptedFile(path, "index table named by indexmap is missing") from None
        magic, version, level, _, count = _HEADER.unpack_from(buffer, 0)
        if magic != MAGIC:
            raise CorruptedFile(path, "not an evdb index table (bad magic)")
        if version != FORMAT_VERSION:
            raise CorruptedFile(path, f"unknown index table format version {version}")
        if size != table_file_size(count):
            raise CorruptedFile(
                path,
                f"index table is {size} bytes but holds {count} entries ({table_file_size(count)} bytes)",
            )
        end_magic, end_count = _FOOTER_HEAD.unpack_from(buffer, size - FOOTER_SIZE)
        if end_magic != END_MAGIC or end_count != count:
            raise CorruptedFile(path, "index table footer is damaged")
        digest = bytes(buffer[size - DIGEST_SIZE :])
        if _digest_of(memoryview(buffer), size - DIGEST_SIZE) != digest:
            raise CorruptedFile(path, "index table checksum mismatch")
        entries = _columns(buffer, count)
        sidecar = read_sidecar(path)
        bloom_size = 0
        if sidecar is None or sidecar.table_digest != digest:
            _log.warning("Bloom filter of index table %s is missing or damaged: rebuilding it", path)
            sidecar = _sidecar_for(entries[0], digest)
            bloom_size = write_sidecar(path, sidecar)
        else:
            bloom_size = os.path.getsize(sidecar_path(path))
        if hasattr(mmap, "MADV_DONTNEED"):
            # the checksum read every page: let this process's mapping of them go (they stay in the page
            # cache; a lookup maps the few it needs again), so RSS does not hold every table at open
            buffer.madvise(mmap.MADV_DONTNEED)
        return cls(name, level, entries, digest, sidecar, path=path, bloom_size=bloom_size)

    def delete(self) -> None:
        """Remove the table's files (readers still holding the mapping keep reading it)."""
        if self.path is not None:
            remove_durably([self.path, sidecar_path(self.path)])

    # -- lookups ---------------------------------------------------------------------------------------
    def range_of(self, h: int) -> tuple[int, int]:
        """``[lo, hi)``: where the entries of hash ``h`` are (empty when the bloom filter says none)."""
        if h not in self.bloom:
            return 0, 0
        if h == _UINT64_MAX:
            return int(self.hashes.searchsorted(np.uint64(h), "left")), len(self.hashes)
        # the end of h's run is where h + 1 would go: both bounds from one binary search call
        bounds = self.hashes.searchsorted(np.array((h, h + 1), dtype=np.uint64))
        return bounds.item(0), bounds.item(1)

    def iter_forward(self, h: int, from_number: int) -> Iterator[tuple[int, int]] | None:
        """(number, position) with number >= ``from_number``, ascending; None when there are none."""
        lo, hi = self.range_of(h)
        if lo == hi:
            return None
        start = lo + int(self.numbers[lo:hi].searchsorted(np.int64(from_number), "left"))
        if start == hi:
            return None
        return _ascending(self.numbers, self.positions, start, hi)

    def iter_backward(self, h: int, before_number: int | None) -> Iterator[tuple[int, int]] | None:
        """(number, position) with number < ``before_number``, descending; None when there are none."""
        lo, hi = self.range_of(h)
        if lo == hi:
            return None
        end = hi
        if before_number is not None:
            end = lo + int(self.numbers[lo:hi].searchsorted(np.int64(before_number), "left"))
        if end == lo:
            return None
        return _descending(self.numbers, self.positions, lo, end)

    def get(self, h: int, number: int) -> list[int]:
        """Positions of the entries (h, number), ascending."""
        lo, hi = self.range_of(h)
        if lo == hi:
            return []
        numbers = self.numbers[lo:hi]
        key = np.int64(number)
        a, b = int(numbers.searchsorted(key, "left")), int(numbers.searchsorted(key, "right"))
        return self.positions[lo + a : lo + b].tolist()


def _ascending(
    numbers: np.ndarray, positions: np.ndarray, start: int, stop: int
) -> Iterator[tuple[int, int]]:
    """Entries ``[start, stop)`` in order: the first alone (often the only one read), then growing blocks."""
    yield numbers.item(start), positions.item(start)
    start, step = start + 1, 8
    while start < stop:
        end = min(stop, start + step)
        yield from zip(numbers[start:end].tolist(), positions[start:end].tolist(), strict=True)
        start, step = end, min(step * 4, 4096)


def _descending(
    numbers: np.ndarray, positions: np.ndarray, start: int, stop: int
) -> Iterator[tuple[int, int]]:
    """Entries ``[start, stop)`` in reverse order: the last alone (a stream's last event), then blocks."""
    stop -= 1
    yield numbers.item(stop), positions.item(stop)
    step = 8
    while stop > start:
        begin = max(start, stop - step)
        yield from zip(
            reversed(numbers[begin:stop].tolist()), reversed(positions[begin:stop].tolist()), strict=True
        )
        stop, step = begin, min(step * 4, 4096)


def _columns(buffer: mmap.mmap | bytes | bytearray, count: int) -> Entries:
    return (
        np.frombuffer(buffer, dtype="<u8", count=count, offset=HEADER_SIZE),
        np.frombuffer(buffer, dtype="<i8", count=count, offset=HEADER_SIZE + 8 * count),
        np.frombuffer(buffer, dtype="<i8", count=count, offset=HEADER_SIZE + 16 * count),
    )


def _digest_of(data: memoryview, length: int) -> bytes:
    """xxh3-128 of ``data[:length]``, a block at a time (xxhash holds the GIL while it hashes)."""
    hasher = xxhash.xxh3_128()
    for start in range(0, length, _CHECKSUM_BLOCK):
        hasher.update(data[start : min(length, start + _CHECKSUM_BLOCK)])
    return hasher.digest()


def _sidecar_for(sorted_hashes: np.ndarray, digest: bytes) -> BloomSidecar:
    bloom, hash_count = build_bloom(sorted_hashes)
    return BloomSidecar(bloom, hash_count, digest)


class TableWriter:
    """Builds one table of a known entry count from sorted slices appended in order.

    On disk the file is made at its full size under ``<GUID>.tmp`` and the slices are written in
    place (so a merge of huge tables needs little memory); ``finish`` adds the header and footer,
    fsyncs, renames, then writes the bloom sidecar. In memory the slices fill numpy arrays.
    """

    def __init__(self, directory: str | None, level: int, count: int) -> None:
        if not 0 <= level < 1 << 16:
            raise ValueError(f"table level {level} out of range")
        self.directory = directory
        self.level = level
        self.count = count
        self.name = new_table_name()
        self._cursor = 0
        self._last_key: tuple[int, int, int] | None = None
        self._fd: int | None = None
        self._arrays: Entries | None = None
        if directory is None:
            self._arrays = (np.empty(count, np.uint64), np.empty(count, np.int64), np.empty(count, np.int64))
        else:
            self.path = os.path.join(directory, self.name)
            self._tmp = self.path + TMP_SUFFIX
            self._fd = os.open(self._tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                os.ftruncate(self._fd, table_file_size(count))
            except BaseException:
                self.abort()
                raise

    def __enter__(self) -> TableWriter:
        return self

    def __exit__(self, exc_type: object, *_: object) -> None:
        if exc_type is not None:
            self.abort()

    def append(self, hashes: np.ndarray, numbers: np.ndarray, positions: np.ndarray) -> None:
        """Add the next slice of sorted entries."""
        n = len(hashes)
        if not n:
            return
        start = self._cursor
        if start + n > self.count:
            raise ValueError(f"table writer got more than the {self.count} entries announced")
        self._check_order(hashes, numbers, positions)
        columns = (
            np.ascontiguousarray(hashes, dtype="<u8"),
            np.ascontiguousarray(numbers, dtype="<i8"),
            np.ascontiguousarray(positions, dtype="<i8"),
        )
        if self._arrays is not None:
            for target, column in zip(self._arrays, columns, strict=True):
                target[start : start + n] = column
        else:
            assert self._fd is not None
            for k, column in enumerate(columns):
                _pwrite_all(self._fd, column.data.cast("B"), HEADER_SIZE + 8 * (k * self.count + start))
        self._cursor += n

    def _check_order(self, hashes: np.ndarray, numbers: np.ndarray, positions: np.ndarray) -> None:
        """Entries must be in order: a table out of order would answer lookups wrongly."""
        first = (int(hashes[0]), int(numbers[0]), int(positions[0]))
        if (self._last_key is not None and first < self._last_key) or not is_sorted(
            hashes, numbers, positions
        ):
            raise ValueError("index entries appended out of (hash, number, position) order")
        self._last_key = (int(hashes[-1]), int(numbers[-1]), int(positions[-1]))

    def finish(self) -> PTable:
        """Seal the table (and its sidecar) under its final name and return it, opened."""
        if self._cursor != self.count:
            raise ValueError(f"table writer got {self._cursor} of {self.count} entries")
        header = _HEADER.pack(MAGIC, FORMAT_VERSION, self.level, 0, self.count).ljust(HEADER_SIZE, b"\0")
        footer_head = _FOOTER_HEAD.pack(END_MAGIC, self.count)
        if self._arrays is not None:
            hasher = xxhash.xxh3_128(header)
            for column in self._arrays:
                hasher.update(column.data.cast("B"))
            hasher.update(footer_head)
            digest = hasher.digest()
            sidecar = _sidecar_for(self._arrays[0], digest)
            return PTable(
                self.name, self.level, self._arrays, digest, sidecar, bloom_size=sidecar_size(sidecar)
            )
        fd = self._fd
        assert fd is not None
        try:
            _pwrite_all(fd, header, 0)
            body_end = HEADER_SIZE + ENTRY_SIZE * self.count
            _pwrite_all(fd, footer_head, body_end)
            with mmap.mmap(fd, 0, access=mmap.ACCESS_READ) as view, memoryview(view) as data:
                digest = _digest_of(data, body_end + len(footer_head))
            _pwrite_all(fd, digest, body_end + len(footer_head))
            os.fsync(fd)
        except BaseException:
            self.abort()
            raise
        os.close(fd)
        self._fd = None
        try:
            replace_durably(self._tmp, self.path)
        except BaseException:
            self.abort()
            raise
        assert self.directory is not None
        return _open_fresh(self.directory, self.name, self.level, self.count, digest)

    def abort(self) -> None:
        """Drop the unfinished table (its temporary file)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self.directory is not None:
            try:
                os.unlink(self._tmp)
            except FileNotFoundError:
                pass
            else:
                fsync_dir(self.directory)


def _open_fresh(directory: str, name: str, level: int, count: int, digest: bytes) -> PTable:
    """Map a table just written (its checksum was computed from the file) and write its sidecar."""
    path = os.path.join(directory, name)
    with open(path, "rb") as f:
        buffer = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    entries = _columns(buffer, count)
    sidecar = _sidecar_for(entries[0], digest)
    bloom_size = write_sidecar(path, sidecar)
    return PTable(name, level, entries, digest, sidecar, path=path, bloom_size=bloom_size)


def _pwrite_all(fd: int, data: bytes | memoryview, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


def write_table(
    directory: str | None, level: int, hashes: np.ndarray, numbers: np.ndarray, positions: np.ndarray
) -> PTable:
    """Write sorted entries as one new table."""
    with TableWriter(directory, level, len(hashes)) as writer:
        for start in range(0, len(hashes), 1 << 20):
            stop = start + (1 << 20)
            writer.append(hashes[start:stop], numbers[start:stop], positions[start:stop])
        return writer.finish()
