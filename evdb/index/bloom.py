"""The ``<table>.bloomfilter`` sidecar: which stream hashes a PTable may hold.

A lookup asks the filter first and skips the table when it says no, so a stream that lives in a
few tables costs a binary search in those only. The filter is an ``rbloom.Bloom`` (1% false
positives) keyed by the 64-bit stream hash itself: the hash is already uniform, and rbloom spreads
it over its k bit indexes with a 128-bit LCG (``operator.index`` is the hash function, so nothing
runs in Python per item).

Layout (little-endian)::

    0   8   magic "EVDBBLOM"
    8   2   format version (1)
    10  6   zero
    16  8   distinct hashes added
    24  16  the table's checksum (its footer digest): binds the sidecar to its table
    40  8   payload length L
    48  L   rbloom payload (rbloom's own format: u64 k, then the bit array)
    48+L 16 xxh3-128 of bytes [0, 48+L)

A sidecar that is missing, damaged, or made for another table is rebuilt from the table, never
trusted: a wrong "no" would hide events.
"""

from __future__ import annotations

import operator
import struct

import numpy as np
import rbloom
import xxhash

from evdb.index.durable import write_durably

__all__ = [
    "FALSE_POSITIVE_RATE",
    "BloomSidecar",
    "build_bloom",
    "decode_sidecar",
    "encode_sidecar",
    "read_sidecar",
    "sidecar_path",
    "sidecar_size",
    "write_sidecar",
]

MAGIC = b"EVDBBLOM"
FORMAT_VERSION = 1
FALSE_POSITIVE_RATE = 0.01
_HEADER = struct.Struct("<8sH6xQ16sQ")
HEADER_SIZE = _HEADER.size  # 48
DIGEST_SIZE = 16
_UPDATE_BATCH = 16_384  # rbloom holds the GIL for a whole update: give other threads a turn between batches


class BloomSidecar:
    """A decoded sidecar: the filter, and the checksum of the table it was made for."""

    __slots__ = ("bloom", "hash_count", "table_digest")

    def __init__(self, bloom: rbloom.Bloom, hash_count: int, table_digest: bytes) -> None:
        self.bloom = bloom
        self.hash_count = hash_count
        self.table_digest = table_digest


def build_bloom(sorted_hashes: np.ndarray) -> tuple[rbloom.Bloom, int]:
    """A filter over the distinct values of an ascending hash column, and how many there are."""
    if len(sorted_hashes):
        distinct = np.empty(len(sorted_hashes), dtype=bool)
        distinct[0] = True
        np.not_equal(sorted_hashes[1:], sorted_hashes[:-1], out=distinct[1:])
        unique = sorted_hashes[distinct]
    else:
        unique = np.zeros(0, dtype=np.uint64)
    bloom = rbloom.Bloom(max(1, len(unique)), FALSE_POSITIVE_RATE, operator.index)
    for start in range(0, len(unique), _UPDATE_BATCH):
        bloom.update(unique[start : start + _UPDATE_BATCH].tolist())
    return bloom, len(unique)


def encode_sidecar(sidecar: BloomSidecar) -> bytes:
    payload = sidecar.bloom.save_bytes()
    head = _HEADER.pack(MAGIC, FORMAT_VERSION, sidecar.hash_count, sidecar.table_digest, len(payload))
    body = head + payload
    return body + xxhash.xxh3_128_digest(body)


def decode_sidecar(raw: bytes) -> BloomSidecar | None:
    """The sidecar in ``raw``, or None when it is not a whole, intact one."""
    if len(raw) < HEADER_SIZE + DIGEST_SIZE:
        return None
    magic, version, hash_count, table_digest, length = _HEADER.unpack_from(raw, 0)
    if magic != MAGIC or version != FORMAT_VERSION or len(raw) != HEADER_SIZE + length + DIGEST_SIZE:
        return None
    if xxhash.xxh3_128_digest(memoryview(raw)[: HEADER_SIZE + length]) != raw[-DIGEST_SIZE:]:
        return None
    if length < 9:  # rbloom's k and at least one byte of bits
        return None
    try:
        bloom = rbloom.Bloom.load_bytes(raw[HEADER_SIZE : HEADER_SIZE + length], operator.index)
    except (ValueError, TypeError):
        return None
    return BloomSidecar(bloom, hash_count, table_digest)


def sidecar_size(sidecar: BloomSidecar) -> int:
    """Bytes the encoded sidecar takes (rbloom's bit array is a whole number of bytes)."""
    return HEADER_SIZE + 8 + sidecar.bloom.size_in_bits // 8 + DIGEST_SIZE


def sidecar_path(table_path: str) -> str:
    return table_path + ".bloomfilter"


def read_sidecar(table_path: str) -> BloomSidecar | None:
    """The table's sidecar, or None when it is missing or damaged."""
    try:
        with open(sidecar_path(table_path), "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return None
    return decode_sidecar(raw)


def write_sidecar(table_path: str, sidecar: BloomSidecar) -> int:
    """Write the sidecar atomically next to its table; returns its size in bytes."""
    raw = encode_sidecar(sidecar)
    write_durably(sidecar_path(table_path), [raw])
    return len(raw)
