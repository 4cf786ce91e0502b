"""Whole-chunk record tables for the scavenge phases, computed with numpy instead of decoding every
record in Python.

A :class:`RecordTable` holds, for every record of a chunk, the fields a phase needs (frame offset,
size, type, flags, log position, event number, timestamp) and splits the records into *runs* of
consecutive events of one stream (an append writes its events together), so stream names are
decoded once per run. Frames are checked as the decoder checks them (lengths, trailers, positions);
a completed chunk's xxh3 checksum (which covers every frame) replaces the per-record CRCs.

The functions here take a :class:`~evdb.storage.chunk.Chunk` and plain values only, and yield the
GIL (``time.sleep(0)``) every few thousand records, so appends go on while a scavenge runs.
"""

from __future__ import annotations

import mmap
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import xxhash

from evdb.errors import CorruptedFile
from evdb.storage import records as rec
from evdb.storage.chunk import HEADER_SIZE, Chunk

if TYPE_CHECKING:
    from evdb.scavenge.handoff import CopyTable

__all__ = ["DecisionTable", "RecordTable", "discard_mask", "load_compiled", "record_table"]

_HS = HEADER_SIZE
_STREAM_AT = 4 + rec.EVENT_HEADER.size  # stream name bytes, from the frame start
_EVENT_BODY = rec.EVENT_HEADER.size  # an event's body holds at least its header and stream name
_SYSTEM_BODY = rec.SYSTEM_HEADER.size
_YIELD_EVERY = 4096  # records between GIL yields in the Python loops
_BLOCK = 65536  # records per numpy block (keeps each GIL-holding stretch short)
_unpack_len = struct.Struct("<I").unpack_from


