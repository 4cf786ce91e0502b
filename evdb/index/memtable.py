"""The memtable: the newest index entries, in memory until there are enough to dump into a PTable.

Entries are kept in arrival (log) order in three ``array`` columns (hash, event number, log position:
24 bytes an entry). A dict maps each stream hash to the index of its only entry, or to an
``array('i')`` of its entries' indexes (4 bytes more an entry) once it has several. A stream's event
numbers normally grow with the log position, so its entries are already in (number, position)
order and a binary search over the index array finds a number; hashes for which they are not (two
colliding streams, say) are listed in ``_unordered`` and sorted when read.

One writer appends; readers run concurrently. A reader takes the lock only to read a hash's slot
and its length: entries are never changed once appended, and the arrays are only read item by
item (never through an exported buffer, which would stop the writer's arrays from growing).
"""

from __future__ import annotations

import bisect
import threading
from array import array
from collections.abc import Callable, Iterator, Sequence
from itertools import count

import numpy as np

__all__ = ["Entries", "KeepFunction", "MemTable"]

Entries = tuple[np.ndarray, np.ndarray, np.ndarray]
"""Index entries column-wise: (hashes uint64, event numbers int64, log positions int64)."""

KeepFunction = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]
"""``keep(hashes, numbers, positions) -> bool mask``: which entries a scavenge keeps (elementwise)."""

SLICE = 1 << 15  # entries judged, then copied, at a time by MemTable.filtered and copy


