"""What accumulation hands on to chunk execution, so that a chunk accumulated and executed in the
same run is walked once (issue 23).

Accumulation walks every record frame of a completed chunk file (``chunkscan.record_table``, with the
checksum). Execution needs, per record, the frame's size (the offsets follow: the frames of a chunk
lie back to back from its header on, which the walk checked), the log position, and, to judge it, its
run (the stream), event number and timestamp. Accumulation writes these to one *hand-off file* per
chunk file, in the run's hand-off folder (``<index>/scavenging/handoff/``), coded small: the sizes 4
bytes a record; event numbers, timestamps and the positions' distance from the frame offsets as
segments (numbers that go up by one, timestamps and distances that stay the same) unless plain
values are smaller; the runs' first records and stream names; the indices of the system records.
About 1 MiB for a 256 MiB chunk of 1 KiB events, in the page cache (never in a process's memory
beyond the chunk being worked on), removed as each chunk is executed.

A hand-off is used only by the run that wrote it, for the very chunk file it was written from: the
folder is emptied as each run starts and ends (a killed run's files are never read), the node hands
a file on only for the chunk object accumulation read, and the file names that chunk file (name,
size, footer checksum) and ends with a checksum of its own bytes: anything else, and execution walks
the chunk as it would without one. Never fsynced: it is not state a restart relies on.
"""

from __future__ import annotations

import contextlib
import os
import struct
from dataclasses import dataclass

import numpy as np
import xxhash

from evdb.storage.chunk import HEADER_SIZE, Chunk

__all__ = ["CopyTable", "HandoffUnusable", "clear_folder", "path_for", "read_handoff", "write_handoff"]

_MAGIC = b"EVDBHOF1"
# magic, name length, system records, records, runs, name bytes, number segments, timestamp
# segments, distance segments (-1: plain values), chunk file size, chunk checksum
_HEAD = struct.Struct("<8sIIqqqqqqq16s")
_TRAILER = 8  # xxh3-64 of every byte before it
SUFFIX = ".handoff"


