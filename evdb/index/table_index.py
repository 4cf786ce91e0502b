"""TableIndex: a memtable in front of levels of immutable PTables, listed by ``indexmap``.

The writer adds entries in log order to the live memtable. When it holds ``max_memtable_entries``
it is frozen and a background thread dumps it into a level-0 PTable; when a level holds four
tables they merge into one table of the next level. After each change ``indexmap`` is replaced,
and only then are the tables it no longer names deleted. Entries not yet in a PTable are not
persisted: the database indexes the log again from ``checkpoint`` at start.

Concurrency: readers take no lock. They read ``_view``, an immutable snapshot of (live memtable,
frozen memtable, tables), which is replaced whole under ``_state``; a table deleted after a swap
stays mapped for readers that still hold it. ``_maintenance`` serializes the structural work
(dumps, merges, scavenge, merge_indexes); ``_write_lock`` serializes changes to the live memtable
(the writer's adds, a scavenge's swap). Lock order: maintenance, write lock, state.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from heapq import merge as heap_merge

import numpy as np

from evdb.errors import CorruptedFile, DatabaseClosed, StorageError
from evdb.index.durable import TMP_SUFFIX, remove_durably
from evdb.index.indexmap import DEFAULT_MAX_AUTO_MERGE_LEVEL, INDEXMAP_NAME, IndexMap, IndexMapEntry
from evdb.index.memtable import Entries, KeepFunction, MemTable
from evdb.index.merge import merge_sorted, sort_entries
from evdb.index.ptable import INT64_MAX, INT64_MIN, TABLE_NAME, PTable, TableWriter

__all__ = ["MERGE_FANOUT", "IndexScavengeResult", "TableIndex", "TableScavengeReport"]

MERGE_FANOUT = 4
"""A level holding this many tables merges them into one table of the next level."""

_SCAVENGE_SLICE = 1 << 18  # entries judged by one call of a scavenge's keep function (6 MiB of table)
_log = logging.getLogger("evdb.index")
_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
_DISK_FULL_RETRY_SECONDS = 1.0  # a table write that found the disk full is tried again this often


@dataclass(frozen=True, slots=True)
class TableScavengeReport:
    """What a scavenge did to one PTable (logged as a ``$scavengeIndexCompleted`` event)."""

    level: int
    index: int
    entries_kept: int
    entries_deleted: int
    space_saved: int
    time_taken: float


@dataclass(frozen=True, slots=True)
class IndexScavengeResult:
    tables: tuple[TableScavengeReport, ...] = ()
    memtable_entries_deleted: int = 0
    time_taken: float = 0.0

    @property
    def entries_deleted(self) -> int:
        return sum(t.entries_deleted for t in self.tables) + self.memtable_entries_deleted

    @property
    def space_saved(self) -> int:
        return sum(t.space_saved for t in self.tables)


@dataclass(frozen=True)
class _View:
    """What readers see: replaced whole, never changed."""

    live: MemTable
    frozen: MemTable | None
    levels: tuple[tuple[PTable, ...], ...]  # levels[l]: oldest first

    @cached_property
    def tables(self) -> tuple[PTable, ...]:
        """Every table, newest data first (level 0 newest first, then level 1, ...)."""
        return tuple(t for level in self.levels for t in reversed(level))


class TableIndex:
    """The event index: stream hash -> (event number, log position) entries."""

    def __init__(
        self,
        directory: str | None,
        *,
        max_memtable_entries: int,
        max_auto_merge_level: int,
        checkpoint: int,
        levels: tuple[tuple[PTable, ...], ...],
    ) -> None:
        self.directory = directory
        self.max_memtable_entries = max_memtable_entries
        self.max_auto_merge_level = max_auto_merge_level
        self._checkpoint = checkpoint
        self._view = _View(MemTable(), None, levels)
        self._state = threading.Condition()
        self._maintenance = threading.Lock()
        self._write_lock = threading.Lock()
        self._busy = False
        self._merge_due = True  # check the levels once at start (a crash may have cut a merge short)
        self._stopping = False
        self._closed = False
        self._failure: BaseException | None = None
        self._held_back: OSError | None = None  # the disk is full: tables wait, entries stay in memory
        self._worker = threading.Thread(target=self._run, name="evdb-index", daemon=True)

    # -- opening and closing ---------------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        directory: str | None,
        *,
        max_memtable_entries: int = 1_000_000,
        max_auto_merge_level: int | None = None,
    ) -> TableIndex:
        """Open the index in ``directory`` (created if needed), or a purely in-memory one for None.

        Without an ``indexmap`` the index starts empty (checkpoint -1) and the database indexes
        the whole log again. Index files the indexmap does not name, and temporary files, are
        leftovers of a crash and are deleted.
        """
        if max_memtable_entries < 1:
            raise ValueError("max_memtable_entries must be at least 1")
        if max_auto_merge_level is not None and max_auto_merge_level < 0:
            raise ValueError("max_auto_merge_level must not be negative")
        if directory is None:
            index = cls(
                None,
                max_memtable_entries=max_memtable_entries,
                max_auto_merge_level=_or_default(max_auto_merge_level),
                checkpoint=-1,
                levels=(),
            )
            index._worker.start()
            return index
        os.makedirs(directory, exist_ok=True)
        indexmap = IndexMap.read(directory)
        fresh = indexmap is None
        if indexmap is None:
            indexmap = IndexMap(max_auto_merge_level=_or_default(max_auto_merge_level))
        _remove_leftovers(directory, {t.name for t in indexmap.tables})
        levels: list[list[PTable]] = []
        for entry in indexmap.tables:
            while len(levels) <= entry.level:
                levels.append([])
            table = PTable.open(directory, entry.name)
            if table.level != entry.level:
                raise CorruptedFile(
                    table.path or entry.name, f"table is level {table.level}, indexmap says {entry.level}"
                )
            levels[entry.level].append(table)
        merge_level = indexmap.max_auto_merge_level if max_auto_merge_level is None else max_auto_merge_level
        index = cls(
            directory,
            max_memtable_entries=max_memtable_entries,
            max_auto_merge_level=merge_level,
            checkpoint=indexmap.checkpoint,
            levels=tuple(tuple(level) for level in levels),
        )
        if fresh or merge_level != indexmap.max_auto_merge_level:
            index._write_indexmap(index._view.levels, index._checkpoint)
        index._worker.start()
        return index

    def close(self) -> None:
        """Finish the background work under way (a frozen memtable is dumped) and stop.

        The live memtable is not dumped: its entries are re-added from the log at the next start.
        """
        with self._state:
            if self._closed:
                return
            self._stopping = True
            self._state.notify_all()
        self._worker.join()
        with self._state:
            self._closed = True

    def __enter__(self) -> TableIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- facts -----------------------------------------------------------------------------------------
    @property
    def checkpoint(self) -> int:
        """Log position up to which every entry is in the PTables (those indexmap names); -1 when none.

        The database indexes the log again from here at start: memtables are not persisted.
        """
        return self._checkpoint

    @property
    def indexed_position(self) -> int:
        """Log position just after the last record whose entries are in the index (memtables too)."""
        view = self._view
        frozen = view.frozen.last_position if view.frozen is not None else -1
        return max(view.live.last_position, frozen, self._checkpoint)

    @property
    def dumping(self) -> bool:
        """A full memtable is being written out as a PTable (and merged into its level)."""
        return self._view.frozen is not None

    def entry_count(self) -> int:
        view = self._view
        frozen = len(view.frozen) if view.frozen is not None else 0
        return len(view.live) + frozen + sum(len(t) for level in view.levels for t in level)

    def tables(self) -> list[PTable]:
        """The PTables in indexmap order: by level, oldest first within a level."""
        return [t for level in self._view.levels for t in level]

    # -- writing ---------------------------------------------------------------------------------------
    def add(self, entries: Sequence[tuple[int, int, int]], position: int) -> None:
        """Add entries in log order; ``position`` is the log position just after the last record covered.

        Called by one writer thread. Blocks only when a full memtable is still waiting for its dump
        as another fills up: two memtables are the most the index keeps in memory.
        """
        with self._write_lock:
            self._check_usable()
            live = self._view.live
            live.add(entries, position)
            full = len(live) >= self.max_memtable_entries
        if full:
            self._freeze()

    def _freeze(self) -> None:
        with self._state:
            while self._view.frozen is not None and self._failure is None and self._held_back is None:
                self._state.wait()
        self._check_usable()
        with self._write_lock, self._state:
            view = self._view
            if len(view.live) < self.max_memtable_entries:  # a scavenge shrank it meanwhile
                return
            if view.frozen is not None:  # held back by a full disk: the live memtable grows meanwhile
                return
            self._view = replace(view, live=MemTable(), frozen=view.live)
            self._state.notify_all()

    def _check_usable(self) -> None:
        if self._failure is not None:
            raise StorageError(f"the index stopped after a failure: {self._failure!r}") from self._failure
        if self._closed or self._stopping:
            raise DatabaseClosed()

    # -- reading ---------------------------------------------------------------------------------------
    def iter_backward(self, h: int, before_number: int | None = None) -> Iterator[tuple[int, int]]:
        """(event number, log position) of hash ``h``, newest first; numbers < ``before_number`` if given.

        Entries with the same number (colliding streams, rewrites) all come, newest position first.
        """
        if before_number is not None:
            if before_number <= INT64_MIN:
                return iter(())
            if before_number > INT64_MAX:
                before_number = None
        view = self._view
        sources = [view.live.iter_backward(h, before_number)]
        if view.frozen is not None:
            sources.append(view.frozen.iter_backward(h, before_number))
        sources += [t.iter_backward(h, before_number) for t in view.tables]
        return _merged([s for s in sources if s is not None], reverse=True)

    def iter_forward(self, h: int, from_number: int = 0) -> Iterator[tuple[int, int]]:
        """(event number, log position) of hash ``h``, oldest first, numbers >= ``from_number``."""
        if from_number > INT64_MAX:
            return iter(())
        from_number = max(from_number, INT64_MIN)
        view = self._view
        sources = [view.live.iter_forward(h, from_number)]
        if view.frozen is not None:
            sources.append(view.frozen.iter_forward(h, from_number))
        sources += [t.iter_forward(h, from_number) for t in view.tables]
        return _merged([s for s in sources if s is not None], reverse=False)

    def entry_arrays(self, h: int) -> tuple[np.ndarray, np.ndarray]:
        """(event numbers, log positions) of every entry of hash ``h``, as int64 arrays in no
        particular order: for callers that work on a stream's entries in bulk (the scavenge)."""
        view = self._view
        numbers: list[np.ndarray] = []
        positions: list[np.ndarray] = []
        for memtable in (view.live, view.frozen):
            found = memtable.entry_arrays(h) if memtable is not None else None
            if found is not None:
                numbers.append(found[0])
                positions.append(found[1])
        for table in view.tables:
            lo, hi = table.range_of(h)
            if lo < hi:
                numbers.append(table.numbers[lo:hi])
                positions.append(table.positions[lo:hi])
        if not numbers:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        return np.concatenate(numbers).astype(np.int64), np.concatenate(positions).astype(np.int64)

    def get(self, h: int, event_number: int) -> list[int]:
        """Log positions of the entries (h, event_number), newest first (several when hashes collide)."""
        if not INT64_MIN <= event_number <= INT64_MAX:
            return []
        view = self._view
        positions = view.live.get(h, event_number)
        if view.frozen is not None:
            positions += view.frozen.get(h, event_number)
        for table in view.tables:
            positions += table.get(h, event_number)
        positions.sort(reverse=True)
        return positions

    # -- background work -------------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._state:
                while not self._work_due() and not self._stopping:
                    self._state.wait()
                if not self._work_due():
                    return
                self._busy = True
            try:
                with self._maintenance:
                    self._catch_up()
            except OSError as exc:
                if exc.errno not in _DISK_FULL:
                    self._stop_after(exc)
                    return
                if not self._hold_back(exc):
                    return
                continue
            except BaseException as exc:
                self._stop_after(exc)
                return
            with self._state:
                if self._held_back is not None:
                    _log.info("The index writes its tables again (the disk has space); nothing was lost")
                    self._held_back = None
                self._busy = False
                self._state.notify_all()

    def _stop_after(self, exc: BaseException) -> None:
        _log.error("Index background work failed; the index takes no more entries", exc_info=exc)
        with self._state:
            self._failure = exc
            self._busy = False
            self._state.notify_all()

    def _hold_back(self, exc: OSError) -> bool:
        """The disk is full: keep the entries in memory and try again in a while; False when closing."""
        if self._held_back is None:
            _log.error(
                "The index could not write a table: %s. Its entries stay in memory (and in the log); "
                "writing is tried again every %.0f s",
                exc.strerror or exc,
                _DISK_FULL_RETRY_SECONDS,
            )
        with self._state:
            self._held_back = exc
            self._busy = False
            self._state.notify_all()
            if not self._stopping:
                self._state.wait(_DISK_FULL_RETRY_SECONDS)
            return not self._stopping

    def _work_due(self) -> bool:
        return self._view.frozen is not None or self._merge_due

    def _catch_up(self) -> None:
        """Dump the frozen memtable, then merge every full level. Holds ``_maintenance``."""
        frozen = self._view.frozen
        if frozen is not None:
            self._dump(frozen)
        with self._state:
            self._merge_due = False
        while (level := self._full_level()) is not None:
            self._merge_level(level)

    def _dump(self, memtable: MemTable) -> None:
        started = time.perf_counter()
        hashes, numbers, positions = sort_entries(*memtable.arrays())
        table = _write(self.directory, 0, [(hashes, numbers, positions)], len(hashes))
        levels = _with_table(self._view.levels, 0, table)
        try:
            self._write_indexmap(levels, memtable.last_position)
        except BaseException:
            table.delete()  # the indexmap does not name it: the memtable is dumped again later
            raise
        with self._state:
            self._view = replace(self._view, frozen=None, levels=levels)
            self._checkpoint = memtable.last_position
            self._state.notify_all()
        _log.debug(
            "Dumped a memtable of %d entries into %s in %.3fs",
            len(table),
            table.name,
            time.perf_counter() - started,
        )

    def _full_level(self) -> int | None:
        for level, tables in enumerate(self._view.levels):
            if level < self.max_auto_merge_level and len(tables) >= MERGE_FANOUT:
                return level
        return None

    def _merge_level(self, level: int) -> None:
        started = time.perf_counter()
        old = self._view.levels[level][:MERGE_FANOUT]
        merged = _merge_tables(self.directory, level + 1, old)
        remaining = list(self._view.levels)
        remaining[level] = remaining[level][MERGE_FANOUT:]
        self._replace_tables(_with_table(tuple(remaining), level + 1, merged), old)
        _log.debug(
            "Merged %d level-%d tables into %s (%d entries) in %.3fs",
            len(old),
            level,
            merged.name,
            len(merged),
            time.perf_counter() - started,
        )

    def _replace_tables(self, levels: tuple[tuple[PTable, ...], ...], obsolete: Sequence[PTable]) -> None:
        """Make ``levels`` current: indexmap first, then readers, then delete what it no longer names
        (every obsolete file at once: one folder fsync)."""
        self._write_indexmap(levels, self._checkpoint)
        with self._state:
            self._view = replace(self._view, levels=levels)
        for table in obsolete:
            table.release()
        PTable.delete_all(obsolete)

    def _write_indexmap(self, levels: tuple[tuple[PTable, ...], ...], checkpoint: int) -> None:
        if self.directory is None:
            return
        entries = tuple(
            IndexMapEntry(level, index, table.name)
            for level, tables in enumerate(levels)
            for index, table in enumerate(tables)
        )
        IndexMap(checkpoint, self.max_auto_merge_level, entries).write(self.directory)

    def wait_idle(self) -> None:
        """Wait until no dump or merge is pending or running (for tests and a clean shutdown)."""
        with self._state:
            while (
                (self._work_due() or self._busy)
                and self._failure is None
                and self._held_back is None
                and self._worker.is_alive()
            ):
                self._state.wait()
        if self._failure is not None:
            raise StorageError(f"the index stopped after a failure: {self._failure!r}") from self._failure
        if self._held_back is not None:
            raise StorageError(
                f"the index cannot write its tables now: {self._held_back}"
            ) from self._held_back

    def release_pages(self) -> None:
        """Let this process's mapping of every table's pages go (``PTable.release``): after a pass
        over many streams' entries (a scavenge's calculation), so RSS does not keep what it read."""
        for table in self._view.tables:
            table.release()

    # -- maintenance -----------------------------------------------------------------------------------
    def merge_indexes(self) -> None:
        """Merge every PTable into one (KurrentDB's MergeIndexes operation); the live memtable stays."""
        self._check_usable()
        with self._maintenance:
            self._catch_up()
            tables = self.tables()
            if len(tables) < 2:
                return
            level = max(t.level for t in tables)
            oldest_first = [t for lvl in reversed(self._view.levels) for t in lvl]
            merged = _merge_tables(self.directory, level, oldest_first)
            levels = (*(() for _ in range(level)), (merged,))
            self._replace_tables(levels, tables)

    def scavenge(self, keep: KeepFunction) -> IndexScavengeResult:
        """Rewrite every PTable and the memtables without the entries ``keep`` rejects.

        ``keep(hashes, numbers, positions)`` returns a bool mask; it must judge each entry on its
        own (it is called on slices of large tables). A table that loses entries is written anew
        under a new name at its place and swapped in through indexmap; one that loses none is
        left as it is; one that loses all is dropped.
        """
        self._check_usable()
        started = time.perf_counter()
        with self._maintenance:
            self._catch_up()
            reports: list[TableScavengeReport] = []
            obsolete: list[PTable] = []
            levels: list[tuple[PTable, ...]] = []
            for level, tables in enumerate(self._view.levels):
                kept_tables: list[PTable] = []
                for index, table in enumerate(tables):
                    table_started = time.perf_counter()
                    rewritten, kept = _scavenge_table(self.directory, table, keep)
                    if rewritten is not table:
                        obsolete.append(table)
                    if rewritten is not None:
                        kept_tables.append(rewritten)
                    new_size = rewritten.size if rewritten is not None else 0
                    reports.append(
                        TableScavengeReport(
                            level,
                            index,
                            kept,
                            len(table) - kept,
                            table.size - new_size,
                            time.perf_counter() - table_started,
                        )
                    )
                levels.append(tuple(kept_tables))
            if obsolete:
                self._replace_tables(_trimmed(levels), obsolete)
            memtable_deleted = self._scavenge_memtables(keep)
        return IndexScavengeResult(tuple(reports), memtable_deleted, time.perf_counter() - started)

    def _scavenge_memtables(self, keep: KeepFunction) -> int:
        """Filter the frozen and the live memtable; the writer waits only while the swap is made."""
        deleted = 0
        done: list[MemTable] = []
        while True:
            frozen = self._view.frozen  # immutable, and not dumped while we hold _maintenance
            if frozen is not None and not any(frozen is m for m in done):
                filtered, dropped = frozen.filtered(keep, len(frozen))
                deleted += dropped
                if filtered is not None:
                    with self._state:
                        self._view = replace(self._view, frozen=filtered)
                done.append(filtered if filtered is not None else frozen)
            live = self._view.live
            seen = len(live)
            filtered, dropped = live.filtered(keep, seen)
            with self._write_lock:
                if self._view.live is not live:
                    continue  # the writer froze it meanwhile: it is the frozen one now
                hashes, numbers, positions = live.arrays(seen)
                mask = np.asarray(keep(hashes, numbers, positions), dtype=bool) if len(hashes) else None
                dropped_since = 0 if mask is None else len(mask) - int(np.count_nonzero(mask))
                if filtered is None and not dropped_since:
                    return deleted
                if filtered is None:
                    filtered = live.copy(seen)
                if mask is not None:
                    filtered.add_arrays(hashes[mask], numbers[mask], positions[mask])
                filtered.last_position = live.last_position
                with self._state:
                    self._view = replace(self._view, live=filtered)
                return deleted + dropped + dropped_since


