"""The scavenge database: ``<index>/scavenging/scavenging.db`` (SQLite, rollback journal).

It remembers what accumulation found (stream metadata, tombstones, which stream each hash belongs
to, chunk timestamp ranges), what calculation decided (discard points, chunk weights, kept until
the chunk is executed), and a checkpoint saying which stage a run reached, so a stopped or
interrupted run resumes there. Each stage's unit of work (one chunk, a batch of streams) commits
together with the checkpoint.

The spec has ``scavenging.db`` be the only file in its directory, and a file-copy backup copies
that one file; such a backup must not overlap a scavenge (evdb backup stops a running one first).
So between runs the database is a single file holding all its content, in rollback-journal mode
(``journal_mode = DELETE``, ``synchronous = FULL``: a journal exists only during a transaction, is
on disk before the main file changes, and the main file before the journal goes). The node's
writes (a run from its beginning to its end, the mark of an interrupted one) go through a
write-ahead log (``ScavengeState.running``: ``WAL``, ``synchronous = NORMAL``, a commit waits for no
disk flush; a power cut may lose the last commits, never their order, and a run resumes from the
last one kept), folded back into the file as they end, however they end. A kill during a run leaves
a WAL, which readers opening the file read-only can read and which the next open folds into the
file, as it does a database an earlier version left in WAL mode. A kill during one of the few
rollback-journal writes (the open's, the switch between modes) leaves a hot journal, which a
read-only connection cannot roll back: readers (evdb backup, verification) go through
``reading``, which then reads a rolled-back copy.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import sqlite3
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from evdb.errors import CorruptedFile

__all__ = ["HashUsers", "ScavengeState", "StreamRow", "reading", "to_signed", "to_unsigned"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS checkpoint (id INTEGER PRIMARY KEY CHECK (id = 0), data TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS hash_users (hash INTEGER PRIMARY KEY, stream TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS collisions (stream TEXT PRIMARY KEY, hash INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS streams (
    stream TEXT PRIMARY KEY,
    tombstoned INTEGER NOT NULL DEFAULT 0,
    max_age INTEGER,
    max_count INTEGER,
    truncate_before INTEGER,
    meta_number INTEGER,
    last_number INTEGER,
    discard_point INTEGER NOT NULL DEFAULT 0,
    dirty INTEGER NOT NULL DEFAULT 1
);
CREATE TABLE IF NOT EXISTS chunk_timestamps (chunk INTEGER PRIMARY KEY, min_ts INTEGER NOT NULL, max_ts INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS chunk_weights (chunk INTEGER PRIMARY KEY, weight REAL NOT NULL);
CREATE TABLE IF NOT EXISTS chunk_age_weights (chunk INTEGER PRIMARY KEY, weight REAL NOT NULL);
"""


_DAMAGED = (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)  # primary result codes of a damaged file

#: the streams calculation works on: those whose row or events changed since it last ran (``dirty``),
#: and those with ``$maxAge``, whose cut-off moves with every scavenge point
_TO_CALCULATE = "dirty = 1 OR max_age IS NOT NULL"
_COLUMNS = "stream, tombstoned, max_age, max_count, truncate_before, meta_number, last_number, discard_point"