class HandoffUnusable(Exception):
    """A hand-off file that does not describe the chunk file given (or cannot be read whole)."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


@dataclass
class CopyTable:
    """What chunk execution needs of every record of one chunk (in log order): the fields
    ``chunkscan.discard_mask`` judges and those a copy is made of."""

    offsets: np.ndarray  # int64: frame start, absolute in the chunk's buffer (header included)
    sizes: np.ndarray  # int64: frame size
    positions: np.ndarray  # int64: log position
    numbers: np.ndarray  # int64: event number (events)
    timestamps: np.ndarray  # int64: ticks (events)
    run_of: np.ndarray  # int64: index into run_names for events, -1 for system records
    run_names: list[str]  # stream name of each run

    def __len__(self) -> int:
        return len(self.offsets)


def path_for(folder: str, chunk: Chunk) -> str:
    return os.path.join(folder, chunk.file_name + SUFFIX)


def clear_folder(folder: str, *, keep: bool = True) -> None:
    """Remove every hand-off file of ``folder`` (made if missing): those of a run that ended, or was
    killed. ``keep`` false: the folder too, when nothing else is in it (as a run ends, so that the
    scavenge database is the only entry of its directory between runs). An OSError names the file."""
    if not keep and not os.path.isdir(folder):
        return
    os.makedirs(folder, exist_ok=True)
    for name in os.listdir(folder):
        if name.endswith(SUFFIX) or name.endswith(SUFFIX + ".part"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(folder, name))
    if not keep:
        with contextlib.suppress(OSError):  # (not empty: a file of someone else's)
            os.rmdir(folder)


def _segments(values: np.ndarray, step: int) -> tuple[np.ndarray, np.ndarray] | None:
    """``values`` as segments in which each value is the one before plus ``step`` (first index,
    first value of each), or None when plain values are smaller. int64 arithmetic wraps, in the
    coding and the decoding alike, so any values come back exactly."""
    count = len(values)
    if not count:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    breaks = np.flatnonzero(np.diff(values) != step)
    if 2 * (len(breaks) + 1) > count:
        return None
    starts = np.empty(len(breaks) + 1, dtype=np.int64)
    starts[0] = 0
    starts[1:] = breaks + 1
    return starts, values[starts]


def _expand(starts: np.ndarray, firsts: np.ndarray, step: int, count: int) -> np.ndarray:
    if not count:
        return np.zeros(0, np.int64)
    lengths = np.diff(np.append(starts, count))
    out = np.repeat(firsts - step * starts, lengths)
    if step:
        out += np.arange(count, dtype=np.int64) * step
    return out


def _pad(raw: bytes) -> bytes:
    return raw + b"\0" * (-len(raw) % 8)


def write_handoff(
    path: str,
    chunk: Chunk,
    *,
    offsets: np.ndarray,
    sizes: np.ndarray,
    types: np.ndarray,
    positions: np.ndarray,
    numbers: np.ndarray,
    timestamps: np.ndarray,
    run_starts: np.ndarray,
    run_names: list[str],
) -> None:
    """Write the hand-off of completed ``chunk`` (its record table's columns) to ``path`` (under a
    ``.part`` name first: a file at ``path`` is always whole)."""
    assert chunk.footer is not None, "only a completed chunk has a hand-off"
    count = len(sizes)
    if count and int(sizes.max()) >= 1 << 32:
        raise ValueError(f"{chunk.path or chunk.file_name}: a record too big for a hand-off")
    name = chunk.file_name.encode()
    system = np.flatnonzero(types != 1).astype(np.int64)  # records.RecordType.EVENT
    encoded = [n.encode() for n in run_names]
    name_lengths = np.array([len(n) for n in encoded], dtype=np.uint32)
    blob = b"".join(encoded)
    # positions as their distance from the frame offsets: one segment for a chunk never scavenged
    coded = [
        (_segments(numbers, 1), numbers),
        (_segments(timestamps, 0), timestamps),
        (_segments(positions - offsets, 0), positions - offsets),
    ]
    head = _HEAD.pack(
        _MAGIC, len(name), len(system), count, len(run_names), len(blob),
        *(-1 if seg is None else len(seg[0]) for seg, _ in coded),
        chunk.file_size, chunk.footer.checksum,
    )  # fmt: skip
    parts = [
        head,
        _pad(name),
        _pad(sizes.astype("<u4").tobytes()),
        system.astype("<i8").tobytes(),
        run_starts.astype("<i8").tobytes(),
        _pad(name_lengths.astype("<u4").tobytes()),
        _pad(blob),
    ]
    for seg, plain in coded:
        if seg is None:
            parts.append(plain.astype("<i8").tobytes())
        else:
            parts += [seg[0].astype("<i8").tobytes(), seg[1].astype("<i8").tobytes()]
    hasher = xxhash.xxh3_64()
    for part in parts:
        hasher.update(part)
    parts.append(hasher.digest())
    partial = path + ".part"
    try:
        with open(partial, "wb") as f:
            f.writelines(parts)
        os.replace(partial, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(partial)
        raise


class _Reader:
    def __init__(self, raw: bytes, path: str) -> None:
        self.raw = raw
        self.at = 0
        self.path = path

    def take(self, count: int, dtype: str) -> np.ndarray:
        size = count * np.dtype(dtype).itemsize
        if self.at + size > len(self.raw):
            raise HandoffUnusable(self.path, "shorter than its header says")
        out = np.frombuffer(self.raw, dtype=dtype, count=count, offset=self.at)
        self.at += size + (-size % 8)
        return out

    def take_bytes(self, count: int) -> bytes:
        if self.at + count > len(self.raw):
            raise HandoffUnusable(self.path, "shorter than its header says")
        out = self.raw[self.at : self.at + count]
        self.at += count + (-count % 8)
        return out


def read_handoff(path: str, chunk: Chunk) -> CopyTable:
    """The records of ``chunk`` from its hand-off at ``path``; :class:`HandoffUnusable` when the file
    is not whole, or was written from another chunk file."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as exc:
        raise HandoffUnusable(path, f"cannot be read: {exc}") from None
    if len(raw) < _HEAD.size + _TRAILER or xxhash.xxh3_64_digest(raw[:-_TRAILER]) != raw[-_TRAILER:]:
        raise HandoffUnusable(path, "checksum mismatch")
    magic, name_length, system_count, count, runs, blob_length, *segments, file_size, checksum = (
        _HEAD.unpack_from(raw)
    )
    if magic != _MAGIC:
        raise HandoffUnusable(path, "not a hand-off file")
    reader = _Reader(raw[: len(raw) - _TRAILER], path)
    reader.at = _HEAD.size
    name = reader.take_bytes(name_length).decode()
    if (
        chunk.footer is None
        or name != chunk.file_name
        or file_size != chunk.file_size
        or checksum != chunk.footer.checksum
    ):
        raise HandoffUnusable(path, f"written from another file than {chunk.path or chunk.file_name}")
    sizes = reader.take(count, "<u4").astype(np.int64)
    system = reader.take(system_count, "<i8")
    run_starts = reader.take(runs, "<i8")
    name_lengths = reader.take(runs, "<u4")
    blob = reader.take_bytes(blob_length)
    columns = []
    for segment_count, step in zip(segments, (1, 0, 0), strict=True):
        if segment_count < 0:
            columns.append(reader.take(count, "<i8").copy())
        else:
            starts = reader.take(segment_count, "<i8")
            firsts = reader.take(segment_count, "<i8")
            columns.append(_expand(starts, firsts, step, count))
    if reader.at != len(reader.raw):
        raise HandoffUnusable(path, "longer than its header says")
    if (
        (runs and (int(run_starts.min()) < 0 or int(run_starts.max()) >= count))
        or (system_count and (int(system.min()) < 0 or int(system.max()) >= count))
        or int(name_lengths.sum()) != blob_length
    ):
        raise HandoffUnusable(path, "its runs do not fit its records")
    numbers, timestamps, distance = columns
    offsets = np.empty(count, dtype=np.int64)
    if count:
        offsets[0] = HEADER_SIZE
        np.cumsum(sizes[:-1], out=offsets[1:])
        offsets[1:] += HEADER_SIZE
    if int(sizes.sum()) != chunk.physical_end:
        raise HandoffUnusable(path, f"its records do not fill {chunk.path or chunk.file_name}")
    ends = np.cumsum(name_lengths.astype(np.int64))
    names = [blob[a:b].decode() for a, b in zip(np.append(0, ends[:-1]).tolist(), ends.tolist(), strict=True)]
    new_run = np.zeros(count, dtype=np.int64)
    new_run[run_starts] = 1
    run_of = np.cumsum(new_run) - 1
    run_of[system] = -1
    return CopyTable(offsets, sizes, distance + offsets, numbers, timestamps, run_of, names)
