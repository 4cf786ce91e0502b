"""The stream existence filter: a persistent bloom filter of stream names.

``might_exist(name)`` False means the stream was certainly never written, so a read of a missing
stream answers without touching the index. Stored in ``stream-existence/streamExistenceFilter.dat``
(the filter, behind a checksummed header) and ``streamExistenceFilter.chk`` (one int64: the log
position up to which every stream name was added). Both are replaced atomically, the ``.dat``
first, so the checkpoint never claims more than the filter holds.
"""

from __future__ import annotations

import logging
import os
import struct
import uuid

import rbloom
import xxhash

__all__ = ["StreamExistenceFilter"]

_HEADER = struct.Struct("<8sQ")
MAGIC = b"EVDBSEF1"
_log = logging.getLogger("evdb.index")


def _name_key(name: str) -> int:
    return xxhash.xxh3_128_intdigest(name.encode()) >> 1  # within rbloom's signed 128-bit range


def _replace(path: str, data: bytes) -> None:
    tmp = f"{path}.{uuid.uuid4().hex}.tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, path)


class StreamExistenceFilter:
    def __init__(
        self, directory: str | None, bloom: rbloom.Bloom, checkpoint: int, capacity: int, error_rate: float
    ):
        self.directory = directory
        self._bloom = bloom
        self.checkpoint = checkpoint
        self._capacity = capacity
        self._error_rate = error_rate

    @classmethod
    def open(
        cls, directory: str | None, *, capacity: int = 10_000_000, error_rate: float = 0.01
    ) -> StreamExistenceFilter:
        fresh = rbloom.Bloom(capacity, error_rate, hash_func=_name_key)
        if directory is None:
            return cls(None, fresh, -1, capacity, error_rate)
        os.makedirs(directory, exist_ok=True)
        for name in os.listdir(directory):
            if name.endswith(".tmp"):
                os.unlink(os.path.join(directory, name))
        dat = os.path.join(directory, "streamExistenceFilter.dat")
        chk = os.path.join(directory, "streamExistenceFilter.chk")
        try:
            with open(dat, "rb") as f:
                raw = f.read()
            with open(chk, "rb") as f:
                (checkpoint,) = struct.unpack("<q", f.read(8))
            magic, digest = _HEADER.unpack_from(raw, 0)
            payload = raw[_HEADER.size :]
            if magic != MAGIC or xxhash.xxh3_64_intdigest(payload) != digest:
                raise ValueError("checksum mismatch")
            bloom = rbloom.Bloom.load_bytes(payload, _name_key)
        except FileNotFoundError:
            return cls(directory, fresh, -1, capacity, error_rate)
        except (ValueError, struct.error, OSError) as exc:
            _log.warning(
                "Stream existence filter %s is unreadable (%s): rebuilding it from the log", dat, exc
            )
            return cls(directory, fresh, -1, capacity, error_rate)
        return cls(directory, bloom, checkpoint, capacity, error_rate)

    def add(self, name: str) -> None:
        self._bloom.add(name)

    def might_exist(self, name: str) -> bool:
        return name in self._bloom

    def flush(self, position: int) -> None:
        """Persist the filter as covering the log up to ``position``."""
        self.checkpoint = position
        if self.directory is None:
            return
        payload = self._bloom.save_bytes()
        _replace(
            os.path.join(self.directory, "streamExistenceFilter.dat"),
            _HEADER.pack(MAGIC, xxhash.xxh3_64_intdigest(payload)) + payload,
        )
        _replace(os.path.join(self.directory, "streamExistenceFilter.chk"), struct.pack("<q", position))
        fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def close(self) -> None:
        pass
