"""PTables: immutable sorted index files, named by a GUID, each with a ``.bloomfilter`` sidecar.

Layout (little-endian)::

    header   64 bytes: magic "EVDBPTBL", u16 format version, u16 level, u32 zero, u64 entry count, zeros
    hashes   count × u64   (ascending)
    numbers  count × i64   (ascending within one hash)
    positions count × i64
    footer   32 bytes: magic "EVDBPEND", u64 entry count, xxh3-128 of every byte before it

Stored column-wise so that ``numpy.searchsorted`` on the memory-mapped hash column finds a stream's
entries in O(log n) without copying. Written under a temporary name, fsynced, renamed: a PTable
under its final name is always whole, and it never changes afterwards.
"""

from __future__ import annotations

import mmap
import os
import struct
import uuid
from collections.abc import Iterator

import numpy as np
import rbloom
import xxhash

from evdb.errors import CorruptedFile
from evdb.index.hashing import bloom_key

__all__ = ["PTable", "new_table_name"]

_HEADER = struct.Struct("<8sHHIQ")
HEADER_SIZE = 64
_FOOTER = struct.Struct("<8sQ")
FOOTER_SIZE = 32
MAGIC = b"EVDBPTBL"
END_MAGIC = b"EVDBPEND"
FORMAT_VERSION = 1
BLOOM_MAGIC = b"EVDBBLOM"
_BLOOM_HEADER = struct.Struct("<8sQ")  # magic, xxh3-64 of the payload


def new_table_name() -> str:
    return str(uuid.uuid4())


def _fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_atomically(path: str, parts: list[bytes | memoryview]) -> None:
    tmp = f"{path}.{uuid.uuid4().hex}.tmp"
    with open(tmp, "wb") as f:
        for part in parts:
            f.write(part)
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, path)
    _fsync_dir(os.path.dirname(path))