@contextlib.contextmanager
def reading(path: str) -> Iterator[sqlite3.Connection]:
    """A read-only connection to the scavenge database at ``path`` that sees what the node would see
    on opening it. A hot rollback journal a killed writer left needs a writer to roll it back (SQLite
    answers a read-only connection SQLITE_READONLY): then the file and its journal are copied to a
    temporary folder and the copy is opened, rolled back, there. The files at ``path`` are never
    written."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        conn.execute("PRAGMA schema_version").fetchone()  # reads the header: rolls back, or cannot
        hot = False
    except sqlite3.OperationalError as exc:
        conn.close()
        if (getattr(exc, "sqlite_errorcode", 0) & 0xFF) != sqlite3.SQLITE_READONLY:
            raise
        hot = True
    if not hot:
        try:
            yield conn
        finally:
            conn.close()
        return
    with tempfile.TemporaryDirectory(prefix="evdb-scavenge-db-") as folder:
        copy = os.path.join(folder, os.path.basename(path))
        for suffix in ("", "-journal", "-wal"):
            with contextlib.suppress(FileNotFoundError):
                shutil.copyfile(path + suffix, copy + suffix)
        conn = sqlite3.connect(copy)
        try:
            conn.execute("PRAGMA schema_version").fetchone()
            yield conn
        finally:
            conn.close()


def to_signed(h: int) -> int:
    """SQLite integers are signed 64-bit: store an unsigned 64-bit hash in that range."""
    return h - (1 << 64) if h >= 1 << 63 else h


def to_unsigned(h: int) -> int:
    return h + (1 << 64) if h < 0 else h


@dataclass
class StreamRow:
    """What the scavenge knows of one stream (or metastream, for ``meta_number``)."""

    stream: str
    tombstoned: bool = False
    max_age: int | None = None
    max_count: int | None = None
    truncate_before: int | None = None
    meta_number: int | None = None  # metastream rows: number of the last metadata event before the point
    last_number: int | None = None  # last event number before the scavenge point
    discard_point: int = 0  # events numbered below it are removed


class ScavengeState:
    """One connection, used by one scavenge thread at a time (writes) and by readers of progress."""

    def __init__(
        self, path: str | None, *, page_size_kib: int = 16, cache_size_bytes: int = 64 * 1024 * 1024
    ):
        self.path = path
        if path is not None:
            os.makedirs(os.path.dirname(path), exist_ok=True)
        self._conn = sqlite3.connect(path or ":memory:", check_same_thread=False, isolation_level=None)
        self._lock = threading.RLock()
        self.journal_mode = "memory"
        c = self._conn
        try:
            c.execute(f"PRAGMA page_size = {int(page_size_kib) * 1024}")
            c.execute(f"PRAGMA cache_size = -{max(1, int(cache_size_bytes) // 1024)}")
            if path is not None:
                self._journal(run=False)
                # (reading rolled back a journal a killed writer left, and deleted it; one still there
                # is of a transaction killed before it changed the file: a write replaces and deletes it)
                version = int(c.execute("PRAGMA user_version").fetchone()[0])
                if os.path.exists(path + "-journal"):
                    c.execute(f"PRAGMA user_version = {version}")
            c.executescript(_SCHEMA)
            columns = [r[1] for r in c.execute("PRAGMA table_info(streams)")]
            if "dirty" not in columns:  # written by an earlier version: every stream is calculated once
                c.execute("ALTER TABLE streams ADD COLUMN dirty INTEGER NOT NULL DEFAULT 1")
            c.execute(
                f"CREATE INDEX IF NOT EXISTS streams_to_calculate ON streams (stream) WHERE {_TO_CALCULATE}"
            )
        except CorruptedFile:
            c.close()
            raise
        except sqlite3.DatabaseError as exc:
            c.close()
            raise self._unreadable(exc) from exc

    def _journal(self, *, run: bool) -> str:
        """The journal mode of a run (WAL) or of the time between runs (a single file); the mode in
        use, which stays "wal" when another process has the database open in WAL mode as the run
        ends (it works the same: the next open or run end makes it a single file)."""
        if run:
            self.journal_mode = str(self.execute("PRAGMA journal_mode = WAL").fetchone()[0]).lower()
            self.execute("PRAGMA synchronous = NORMAL")
        else:
            self.execute("PRAGMA synchronous = FULL")
            # (from WAL: checkpointed into the file, which is synced, then -wal and -shm deleted)
            self.journal_mode = str(self.execute("PRAGMA journal_mode = DELETE").fetchone()[0]).lower()
        return self.journal_mode

    @contextlib.contextmanager
    def running(self, logger: logging.Logger) -> Iterator[None]:
        """A run's writes, in WAL mode, folded back into the single file as it ends (see the module's
        docstring); a warning in ``logger`` when it stays beside a -wal file."""
        if self.path is None:
            yield
            return
        with self._lock:
            self._journal(run=True)
        try:
            yield
        finally:
            with self._lock:
                try:
                    mode = self._journal(run=False)
                except (sqlite3.Error, CorruptedFile) as exc:  # (the run's own error, if any, goes on)
                    self._not_single_file(logger, str(exc))
                else:
                    if mode != "delete":
                        self._not_single_file(logger, f"another process has it open in {mode} mode")

    def _not_single_file(self, logger: logging.Logger, reason: str) -> None:
        logger.warning(
            "SCAVENGING: The scavenge database %s could not be made a single file again (%s); its "
            "-wal file holds part of its content until the next scavenge ends or the node opens it "
            "again.",
            self.path,
            reason,
        )

    def _unreadable(self, exc: sqlite3.DatabaseError) -> CorruptedFile:
        return CorruptedFile(
            self.path or ":memory:",
            f"the scavenge database cannot be read ({exc}); move it aside to start the scavenge "
            "state afresh (the next scavenge then accumulates every chunk again)",
        )

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    # -- transactions ---------------------------------------------------------------------------------
    def transaction(self) -> _Transaction:
        return _Transaction(self)

    def execute(self, sql: str, params: tuple | list = ()) -> sqlite3.Cursor:
        return self._guarded(self._conn.execute, sql, params)

    def executemany(self, sql: str, rows: list) -> None:
        self._guarded(self._conn.executemany, sql, rows)

    def _guarded(self, call, sql: str, params):
        with self._lock:
            try:
                return call(sql, params)
            except sqlite3.DatabaseError as exc:
                # damage found in a page only a later statement reads: say which file, as at the open
                if (getattr(exc, "sqlite_errorcode", 0) & 0xFF) in _DAMAGED:
                    raise self._unreadable(exc) from exc
                raise

    # -- checkpoint -----------------------------------------------------------------------------------
    def checkpoint(self) -> dict[str, Any]:
        row = self.execute("SELECT data FROM checkpoint WHERE id = 0").fetchone()
        return json.loads(row[0]) if row else {}

    def set_checkpoint(self, data: dict[str, Any]) -> None:
        self.execute(
            "INSERT INTO checkpoint (id, data) VALUES (0, ?) ON CONFLICT (id) DO UPDATE SET data = excluded.data",
            (json.dumps(data),),
        )

    def update_checkpoint(self, **changes: Any) -> dict[str, Any]:
        data = self.checkpoint()
        data.update(changes)
        self.set_checkpoint(data)
        return data

    # -- streams --------------------------------------------------------------------------------------
    def row(self, stream: str) -> StreamRow | None:
        r = self.execute(f"SELECT {_COLUMNS} FROM streams WHERE stream = ?", (stream,)).fetchone()
        return _row(r) if r else None

    def rows_of(self, streams: list[str]) -> dict[str, StreamRow]:
        """The rows of those of ``streams`` the database has."""
        found: dict[str, StreamRow] = {}
        for i in range(0, len(streams), 500):
            batch = streams[i : i + 500]
            cursor = self.execute(
                f"SELECT {_COLUMNS} FROM streams WHERE stream IN ({', '.join('?' * len(batch))})", batch
            )
            found.update((r[0], _row(r)) for r in cursor.fetchall())
        return found

    def rows_after(self, after: str | None, limit: int) -> list[StreamRow]:
        cursor = self.execute(
            f"SELECT {_COLUMNS} FROM streams WHERE stream > ? ORDER BY stream LIMIT ?", (after or "", limit)
        )
        return [_row(r) for r in cursor.fetchall()]

    def rows_to_calculate(self, after: str | None, limit: int) -> list[StreamRow]:
        """The next ``limit`` streams calculation works on, after ``after``, by name."""
        cursor = self.execute(
            f"SELECT {_COLUMNS} FROM streams WHERE stream > ? AND ({_TO_CALCULATE}) ORDER BY stream LIMIT ?",
            (after or "", limit),
        )
        return [_row(r) for r in cursor.fetchall()]

    def count_to_calculate(self) -> int:
        return self.execute(f"SELECT COUNT(*) FROM streams WHERE {_TO_CALCULATE}").fetchone()[0]

    def mark_changed(self, streams) -> None:
        """Those of ``streams`` the scavenge database has a row for changed (new events, a new hash
        collision): the next calculation works on them again."""
        names = list(streams)
        for i in range(0, len(names), 500):
            batch = names[i : i + 500]
            self.execute(
                f"UPDATE streams SET dirty = 1 WHERE dirty = 0 AND stream IN ({', '.join('?' * len(batch))})",
                batch,
            )

    def all_rows(self) -> dict[str, StreamRow]:
        cursor = self.execute(f"SELECT {_COLUMNS} FROM streams")
        return {r[0]: _row(r) for r in cursor.fetchall()}

    def save_row(self, row: StreamRow, *, dirty: bool = True) -> None:
        """Store ``row``; ``dirty``: the next calculation works on it (calculation saves it clean)."""
        self.execute(
            f"INSERT INTO streams ({_COLUMNS}, dirty) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (stream) DO UPDATE SET "
            "tombstoned = excluded.tombstoned, max_age = excluded.max_age, max_count = excluded.max_count, "
            "truncate_before = excluded.truncate_before, meta_number = excluded.meta_number, "
            "last_number = excluded.last_number, discard_point = excluded.discard_point, dirty = excluded.dirty",
            (
                row.stream,
                int(row.tombstoned),
                row.max_age,
                row.max_count,
                row.truncate_before,
                row.meta_number,
                row.last_number,
                row.discard_point,
                int(dirty),
            ),
        )

    def stream_count(self) -> int:
        return self.execute("SELECT COUNT(*) FROM streams").fetchone()[0]

    # -- chunks ---------------------------------------------------------------------------------------
    def extend_chunk_timestamps(self, chunk: int, min_ts: int, max_ts: int) -> None:
        self.execute(
            "INSERT INTO chunk_timestamps (chunk, min_ts, max_ts) VALUES (?, ?, ?) ON CONFLICT (chunk) DO UPDATE SET "
            "min_ts = MIN(min_ts, excluded.min_ts), max_ts = MAX(max_ts, excluded.max_ts)",
            (chunk, min_ts, max_ts),
        )

    def chunk_timestamps(self) -> dict[int, tuple[int, int]]:
        return {
            c: (lo, hi) for c, lo, hi in self.execute("SELECT chunk, min_ts, max_ts FROM chunk_timestamps")
        }

    # A chunk's weight is the sum of two kinds, both kept until the chunk is executed (a chunk skipped
    # below a threshold keeps its weight, and a later run executes it once that weight passes the
    # later run's threshold, even when it adds nothing):
    # - ``chunk_weights``: removals below a discard point (and tombstones under UnsafeIgnoreHardDelete),
    #   counted once, by the calculation that moved the discard point past them (index execution then
    #   removes their entries, so no later calculation sees them again);
    # - ``chunk_age_weights``: removals ``$maxAge`` makes above a stream's discard point (an expired
    #   event after one that stays: timestamps out of order), counted afresh by every calculation (the
    #   index keeps those entries, and every run calculates the streams with ``$maxAge`` again), so
    #   emptied as each calculation starts rather than added to.
    def add_weights(self, weights: dict[int, float], age_weights: dict[int, float] | None = None) -> None:
        for table, more in (("chunk_weights", weights), ("chunk_age_weights", age_weights or {})):
            for chunk, w in more.items():
                self.execute(
                    f"INSERT INTO {table} (chunk, weight) VALUES (?, ?) ON CONFLICT (chunk) DO UPDATE SET "
                    "weight = weight + excluded.weight",
                    (chunk, w),
                )

    def weights(self) -> dict[int, float]:
        """Each chunk's weight (both kinds), for the chunks that have any."""
        return dict(
            self.execute(
                "SELECT chunk, SUM(weight) FROM (SELECT chunk, weight FROM chunk_weights "
                "UNION ALL SELECT chunk, weight FROM chunk_age_weights) GROUP BY chunk HAVING SUM(weight) != 0"
            ).fetchall()
        )

    def reset_weights(self, first: int, last: int) -> None:
        """Chunks ``first`` to ``last`` (logical numbers) were executed: their weights start from 0."""
        for table in ("chunk_weights", "chunk_age_weights"):
            self.execute(f"DELETE FROM {table} WHERE chunk BETWEEN ? AND ?", (first, last))

    def clear_age_weights(self) -> None:
        self.execute("DELETE FROM chunk_age_weights")

    # -- hashes ---------------------------------------------------------------------------------------
    def collided_streams(self) -> dict[str, int]:
        return {s: to_unsigned(h) for s, h in self.execute("SELECT stream, hash FROM collisions")}

    def hash_users_of(self, hashes) -> dict[int, str]:
        """The stream stored for each of ``hashes`` that has one."""
        signed = [to_signed(h) for h in hashes]
        found: dict[int, str] = {}
        for i in range(0, len(signed), 500):
            batch = signed[i : i + 500]
            cursor = self.execute(
                f"SELECT hash, stream FROM hash_users WHERE hash IN ({', '.join('?' * len(batch))})", batch
            )
            found.update((to_unsigned(h), stream) for h, stream in cursor)
        return found