class MemTable:
    """Index entries in memory, in log order, with a per-hash lookup."""

    __slots__ = ("_hashes", "_lock", "_numbers", "_positions", "_streams", "_unordered", "last_position")

    def __init__(self) -> None:
        self._hashes = array("Q")
        self._numbers = array("q")
        self._positions = array("q")
        self._streams: dict[int, int | array[int]] = {}
        self._unordered: set[int] = set()
        self._lock = threading.Lock()
        self.last_position = -1
        """Log position just after the last record covered (the index checkpoint once dumped)."""

    def __len__(self) -> int:
        return len(self._hashes)

    def __repr__(self) -> str:
        return f"<MemTable {len(self)} entries, {len(self._streams)} hashes, up to {self.last_position}>"

    @property
    def hash_count(self) -> int:
        return len(self._streams)

    # -- writing ---------------------------------------------------------------------------------------
    def add(self, entries: Sequence[tuple[int, int, int]], position: int) -> None:
        """Append entries (in log order) and note the log position they run up to."""
        if not entries:
            self.last_position = max(self.last_position, position)
            return
        new_hashes, new_numbers, new_positions = zip(*entries, strict=True)
        hashes, numbers = self._hashes, self._numbers
        streams = self._streams
        with self._lock:
            base = len(hashes)
            try:
                hashes.extend(new_hashes)
                numbers.extend(new_numbers)
                self._positions.extend(new_positions)
            except BaseException:  # a value out of range: leave the columns as they were
                del hashes[base:], numbers[base:], self._positions[base:]
                raise
            if new_hashes.count(new_hashes[0]) == len(new_hashes):
                self._add_run(new_hashes[0], base, new_numbers)  # one stream's events: the usual case
            else:
                unordered = self._unordered
                for i, h, number in zip(count(base), new_hashes, new_numbers):
                    slot = streams.get(h)
                    if slot is None:
                        streams[h] = i
                    elif isinstance(slot, int):
                        if number < numbers[slot]:
                            unordered.add(h)
                        streams[h] = array("i", (slot, i))
                    else:
                        if number < numbers[slot[-1]]:
                            unordered.add(h)
                        slot.append(i)
            self.last_position = max(self.last_position, position)

    def _add_run(self, h: int, base: int, new_numbers: tuple[int, ...]) -> None:
        """Index ``len(new_numbers)`` entries of one hash appended at ``base``."""
        numbers = self._numbers
        slot = self._streams.get(h)
        if slot is None:
            if len(new_numbers) == 1:
                self._streams[h] = base
                return
            slot = self._streams[h] = array("i")
            previous = None
        elif isinstance(slot, int):
            previous = numbers[slot]
            slot = self._streams[h] = array("i", (slot,))
        else:
            previous = numbers[slot[-1]]
        slot.extend(range(base, base + len(new_numbers)))
        ordered = list(new_numbers) == sorted(new_numbers)
        if not ordered or (previous is not None and new_numbers[0] < previous):
            self._unordered.add(h)

    def add_arrays(self, hashes: np.ndarray, numbers: np.ndarray, positions: np.ndarray) -> None:
        """Append column-wise entries (in log order) without moving ``last_position``: what
        :meth:`add` does, with the columns copied whole and the per-hash lists built a hash at a
        time (grouped with numpy) instead of an entry at a time."""
        count_new = len(hashes)
        if not count_new:
            return
        hashes = np.ascontiguousarray(hashes, dtype=np.uint64)
        numbers_new = np.ascontiguousarray(numbers, dtype=np.int64)
        positions = np.ascontiguousarray(positions, dtype=np.int64)
        if not len(numbers_new) == len(positions) == count_new:
            raise ValueError("index entry columns of different lengths")
        order = np.argsort(hashes, kind="stable")  # each hash's entries stay in log order
        grouped = hashes[order]
        firsts = np.flatnonzero(np.concatenate(([True], grouped[1:] != grouped[:-1])))
        lasts = np.append(firsts[1:], count_new)
        in_order = numbers_new[order]
        # a number below the one before it, within one hash's entries: that hash is unordered
        falls = np.flatnonzero((in_order[1:] < in_order[:-1]) & (grouped[1:] == grouped[:-1])) + 1
        falling_groups = set((np.searchsorted(firsts, falls, side="right") - 1).tolist())
        streams, unordered, column = self._streams, self._unordered, self._numbers
        with self._lock:
            base = len(self._hashes)
            self._hashes.frombytes(hashes.tobytes())
            column.frombytes(numbers_new.tobytes())
            self._positions.frombytes(positions.tobytes())
            indexes = (order + base).astype(np.intc)
            for g, (h, a, b) in enumerate(
                zip(grouped[firsts].tolist(), firsts.tolist(), lasts.tolist(), strict=True)
            ):
                slot = streams.get(h)
                previous = None
                if slot is None:
                    if b - a == 1:
                        streams[h] = int(indexes[a])
                        continue
                    slot = streams[h] = array("i")
                elif isinstance(slot, int):
                    previous = column[slot]
                    slot = streams[h] = array("i", (slot,))
                else:
                    previous = column[slot[-1]]
                slot.frombytes(indexes[a:b].tobytes())
                if g in falling_groups or (previous is not None and int(in_order[a]) < previous):
                    unordered.add(h)

    # -- reading ---------------------------------------------------------------------------------------
    def _slot(self, h: int) -> tuple[Sequence[int], int, bool] | None:
        """(entry indexes, how many to use, whether they are in (number, position) order)."""
        with self._lock:
            slot = self._streams.get(h)
            if slot is None:
                return None
            if isinstance(slot, int):
                return (slot,), 1, True
            return slot, len(slot), h not in self._unordered

    def _entries(self, h: int) -> tuple[Sequence[int], int, list[tuple[int, int]] | None] | None:
        """(entry indexes, how many to use, and when they are out of order their (number, position)
        pairs sorted, else None); None when the hash is absent."""
        found = self._slot(h)
        if found is None:
            return None
        indexes, count, ordered = found
        return indexes, count, None if ordered else self._sorted_pairs(indexes, count)

    def _sorted_pairs(self, indexes: Sequence[int], count: int) -> list[tuple[int, int]]:
        numbers, positions = self._numbers, self._positions
        return sorted((numbers[i], positions[i]) for i in indexes[:count])

    def contains(self, h: int) -> bool:
        return h in self._streams

    def iter_forward(self, h: int, from_number: int) -> Iterator[tuple[int, int]] | None:
        """(number, position) with number >= ``from_number``, ascending; None when the hash is absent."""
        found = self._entries(h)
        if found is None:
            return None
        indexes, count, pairs = found
        if pairs is not None:
            start = bisect.bisect_left(pairs, from_number, key=_number_of)
            return iter(pairs[start:]) if start < len(pairs) else None
        numbers = self._numbers
        start = bisect.bisect_left(indexes, from_number, 0, count, key=numbers.__getitem__)
        if start == count:
            return None
        return self._walk(indexes, range(start, count))

    def iter_backward(self, h: int, before_number: int | None) -> Iterator[tuple[int, int]] | None:
        """(number, position) with number < ``before_number``, descending; None when there are none."""
        found = self._entries(h)
        if found is None:
            return None
        indexes, count, pairs = found
        if pairs is not None:
            end = (
                len(pairs)
                if before_number is None
                else bisect.bisect_left(pairs, before_number, key=_number_of)
            )
            return reversed(pairs[:end]) if end else None
        end = count
        if before_number is not None:
            end = bisect.bisect_left(indexes, before_number, 0, count, key=self._numbers.__getitem__)
        if not end:
            return None
        return self._walk(indexes, range(end - 1, -1, -1))

    def _walk(self, indexes: Sequence[int], order: range) -> Iterator[tuple[int, int]]:
        numbers, positions = self._numbers, self._positions
        for k in order:
            i = indexes[k]
            yield numbers[i], positions[i]

    def entry_arrays(self, h: int) -> tuple[np.ndarray, np.ndarray] | None:
        """(event numbers, log positions) of every entry of hash ``h`` in arrival order, as int64
        arrays (None: the hash is absent). A stream's entries come in runs (an append's events are
        consecutive), so the columns are copied a run at a time rather than read an entry at a time."""
        found = self._slot(h)
        if found is None:
            return None
        indexes, count, _ = found
        numbers, positions = self._numbers, self._positions
        if count == 1:
            i = indexes[0]
            return np.array([numbers[i]], dtype=np.int64), np.array([positions[i]], dtype=np.int64)
        assert isinstance(indexes, array)  # several entries: the hash's list
        where = np.frombuffer(indexes[:count], dtype=np.intc)  # (a copy of the slot: never the live array)
        cuts = np.flatnonzero(np.diff(where) != 1) + 1
        starts = where[np.concatenate(([0], cuts))].tolist()
        ends = (where[np.append(cuts - 1, count - 1)] + 1).tolist()
        return (
            np.frombuffer(
                b"".join(numbers[a:b].tobytes() for a, b in zip(starts, ends, strict=True)), np.int64
            ),
            np.frombuffer(
                b"".join(positions[a:b].tobytes() for a, b in zip(starts, ends, strict=True)), np.int64
            ),
        )

    def get(self, h: int, number: int) -> list[int]:
        """Positions of the entries (h, number), ascending."""
        found = self._slot(h)
        if found is None:
            return []
        indexes, count, _ = found
        numbers, positions = self._numbers, self._positions
        return sorted(positions[i] for i in indexes[:count] if numbers[i] == number)

    # -- bulk ------------------------------------------------------------------------------------------
    def arrays(self, start: int = 0, stop: int | None = None) -> Entries:
        """Copies of the entries ``[start, stop)`` in log order, as numpy columns."""
        with self._lock:
            end = len(self._hashes) if stop is None else stop
            # slicing copies: numpy never holds a buffer of the live arrays (that would stop them growing)
            hashes, numbers, positions = (
                self._hashes[start:end],
                self._numbers[start:end],
                self._positions[start:end],
            )
        return (
            np.frombuffer(hashes, dtype=np.uint64) if len(hashes) else np.zeros(0, np.uint64),
            np.frombuffer(numbers, dtype=np.int64) if len(numbers) else np.zeros(0, np.int64),
            np.frombuffer(positions, dtype=np.int64) if len(positions) else np.zeros(0, np.int64),
        )

    def filtered(self, keep: KeepFunction, stop: int | None = None) -> tuple[MemTable | None, int]:
        """A new memtable holding the entries ``[0, stop)`` that ``keep`` keeps, and how many it dropped;
        ``(None, 0)`` when it drops none. ``last_position`` is carried over."""
        return self._rebuilt(keep, len(self) if stop is None else stop)

    def copy(self, stop: int | None = None) -> MemTable:
        """A new memtable with the entries ``[0, stop)``."""
        table, _ = self._rebuilt(None, len(self) if stop is None else stop)
        assert table is not None  # nothing judged: everything copied
        return table

    def _rebuilt(self, keep: KeepFunction | None, stop: int) -> tuple[MemTable | None, int]:
        """:meth:`filtered` (all entries when ``keep`` is None), judged, then built, a slice of
        ``SLICE`` entries at a time: a memtable of a million entries is not turned into a million
        Python tuples at once (150 MiB), and other threads get the GIL between slices."""
        verdicts: list[np.ndarray] = []  # packed bits, one per entry
        dropped = 0
        if keep is not None:
            for start in range(0, stop, SLICE):
                hashes, numbers, positions = self.arrays(start, min(stop, start + SLICE))
                mask = np.asarray(keep(hashes, numbers, positions), dtype=bool)
                if mask.shape != (len(hashes),):
                    raise ValueError("a scavenge keep function must return one bool per entry")
                dropped += len(mask) - int(np.count_nonzero(mask))
                verdicts.append(np.packbits(mask))
            if not dropped:
                return None, 0
        table = MemTable()
        for k, start in enumerate(range(0, stop, SLICE)):
            hashes, numbers, positions = self.arrays(start, min(stop, start + SLICE))
            if keep is not None:
                mask = np.unpackbits(verdicts[k], count=len(hashes)).astype(bool)
                hashes, numbers, positions = hashes[mask], numbers[mask], positions[mask]
            table.add_arrays(hashes, numbers, positions)
        table.last_position = self.last_position
        return table, dropped


def _number_of(pair: tuple[int, int]) -> int:
    return pair[0]