class _Words:
    """Little-endian 64-bit reads at any byte offsets of a buffer, vectorised: two aligned words
    per value, shifted together."""

    def __init__(self, buf) -> None:
        # every read is of a frame's bytes, and a chunk's buffer goes on at least 16 bytes after its
        # last frame (the footer, or the rest of an active chunk), so no word is read past the end
        self.words = np.frombuffer(buf, dtype="<u8", count=len(buf) // 8)
        self.last = len(self.words) - 1

    def u64(self, offsets: np.ndarray) -> np.ndarray:
        index = offsets >> 3
        shift = ((offsets & 7) << 3).astype(np.uint64)
        lo = self.words[index] >> shift
        hi = self.words[np.minimum(index + 1, self.last)] << (np.uint64(64) - shift)
        return np.where(shift == 0, lo, lo | hi)

    def u64s(self, offsets: np.ndarray, count: int) -> np.ndarray:
        """The ``count`` words at ``offsets``, ``offsets + 8``, ...: an array of shape (n, count),
        gathered in one pass (the words of one record share cache lines)."""
        index = (offsets >> 3)[:, None] + np.arange(count + 1)
        np.minimum(index, self.last, out=index)
        words = self.words[index]
        shift = ((offsets & 7) << 3).astype(np.uint64)[:, None]
        lo = words[:, :count] >> shift
        hi = words[:, 1:] << (np.uint64(64) - shift)
        return np.where(shift == 0, lo, lo | hi)

    def get(self, offsets: np.ndarray, width: int, dtype) -> np.ndarray:
        value = self.u64(offsets)
        if width < 8:
            value &= np.uint64((1 << (8 * width)) - 1)
        return value.astype(dtype)


@dataclass
class RecordTable:
    """The records of one chunk, as arrays (one entry per record, in log order)."""

    offsets: np.ndarray  # int64: frame start, absolute in the chunk's buffer (header included)
    sizes: np.ndarray  # int64: frame size (the record's logical size)
    types: np.ndarray  # uint8: rec.RecordType
    flags: np.ndarray  # int64 (events; 0 for system records)
    positions: np.ndarray  # int64: log position
    numbers: np.ndarray  # int64: event number (events)
    timestamps: np.ndarray  # int64: ticks (events)
    run_of: np.ndarray  # int64: index into run_names for events, -1 for system records
    run_names: list[str]  # stream name of each run
    run_starts: np.ndarray  # int64: index of each run's first record

    def __len__(self) -> int:
        return len(self.offsets)


_kernels_module = None  # evdb.scavenge.framescan, once imported and compiled in this process
#: whether record_table walks frames with the compiled kernels by default: in the scavenge worker
#: processes (they call load_compiled at start-up); the node process keeps the numpy path
_use_compiled = False


def _kernels():
    global _kernels_module
    if _kernels_module is None:
        from evdb.scavenge import framescan

        framescan.warm_up()
        _kernels_module = framescan
    return _kernels_module


def load_compiled() -> bool:
    """Import the compiled record walk in this process, compile it (or load it from numba's cache)
    now, and use it from now on; False, with the numpy path kept, when that fails."""
    global _use_compiled
    try:
        _kernels()
    except Exception:  # numba missing, or unable to compile here: the numpy path gives the same tables
        return False
    _use_compiled = True
    return True


def _record_offsets(chunk: Chunk, should_stop: Callable[[], bool]) -> np.ndarray:
    """Absolute frame offsets of every record in the chunk's valid data."""
    end = _HS + chunk.physical_end
    posmap = chunk.posmap_offsets()
    if posmap is not None:
        return posmap.astype(np.int64) + _HS
    if chunk.is_scavenged:
        return np.zeros(0, dtype=np.int64)
    buf = chunk.buffer
    out: list[int] = []
    append = out.append
    unpack = _unpack_len
    off = _HS
    count = 0
    while off < end:
        append(off)
        off += unpack(buf, off)[0] + rec.FRAME_OVERHEAD
        count += 1
        if count == _YIELD_EVERY:
            count = 0
            if should_stop():
                raise InterruptedError("scan stopped")
            time.sleep(0)
    if off != end:
        raise CorruptedFile(chunk.path or chunk.file_name, f"bad record length before offset {end - _HS}")
    return np.array(out, dtype=np.int64)


def verify_checksum(chunk: Chunk) -> None:
    """A completed chunk: its xxh3 checksum (covers every frame). Active: every frame's CRC."""
    where = chunk.path or chunk.file_name
    if chunk.footer is not None:
        size = chunk.file_size
        if xxhash.xxh3_128(memoryview(chunk.buffer)[: size - 16]).digest() != chunk.footer.checksum:
            raise CorruptedFile(where, "chunk checksum mismatch")
        return
    offset = 0
    while offset < chunk.physical_end:
        _, offset = chunk.read_at(offset)


def record_table(
    chunk: Chunk,
    should_stop: Callable[[], bool] = lambda: False,
    *,
    verify: bool = True,
    streams: bool = True,
    compiled: bool | None = None,
) -> RecordTable:
    """Every record of a completed ``chunk``; without ``streams`` the runs are not worked out (a
    merge copies every record and needs no names). ``compiled``: walk the frames with the compiled
    kernels or with numpy (the same table); by default, compiled once :func:`load_compiled` ran here."""
    where = chunk.path or chunk.file_name
    if compiled is None:
        compiled = _use_compiled
    names: _RunNames | mmap.mmap  # where the run starts' stream names are read
    if compiled:
        if verify and chunk.footer is None:
            verify_checksum(chunk)  # an active chunk: every frame's CRC
        # a window at a time, each window's pages let go once walked (and hashed); a checksum
        # mismatch is reported before any damage the walk found
        columns, names = _windowed_columns(
            chunk, where, verify and chunk.footer is not None, should_stop, streams
        )
    else:
        if verify:
            verify_checksum(chunk)
        if should_stop():
            raise InterruptedError("scan stopped")
        columns = _numpy_columns(chunk, should_stop, where, streams)
        names = chunk.buffer
    offsets, sizes, types, flags, positions, numbers, timestamps, name_lengths, new_run = columns
    if streams:
        run_of, run_names, run_starts = _runs(
            names, offsets, types, name_lengths, new_run, should_stop, where
        )
    else:
        run_of, run_names, run_starts = np.full(len(offsets), -1, dtype=np.int64), [], np.zeros(0, np.int64)
    return RecordTable(
        offsets, sizes, types, flags, positions, numbers, timestamps, run_of, run_names, run_starts
    )


def _raise(where: str, kind: int, offset: int, value: int) -> None:
    """The error of the first bad record, in the words of the record decoder."""
    at = offset - _HS
    if kind == 1:
        raise CorruptedFile(where, f"bad record length {value} at offset {at}")
    if kind == 2:
        raise CorruptedFile(where, f"record checksum mismatch at offset {at}")
    if kind == 3:
        raise CorruptedFile(where, f"record at offset {at} claims position {value}")
    raise CorruptedFile(where, f"undecodable record at offset {at}: too short for its header")


#: the compiled walk goes over a chunk this many bytes at a time and lets each window's pages go once
#: it has walked (and hashed) them (``Chunk.drop_pages``): a worker process's RSS holds a window of
#: the chunk's file, not all of it (issue 23: a scavenge under 500 MiB of RSS)
_WINDOW = 32 << 20
#: the bytes a frame is taken to hold, on average, to size a walked chunk's columns (more frames
#: double them)
_FRAME_GUESS = 256


def _frame_length(buf, off: int, limit: int) -> int:
    return int(_unpack_len(buf, off)[0]) if off >= 0 and off + 4 <= limit else 0


def _names_equal(buf, a: int, b: int, count: int) -> bool:
    return bytes(buf[a : a + count]) == bytes(buf[b : b + count])


class _RunNames:
    """The stream names at the run starts of a chunk, read while the walk had their window mapped:
    sliced as the chunk's buffer is sliced at a name (``names[a : a + length]``)."""

    def __init__(self, raw) -> None:
        self._raw = raw
        self.at: dict[int, bytes] = {}

    def add(self, raw, offsets: np.ndarray, name_lengths: np.ndarray, new_run: np.ndarray) -> None:
        for i in np.nonzero(new_run)[0].tolist():
            a = int(offsets[i]) + _STREAM_AT
            self.at[a] = bytes(raw[a : a + int(name_lengths[i])])

    def __getitem__(self, where: slice) -> bytes:
        got = self.at.get(where.start)
        return got if got is not None and len(got) == where.stop - where.start else bytes(self._raw[where])


def _windowed_columns(
    chunk: Chunk, where: str, hash_it: bool, should_stop: Callable[[], bool], streams: bool = True
) -> tuple[tuple, _RunNames]:
    """The columns of every record of a chunk, from the compiled kernels run a window of frames at
    a time (the same columns, and the same first error, as one run over the whole chunk; each
    window after the first is scanned in a view that starts at its first frame, and its first
    record's run start is settled here against the window before). With ``hash_it`` the chunk's
    checksum is computed beside the walk, window by window, and checked before any error the walk
    found is raised."""
    kernels = _kernels()
    raw = chunk.buffer
    buf = np.frombuffer(raw, dtype=np.uint8)
    end = _HS + chunk.physical_end
    limit = min(end, len(buf))
    posmap = chunk.posmap_offsets()
    if posmap is not None:
        given: np.ndarray | None = posmap.astype(np.int64) + _HS
    elif chunk.is_scavenged:
        given = np.zeros(0, dtype=np.int64)
    else:
        given = None  # walked by their lengths
    hasher = xxhash.xxh3_128() if hash_it else None
    hash_end = chunk.file_size - 16 if hash_it else 0
    hashed = dropped = since = 0
    names = _RunNames(raw)
    # the chunk's columns, written in place window after window (one concatenation of the windows'
    # own columns copied a tenth of a chunk walk's CPU): room for frames of _FRAME_GUESS bytes,
    # doubled when a window fills it
    if given is None:
        out = kernels.columns(chunk.physical_end // _FRAME_GUESS + 64)
    else:
        out = (given, *kernels.columns(len(given))[1:])
    error: tuple[int, int, int] | None = None  # (kind, record index, value): the first, as one run finds it
    walk_error = False  # the frames' lengths do not lead to the end
    count = 0  # records in the windows before
    expected = _HS  # where the next window's first frame must start
    previous: tuple[int, int, int, int] | None = (
        None  # the last record before: offset, size, type, name length
    )
    off, gi = _HS, 0

    def hash_to(upto: int) -> None:
        nonlocal hashed
        upto = min(upto, hash_end)
        if hasher is not None and upto > hashed:
            hasher.update(memoryview(raw)[hashed:upto])
            hashed = upto

    def beside_hash(upto: int, kernel, *args):
        """``kernel(*args)``, while the chunk is hashed up to ``upto`` on another thread (the
        kernels run without the GIL)."""
        hasher_thread = None
        if hasher is not None and upto > hashed:
            hasher_thread = threading.Thread(target=hash_to, args=(upto,), daemon=True)
            hasher_thread.start()
        try:
            return kernel(*args)
        finally:
            if hasher_thread is not None:
                hasher_thread.join()

    try:
        while True:
            if should_stop():
                raise InterruptedError("scan stopped")
            walked = None  # the error the walk found (walked by their lengths)
            if given is None:
                if off >= end:
                    break
                window = min(end, off + _WINDOW)
                if count == len(out[0]):  # full: twice the room, the columns so far kept
                    out = tuple(_grown(column, count) for column in out)
                written, stop, *walked = beside_hash(
                    window, kernels.walk_records, buf, off, window, end, chunk.start_position,
                    not chunk.is_scavenged, out, count,
                )  # fmt: skip
                offsets = out[0][count : count + written]
                if stop > end:
                    walk_error = True  # reported before any record's damage, as one walk does
                    break
                last = stop == end
                window_end = stop
                off = stop
                if error is not None and error[0] == 1:
                    continue  # (walked on only to see whether the lengths lead to the end)
            else:
                if gi >= len(given) or (error is not None and error[0] == 1):
                    break
                stop_at = int(np.searchsorted(given, given[gi] + _WINDOW, side="left"))
                offsets = given[gi : max(stop_at, gi + 1)]
                written = len(offsets)
                gi += written
                last = gi >= len(given)
                tail = int(offsets[-1])
                window_end = end if last else min(tail + _frame_length(buf, tail, limit) + 12, end)
            first = int(offsets[0])
            if count and first != expected:  # (only a position map's offsets can jump)
                error = (1, count, _frame_length(buf, first, limit))
                break
            if walked is None:
                shift = first - _HS if count else 0
                walked = beside_hash(
                    window_end, kernels.scan_records, buf[shift:], offsets - shift, window_end - shift,
                    chunk.start_position + shift, not chunk.is_scavenged, out, count,
                )  # fmt: skip
            kind, i, value = walked
            # (this window's part of the columns: sizes, types, name lengths, run starts)
            sizes, types, name_lengths, new_run = (out[k][count : count + written] for k in (1, 2, 7, 8))
            if (
                count and types[0] == 1
            ):  # (an event) its run starts here unless the record before is of its stream
                before_off, before_size, before_type, before_length = previous  # type: ignore[misc]
                new_run[0] = not (
                    before_type == 1
                    and _has_name(buf, before_off, before_size, before_length)
                    and _has_name(buf, first, int(sizes[0]), int(name_lengths[0]))
                    and before_length == int(name_lengths[0])
                    and _names_equal(buf, first + _STREAM_AT, before_off + _STREAM_AT, before_length)
                )
            if streams and not kind:
                names.add(raw, offsets, name_lengths, new_run)  # while the window is mapped
            if kind and (error is None or kind < error[0]):
                error = (int(kind), count + int(i), int(value))
            previous = (int(offsets[-1]), int(sizes[-1]), int(types[-1]), int(name_lengths[-1]))
            count += written
            expected = int(offsets[-1]) + int(sizes[-1])
            # this window's pages: walked and hashed, let go (the next window starts on the last one)
            upto = (window_end // mmap.PAGESIZE) * mmap.PAGESIZE
            # (from the window before's start: reading the record before this window's first one
            # mapped some of its pages again)
            if not last and upto > dropped:
                chunk.drop_pages(since, upto - since)
                since, dropped = dropped, upto
            if last:
                break
        hash_to(hash_end)
    finally:
        chunk.drop_pages(since)
    if hasher is not None and hasher.digest() != chunk.footer.checksum:  # type: ignore[union-attr]
        raise CorruptedFile(where, "chunk checksum mismatch")
    if walk_error:
        raise CorruptedFile(where, f"bad record length before offset {end - _HS}")
    columns = tuple(column[:count] for column in out)
    if error is not None:
        kind, i, value = error
        _raise(where, kind, int(columns[0][i]), int(columns[4][i]) if kind == 3 else value)
    return columns, names


def _grown(column: np.ndarray, count: int) -> np.ndarray:
    """``column`` with twice the room, its first ``count`` entries kept."""
    bigger = np.empty(2 * len(column), dtype=column.dtype)
    bigger[:count] = column[:count]
    return bigger


def _has_name(buf, off: int, size: int, name_length: int) -> bool:
    """Whether the compiled walk reads an event's stream name at ``off`` (its body holds the header
    and the name, and the header lies inside the buffer)."""
    return off + _EVENT_BODY <= len(buf) and size - 12 >= _EVENT_BODY + name_length


def _numpy_columns(chunk: Chunk, should_stop: Callable[[], bool], where: str, streams: bool):
    offsets = _record_offsets(chunk, should_stop)
    buf = chunk.buffer
    words = _Words(buf)
    end = _HS + chunk.physical_end
    # the first 56 bytes of each frame: length (u32), type (u8), version (u8), flags (u16), position,
    # event number, timestamp, event id (16 bytes), stream and event type lengths (u16 each), ...
    head = words.u64s(offsets, 7)
    first = head[:, 0]
    n = (first & np.uint64(0xFFFFFFFF)).astype(np.int64)
    sizes = n + rec.FRAME_OVERHEAD
    bad = (n == 0) | (offsets + sizes > end)
    if len(offsets):
        contiguous = np.empty(len(offsets), dtype=bool)
        contiguous[0] = offsets[0] == _HS
        contiguous[1:] = offsets[1:] == offsets[:-1] + sizes[:-1]
        bad |= ~contiguous
        if int(offsets[-1] + sizes[-1]) != end:
            bad[-1] = True
    if bad.any():
        i = int(np.argmax(bad))
        _raise(where, 1, int(offsets[i]), int(n[i]))
    trailer = words.get(offsets + 8 + n, 4, np.int64)
    types = ((first >> np.uint64(32)) & np.uint64(0xFF)).astype(np.uint8)
    positions = np.ascontiguousarray(head[:, 1]).view(np.int64)
    bad = (trailer != n) | ((types != rec.RecordType.EVENT) & (types != rec.RecordType.SYSTEM))
    if bad.any():
        i = int(np.argmax(bad))
        _raise(where, 2, int(offsets[i]), 0)
    if not chunk.is_scavenged:
        wrong = positions != chunk.start_position + offsets - _HS
        if wrong.any():
            i = int(np.argmax(wrong))
            _raise(where, 3, int(offsets[i]), int(positions[i]))
    is_event = types == rec.RecordType.EVENT
    flags = np.where(is_event, (first >> np.uint64(48)).astype(np.int64), 0)
    numbers = np.ascontiguousarray(head[:, 2]).view(np.int64)
    timestamps = np.ascontiguousarray(head[:, 3]).view(np.int64)
    name_lengths = np.where(is_event, (head[:, 6] & np.uint64(0xFFFF)).astype(np.int64), 0)
    del head
    short = np.where(is_event, n < _EVENT_BODY + name_lengths, n < _SYSTEM_BODY)
    if short.any():
        i = int(np.argmax(short))
        _raise(where, 4, int(offsets[i]), 0)
    if streams:
        new_run = _new_runs(buf, words, offsets, name_lengths, is_event)
    else:
        new_run = np.zeros(len(offsets), dtype=bool)
    return offsets, sizes, types, flags, positions, numbers, timestamps, name_lengths, new_run


def _new_runs(buf, words, offsets, ls, is_event) -> np.ndarray:
    """Where a run of one stream's events starts: at every event whose stream name is not the
    previous record's (compared exactly: two 16-byte windows, masked to the name, for names of up to
    32 bytes; the whole name for longer ones)."""
    count = len(offsets)
    if not count:
        return np.zeros(0, dtype=bool)
    starts = offsets + _STREAM_AT
    head = words.u64s(starts, 2)
    # the head window covers the first min(length, 16) bytes of the name: mask off what follows it
    ones = np.uint64(0xFFFFFFFFFFFFFFFF)
    first = np.minimum(ls, 8)
    second = np.clip(ls - 8, 0, 8)
    head[:, 0] &= np.where(first >= 8, ones, (np.uint64(1) << (first * 8).astype(np.uint64)) - np.uint64(1))
    head[:, 1] &= np.where(second >= 8, ones, (np.uint64(1) << (second * 8).astype(np.uint64)) - np.uint64(1))
    # names of 17 to 32 bytes: the tail window (the last 16 bytes) lies inside the name too
    tail = words.u64s(starts + ls - 16, 2)
    tail[ls <= 16] = 0
    same = is_event.copy()
    same[0] = False
    same[1:] &= is_event[:-1] & (ls[1:] == ls[:-1])
    for key in (head[:, 0], head[:, 1], tail[:, 0], tail[:, 1]):
        same[1:] &= key[1:] == key[:-1]
    # long names: compare the whole name with the previous record's
    for i in np.nonzero(same & (ls > 32))[0].tolist():
        a, b, size = int(starts[i]), int(starts[i - 1]), int(ls[i])
        if buf[a : a + size] != buf[b : b + size]:
            same[i] = False
    return is_event & ~same


def _runs(buf, offsets, types, name_lengths, new_run, should_stop, where):
    """Each event's run (of one stream; -1 for system records); each run's stream name, decoded once."""
    count = len(offsets)
    if not count:
        return np.zeros(0, dtype=np.int64), [], np.zeros(0, dtype=np.int64)
    run_starts = np.nonzero(new_run)[0]
    run_of = np.where(types == rec.RecordType.EVENT, np.cumsum(new_run) - 1, -1)
    starts = offsets + _STREAM_AT
    names: list[str] = []
    for k, i in enumerate(run_starts.tolist()):
        a = int(starts[i])
        try:
            names.append(buf[a : a + int(name_lengths[i])].decode())
        except UnicodeDecodeError as exc:
            raise CorruptedFile(
                where, f"undecodable record at offset {int(offsets[i]) - _HS}: {exc}"
            ) from None
        if k % _YIELD_EVERY == _YIELD_EVERY - 1:
            if should_stop():
                raise InterruptedError("scan stopped")
            time.sleep(0)
    return run_of.astype(np.int64), names, run_starts.astype(np.int64)


@dataclass
class DecisionTable:
    """Per stream, what chunk execution needs to judge its records (from the Decider's rows)."""

    rows: dict[str, tuple[int, int, int | None]]  # stream -> (discard point, last number or -1, cutoff)
    limit: int  # the scavenge point's position: records at or after it stay
    unsafe: bool  # UnsafeIgnoreHardDelete: tombstones go too

    @classmethod
    def from_decider(cls, decider) -> DecisionTable:
        rows = {}
        for name, row in decider.rows.items():
            cutoff = decider._cutoffs.get(name)
            if row.discard_point <= 0 and cutoff is None and not decider.unsafe:
                continue  # nothing of this stream can go
            last = row.last_number if row.last_number is not None else -1
            rows[name] = (row.discard_point, last, cutoff)
        return cls(rows, decider.point.position, decider.unsafe)


def discard_mask(table: RecordTable | CopyTable, decisions: DecisionTable) -> np.ndarray:
    """Which records chunk execution removes; the same answers as ``Decider.discard_record`` (from a
    chunk's walk, or from the hand-off accumulation wrote of it: evdb/scavenge/handoff.py)."""
    count = len(table)
    discard = np.zeros(count, dtype=bool)
    if not count or not table.run_names:
        return discard
    runs = len(table.run_names)
    has_row = np.zeros(runs, dtype=bool)
    point = np.zeros(runs, dtype=np.int64)
    last = np.full(runs, -1, dtype=np.int64)
    has_cutoff = np.zeros(runs, dtype=bool)
    cutoff = np.zeros(runs, dtype=np.int64)
    rows = decisions.rows
    for k, name in enumerate(table.run_names):
        row = rows.get(name)
        if row is None:
            continue
        has_row[k] = True
        point[k], last[k] = row[0], row[1]
        if row[2] is not None:
            has_cutoff[k] = True
            cutoff[k] = row[2]
    event = table.run_of >= 0
    run = np.where(event, table.run_of, 0)
    candidate = event & has_row[run] & (table.positions < decisions.limit)
    numbers = table.numbers
    tombstone = numbers == rec.MAX_EVENT_NUMBER
    expired = has_cutoff[run] & (numbers != last[run]) & (table.timestamps < cutoff[run])
    judged = (numbers < point[run]) | expired
    discard = candidate & np.where(tombstone, decisions.unsafe, judged)
    return discard