def _or_default(max_auto_merge_level: int | None) -> int:
    return DEFAULT_MAX_AUTO_MERGE_LEVEL if max_auto_merge_level is None else max_auto_merge_level


def _merged(sources: list[Iterator[tuple[int, int]]], *, reverse: bool) -> Iterator[tuple[int, int]]:
    if not sources:
        return iter(())
    if len(sources) == 1:
        return sources[0]
    return heap_merge(*sources, reverse=reverse)


def _with_table(
    levels: tuple[tuple[PTable, ...], ...], level: int, table: PTable
) -> tuple[tuple[PTable, ...], ...]:
    """``levels`` with ``table`` added as the newest of its level."""
    grown = list(levels) + [()] * (level + 1 - len(levels))
    grown[level] = (*grown[level], table)
    return tuple(grown)


def _trimmed(levels: list[tuple[PTable, ...]]) -> tuple[tuple[PTable, ...], ...]:
    while levels and not levels[-1]:
        levels.pop()
    return tuple(levels)


def _write(directory: str | None, level: int, slices: Sequence[Entries], count: int) -> PTable:
    with TableWriter(directory, level, count) as writer:
        for hashes, numbers, positions in slices:
            writer.append(hashes, numbers, positions)
        return writer.finish()


def _merge_tables(directory: str | None, level: int, tables: Sequence[PTable]) -> PTable:
    """One table at ``level`` holding every entry of ``tables`` (given oldest first); the pages of
    the entries merged are let go behind the merge, so its RSS stays a few blocks however large."""

    def consumed(source: int, start: int, stop: int) -> None:
        tables[source].release(start, stop)

    with TableWriter(directory, level, sum(len(t) for t in tables)) as writer:
        merge_sorted([t.entries for t in tables], writer.append, consumed=consumed)
        return writer.finish()


