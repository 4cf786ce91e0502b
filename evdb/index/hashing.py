"""The 64-bit stream hash the index is keyed by.

High 32 bits: xxHash32 of the UTF-8 name; low 32 bits: MurmurHash3 x86_32 (unsigned). Two
independent hashes make collisions rare, but they are real: the database resolves them by reading
the stream name of each record an index entry points to.
"""

from __future__ import annotations

import mmh3
import xxhash

__all__ = ["stream_hash"]


def stream_hash(name: str) -> int:
    """The stream's index key, in ``[0, 2**64)``."""
    data = name.encode()
    return (xxhash.xxh32_intdigest(data) << 32) | mmh3.hash(data, signed=False)
