"""Sorting index entries by (hash, event number, log position), and merging sorted tables.

``numpy.lexsort`` on three keys is slow (about 0.5 s for a million entries here). Entries almost
always reach a sort already ordered by (hash, arrival), and for one stream arrival order is event
number order, so a stable sort on the hash alone (timsort: linear on pre-sorted runs) gives the
final order; only the hash groups where it does not (colliding streams) are found and sorted by
all three keys.

Merging walks the sorted sources in blocks, so memory stays bounded however large the tables are:
each round takes from every source the entries up to the smallest "last key of a block", sorts that
slice, and hands it on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from evdb.index.memtable import Entries

__all__ = ["MERGE_BLOCK", "is_sorted", "merge_sorted", "sort_entries"]

MERGE_BLOCK = 1 << 16  # entries taken from each source per round: 1.5 MiB of table, whatever its size


def sort_entries(hashes: np.ndarray, numbers: np.ndarray, positions: np.ndarray) -> Entries:
    """The entries sorted by (hash, number, position); fastest when already sorted by (hash, arrival)."""
    order = np.argsort(hashes, kind="stable")
    hashes, numbers, positions = hashes[order], numbers[order], positions[order]
    _fix_within_hash(hashes, numbers, positions)
    return hashes, numbers, positions


def is_sorted(hashes: np.ndarray, numbers: np.ndarray, positions: np.ndarray) -> bool:
    """Whether the entries are in (hash, number, position) order."""
    if len(hashes) < 2:
        return True
    h0, h1 = hashes[:-1], hashes[1:]
    n0, n1 = numbers[:-1], numbers[1:]
    same = h0 == h1
    disorder = (h1 < h0) | (same & ((n1 < n0) | ((n1 == n0) & (positions[1:] < positions[:-1]))))
    return not disorder.any()


def _fix_within_hash(hashes: np.ndarray, numbers: np.ndarray, positions: np.ndarray) -> None:
    """Sort, in place, the runs of equal hash whose (number, position) are out of order."""
    if len(hashes) < 2:
        return
    same = hashes[1:] == hashes[:-1]
    earlier_n, later_n = numbers[:-1], numbers[1:]
    bad = same & ((later_n < earlier_n) | ((later_n == earlier_n) & (positions[1:] < positions[:-1])))
    if not bad.any():
        return
    affected = np.nonzero(np.isin(hashes, np.unique(hashes[1:][bad])))[0]  # whole runs, in hash order
    order = np.lexsort((positions[affected], numbers[affected], hashes[affected]))
    numbers[affected] = numbers[affected][order]
    positions[affected] = positions[affected][order]


def _count_up_to(source: Entries, lo: int, hi: int, key: tuple[int, int, int]) -> int:
    """Index of the first entry in ``source[lo:hi]`` greater than ``key`` (the source is sorted)."""
    hashes, numbers, positions = source
    h, n, p = key
    a = lo + int(np.searchsorted(hashes[lo:hi], np.uint64(h), side="left"))
    b = lo + int(np.searchsorted(hashes[lo:hi], np.uint64(h), side="right"))
    if a == b:
        return a
    c = a + int(np.searchsorted(numbers[a:b], np.int64(n), side="left"))
    d = a + int(np.searchsorted(numbers[a:b], np.int64(n), side="right"))
    if c == d:
        return c
    return c + int(np.searchsorted(positions[c:d], np.int64(p), side="right"))


def merge_sorted(
    sources: Sequence[Entries],
    emit: Callable[[np.ndarray, np.ndarray, np.ndarray], None],
    block: int = MERGE_BLOCK,
    consumed: Callable[[int, int, int], None] | None = None,
) -> None:
    """Feed ``emit`` the entries of the sorted ``sources`` (oldest first), in sorted order, in slices.

    ``consumed(source, start, stop)``, when given, is told after each slice which entries of which
    source (its index in ``sources``) were handed on and are not read again."""
    cursors = [0] * len(sources)

    def done(i: int, stop: int) -> None:
        if consumed is not None and stop > cursors[i]:
            consumed(i, cursors[i], stop)
        cursors[i] = stop

    while True:
        active = [i for i, s in enumerate(sources) if cursors[i] < len(s[0])]
        if not active:
            return
        if len(active) == 1:
            i = active[0]
            hashes, numbers, positions = sources[i]
            for start in range(cursors[i], len(hashes), block):
                stop = min(start + block, len(hashes))
                emit(hashes[start:stop], numbers[start:stop], positions[start:stop])
                done(i, stop)
            return
        ends = {i: min(cursors[i] + block, len(sources[i][0])) for i in active}
        limited = [i for i in active if ends[i] < len(sources[i][0])]
        if limited:
            boundary = min(_key(sources[i], ends[i] - 1) for i in limited)
            cuts = {i: _count_up_to(sources[i], cursors[i], ends[i], boundary) for i in active}
        else:
            cuts = ends
        parts = [(i, cursors[i], cuts[i]) for i in active if cuts[i] > cursors[i]]
        hashes = np.concatenate([sources[i][0][a:b] for i, a, b in parts])
        numbers = np.concatenate([sources[i][1][a:b] for i, a, b in parts])
        positions = np.concatenate([sources[i][2][a:b] for i, a, b in parts])
        emit(*sort_entries(hashes, numbers, positions))
        for i in active:
            done(i, cuts[i])


def _key(source: Entries, i: int) -> tuple[int, int, int]:
    return int(source[0][i]), int(source[1][i]), int(source[2][i])