def _scavenge_table(directory: str | None, table: PTable, keep: KeepFunction) -> tuple[PTable | None, int]:
    """(the table to keep in its place: itself, a rewrite, or None when empty; entries kept).

    Two passes of bounded slices, each slice's pages let go behind it: one judges every entry (the
    verdicts are kept a bit each), the other writes the kept ones. Memory does not grow with the table."""
    hashes, numbers, positions = table.entries
    count = len(table)
    verdicts: list[np.ndarray] = []  # packed bits, one per entry
    kept = 0
    for start in range(0, count, _SCAVENGE_SLICE):
        stop = min(count, start + _SCAVENGE_SLICE)
        mask = np.asarray(keep(hashes[start:stop], numbers[start:stop], positions[start:stop]), dtype=bool)
        if mask.shape != (stop - start,):
            raise ValueError("a scavenge keep function must return one bool per entry")
        kept += int(np.count_nonzero(mask))
        verdicts.append(np.packbits(mask))
        table.release(start, stop)
    if kept == count:
        return table, kept
    if not kept:
        return None, 0
    with TableWriter(directory, table.level, kept) as writer:
        for k, packed in enumerate(verdicts):
            start = k * _SCAVENGE_SLICE
            stop = min(count, start + _SCAVENGE_SLICE)
            mask = np.unpackbits(packed, count=stop - start).astype(bool)
            writer.append(hashes[start:stop][mask], numbers[start:stop][mask], positions[start:stop][mask])
            table.release(start, stop)
        return writer.finish(), kept


def _remove_leftovers(directory: str, named: set[str]) -> None:
    """Delete tables and sidecars indexmap does not name, and temporary files: a crash's leftovers."""
    leftovers = []
    for name in os.listdir(directory):
        base = name.removesuffix(TMP_SUFFIX)
        temporary = base != name
        table = base.removesuffix(".bloomfilter")
        stale_table = TABLE_NAME.fullmatch(table) and (temporary or table not in named)
        if stale_table or (temporary and base == INDEXMAP_NAME):
            leftovers.append(name)
    for name in leftovers:
        _log.info(
            "Removing index file left over from an interrupted change: %s", os.path.join(directory, name)
        )
    remove_durably(os.path.join(directory, name) for name in leftovers)