class PTable:
    """One immutable table (file-backed, or arrays only for an in-memory database)."""

    def __init__(
        self,
        name: str,
        level: int,
        hashes: np.ndarray,
        numbers: np.ndarray,
        positions: np.ndarray,
        *,
        path: str | None = None,
        bloom: rbloom.Bloom | None = None,
        keep_alive: object = None,
    ) -> None:
        self.name = name
        self.level = level
        self.hashes = hashes
        self.numbers = numbers
        self.positions = positions
        self.path = path
        self.bloom = bloom if bloom is not None else _build_bloom(hashes)
        self._keep_alive = keep_alive  # the mmap the arrays view

    def __len__(self) -> int:
        return len(self.hashes)

    def __repr__(self) -> str:
        return f"<PTable {self.name} level {self.level}, {len(self)} entries>"

    @property
    def file_size(self) -> int:
        return HEADER_SIZE + 24 * len(self) + FOOTER_SIZE

    # -- writing and loading ---------------------------------------------------------------------------
    @classmethod
    def write(
        cls, directory: str | None, level: int, hashes: np.ndarray, numbers: np.ndarray, positions: np.ndarray
    ) -> PTable:
        """Write sorted entries as a new table (and its bloom filter)."""
        hashes = np.ascontiguousarray(hashes, dtype="<u8")
        numbers = np.ascontiguousarray(numbers, dtype="<i8")
        positions = np.ascontiguousarray(positions, dtype="<i8")
        name = new_table_name()
        bloom = _build_bloom(hashes)
        if directory is None:
            return cls(name, level, hashes, numbers, positions, bloom=bloom)
        path = os.path.join(directory, name)
        header = _HEADER.pack(MAGIC, FORMAT_VERSION, level, 0, len(hashes)).ljust(HEADER_SIZE, b"\0")
        hasher = xxhash.xxh3_128(header)
        body = [hashes.tobytes(), numbers.tobytes(), positions.tobytes()]
        for part in body:
            hasher.update(part)
        footer_head = _FOOTER.pack(END_MAGIC, len(hashes))
        hasher.update(footer_head)
        footer = footer_head + hasher.digest()
        _write_bloom(path, bloom)
        _write_atomically(path, [header, *body, footer])
        return cls.load(directory, name, verify=False)

    @classmethod
    def load(cls, directory: str, name: str, *, verify: bool = True) -> PTable:
        path = os.path.join(directory, name)
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size < HEADER_SIZE + FOOTER_SIZE:
                    raise CorruptedFile(path, f"index table is {size} bytes, too short")
                buf = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ)
        except FileNotFoundError:
            raise CorruptedFile(path, "index table named by indexmap is missing") from None
        magic, version, level, _, count = _HEADER.unpack_from(buf, 0)
        if magic != MAGIC or version != FORMAT_VERSION:
            raise CorruptedFile(path, "not an evdb index table (bad header)")
        if size != HEADER_SIZE + 24 * count + FOOTER_SIZE:
            raise CorruptedFile(path, f"index table is {size} bytes, its header says {count} entries")
        end_magic, end_count = _FOOTER.unpack_from(buf, size - FOOTER_SIZE)
        if end_magic != END_MAGIC or end_count != count:
            raise CorruptedFile(path, "index table footer is damaged")
        if verify:
            digest = xxhash.xxh3_128(memoryview(buf)[: size - 16]).digest()
            if digest != bytes(buf[size - 16 :]):
                raise CorruptedFile(path, "index table checksum mismatch")
        hashes = np.frombuffer(buf, dtype="<u8", count=count, offset=HEADER_SIZE)
        numbers = np.frombuffer(buf, dtype="<i8", count=count, offset=HEADER_SIZE + 8 * count)
        positions = np.frombuffer(buf, dtype="<i8", count=count, offset=HEADER_SIZE + 16 * count)
        bloom = _read_bloom(path)
        if bloom is None:
            bloom = _build_bloom(hashes)
            _write_bloom(path, bloom)
        return cls(name, level, hashes, numbers, positions, path=path, bloom=bloom, keep_alive=buf)

    def delete(self) -> None:
        if self.path is None:
            return
        for p in (self.path, self.path + ".bloomfilter"):
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass

    # -- lookups ---------------------------------------------------------------------------------------
    def _range(self, h: int) -> tuple[int, int]:
        if h not in self.bloom:
            return 0, 0
        key = np.uint64(h)
        lo = int(self.hashes.searchsorted(key, side="left"))
        hi = int(self.hashes.searchsorted(key, side="right"))
        return lo, hi

    def iter_forward(self, h: int, from_number: int) -> Iterator[tuple[int, int]]:
        lo, hi = self._range(h)
        if lo == hi:
            return iter(())
        start = lo + int(np.searchsorted(self.numbers[lo:hi], from_number, side="left"))
        return self._forward(start, hi)

    def _forward(self, start: int, stop: int) -> Iterator[tuple[int, int]]:
        """In growing slices, so that asking for the first few entries of a long stream is cheap."""
        step = 64
        while start < stop:
            end = min(stop, start + step)
            yield from zip(self.numbers[start:end].tolist(), self.positions[start:end].tolist(), strict=True)
            start = end
            step = min(step * 4, 65536)

    def iter_backward(self, h: int, before_number: int | None) -> Iterator[tuple[int, int]]:
        lo, hi = self._range(h)
        if lo == hi:
            return iter(())
        end = (
            hi
            if before_number is None
            else lo + int(np.searchsorted(self.numbers[lo:hi], before_number, side="left"))
        )
        return self._backward(lo, end)

    def _backward(self, lo: int, end: int) -> Iterator[tuple[int, int]]:
        step = 64
        while end > lo:
            start = max(lo, end - step)
            yield from zip(
                reversed(self.numbers[start:end].tolist()),
                reversed(self.positions[start:end].tolist()),
                strict=True,
            )
            end = start
            step = min(step * 4, 65536)

    def get(self, h: int, number: int) -> list[int]:
        lo, hi = self._range(h)
        if lo == hi:
            return []
        a = lo + int(np.searchsorted(self.numbers[lo:hi], number, side="left"))
        b = lo + int(np.searchsorted(self.numbers[lo:hi], number, side="right"))
        return self.positions[a:b].tolist()


def _build_bloom(hashes: np.ndarray) -> rbloom.Bloom:
    unique = np.unique(hashes)
    bloom = rbloom.Bloom(max(1000, len(unique)), 0.01, hash_func=bloom_key)
    bloom.update(int(h) for h in unique.tolist())
    return bloom


def _write_bloom(path: str, bloom: rbloom.Bloom) -> None:
    payload = bloom.save_bytes()
    _write_atomically(
        path + ".bloomfilter", [_BLOOM_HEADER.pack(BLOOM_MAGIC, xxhash.xxh3_64_intdigest(payload)), payload]
    )


def _read_bloom(path: str) -> rbloom.Bloom | None:
    """The sidecar, or None when it is missing or damaged (then it is rebuilt, never trusted)."""
    try:
        with open(path + ".bloomfilter", "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return None
    if len(raw) < _BLOOM_HEADER.size:
        return None
    magic, digest = _BLOOM_HEADER.unpack_from(raw, 0)
    payload = raw[_BLOOM_HEADER.size :]
    if magic != BLOOM_MAGIC or xxhash.xxh3_64_intdigest(payload) != digest:
        return None
    try:
        return rbloom.Bloom.load_bytes(payload, bloom_key)
    except Exception:
        return None
