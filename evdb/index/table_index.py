"""The index: a memtable in front of levels of immutable PTables, listed by ``indexmap``.

The writer adds entries in log order. When the memtable holds ``max_memtable_entries`` it is frozen
and a background thread dumps it into a level-0 PTable; when a level holds four tables they merge
into one of the next level. ``indexmap`` is replaced after each change, and tables it no longer
names are deleted only then. Entries not yet in a PTable are not persisted: the database indexes
the log again from the index checkpoint at start.
"""

from __future__ import annotations

import heapq
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from evdb.index.indexmap import IndexMap, IndexMapEntry
from evdb.index.memtable import MemTable
from evdb.index.ptable import PTable

__all__ = ["IndexScavengeResult", "TableIndex", "TableScavengeReport"]

MERGE_FANOUT = 4
_GUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}(\.bloomfilter)?$")
_log = logging.getLogger("evdb.index")

KeepFunction = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class TableScavengeReport:
    level: int
    index: int
    entries_kept: int
    entries_deleted: int
    space_saved: int
    time_taken: float


@dataclass
class IndexScavengeResult:
    tables: list[TableScavengeReport] = field(default_factory=list)
    memtable_entries_deleted: int = 0

    @property
    def entries_deleted(self) -> int:
        return sum(t.entries_deleted for t in self.tables) + self.memtable_entries_deleted


