"""The record walk of a chunk in compiled code (numba): one pass over the frames that fills the
columns of a :class:`~evdb.scavenge.chunkscan.RecordTable` and finds where each run of one stream's
events starts, comparing every stream name with the previous record's byte by byte: by the frames'
lengths (:func:`walk_records`), or at the offsets a scavenged chunk's position map gives
(:func:`scan_records`).

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

__all__ = ["columns", "scan_records", "walk_records", "warm_up"]

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
def _records(buf, given, walking, start, end, chunk_end, base_position, check_positions, out, at):
    """The one loop of :func:`scan_records` (``walking`` off: the frames at ``given``) and
    :func:`walk_records` (on: the frames from ``start`` by their lengths, up to the first that ends
    at or after ``end``, or until ``out`` is full), writing from index ``at`` of ``out`` (offsets,
    written only when walking; sizes, types, flags, positions, numbers, timestamps, name lengths, run
    starts): (records written, where the walk stopped, error kind, error index among them, error
    value)."""
    offsets, sizes, types, flags, positions, numbers, timestamps, name_lengths, new_run = out
    room = len(given) if not walking else len(sizes) - at
    limit = min(chunk_end, len(buf))
    bad_length = bad_trailer = bad_position = bad_body = -1
    value = 0  # (the length of the record with a bad one)
    previous_name = -1  # where the previous record's stream name starts, when it is an event
    previous_length = 0
    count = 0
    off = expected = start
    while count < room:
        if walking:
            if off >= end:
                break
            if off + 4 > len(buf):
                off = end + 1
                break
        else:
            off = given[count]
        i = count
        j = at + i
        count += 1
        length = 0
        if off >= 0 and off + 4 <= (len(buf) if walking else limit):
            length = _u32(buf, off)
        if walking:
            offsets[j] = off
        sizes[j] = length + 12
        types[j] = 0
        flags[j] = positions[j] = numbers[j] = timestamps[j] = name_lengths[j] = 0
        new_run[j] = False
        frame = off
        off += length + 12
        if not walking and (frame != expected or off > limit):
            length = 0  # (reported as a bad length below)
        expected = off
        if length == 0:
            if bad_length < 0:
                bad_length, value = i, sizes[j] - 12
            if walking:
                continue
            break  # (the frames at given offsets are not read past one whose length is bad)
        if off > limit:
            continue  # (walking) past the chunk's end: the walk stops beyond chunk_end
        kind = buf[frame + 4]
        types[j] = kind
        if bad_trailer < 0 and (
            _u32(buf, frame + 8 + length) != length or (kind != _EVENT and kind != _SYSTEM)
        ):
            bad_trailer = i
        name_at = -1
        if frame + _EVENT_BODY > len(buf):  # (never in a chunk: its footer follows its frames)
            if bad_body < 0:
                bad_body = i
        else:
            # the first 56 bytes of every frame are read, as the numpy path reads them (from the next
            # frame, or the footer, when the frame is shorter: such a record is reported below)
            positions[j] = _i64(buf, frame + 8)
            numbers[j] = _i64(buf, frame + 16)
            timestamps[j] = _i64(buf, frame + 24)
            if check_positions and bad_position < 0 and positions[j] != base_position + frame - _HS:
                bad_position = i
            if kind == _EVENT:
                flags[j] = _u16(buf, frame + 6)
                name = _u16(buf, frame + 48)
                name_lengths[j] = name
                if length < _EVENT_BODY + name:
                    if bad_body < 0:
                        bad_body = i
                else:
                    name_at = frame + _STREAM_AT
            elif length < _SYSTEM_BODY and bad_body < 0:
                bad_body = i
        if kind == _EVENT:
            same = name_at >= 0 and previous_name >= 0 and name_lengths[j] == previous_length
            if same:
                same = _same_bytes(buf, name_at, previous_name, previous_length)
            new_run[j] = not same
        previous_name = name_at
        previous_length = name_lengths[j]
    if not walking and bad_length < 0 and count and expected != chunk_end:
        bad_length, value = count - 1, sizes[at + count - 1] - 12
    kind, index = 0, -1
    if bad_length >= 0:
        kind, index = 1, bad_length
    elif bad_trailer >= 0:
        kind, index = 2, bad_trailer
    elif bad_position >= 0:
        kind, index = 3, bad_position
    elif bad_body >= 0:
        kind, index = 4, bad_body
    return (count if walking else len(given)), off, kind, index, value


@_jit
def scan_records(buf, offsets, end, base_position, check_positions, out, at):
    """The columns of every record at ``offsets`` (absolute, in log order, the first at the header's
    end), written into ``out`` (sizes, types, flags, positions, numbers, timestamps, name lengths,
    run starts; its offsets are not written) from index ``at``, and the first error: (error kind,
    error index, error value). One pass over the frames; the error reported is the first of the
    first kind found, in this order: 1 a bad length (value: the length), 2 a bad trailer or type, 3
    a record not at its own position, 4 an event or system record too short for its header and
    stream name."""
    return _records(buf, offsets, False, _HS, 0, end, base_position, check_positions, out, at)[2:]


@_jit
def walk_records(buf, start, end, chunk_end, base_position, check_positions, out, at):
    """The frames from ``start`` by their leading lengths, up to the first that ends at or after
    ``end`` (or as many as ``out`` has room for from index ``at``), and their columns, written into
    ``out`` (offsets, then as :func:`scan_records`), in one pass: (records written, where the walk
    stopped, then :func:`scan_records`'s error for them, in a window that ends where the walk
    stopped). A whole chunk stops exactly at ``chunk_end``; a walk that stops after it (the lengths
    do not lead to the chunk's end) writes columns that mean nothing. Each frame's fields are read as
    the walk reaches it, while its first bytes are in the cache (reaching the next frame misses
    it: a walk for the offsets and a second pass for the fields missed twice, 2.4x the CPU)."""
    empty = np.empty(0, dtype=np.int64)
    return _records(buf, empty, True, start, end, chunk_end, base_position, check_positions, out, at)


def columns(capacity: int) -> tuple:
    """Room for ``capacity`` records' columns: offsets, sizes, types, flags, positions, numbers,
    timestamps, name lengths, run starts (pages are touched only as records are written)."""
    wide = [np.empty(capacity, dtype=np.int64) for _ in range(7)]
    return (*wide[:2], np.empty(capacity, dtype=np.uint8), *wide[2:7], np.empty(capacity, dtype=np.bool_))


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
        out = columns(4)
        walk_records(b, _HS, _HS + 64, _HS + 64, 0, True, out, 0)
        scan_records(b, out[0][:1], _HS + 64, 0, True, out, 1)
