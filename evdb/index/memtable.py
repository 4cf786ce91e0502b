"""The newest index entries, in memory until there are enough to dump into a PTable."""

from __future__ import annotations

import bisect
import threading
from array import array
from collections.abc import Callable, Iterator, Sequence

import numpy as np

__all__ = ["MemTable"]


class MemTable:
    """Entries per stream hash, as ``array('q')`` of interleaved (event number, log position).

    About 16 bytes per entry plus ~150 bytes per distinct hash. Appends come from one writer;
    readers take the lock only to copy a hash's array.
    """

    def __init__(self) -> None:
        self._entries: dict[int, array] = {}
        self._unsorted: set[int] = set()  # hashes whose numbers did not arrive in order
        self._count = 0
        self._lock = threading.Lock()
        self.last_position = -1  # log position after the last record covered

    def __len__(self) -> int:
        return self._count

    def add(self, entries: Sequence[tuple[int, int, int]], position: int) -> None:
        table = self._entries
        with self._lock:
            for h, number, log_position in entries:
                values = table.get(h)
                if values is None:
                    table[h] = array("q", (number, log_position))
                else:
                    if number < values[-2]:
                        self._unsorted.add(h)
                    values.append(number)
                    values.append(log_position)
            self._count += len(entries)
            self.last_position = position

    def _pairs(self, h: int) -> tuple[list[int], list[int]]:
        """(numbers, positions) of one hash, ascending by number (then position)."""
        with self._lock:
            values = self._entries.get(h)
            if values is None:
                return [], []
            values = array("q", values)
            unsorted = h in self._unsorted
        numbers, positions = values[0::2].tolist(), values[1::2].tolist()
        if unsorted:
            pairs = sorted(zip(numbers, positions, strict=True))
            numbers = [n for n, _ in pairs]
            positions = [p for _, p in pairs]
        return numbers, positions

    def iter_forward(self, h: int, from_number: int) -> Iterator[tuple[int, int]]:
        numbers, positions = self._pairs(h)
        start = bisect.bisect_left(numbers, from_number)
        return zip(numbers[start:], positions[start:], strict=True)

    def iter_backward(self, h: int, before_number: int | None) -> Iterator[tuple[int, int]]:
        with self._lock:
            values = self._entries.get(h)
            if values is None:
                return iter(())
            if h not in self._unsorted and before_number is None:
                # the common case (the newest entries of a stream): read from the end in slices
                return self._backward_slices(values, len(values) // 2)
        numbers, positions = self._pairs(h)
        end = len(numbers) if before_number is None else bisect.bisect_left(numbers, before_number)
        return zip(reversed(numbers[:end]), reversed(positions[:end]), strict=True)

    def _backward_slices(self, values: array, end: int) -> Iterator[tuple[int, int]]:
        step = 32
        while end > 0:
            start = max(0, end - step)
            with self._lock:
                chunk = values[2 * start : 2 * end]
            yield from zip(reversed(chunk[0::2].tolist()), reversed(chunk[1::2].tolist()), strict=True)
            end = start
            step = min(step * 4, 65536)

    def get(self, h: int, number: int) -> list[int]:
        numbers, positions = self._pairs(h)
        i = bisect.bisect_left(numbers, number)
        out = []
        while i < len(numbers) and numbers[i] == number:
            out.append(positions[i])
            i += 1
        return out

    def to_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """All entries as (hashes, numbers, positions), sorted by hash then number then position."""
        with self._lock:
            items = [(h, np.frombuffer(values, dtype=np.int64).copy()) for h, values in self._entries.items()]
        if not items:
            empty = np.zeros(0, dtype=np.int64)
            return empty.astype(np.uint64), empty, empty
        lengths = np.fromiter((len(v) // 2 for _, v in items), dtype=np.int64, count=len(items))
        hashes = np.repeat(np.fromiter((h for h, _ in items), dtype=np.uint64, count=len(items)), lengths)
        flat = np.concatenate([v for _, v in items])
        numbers, positions = flat[0::2], flat[1::2]
        order = np.lexsort((positions, numbers, hashes))
        return hashes[order], numbers[order], positions[order]

    def filter(self, keep: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]) -> int:
        """Drop the entries for which ``keep`` says False; returns how many were dropped."""
        hashes, numbers, positions = self.to_arrays()
        if not len(hashes):
            return 0
        mask = keep(hashes, numbers, positions)
        dropped = int((~mask).sum())
        if not dropped:
            return 0
        with self._lock:
            self._entries = {}
            self._unsorted = set()
            for h, n, p in zip(
                hashes[mask].tolist(), numbers[mask].tolist(), positions[mask].tolist(), strict=True
            ):
                values = self._entries.get(h)
                if values is None:
                    self._entries[h] = array("q", (n, p))
                else:
                    values.append(n)
                    values.append(p)
            self._count -= dropped
        return dropped