def _row(r: tuple) -> StreamRow:
    return StreamRow(r[0], bool(r[1]), r[2], r[3], r[4], r[5], r[6], r[7])


class _Transaction:
    def __init__(self, state: ScavengeState) -> None:
        self._state = state

    def __enter__(self) -> ScavengeState:
        self._state._lock.acquire()
        self._state._conn.execute("BEGIN")
        return self._state

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            self._state._conn.execute("ROLLBACK" if exc_type else "COMMIT")
        finally:
            self._state._lock.release()


class HashUsers:
    """Which stream each 64-bit hash belongs to, with an LRU cache in front of the table.

    A hash seen with a second stream name is a collision: both names are recorded, and the index
    phase then checks the stream name of every entry with that hash.
    """

    def __init__(self, state: ScavengeState, capacity: int) -> None:
        self._state = state
        self._capacity = max(1, capacity)
        self._cache: OrderedDict[int, str] = OrderedDict()
        self.misses = 0
        self.hits = 0
        self.collisions = 0

    def observe(self, h: int, stream: str) -> None:
        self.observe_all([(h, stream)])

    def observe_all(self, seen: list[tuple[int, str]]) -> None:
        """Each (hash, stream) in turn, as ``observe`` would one at a time; the hashes the cache
        lacks are looked up in one query, and the new ones stored in one statement."""
        cache = self._cache
        # every hash of the batch when the cache lacks any (a miss may evict one that comes again);
        # none when it holds them all (then nothing is evicted)
        hashes = {h for h, _ in seen}
        stored = self._state.hash_users_of(hashes) if any(h not in cache for h in hashes) else {}
        new: list[tuple[int, str]] = []
        for h, stream in seen:
            known = cache.get(h)
            if known is not None:
                self.hits += 1
                cache.move_to_end(h)
            else:
                self.misses += 1
                known = stored.get(h)
                if known is None:
                    new.append((to_signed(h), stream))
                    known = stored[h] = stream
                cache[h] = known
                if len(cache) > self._capacity:
                    cache.popitem(last=False)
            if known != stream:
                self.collisions += 1
                for name in (known, stream):
                    self._state.execute(
                        "INSERT OR IGNORE INTO collisions (stream, hash) VALUES (?, ?)", (name, to_signed(h))
                    )
                self._state.mark_changed((known, stream))  # their entries are told apart by name from now on
        if new:
            self._state.executemany("INSERT INTO hash_users (hash, stream) VALUES (?, ?)", new)
