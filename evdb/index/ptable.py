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

import errno
import logging
import mmap
import os
import re
import struct
import uuid
from collections.abc import Iterable, Iterator

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
from evdb.storage import disk

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
_CAN_RELEASE = hasattr(mmap, "MADV_DONTNEED")
_WRITEBACK_STEP = 1 << 20  # bytes of a table written before they are waited onto the disk
_FAULT_AROUND = 2 << 20  # a read maps the whole page-cache folio it falls in: up to 2 MiB
_log = logging.getLogger("evdb.index")


def new_table_name() -> str:
    return str(uuid.uuid4())


def table_file_size(count: int) -> int:
    return HEADER_SIZE + ENTRY_SIZE * count + FOOTER_SIZE


class PTable:
    """One immutable sorted table: memory-mapped from its file, or plain arrays for an in-memory index."""

    __slots__ = (
        "_map",
        "bloom",
        "bloom_size",
        "digest",
        "hashes",
        "level",
        "name",
        "numbers",
        "path",
        "positions",
    )

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
        buffer: mmap.mmap | None = None,
    ) -> None:
        self._map = buffer  # the file's read-only map (None in memory): its pages can be let go
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
        # the checksum reads every page: each block's pages are let go behind it (they stay in the page
        # cache; a lookup maps the few it needs again), so RSS holds no table, even while it is opened
        if _digest_of(memoryview(buffer), size - DIGEST_SIZE, buffer) != digest:
            raise CorruptedFile(path, "index table checksum mismatch")
        entries = _columns(buffer, count)
        sidecar = read_sidecar(path)
        bloom_size = 0
        if sidecar is None or sidecar.table_digest != digest:
            _log.warning("Bloom filter of index table %s is missing or damaged: rebuilding it", path)
            sidecar = _sidecar_for(_distinct_hashes(entries[0], buffer), digest)
            bloom_size = write_sidecar(path, sidecar)
        else:
            bloom_size = os.path.getsize(sidecar_path(path))
        return cls(name, level, entries, digest, sidecar, path=path, bloom_size=bloom_size, buffer=buffer)

    def files(self) -> list[str]:
        """The table's files on disk (none in memory)."""
        return [] if self.path is None else [self.path, sidecar_path(self.path)]

    def delete(self) -> None:
        """Remove the table's files (readers still holding the mapping keep reading it)."""
        remove_durably(self.files())

    @staticmethod
    def delete_all(tables: Iterable[PTable]) -> None:
        """Remove several tables' files, with one folder fsync for them all.

        Each file's blocks are freed a step at a time (``disk.Reclaimer``, as a switched-out chunk's):
        freed at once, a big table's (384 MB at 20 GiB) went in one journal commit that an append's
        ``fdatasync`` waited behind. A table file is cut down only once the last map of it in this
        process is gone (a reader holding the old view still reads it whole); its bloom filter, read
        into memory when opened, at once."""
        folders: set[str] = set()
        for table in tables:
            if table.path is None:
                continue
            table_file = (table.path, table_file_size(len(table)), table._map)
            for path, size, mapping in (table_file, (sidecar_path(table.path), table.bloom_size, None)):
                if disk.reclaimer.delete(path, size, mapping):
                    folders.add(os.path.dirname(path) or ".")
        for folder in folders:
            fsync_dir(folder)

    def release(self, start: int = 0, stop: int | None = None) -> None:
        """Let this process's mapping of the pages holding entries ``[start, stop)`` go (all by default).

        ``madvise(MADV_DONTNEED)`` on the read-only map: the pages stay in the page cache and the next
        read maps them again (a minor fault), so lookups answer as before, and RSS as ``ps`` shows it
        does not keep every page a pass over the table read (a scavenge, a merge, a calculation)."""
        buffer = self._map
        if buffer is None or not _CAN_RELEASE:
            return
        count = len(self.hashes)
        stop = count if stop is None else min(stop, count)
        if stop <= start:
            return
        if start == 0 and stop == count:
            disk.drop_pages(buffer, HEADER_SIZE, ENTRY_SIZE * count)
            return
        for column in range(3):
            # a read maps the whole page-cache folio it falls in (up to 2 MiB on ext4), not only its
            # page: let the range's neighbours go too, or a pass leaves pages behind every slice
            first = max(0, HEADER_SIZE + 8 * (column * count + start) - _FAULT_AROUND)
            disk.drop_pages(buffer, first, HEADER_SIZE + 8 * (column * count + stop) + _FAULT_AROUND - first)

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


def _digest_of(data: memoryview, length: int, buffer: mmap.mmap | None = None) -> bytes:
    """xxh3-128 of ``data[:length]``, a block at a time (xxhash holds the GIL while it hashes); with
    ``buffer`` (the map ``data`` views), each block's pages are let go once hashed."""
    hasher = xxhash.xxh3_128()
    for start in range(0, length, _CHECKSUM_BLOCK):
        hasher.update(data[start : min(length, start + _CHECKSUM_BLOCK)])
        if buffer is not None and _CAN_RELEASE:
            disk.drop_pages(buffer, start, _CHECKSUM_BLOCK)
    return hasher.digest()