class TableIndex:
    def __init__(
        self, directory: str | None, max_memtable_entries: int, imap: IndexMap, levels: list[list[PTable]]
    ):
        self.directory = directory
        self.max_memtable_entries = max(1, max_memtable_entries)
        self.checkpoint = imap.checkpoint
        self.max_level = imap.max_level
        self._levels = levels
        self._memtable = MemTable()
        self._frozen: list[MemTable] = []
        self._lock = threading.Lock()  # guards _levels, _frozen, _memtable swaps
        self._changed = threading.Condition(self._lock)
        self._maintenance = threading.Lock()  # one structural change at a time (dump, merge, scavenge)
        self._stopping = False
        self._error: BaseException | None = None
        self._worker = threading.Thread(target=self._work, name="evdb-index", daemon=True)
        self._worker.start()

    # -- opening ---------------------------------------------------------------------------------------
    @classmethod
    def open(cls, directory: str | None, *, max_memtable_entries: int = 1_000_000) -> TableIndex:
        if directory is None:
            return cls(None, max_memtable_entries, IndexMap(), [])
        os.makedirs(directory, exist_ok=True)
        imap = IndexMap.read(directory) or IndexMap()
        levels: list[list[PTable]] = []
        for entry in sorted(imap.tables, key=lambda t: (t.level, t.index)):
            while len(levels) <= entry.level:
                levels.append([])
            levels[entry.level].append(PTable.load(directory, entry.name))
        named = {t.name for t in imap.tables}
        for name in os.listdir(directory):
            path = os.path.join(directory, name)
            if name.endswith(".tmp") or (_GUID.match(name) and name.split(".")[0] not in named):
                _log.info("Removing index file left over from a crash: %s", path)
                os.unlink(path)
        return cls(directory, max_memtable_entries, imap, levels)

    # -- facts -----------------------------------------------------------------------------------------
    def tables(self) -> list[PTable]:
        with self._lock:
            return [t for level in self._levels for t in level]

    def entry_count(self) -> int:
        with self._lock:
            frozen = sum(len(m) for m in self._frozen)
            return len(self._memtable) + frozen + sum(len(t) for level in self._levels for t in level)

    def _sources(self):
        with self._lock:
            return (
                self._memtable,
                list(reversed(self._frozen)),
                [t for level in reversed(self._levels) for t in reversed(level)],
            )

    # -- writing ---------------------------------------------------------------------------------------
    def add(self, entries: Sequence[tuple[int, int, int]], position: int) -> None:
        if self._error is not None:
            raise self._error
        memtable = self._memtable
        memtable.add(entries, position)
        if len(memtable) >= self.max_memtable_entries:
            with self._changed:
                while self._frozen and not self._stopping:  # at most one memtable waits for its dump
                    self._changed.wait()
                self._frozen.append(memtable)
                self._memtable = MemTable()
                self._changed.notify_all()

    # -- background work -------------------------------------------------------------------------------
    def _work(self) -> None:
        while True:
            with self._changed:
                while not self._frozen and not self._stopping:
                    self._changed.wait()
                if not self._frozen:
                    return
                memtable = self._frozen[0]
            try:
                with self._maintenance:
                    self._dump(memtable)
                    self._merge_full_levels()
            except BaseException as exc:
                _log.exception("Index dump failed; the index stops taking entries")
                with self._changed:
                    self._error = exc
                    self._frozen.clear()
                    self._changed.notify_all()
                return

    def _dump(self, memtable: MemTable) -> None:
        hashes, numbers, positions = memtable.to_arrays()
        table = PTable.write(self.directory, 0, hashes, numbers, positions)
        with self._changed:
            if not self._levels:
                self._levels.append([])
            self._levels[0].append(table)
            self._frozen.remove(memtable)
            self.checkpoint = memtable.last_position
            self._changed.notify_all()
        self._persist([])

    def _merge_full_levels(self) -> None:
        level = 0
        while level < len(self._levels):
            tables = self._levels[level]
            if len(tables) >= MERGE_FANOUT and level + 1 < self.max_level:
                self._merge(level, list(tables[:MERGE_FANOUT]), level + 1)
            else:
                level += 1

    def _merge(self, level: int, tables: list[PTable], target: int) -> PTable:
        hashes = np.concatenate([t.hashes for t in tables])
        numbers = np.concatenate([t.numbers for t in tables])
        positions = np.concatenate([t.positions for t in tables])
        order = np.lexsort((positions, numbers, hashes))
        merged = PTable.write(self.directory, target, hashes[order], numbers[order], positions[order])
        with self._changed:
            for t in tables:
                self._levels[level].remove(t)
            while len(self._levels) <= target:
                self._levels.append([])
            self._levels[target].append(merged)
        self._persist(tables)
        return merged

    def _persist(self, obsolete: list[PTable]) -> None:
        """Write indexmap for the current tables, then delete the tables it no longer names."""
        if self.directory is None:
            return
        with self._lock:
            entries = tuple(
                IndexMapEntry(level, i, t.name)
                for level, tables in enumerate(self._levels)
                for i, t in enumerate(tables)
            )
            imap = IndexMap(self.checkpoint, self.max_level, entries)
        imap.write(self.directory)
        for t in obsolete:
            t.delete()

    # -- reading ---------------------------------------------------------------------------------------
    def iter_forward(self, h: int, from_number: int = 0) -> Iterator[tuple[int, int]]:
        memtable, frozen, tables = self._sources()
        sources = [memtable.iter_forward(h, from_number)]
        sources += [m.iter_forward(h, from_number) for m in frozen]
        sources += [t.iter_forward(h, from_number) for t in tables]
        sources = [s for s in sources if s]
        if len(sources) == 1:
            return sources[0]
        return heapq.merge(*sources)

    def iter_backward(self, h: int, before_number: int | None = None) -> Iterator[tuple[int, int]]:
        memtable, frozen, tables = self._sources()
        sources = [memtable.iter_backward(h, before_number)]
        sources += [m.iter_backward(h, before_number) for m in frozen]
        sources += [t.iter_backward(h, before_number) for t in tables]
        return heapq.merge(*sources, reverse=True)

    def get(self, h: int, event_number: int) -> list[int]:
        memtable, frozen, tables = self._sources()
        out = memtable.get(h, event_number)
        for m in frozen:
            out += m.get(h, event_number)
        for t in tables:
            out += t.get(h, event_number)
        return out

    # -- maintenance -----------------------------------------------------------------------------------
    def wait_idle(self) -> None:
        with self._changed:
            while self._frozen and self._error is None:
                self._changed.wait()
        with self._maintenance:
            pass
        if self._error is not None:
            raise self._error

    def merge_indexes(self) -> None:
        """Merge every PTable into one (KurrentDB's MergeIndexes operation)."""
        self.wait_idle()
        with self._maintenance:
            tables = self.tables()
            if len(tables) < 2:
                return
            target = max(t.level for t in tables) + 1
            hashes = np.concatenate([t.hashes for t in tables])
            numbers = np.concatenate([t.numbers for t in tables])
            positions = np.concatenate([t.positions for t in tables])
            order = np.lexsort((positions, numbers, hashes))
            merged = PTable.write(self.directory, target, hashes[order], numbers[order], positions[order])
            with self._changed:
                self._levels = [[] for _ in range(target)] + [[merged]]
            self._persist(tables)

    def scavenge(self, keep: KeepFunction) -> IndexScavengeResult:
        """Rewrite every table (and the memtables) without the entries ``keep`` rejects."""
        self.wait_idle()
        result = IndexScavengeResult()
        with self._maintenance:
            obsolete = []
            for level, tables in enumerate(list(self._levels)):
                for index, table in enumerate(list(tables)):
                    started = time.perf_counter()
                    mask = np.asarray(keep(table.hashes, table.numbers, table.positions), dtype=bool)
                    kept = int(mask.sum())
                    deleted = len(table) - kept
                    saved = 0
                    if deleted:
                        new = PTable.write(
                            self.directory,
                            level,
                            table.hashes[mask],
                            table.numbers[mask],
                            table.positions[mask],
                        )
                        saved = table.file_size - new.file_size
                        with self._changed:
                            self._levels[level][self._levels[level].index(table)] = new
                        obsolete.append(table)
                    result.tables.append(
                        TableScavengeReport(level, index, kept, deleted, saved, time.perf_counter() - started)
                    )
            self._persist(obsolete)
            with self._lock:
                memtables = [self._memtable, *self._frozen]
            result.memtable_entries_deleted = sum(m.filter(keep) for m in memtables)
        return result

    def close(self) -> None:
        with self._changed:
            self._stopping = True
            self._changed.notify_all()
        self._worker.join()
