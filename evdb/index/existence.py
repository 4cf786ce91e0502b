"""The stream existence filter: a persistent bloom filter of every stream name written.

``might_exist(name)`` False means the stream was certainly never written, so a read or a first
append of a new stream answers without searching the index. Stored in ``<index>/stream-existence``:

``streamExistenceFilter.dat`` (little-endian)::

    0    8   magic "EVDBSEXF"
    8    2   format version (1)
    10   6   zero
    16   8   capacity (expected names), u64
    24   8   false positive rate, f64
    32   8   payload length L
    40   L   rbloom payload (u64 k, then the bit array)
    40+L 16  xxh3-128 of bytes [0, 40+L)

``streamExistenceFilter.chk``: one i64, the log position up to which every stream name was added.

``flush`` replaces the ``.dat`` (temporary file, fsync, rename, folder fsync) and only then the
``.chk`` likewise, so the checkpoint never claims names the filter does not hold. A ``.dat`` that
is unreadable, or sized for another capacity, is dropped (checkpoint -1, a warning): the database
then adds the names from the whole log again.
"""

from __future__ import annotations

import logging
import os
import re
import struct
import threading

import rbloom
import xxhash

from evdb.index.durable import remove_durably, write_durably

__all__ = ["CHK_NAME", "DAT_NAME", "StreamExistenceFilter"]

DAT_NAME = "streamExistenceFilter.dat"
CHK_NAME = "streamExistenceFilter.chk"
MAGIC = b"EVDBSEXF"
FORMAT_VERSION = 1
_HEADER = struct.Struct("<8sH6xQdQ")
HEADER_SIZE = _HEADER.size  # 40
DIGEST_SIZE = 16
_CHECKPOINT = struct.Struct("<q")
_TEMPORARY = re.compile(r"streamExistenceFilter\.(dat|chk)(\.[0-9a-f]+)?\.tmp")
_log = logging.getLogger("evdb.index")


def _name_key(name: str) -> int:
    """rbloom's hash of a name: stable across processes (Python's ``hash`` is not), 127 bits."""
    return xxhash.xxh3_128_intdigest(name.encode()) >> 1


class StreamExistenceFilter:
    """Which stream names may exist (no false negatives; ``error_rate`` false positives)."""

    def __init__(
        self, directory: str | None, bloom: rbloom.Bloom, checkpoint: int, capacity: int, error_rate: float
    ) -> None:
        self.directory = directory
        self.capacity = capacity
        self.error_rate = error_rate
        self._bloom = bloom
        self._checkpoint = checkpoint
        self._dirty = False  # names added since the .dat was last written
        self._lock = threading.Lock()

    @classmethod
    def open(
        cls, directory: str | None, *, capacity: int = 10_000_000, error_rate: float = 0.01
    ) -> StreamExistenceFilter:
        """Load the filter from ``directory`` (created if needed), or start an in-memory one for None."""
        if capacity < 1 or not 0.0 < error_rate < 1.0:
            raise ValueError("the existence filter needs a capacity >= 1 and an error rate in (0, 1)")
        if directory is None:
            return cls(None, _empty(capacity, error_rate), -1, capacity, error_rate)
        os.makedirs(directory, exist_ok=True)
        remove_durably(os.path.join(directory, n) for n in os.listdir(directory) if _TEMPORARY.fullmatch(n))
        dat = os.path.join(directory, DAT_NAME)
        try:
            with open(dat, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return cls(directory, _empty(capacity, error_rate), -1, capacity, error_rate)
        bloom, problem = _decode(raw, capacity, error_rate)
        if bloom is None:
            _log.warning("Stream existence filter %s %s: rebuilding it from the log", dat, problem)
            return cls(directory, _empty(capacity, error_rate), -1, capacity, error_rate)
        return cls(
            directory, bloom, _read_checkpoint(os.path.join(directory, CHK_NAME)), capacity, error_rate
        )

    @property
    def checkpoint(self) -> int:
        """Log position up to which every stream name was added (-1: none)."""
        return self._checkpoint

    def add(self, name: str) -> None:
        with self._lock:
            self._bloom.add(name)
            self._dirty = True

    def might_exist(self, name: str) -> bool:
        """False: the stream was never written. True: it probably was."""
        return name in self._bloom

    def flush(self, position: int) -> None:
        """Persist the filter as holding every name written before ``position``: .dat first, then .chk."""
        with self._lock:
            if self.directory is not None:
                if self._dirty or not os.path.exists(os.path.join(self.directory, DAT_NAME)):
                    write_durably(os.path.join(self.directory, DAT_NAME), [_encode(self)])
                    self._dirty = False
                write_durably(os.path.join(self.directory, CHK_NAME), [_CHECKPOINT.pack(position)])
            self._checkpoint = position

    def close(self) -> None:
        """Nothing to release: unflushed names are added again from the log at the next start."""


def _empty(capacity: int, error_rate: float) -> rbloom.Bloom:
    return rbloom.Bloom(capacity, error_rate, _name_key)


def _encode(f: StreamExistenceFilter) -> bytes:
    payload = f._bloom.save_bytes()
    body = _HEADER.pack(MAGIC, FORMAT_VERSION, f.capacity, f.error_rate, len(payload)) + payload
    return body + xxhash.xxh3_128_digest(body)


def _decode(raw: bytes, capacity: int, error_rate: float) -> tuple[rbloom.Bloom | None, str]:
    """(the filter, "") or (None, what is wrong with it)."""
    if len(raw) < HEADER_SIZE + DIGEST_SIZE:
        return None, "is truncated"
    magic, version, stored_capacity, stored_rate, length = _HEADER.unpack_from(raw, 0)
    if magic != MAGIC or version != FORMAT_VERSION:
        return None, "is not an evdb existence filter"
    if len(raw) != HEADER_SIZE + length + DIGEST_SIZE:
        return None, "is truncated"
    if xxhash.xxh3_128_digest(memoryview(raw)[: HEADER_SIZE + length]) != raw[-DIGEST_SIZE:]:
        return None, "fails its checksum"
    if stored_capacity != capacity or stored_rate != error_rate:
        return None, f"was sized for {stored_capacity} names at {stored_rate}, not {capacity} at {error_rate}"
    try:
        return rbloom.Bloom.load_bytes(raw[HEADER_SIZE : HEADER_SIZE + length], _name_key), ""
    except (ValueError, TypeError) as exc:
        return None, f"cannot be loaded ({exc})"


def _read_checkpoint(path: str) -> int:
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return -1
    if len(raw) != _CHECKPOINT.size:
        _log.warning("Stream existence checkpoint %s is %d bytes, not 8: starting from -1", path, len(raw))
        return -1
    return max(-1, _CHECKPOINT.unpack(raw)[0])
