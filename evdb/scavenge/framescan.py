"""The record walk of a chunk in compiled code (numba): one pass over the frames that fills the
columns of a :class:`~evdb.scavenge.chunkscan.RecordTable` and finds where each run of one stream's
events starts, comparing every stream name with the previous record's byte by byte.

Imported only where it pays: in the scavenge worker processes, which compile (or load from numba's
cache) the kernels once, at start-up (:func:`warm_up`), never in the node process, where importing
numba alone would cost more than scanning a small chunk with numpy. ``chunkscan.record_table`` uses
these kernels when this module has been loaded, and gives the same table either way
(tests/scavenge/test_chunkscan.py compares them).

The kernels read every field little-endian, byte by byte (the compiler turns that into plain loads),
and check each frame before reading anything inside it, so a damaged chunk can never make them read
outside its buffer. They run without the GIL.
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["record_offsets", "scan_records", "warm_up"]

_HS = 128  # chunk header size (evdb.storage.chunk.HEADER_SIZE; checked in chunkscan)
_STREAM_AT = 60  # stream name bytes, from the frame start (4 + records.EVENT_HEADER.size)
_EVENT = 1
_SYSTEM = 2
_EVENT_BODY = 56  # records.EVENT_HEADER.size
_SYSTEM_BODY = 24  # records.SYSTEM_HEADER.size

_jit = numba.njit(cache=True, nogil=True)


@_jit
def _u16(buf, at):
    return np.int64(buf[at]) | (np.int64(buf[at + 1]) << 8)


@_jit
def _u32(buf, at):
    return (
        np.int64(buf[at])
        | (np.int64(buf[at + 1]) << 8)
        | (np.int64(buf[at + 2]) << 16)
        | (np.int64(buf[at + 3]) << 24)
    )


@_jit
def _i64(buf, at):
    value = np.uint64(0)
    for k in range(8):
        value |= np.uint64(buf[at + k]) << np.uint64(8 * k)
    return np.int64(value)


@_jit
def _same_bytes(buf, a, b, count):
    """Whether ``buf[a:a + count]`` and ``buf[b:b + count]`` hold the same bytes (8 at a time)."""
    k = 0
    while k + 8 <= count:
        if _i64(buf, a + k) != _i64(buf, b + k):
            return False
        k += 8
    while k < count:
        if buf[a + k] != buf[b + k]:
            return False
        k += 1
    return True


@_jit
def record_offsets(buf, start, end):
    """Frame offsets from ``start`` to ``end`` by their leading lengths; returns (offsets, where the
    walk stopped): a whole chunk stops exactly at ``end``."""
    count = 0
    off = start
    while off < end:
        if off + 4 > len(buf):
            off = end + 1
            break
        off += _u32(buf, off) + 12
        count += 1
    stop = off
    offsets = np.empty(count, dtype=np.int64)
    off = start
    for i in range(count):
        offsets[i] = off
        off += _u32(buf, off) + 12
    return offsets, stop


@_jit
def scan_records(buf, offsets, end, base_position, check_positions):
    """The columns of every record at ``offsets`` (absolute, in log order) and the first error:
    (sizes, types, flags, positions, numbers, timestamps, name lengths, run starts, error kind, error
    index, error value). One pass over the frames; the error reported is the first of the first kind
    found, in this order: 1 a bad length (value: the length), 2 a bad trailer or type, 3 a record not
    at its own position, 4 an event or system record too short for its header and stream name."""
    count = len(offsets)
    sizes = np.empty(count, dtype=np.int64)
    types = np.zeros(count, dtype=np.uint8)
    flags = np.zeros(count, dtype=np.int64)
    positions = np.zeros(count, dtype=np.int64)
    numbers = np.zeros(count, dtype=np.int64)
    timestamps = np.zeros(count, dtype=np.int64)
    name_lengths = np.zeros(count, dtype=np.int64)
    new_run = np.zeros(count, dtype=np.bool_)
    limit = min(end, len(buf))
    expected = _HS
    bad_trailer = bad_position = bad_body = -1
    previous_name = -1  # where the previous record's stream name starts, when it is an event
    previous_length = 0
    for i in range(count):
        off = offsets[i]
        length = 0
        if off >= 0 and off + 4 <= limit:
            length = _u32(buf, off)
        sizes[i] = length + 12
        if length == 0 or off != expected or off + length + 12 > limit:
            return sizes, types, flags, positions, numbers, timestamps, name_lengths, new_run, 1, i, length
        expected = off + length + 12
        kind = buf[off + 4]
        types[i] = kind
        if bad_trailer < 0 and (
            _u32(buf, off + 8 + length) != length or (kind != _EVENT and kind != _SYSTEM)
        ):
            bad_trailer = i
        name_at = -1
        if off + _EVENT_BODY > len(buf):  # (never in a chunk: its footer follows its frames)
            if bad_body < 0:
                bad_body = i
        else:
            # the first 56 bytes of every frame are read, as the numpy path reads them (from the next
            # frame, or the footer, when the frame is shorter: such a record is reported below)
            positions[i] = _i64(buf, off + 8)
            numbers[i] = _i64(buf, off + 16)
            timestamps[i] = _i64(buf, off + 24)
            if check_positions and bad_position < 0 and positions[i] != base_position + off - _HS:
                bad_position = i
            if kind == _EVENT:
                flags[i] = _u16(buf, off + 6)
                name = _u16(buf, off + 48)
                name_lengths[i] = name
                if length < _EVENT_BODY + name:
                    if bad_body < 0:
                        bad_body = i
                else:
                    name_at = off + _STREAM_AT
            elif length < _SYSTEM_BODY and bad_body < 0:
                bad_body = i
        if kind == _EVENT:
            same = name_at >= 0 and previous_name >= 0 and name_lengths[i] == previous_length
            if same:
                same = _same_bytes(buf, name_at, previous_name, previous_length)
            new_run[i] = not same
        previous_name = name_at
        previous_length = name_lengths[i]
    if count and expected != end:
        length = sizes[count - 1] - 12
        return (
            sizes,
            types,
            flags,
            positions,
            numbers,
            timestamps,
            name_lengths,
            new_run,
            1,
            count - 1,
            length,
        )
    if bad_trailer >= 0:
        return sizes, types, flags, positions, numbers, timestamps, name_lengths, new_run, 2, bad_trailer, 0
    if bad_position >= 0:
        return sizes, types, flags, positions, numbers, timestamps, name_lengths, new_run, 3, bad_position, 0
    if bad_body >= 0:
        return sizes, types, flags, positions, numbers, timestamps, name_lengths, new_run, 4, bad_body, 0
    return sizes, types, flags, positions, numbers, timestamps, name_lengths, new_run, 0, -1, 0


def warm_up() -> None:
    """Compile the kernels (or load them from numba's cache) now, on a tiny buffer, so that no chunk
    waits for the compiler: a worker process calls this as it starts."""
    buf = np.zeros(_HS + 64, dtype=np.uint8)
    buf[_HS] = 52  # one system record of a 52-byte body, framed: 4 + 52 + 8 bytes
    buf[_HS + 4] = _SYSTEM
    buf[_HS + 4 + 52 + 4] = 52
    frozen = buf.copy()
    frozen.flags.writeable = False  # a chunk file's map is read-only: its own specialisation
    for b in (buf, frozen):
        offsets, stop = record_offsets(b, _HS, _HS + 64)
        scan_records(b, offsets, stop, 0, True)
