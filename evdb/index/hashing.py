"""The 64-bit stream hash the index is keyed by.

High 32 bits: xxHash32 of the UTF-8 name; low 32 bits: MurmurHash3 (x86, 32-bit). Two independent
hashes make collisions rare, but they are real: the database resolves them by reading the stream
name of each record an index entry points to.
"""

from __future__ import annotations

import mmh3
import xxhash

__all__ = ["bloom_key", "stream_hash"]

_MIX = 0x9E3779B97F4A7C15F39CC0605CEDC834  # odd: spreads a 64-bit hash over 127 bits


def stream_hash(name: str) -> int:
    data = name.encode()
    return (xxhash.xxh32_intdigest(data) << 32) | mmh3.hash(data, signed=False)


def bloom_key(h: int) -> int:
    """What the bloom filters (rbloom) are given for a 64-bit hash: a value in [0, 2**127)."""
    return (h * _MIX) & ((1 << 127) - 1)