def _digest_of_file(fd: int, length: int, path: str) -> bytes:
    """xxh3-128 of the file's first ``length`` bytes, read into one reused buffer (nothing mapped)."""
    hasher = xxhash.xxh3_128()
    block = memoryview(bytearray(min(_CHECKSUM_BLOCK, max(1, length))))
    offset = 0
    while offset < length:
        want = block[: min(len(block), length - offset)]
        got = os.preadv(fd, [want], offset)
        if got <= 0:
            raise OSError(
                errno.EIO, f"index table ended at {offset} of {length} bytes as it was sealed", path
            )
        hasher.update(want[:got])
        offset += got
    return hasher.digest()


def _distinct_hashes(sorted_hashes: np.ndarray, buffer: mmap.mmap | None = None) -> np.ndarray:
    """The distinct values of an ascending hash column, read a block at a time; with ``buffer`` (the
    map the column views) each block's pages are let go once read."""
    parts: list[np.ndarray] = []
    previous: int | None = None
    step = _CHECKSUM_BLOCK // 8
    for start in range(0, len(sorted_hashes), step):
        block = sorted_hashes[start : start + step]
        parts.append(_new_values(block, previous))
        previous = int(block[-1])
        if buffer is not None and _CAN_RELEASE:
            disk.drop_pages(buffer, HEADER_SIZE + 8 * start, 8 * len(block))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint64)


def _new_values(sorted_hashes: np.ndarray, previous: int | None) -> np.ndarray:
    """The values of an ascending block not equal to the one before them (``previous``: the value just
    before the block, None at the start), copied."""
    distinct = np.empty(len(sorted_hashes), dtype=bool)
    distinct[0] = previous is None or int(sorted_hashes[0]) != previous
    np.not_equal(sorted_hashes[1:], sorted_hashes[:-1], out=distinct[1:])
    return np.array(sorted_hashes[distinct], dtype=np.uint64)


def _sidecar_for(distinct_hashes: np.ndarray, digest: bytes) -> BloomSidecar:
    bloom, hash_count = build_bloom(distinct_hashes)
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
        self._distinct: list[np.ndarray] = []  # the distinct hashes so far, for the bloom filter
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
        previous = None if self._last_key is None else self._last_key[0]
        self._check_order(hashes, numbers, positions)
        columns = (
            np.ascontiguousarray(hashes, dtype="<u8"),
            np.ascontiguousarray(numbers, dtype="<i8"),
            np.ascontiguousarray(positions, dtype="<i8"),
        )
        # the bloom filter is made from the slices as they come: the table is never read back for it
        self._distinct.append(_new_values(columns[0], previous))
        if self._arrays is not None:
            for target, column in zip(self._arrays, columns, strict=True):
                target[start : start + n] = column
        else:
            assert self._fd is not None
            for k, column in enumerate(columns):
                _write_back(self._fd, column.data.cast("B"), HEADER_SIZE + 8 * (k * self.count + start))
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
        distinct = np.concatenate(self._distinct) if self._distinct else np.zeros(0, dtype=np.uint64)
        self._distinct = []
        if self._arrays is not None:
            hasher = xxhash.xxh3_128(header)
            for column in self._arrays:
                hasher.update(column.data.cast("B"))
            hasher.update(footer_head)
            digest = hasher.digest()
            sidecar = _sidecar_for(distinct, digest)
            return PTable(
                self.name, self.level, self._arrays, digest, sidecar, bloom_size=sidecar_size(sidecar)
            )
        fd = self._fd
        assert fd is not None
        try:
            _pwrite_all(fd, header, 0)
            body_end = HEADER_SIZE + ENTRY_SIZE * self.count
            _pwrite_all(fd, footer_head, body_end)
            digest = _digest_of_file(fd, body_end + len(footer_head), self._tmp)
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
        return _open_fresh(self.directory, self.name, self.level, self.count, digest, distinct)

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


def _open_fresh(
    directory: str, name: str, level: int, count: int, digest: bytes, distinct: np.ndarray
) -> PTable:
    """Map a table just written (its checksum was computed from the file, ``distinct``: its distinct
    hashes, gathered as it was written) and write its sidecar; no page of it is read here."""
    path = os.path.join(directory, name)
    with open(path, "rb") as f:
        buffer = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    entries = _columns(buffer, count)
    sidecar = _sidecar_for(distinct, digest)
    bloom_size = write_sidecar(path, sidecar)
    return PTable(name, level, entries, digest, sidecar, path=path, bloom_size=bloom_size, buffer=buffer)


def _write_back(fd: int, data: memoryview, offset: int) -> None:
    """Write ``data`` at ``offset`` a step at a time, each step on the disk before the next is
    written (``disk.wait_writeback``): the device never holds more than a step of a table in front
    of the appends' ``fdatasync`` (which waits for what is in flight), and the table's fsync finds
    nothing left to write. Where ``sync_file_range`` is missing, plain writes."""
    for start in range(0, len(data), _WRITEBACK_STEP):
        step = data[start : start + _WRITEBACK_STEP]
        _pwrite_all(fd, step, offset + start)
        disk.wait_writeback(fd, offset + start, len(step))


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
