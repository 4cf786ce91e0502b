"""The database: stream semantics on top of the transaction log and the index.

One writer thread owns every append. Callers hand it requests through a queue; it takes all that
are waiting as one *group*, checks each against the streams' current state, writes their records,
makes them durable with one fsync, indexes them, and only then answers every caller (group commit).
A request that cannot fit in the rest of the active chunk ends the group's current segment: what is
written so far is committed, the chunk is completed, and the group goes on in the next chunk. An
append is therefore atomic: all its records sit in one chunk and become visible together.

Readers run on any thread. They see only committed records (up to the writer checkpoint), and read
the stream state from the index and the log, never from the writer's private caches.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import errno
import fcntl
import itertools
import json
import logging
import os
import queue
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from evdb.clock import TICKS_PER_SECOND, Clock, SystemClock
from evdb.errors import (
    DatabaseClosed,
    DatabaseLocked,
    DiskFull,
    EvdbError,
    EventTooLarge,
    InvalidInput,
    NotLeader,
    StorageError,
    StreamDeleted,
    StreamNotFound,
    WrongExpectedVersion,
)
from evdb.index.existence import StreamExistenceFilter
from evdb.index.hashing import stream_hash
from evdb.index.table_index import TableIndex
from evdb.storage import records as rec
from evdb.storage.log import TransactionLog
from evdb.streams import (
    ANY,
    MAX_EVENT_NUMBER,
    MAX_NAME_BYTES,
    NO_STREAM,
    STREAM_EXISTS,
    AllSlice,
    AppendResult,
    NewEvent,
    StreamMetadata,
    StreamSlice,
    StreamState,
    check_expected_version,
    check_metadata_events,
    check_stream_name,
    is_metastream,
    metastream_of,
    original_stream_of,
    random_ids,
)

__all__ = ["DEFAULT_CHUNK_SIZE", "Database", "DatabaseConfig", "VisibilityWatch"]

DEFAULT_CHUNK_SIZE = 256 * 1024 * 1024
_log = logging.getLogger("evdb.database")

EventFilter = Callable[[rec.EventRecord], bool]

_DATA = int(rec.RecordFlags.DATA)
_COMMITTED = int(rec.RecordFlags.IS_COMMITTED)
_JSON = int(rec.RecordFlags.IS_JSON)
_BEGIN = int(rec.RecordFlags.TRANSACTION_BEGIN)


_END = int(rec.RecordFlags.TRANSACTION_END)
#: a single node writes its replication.chk once per this much log (and at close), not per commit
COMMIT_FILE_STEP = 1 << 20
#: appends whose ids a database re-reads from the end of its log when it opens (idempotency after a crash)
_REBUILT_APPENDS = 10_000
#: ... and of at most this many events: the rebuild reads every event of those appends, so with large
#: appends (200 events each) 10,000 of them were 2 million records, 7 s and 2 GiB of mapped pages at open
_REBUILT_EVENTS = 100_000
_FRAME_FIXED = rec.FRAME_OVERHEAD + rec.EVENT_HEADER.size


class VisibilityWatch(Protocol):
    """Told of the records of the streams it concerns as they become visible to readers (see
    :meth:`Database.add_visibility_watch`): the users' credential caches watch the user streams."""

    #: the streams whose names start with one of these concern it
    prefixes: tuple[str, ...]

    def changing(self, streams: frozenset[str]) -> None:
        """Records of ``streams`` are committed here and readers may see them from now on."""

    def changed(self, streams: frozenset[str]) -> None:
        """Readers see the records :meth:`changing` announced (or never will: they were rolled back,
        or the database closed first)."""


@dataclass(frozen=True)
class DatabaseConfig:
    """How to open a database. ``db_dir`` None means in memory (MemDb)."""

    db_dir: str | None
    index_dir: str | None = None  # default: <db_dir>/index
    chunk_size: int = DEFAULT_CHUNK_SIZE
    max_memtable_entries: int = 1_000_000
    max_append_size: int = 16 * 1024 * 1024
    verify: bool = True
    stream_cache_capacity: int = 100_000
    idempotency_cache_capacity: int = 100_000
    existence_filter_capacity: int = 10_000_000

    @property
    def resolved_index_dir(self) -> str | None:
        if self.db_dir is None:
            return None
        return self.index_dir or os.path.join(self.db_dir, "index")


# -- answers to writes -------------------------------------------------------------------------------
class _Answer(Protocol):
    """Where the writer puts a request's result: a concurrent future (sync callers and the
    ``*_async`` methods), or a :class:`_LoopAnswer` (the ``*_on_loop`` methods)."""

    def done(self) -> bool: ...

    def set_result(self, result: Any) -> None: ...

    def set_exception(self, exception: BaseException) -> None: ...


#: (asyncio future, result, exception) settled together on their event loop
_Settlement = tuple["asyncio.Future[Any]", Any, BaseException | None]
_answer_batches = threading.local()


class _LoopAnswer:
    """The answer to a write awaited on an event loop. The writer answers a group's requests with
    one ``call_soon_threadsafe`` per event loop (:func:`_answers_batched`), not one wake-up per
    request as ``asyncio.wrap_future`` costs; answered on the loop's own thread (the replication
    gate), it is settled at once, with no wake-up at all."""

    __slots__ = ("_settled", "future", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.future: asyncio.Future[Any] = loop.create_future()
        self._settled = False

    def done(self) -> bool:
        return self._settled

    def set_result(self, result: Any) -> None:
        self._settle(result, None)

    def set_exception(self, exception: BaseException) -> None:
        self._settle(None, exception)

    def _settle(self, result: Any, exception: BaseException | None) -> None:
        if self._settled:
            return
        self._settled = True
        batch: dict[asyncio.AbstractEventLoop, list[_Settlement]] | None = getattr(
            _answer_batches, "batch", None
        )
        if batch is not None:
            batch.setdefault(self.loop, []).append((self.future, result, exception))
        else:
            _deliver(self.loop, [(self.future, result, exception)])


def _settle_all(settlements: list[_Settlement]) -> None:
    """On the event loop: settle each future its waiter has not given up on (cancelled)."""
    for future, result, exception in settlements:
        if future.done():
            continue
        if exception is not None:
            future.set_exception(exception)
        else:
            future.set_result(result)


def _deliver(loop: asyncio.AbstractEventLoop, settlements: list[_Settlement]) -> None:
    if asyncio._get_running_loop() is loop:
        _settle_all(settlements)
        return
    # a closed loop has no waiter left to answer
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(_settle_all, settlements)


@contextlib.contextmanager
def _answers_batched() -> Iterator[None]:
    """Collect the loop answers settled inside (a commit group's), then wake each loop once."""
    if getattr(_answer_batches, "batch", None) is not None:  # nested: the outer one delivers
        yield
        return
    batch: dict[asyncio.AbstractEventLoop, list[_Settlement]] = {}
    _answer_batches.batch = batch
    try:
        yield
    finally:
        _answer_batches.batch = None
        for loop, settlements in batch.items():
            _deliver(loop, settlements)


# -- write requests ----------------------------------------------------------------------------------
@dataclass
class _Request:
    future: _Answer = field(default_factory=concurrent.futures.Future)


@dataclass
class _Append(_Request):
    stream: str = ""
    events: Sequence[NewEvent] = ()
    expected_version: int = ANY
    event_types: list[bytes] | None = None  # encoded, from validation
    payload_size: int = 0  # bytes of event types, data and metadata


@dataclass
class _Delete(_Request):
    stream: str = ""
    expected_version: int = ANY
    hard: bool = False


@dataclass
class _Call(_Request):
    """Run a function in the writer thread (for maintenance work that must see the writer's order)."""

    fn: Callable[[WriterContext], Any] = lambda ctx: None


_STOP = object()


@dataclass
class _Pending:
    """Records written in the current segment, waiting for the fsync that commits them."""

    entries: list[tuple[int, int, int]] = field(default_factory=list)
    names: set[str] = field(default_factory=set)
    answers: list[tuple[_Answer, Any]] = field(default_factory=list)


class WriterContext:
    """What a function run by :meth:`Database.call_in_writer` may do inside the writer thread: the
    typed seam through which evdb.cluster.replica writes a leader's records and chunk files."""

    def __init__(self, db: Database) -> None:
        self._db = db

    @property
    def log(self) -> TransactionLog:
        return self._db._log

    def append(self, stream: str, events: Sequence[NewEvent], expected_version: int = ANY) -> AppendResult:
        """Append within the current group (committed with it)."""
        return self._db._apply_append(
            _Append(stream=stream, events=events, expected_version=expected_version)
        )

    def write_system(self, kind: int, payload: bytes) -> int:
        return self._db._write_system(kind, payload)

    def complete_active_chunk(self) -> None:
        """Commit what is written so far and complete the active chunk."""
        self._db._commit_segment()
        self._db._log.complete_active_chunk()

    def commit(self) -> None:
        """Make what is written durable, index it, and tell the listeners (readers, subscriptions)."""
        self._db._commit_segment()

    def index(self, record: rec.EventRecord, *, follow_appends: bool = True) -> None:
        """Index an event record written (or installed) by replication at the next :meth:`commit`;
        ``follow_appends``: rebuild the recent-append cache from it (records in their log order)."""
        pending = self._db._pending
        pending.entries.append((stream_hash(record.stream), record.event_number, record.log_position))
        pending.names.add(record.stream)
        if follow_appends:
            self._db._follow_replicated_append(record)

    def forget_append_in_progress(self) -> None:
        """The records that follow do not continue the append seen last (a chunk file replaced them)."""
        self._db._replicated_batch = None

    def index_up_to(self, position: int) -> None:
        """Nothing before ``position`` is left to index (a chunk file whose records are all indexed)."""
        if self._db._index.checkpoint < position:
            self._db._index.add([], position)

    def note_epoch(self, position: int, epoch_number: int) -> None:
        """An epoch record was written at ``position``: the epoch (and proposal) checkpoints follow it."""
        checkpoints = self._db._log.checkpoints
        checkpoints.epoch.write(position)
        if epoch_number > checkpoints.proposal.value:
            checkpoints.proposal.write(epoch_number)


def _tell_changed(told: list[tuple[VisibilityWatch, frozenset[str]]]) -> None:
    for watch, streams in told:
        try:
            watch.changed(streams)
        except Exception:
            _log.exception("A visibility watch failed")


class Database:
    """An event store on disk (or in memory): streams, ``$all``, metadata, deletes, subscriptions."""

    def __init__(self, config: DatabaseConfig, clock: Clock, logger: logging.Logger) -> None:
        self.config = config
        self.clock = clock
        self.logger = logger
        self._lock_fd: int | None = None
        self._log: TransactionLog
        self._index: TableIndex
        self._existence: StreamExistenceFilter | None = None
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._writer: threading.Thread | None = None
        self._writer_lock = threading.Lock()  # held by whichever thread runs a group of writes
        self._closed = False
        self._failed: BaseException | None = None
        self._pending = _Pending()
        # writer-private caches (only the writer thread reads or writes them)
        self._states: OrderedDict[str, StreamState] = OrderedDict()
        #: lookups of ``_states`` that found / did not find the stream (kurrentdb_cache_hits_misses_total)
        self.state_cache_hits = 0
        self.state_cache_misses = 0
        #: evdb.metrics.DatabaseObserver: told of each group commit and each client read (None: nobody),
        #: with readings of ``timer`` taken around the work
        self.observer: Any = None
        self.timer: Callable[[], float] = time.perf_counter
        # first event id of a recent append -> (stream, first event number, all its ids, last position)
        self._recent_appends: dict[bytes, tuple[str, int, tuple[bytes, ...], int]] = {}
        #: the append being replicated: [stream, first number, event ids, last position] (followers)
        self._replicated_batch: list | None = None
        self._names_since_flush = 0
        self._listeners: list[Callable[[int], None]] = []
        self._listeners_lock = threading.Lock()
        self._watches: list[VisibilityWatch] = []
        #: (end, watches told) of watched records committed here that readers do not see yet (a
        #: cluster member's read limit is behind them); with the read limit's moves, under _watch_lock
        self._unseen: list[tuple[int, list[tuple[VisibilityWatch, frozenset[str]]]]] = []
        self._watch_lock = threading.Lock()
        #: cluster hooks (see evdb.cluster): on a follower or replica, client writes go to the leader
        #: through ``remote_writer``; on a leader, answers wait in ``replication_gate`` for a majority
        self.remote_writer: Callable[[_Request], concurrent.futures.Future] | None = None
        self.replication_gate: Callable[[int, list], None] | None = None
        #: asked in the writer, under its lock, before each client write: a cluster member writes a
        #: client's records only while it leads under its own epoch (a node taking office must not
        #: write anything before its epoch record: see docs/cluster.md, "The common point")
        self.write_permit: Callable[[], bool] | None = None
        #: called in the writer with the log's end when records are written and about to be synced (a
        #: leader ships them to its followers during its own fdatasync), then with -1 if that sync
        #: fails (they are rolled back: the leader must not go on with what it shipped)
        self.before_sync: Callable[[int], None] | None = None
        #: the end of what readers see: None = all that is durable here (a single node); in a cluster,
        #: what the cluster committed (set by evdb.cluster), so a read never returns a record that a
        #: new leader could cut from this log
        self._read_limit: int | None = None
        self._read_limit_file: Any = None
        self._commit_position_unwritten = -1  # a single node's, kept for replication.chk (see below)

    # -- opening and closing -----------------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        config: DatabaseConfig | str | None,
        *,
        clock: Clock | None = None,
        logger: logging.Logger | None = None,
        **overrides: Any,
    ) -> Database:
        """Open (creating if needed) a database folder, or an in-memory database for ``None``.

        At start the log is cut to ``truncate.chk`` when set, every completed chunk is verified
        (unless ``verify`` is off), and records after the index checkpoint are indexed again.
        """
        if not isinstance(config, DatabaseConfig):
            config = DatabaseConfig(db_dir=config, **overrides)
        elif overrides:
            from dataclasses import replace

            config = replace(config, **overrides)
        if config.chunk_size < 4096:
            raise InvalidInput("The chunk size must be at least 4096 bytes.")
        db = cls(config, clock or SystemClock(), logger or _log)
        try:
            db._open()
        except OSError as exc:
            db._release()
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):  # one message naming the file, no traceback
                where = exc.filename if isinstance(exc.filename, str) else config.db_dir or "memory"
                raise DiskFull(where, exc.strerror or "no space left") from None
            raise
        except BaseException:
            db._release()
            raise
        return db

    def _open(self) -> None:
        cfg = self.config
        if cfg.db_dir is not None:
            os.makedirs(cfg.db_dir, exist_ok=True)
            self._lock_fd = os.open(os.path.join(cfg.db_dir, "evdb.lock"), os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(self._lock_fd)
                self._lock_fd = None
                raise DatabaseLocked(f"{cfg.db_dir} is in use by another evdb process") from None
        self._log = TransactionLog.open(
            cfg.db_dir, chunk_size=cfg.chunk_size, verify=cfg.verify, logger=self.logger
        )
        index_dir = cfg.resolved_index_dir
        if index_dir is not None:
            os.makedirs(index_dir, exist_ok=True)
        self._index = TableIndex.open(index_dir, max_memtable_entries=cfg.max_memtable_entries)
        if self._index.checkpoint > self._log.committed:
            # the log was truncated (restore, or a diverged cluster tail): the index points past it
            self.logger.warning(
                "Index checkpoint %d is beyond the log end %d: rebuilding the index",
                self._index.checkpoint,
                self._log.committed,
            )
            self._index.close()
            self._index = _reset_index(index_dir, cfg.max_memtable_entries)
        if index_dir is not None:
            self._existence = StreamExistenceFilter.open(
                os.path.join(index_dir, "stream-existence"), capacity=cfg.existence_filter_capacity
            )
            if self._existence.checkpoint > self._log.committed:
                self._existence.close()
                _remove_existence_filter(index_dir)
                self._existence = StreamExistenceFilter.open(
                    os.path.join(index_dir, "stream-existence"), capacity=cfg.existence_filter_capacity
                )
        self._reindex()
        self._remember_recent_appends()
        self._writer = threading.Thread(target=self._writer_loop, name="evdb-writer", daemon=True)
        self._writer.start()

    def _reindex(self) -> None:
        """Index the records written after the index checkpoint (and feed the existence filter)."""
        start_index = max(0, self._index.checkpoint)
        start = start_index
        if self._existence is not None:
            start = min(start, max(0, self._existence.checkpoint))
        if start >= self._log.committed:
            self._log.checkpoints.chaser.write(self._log.committed)
            return
        self.logger.info("Indexing the log from position %d to %d", start, self._log.committed)
        entries: list[tuple[int, int, int]] = []
        count = 0
        epoch = self._log.checkpoints.epoch
        for record in self._log.iter_forward(start):
            if not isinstance(record, rec.EventRecord):
                if record.kind == rec.SystemRecordKind.EPOCH and record.log_position > epoch.value:
                    # written (or installed from the leader's chunk file) just before a crash that
                    # came before epoch.chk was moved to it
                    epoch.write(record.log_position)
                    number = int(json.loads(record.payload).get("epochNumber", 0))
                    if number > self._log.checkpoints.proposal.value:
                        self._log.checkpoints.proposal.write(number)
                continue
            if self._existence is not None and record.log_position >= self._existence.checkpoint:
                self._existence.add(record.stream)
            if record.log_position >= start_index:
                entries.append((stream_hash(record.stream), record.event_number, record.log_position))
                if len(entries) >= 10_000:
                    self._index.add(entries, record.next_position)
                    count += len(entries)
                    entries = []
        if entries:
            count += len(entries)
        self._index.add(entries, self._log.committed)
        self._log.checkpoints.chaser.write(self._log.committed)
        if self._existence is not None:
            self._existence.flush(self._log.committed)
        self.logger.info("Indexed %d events", count)

    def _remember_recent_appends(self) -> None:
        """Rebuild the recent-append cache from the newest appends in the log (at most
        ``_REBUILT_APPENDS``), as a follower rebuilds it from replicated records. Without it a node
        restarted after a crash, elected leader with an append its clients never saw acknowledged,
        would write that append a second time when the client retries it with any-version."""
        wanted = min(self.config.idempotency_cache_capacity, _REBUILT_APPENDS)
        start = None
        appends = events = 0
        try:
            for record in self._log.iter_backward(self._log.committed):
                if isinstance(record, rec.EventRecord):
                    start = record.log_position
                    events += 1
                    if record.flags & _BEGIN:  # an append's first event: stop only at one
                        appends += 1
                        if appends >= wanted or events >= _REBUILT_EVENTS:
                            break
        except StorageError as exc:  # a damaged record (SkipDbVerify): reads name it; opening goes on
            self.logger.warning("The recent appends are remembered only after a damaged record: %s", exc)
        if start is None:
            return
        for record in self._log.iter_forward(start):
            if isinstance(record, rec.EventRecord):
                self._follow_replicated_append(record)
        self._replicated_batch = None
        self._log.drop_pages()  # what the two passes mapped is not this node's memory

    def close(self) -> None:
        """Finish queued writes, stop the writer, and leave every file consistent."""
        if self._closed:
            return
        self._closed = True
        if self._writer is not None:
            self._queue.put(_STOP)
            self._writer.join()
        self._release()

    def _release(self) -> None:
        with self._watch_lock:
            unseen, self._unseen = self._unseen, []
        for _, told in unseen:  # closed: readers of this database will never see them
            _tell_changed(told)
        with contextlib.suppress(AttributeError):
            self._index.close()
        if self._existence is not None:
            with contextlib.suppress(Exception):
                if self._failed is None:
                    self._existence.flush(self._log.committed)
            self._existence.close()
        if self._read_limit_file is not None:
            with contextlib.suppress(OSError):
                if self._commit_position_unwritten > self._read_limit_file.value:
                    self._read_limit_file.write(self._commit_position_unwritten, flush=False)
                self._read_limit_file.flush()
                self._read_limit_file.close()
            self._read_limit_file = None
        with contextlib.suppress(AttributeError):
            self._log.checkpoints.chaser.flush()
            self._log.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- facts -------------------------------------------------------------------------------------------
    @property
    def log(self) -> TransactionLog:
        return self._log

    @property
    def index(self) -> TableIndex:
        return self._index

    @property
    def stream_cache_entries(self) -> int:
        """Streams whose state the writer keeps (at most ``config.stream_cache_capacity``)."""
        return len(self._states)

    @property
    def committed_position(self) -> int:
        """End of the committed log: every record before it is durable and readable."""
        return self._log.committed

    @property
    def readable_position(self) -> int:
        """End of what readers see (subscriptions, ``$all``, stream reads): the committed end, or less
        in a cluster, where only what a majority holds is served (see set_read_limit)."""
        limit = self._read_limit
        committed = self._log.committed
        return committed if limit is None or limit > committed else limit

    def set_read_limit(self, position: int) -> None:
        """Serve reads up to ``position`` (the cluster's commit position as this node knows it). It is
        kept in ``replication.chk`` (written, synced lazily: a lower value after a power cut is only
        more careful) so a restarted member serves what it had served, and nothing more."""
        previous = self.readable_position
        with self._watch_lock:
            self._read_limit = max(position, 0)
            now = self.readable_position
            seen = [told for end, told in self._unseen if end <= now]
            if seen:
                self._unseen = [(end, told) for end, told in self._unseen if end > now]
        for told in seen:
            _tell_changed(told)
        self.record_commit_position(position)
        if now > previous:
            self._notify_listeners()

    def _commit_file(self) -> Any:
        if self._read_limit_file is None and self.config.db_dir is not None:
            from evdb.index.durable import fsync_dir
            from evdb.storage.checkpoints import Checkpoint

            path = os.path.join(self.config.db_dir, "replication.chk")
            created = not os.path.exists(path)
            self._read_limit_file = Checkpoint(path, -1)
            if created:
                fsync_dir(self.config.db_dir)  # the file itself must survive a power cut
        return self._read_limit_file

    def record_commit_position(self, position: int) -> None:
        """Keep ``position`` as committed cluster-wide in ``replication.chk`` (a single node: all it
        has made durable), without changing what readers see.

        A single node (no read limit: nothing reads the file while it runs; it is kept should the node
        be restarted as a cluster member) writes it once per COMMIT_FILE_STEP of log, and exactly at
        close, not at each commit. After a kill -9 the file may be behind the log: the member then
        serves only what its leader confirms, as after a power cut (a lower value is only more careful)."""
        if self._closed:
            return
        file = self._commit_file()
        if file is None or position <= file.value:
            return
        if self._read_limit is None and position - file.value < COMMIT_FILE_STEP:
            self._commit_position_unwritten = position
            return
        with contextlib.suppress(OSError):  # closed under us: the next open reads the last value kept
            file.write(position, flush=False)

    def commit_limit_at_open(self) -> int:
        """The commit position this member knew when it stopped (``replication.chk``), never past its
        log (after a truncation the file is lowered to the log's end). 0 without the file: a member
        serves nothing its leader has not confirmed."""
        file = self._commit_file()
        if file is None:
            return 0
        committed = self.committed_position
        if file.value > committed:
            file.write(committed)  # cut below it: records that come later are not committed yet
        return max(min(file.value, committed), 0)

    def _notify_listeners(self) -> None:
        readable = self.readable_position
        with self._listeners_lock:
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener(readable)
            except Exception:
                self.logger.exception("A commit listener failed")

    @property
    def is_in_memory(self) -> bool:
        return self.config.db_dir is None

    # -- listeners ---------------------------------------------------------------------------------------
    def add_visibility_watch(self, watch: VisibilityWatch) -> None:
        """Tell ``watch`` of every committed record of a stream it concerns, whoever wrote it (a client
        here, a leader through replication, a chunk file installed whole): :meth:`VisibilityWatch.changing`
        in the writer thread before readers can see the records, then :meth:`VisibilityWatch.changed` once
        they do (in a cluster, when the read limit passes them: the thread that moves it)."""
        with self._listeners_lock:
            self._watches = [*self._watches, watch]

    def _tell_changing(self, names: set[str]) -> list[tuple[VisibilityWatch, frozenset[str]]]:
        told = []
        for watch in self._watches:
            prefixes = watch.prefixes
            streams = [name for name in names if name.startswith(prefixes)]
            if streams:
                concerned = frozenset(streams)
                watch.changing(concerned)
                told.append((watch, concerned))
        return told

    def _settle_watched(self, end: int, told: list[tuple[VisibilityWatch, frozenset[str]]]) -> None:
        """Records announced by :meth:`_tell_changing`, ending at ``end``, are committed and indexed:
        tell their watches now, or when the read limit passes ``end``."""
        if not told:
            return
        with self._watch_lock:
            if self._read_limit is not None and self.readable_position < end and not self._closed:
                self._unseen.append((end, told))
                return
        _tell_changed(told)

    def add_commit_listener(self, callback: Callable[[int], None]) -> None:
        """Call ``callback(committed_position)`` from the writer thread after each commit."""
        with self._listeners_lock:
            self._listeners.append(callback)

    def remove_commit_listener(self, callback: Callable[[int], None]) -> None:
        with self._listeners_lock, contextlib.suppress(ValueError):
            self._listeners.remove(callback)

    # -- writing (public) --------------------------------------------------------------------------------
    def _submit(self, request: _Request) -> concurrent.futures.Future:
        if self._closed:
            raise DatabaseClosed()
        if self.remote_writer is not None and isinstance(request, (_Append, _Delete)):
            return self.remote_writer(request)
        if self._failed is not None:
            raise EvdbError(f"The database stopped accepting writes after an error: {self._failed}")
        self._queue.put(request)
        return _concurrent(request.future)

    def _submit_on_loop(self, request: _Request) -> asyncio.Future[Any]:
        """Queue ``request`` (made with a :class:`_LoopAnswer` of the running loop) for the writer,
        answered on that loop. A follower's writes go to its leader through ``remote_writer``, as for
        ``_submit``."""
        answer = request.future
        assert isinstance(answer, _LoopAnswer)
        if self._closed:
            raise DatabaseClosed()
        if self.remote_writer is not None and isinstance(request, (_Append, _Delete)):
            return asyncio.wrap_future(self.remote_writer(request), loop=answer.loop)
        if self._failed is not None:
            raise EvdbError(f"The database stopped accepting writes after an error: {self._failed}")
        self._queue.put(request)
        return answer.future

    def _append_request(
        self, stream: str, events: Sequence[NewEvent], expected_version: int, answer: _Answer | None = None
    ) -> _Append:
        """Validate an append before it is queued (nothing reaches the writer unchecked). ``answer``:
        where the writer puts the result (a new concurrent future when None)."""
        check_stream_name(stream)
        check_expected_version(expected_version)
        events = list(events)
        types, size = self._check_events(events)
        check_metadata_events(stream, events)  # metadata appended to $$stream: the same rules as set
        return _Append(
            future=concurrent.futures.Future() if answer is None else answer,
            stream=stream,
            events=events,
            expected_version=expected_version,
            event_types=types,
            payload_size=size,
        )

    def append_async(
        self, stream: str, events: Sequence[NewEvent], expected_version: int = ANY
    ) -> concurrent.futures.Future:
        return self._submit(self._append_request(stream, events, expected_version))

    def append_on_loop(
        self,
        stream: str,
        events: Sequence[NewEvent],
        expected_version: int = ANY,
        *,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> asyncio.Future[AppendResult]:
        """:meth:`append` for a coroutine: call it on the event loop and await the future there. The
        writer answers all of a commit group's appends awaited on a loop with one wake-up of it.
        ``loop``: the running loop, when the caller holds it (looking it up costs a ``getpid``)."""
        answer = _LoopAnswer(loop if loop is not None else asyncio.get_running_loop())
        return self._submit_on_loop(self._append_request(stream, events, expected_version, answer))

    def append(self, stream: str, events: Sequence[NewEvent], expected_version: int = ANY) -> AppendResult:
        """Append ``events`` to ``stream`` atomically, if its version is ``expected_version``.

        Retrying the same events (same ids) at the same expected version returns the original result
        instead of writing them twice.
        """
        return self._run_here_or_queue(self._append_request(stream, events, expected_version)).result()

    def delete_stream_async(
        self, stream: str, expected_version: int = ANY, *, hard: bool = False
    ) -> concurrent.futures.Future:
        check_stream_name(stream)
        check_expected_version(expected_version)
        return self._submit(_Delete(stream=stream, expected_version=expected_version, hard=hard))

    def delete_stream_on_loop(
        self, stream: str, expected_version: int = ANY, *, hard: bool = False
    ) -> asyncio.Future[AppendResult]:
        """:meth:`delete_stream` for a coroutine, answered as :meth:`append_on_loop` is."""
        check_stream_name(stream)
        check_expected_version(expected_version)
        answer = _LoopAnswer(asyncio.get_running_loop())
        return self._submit_on_loop(
            _Delete(future=answer, stream=stream, expected_version=expected_version, hard=hard)
        )

    def delete_stream(self, stream: str, expected_version: int = ANY, *, hard: bool = False) -> AppendResult:
        """Soft delete (``$tb`` = max in the metadata) or, with ``hard``, write a tombstone."""
        check_stream_name(stream)
        check_expected_version(expected_version)
        return self._run_here_or_queue(
            _Delete(stream=stream, expected_version=expected_version, hard=hard)
        ).result()

    def set_stream_metadata(
        self, stream: str, metadata: dict[str, Any] | StreamMetadata, expected_version: int = ANY
    ) -> AppendResult:
        """Append a ``$metadata`` event to ``$$stream`` (validating the well-known keys)."""
        check_stream_name(stream)
        if is_metastream(stream):
            raise InvalidInput("Metadata of a metadata stream cannot be set.")
        raw = metadata.raw if isinstance(metadata, StreamMetadata) else metadata
        if not isinstance(raw, dict):
            raise InvalidInput("Stream metadata must be a JSON object.")
        StreamMetadata.from_dict(raw)  # validates
        event = NewEvent("$metadata", json.dumps(raw, separators=(",", ":")).encode(), is_json=True)
        return self.append(metastream_of(stream), [event], expected_version)

    def call_in_writer(self, fn: Callable[[WriterContext], Any]) -> Any:
        """Run ``fn`` in the writer thread, in order with appends, and return its result."""
        return self._run_here_or_queue(_Call(fn=fn)).result()

    def forget_stream_states(self, *, recent_appends: bool = True) -> None:
        """Drop the writer's cached stream states (after a scavenge rewrote the index under them, or
        when a follower takes office: replicated records do not update them). ``recent_appends=False``
        keeps the event ids of recent appends, which a new leader needs to recognise a client's retry
        of a write the old leader took."""

        def forget(ctx: WriterContext) -> None:
            self._states.clear()
            if recent_appends:
                self._recent_appends.clear()

        self.call_in_writer(forget)

    def write_epoch(self, epoch_number: int, leader_instance_id: uuid.UUID, extra: dict | None = None) -> int:
        """Write an epoch: a system record plus an ``$epoch-information`` event in ``$epochs``."""

        def write(ctx: WriterContext) -> int:
            body = {
                "epochNumber": epoch_number,
                "epochId": str(uuid.uuid4()),
                "leaderInstanceId": str(leader_instance_id),
                "previousEpochPosition": self._log.checkpoints.epoch.value,
                **(extra or {}),
            }
            payload = json.dumps(body, separators=(",", ":")).encode()
            position = ctx.write_system(rec.SystemRecordKind.EPOCH, payload)
            ctx.append("$epochs", [NewEvent("$epoch-information", payload, is_json=True)])
            self._commit_segment()
            self._log.checkpoints.epoch.write(position)
            if epoch_number > self._log.checkpoints.proposal.value:
                self._log.checkpoints.proposal.write(epoch_number)
            return position

        return self.call_in_writer(write)

    # -- replication (evdb.cluster.replica: its writes run here, through the WriterContext) -----------
    def _follow_replicated_append(self, record: rec.EventRecord) -> None:
        """Rebuild the recent-append cache from replicated records (their TransactionBegin/End flags
        mark each append), so that this node, once leader, answers a retried append idempotently."""
        batch = self._replicated_batch
        if record.flags & _BEGIN:
            batch = self._replicated_batch = [record.stream, record.event_number, [record.event_id], 0]
        elif batch is not None and batch[0] == record.stream:
            batch[2].append(record.event_id)
        elif batch is not None:  # the $$stream record that ends the recreation of a soft-deleted stream
            self._remember_append(batch[2], batch[0], batch[1], batch[3])
            self._replicated_batch = None
            return
        else:
            return
        batch[3] = record.log_position
        if record.flags & _END:
            self._remember_append(batch[2], batch[0], batch[1], batch[3])
            self._replicated_batch = None

    def epochs(self, max_count: int = 64) -> list[dict]:
        """The newest epochs of this log, newest first: ``{"epochNumber", "epochId", "position", ...}``."""
        out: list[dict] = []
        position = self._log.checkpoints.epoch.value
        while position >= 0 and len(out) < max_count:
            record = self._log.read_record(position)
            if not isinstance(record, rec.SystemRecord) or record.kind != rec.SystemRecordKind.EPOCH:
                break
            body = json.loads(record.payload)
            body["position"] = position
            out.append(body)
            previous = body.get("previousEpochPosition", -1)
            if previous is None or previous >= position:
                break
            position = previous
        return out

    def truncate_on_next_open(self, position: int) -> None:
        """Ask the next open to cut the log at ``position`` (a follower whose tail diverged)."""
        self._log.checkpoints.truncate.write(position)
        self._log.checkpoints.truncate.flush()

    def _check_events(self, events: list[NewEvent]) -> tuple[list[bytes], int]:
        """Validate events before they are queued; returns their encoded event types and the bytes
        their types, data and metadata take (what the writer needs to size the append)."""
        types: list[bytes] = []
        payload = 0
        for e in events:
            if type(e) is not NewEvent and not isinstance(e, NewEvent):
                raise InvalidInput("Events must be NewEvent values.")
            event_type, data, metadata = e.event_type, e.data, e.metadata
            if type(event_type) is not str or not event_type:
                raise InvalidInput(f"Every event needs an event type of 1 to {MAX_NAME_BYTES} bytes.")
            encoded = event_type.encode()
            if len(encoded) > MAX_NAME_BYTES:
                raise InvalidInput(f"Every event needs an event type of 1 to {MAX_NAME_BYTES} bytes.")
            if type(data) is not bytes or type(metadata) is not bytes:
                raise InvalidInput("Event data and metadata must be bytes.")
            types.append(encoded)
            payload += len(data) + len(metadata)
        if payload > self.config.max_append_size:
            raise EventTooLarge(
                f"The append carries {payload} bytes of data and metadata; the limit (MaxAppendSize) is "
                f"{self.config.max_append_size} bytes."
            )
        return types, payload + sum(map(len, types))

    # -- the writer thread -------------------------------------------------------------------------------
    def _writer_loop(self) -> None:
        while True:
            first = self._queue.get()
            with self._writer_lock:
                group = [first]
                while len(group) < 1000:
                    try:
                        group.append(self._queue.get_nowait())
                    except queue.Empty:
                        break
                if self._process_group(group):
                    break
        self._drain_after_stop()

    def _process_group(self, group: list) -> bool:
        """Run a group of requests and commit them; True when the group holds the stop request.
        The group's answers awaited on an event loop reach it together, with one wake-up."""
        stop = False
        observer = self.observer
        started = self.timer() if observer is not None else 0.0
        with _answers_batched():
            for request in group:
                if request is _STOP:
                    stop = True
                    continue
                if self._failed is not None:
                    request.future.set_exception(EvdbError(f"The database failed: {self._failed}"))
                    continue
                self._run(request)
            try:
                self._commit_segment()
            except BaseException as exc:  # an I/O error: nothing of this segment is acknowledged
                self._fail_segment(exc)
        if observer is not None:
            observer.group_processed(self.timer() - started)
        return stop

    def _run_here_or_queue(self, request: _Request) -> concurrent.futures.Future:
        """Run the request in the calling thread when the writer is idle (no thread hand-offs for a
        lone writer); else queue it for the writer thread, which groups it with the others."""
        if self._closed:
            raise DatabaseClosed()
        if self.remote_writer is not None and isinstance(request, (_Append, _Delete)):
            return self.remote_writer(request)
        if self._failed is not None:
            raise EvdbError(f"The database stopped accepting writes after an error: {self._failed}")
        if self._queue.empty() and self._writer_lock.acquire(blocking=False):
            try:
                if not self._closed:
                    self._process_group([request])
                    return _concurrent(request.future)
            finally:
                self._writer_lock.release()
        self._queue.put(request)
        return _concurrent(request.future)

    def _run(self, request: _Request) -> None:
        try:
            if (
                isinstance(request, (_Append, _Delete))
                and self.write_permit is not None
                and not self.write_permit()
            ):
                raise NotLeader()
            if isinstance(request, _Append):
                result = self._apply_append(request)
            elif isinstance(request, _Delete):
                result = self._apply_delete(request)
            elif isinstance(request, _Call):
                result = request.fn(WriterContext(self))
            else:  # pragma: no cover - programming error
                raise TypeError(request)
        except EvdbError as exc:
            request.future.set_exception(exc)
            return
        except OSError as exc:
            self._fail_segment(exc)
            request.future.set_exception(exc)
            return
        except BaseException as exc:
            self.logger.exception("Unexpected error in the writer")
            request.future.set_exception(exc)
            return
        self._pending.answers.append((request.future, result))

    def _commit_segment(self) -> None:
        """Make the pending records durable, index them, then answer their callers."""
        pending = self._pending
        if not pending.answers and not pending.entries and self._log.end == self._log.committed:
            return
        # the watches (the users' caches) hear of their streams' records before a reader can see them
        told = self._tell_changing(pending.names) if self._watches and pending.names else []
        before_sync = self.before_sync if self._log.end != self._log.committed else None
        if before_sync is not None:
            self._log.write_out()  # in the file before the senders read them to ship
            before_sync(self._log.end)
        observer = self.observer
        flush_started = self.timer() if observer is not None else 0.0
        committed_before = self._log.committed
        try:
            self._log.flush()
        except BaseException:
            if before_sync is not None:
                before_sync(-1)
            _tell_changed(told)  # rolled back: readers never see them
            raise
        committed = self._log.committed
        if observer is not None:
            observer.flushed(committed - committed_before, flush_started, self.timer())
        try:
            self._index.add(pending.entries, committed)
        finally:
            self._settle_watched(committed, told)
        if self._existence is not None:
            for name in pending.names:
                self._existence.add(name)
            self._names_since_flush += len(pending.names)
        self._log.checkpoints.chaser.write(committed, flush=False)
        self._pending = _Pending()
        if self.replication_gate is not None and pending.answers:
            self.replication_gate(committed, pending.answers)  # answered once a majority has them
        else:
            for fut, result in pending.answers:
                if not fut.done():
                    fut.set_result(result)
        if self._existence is not None and self._names_since_flush >= 100_000:
            self._existence.flush(committed)
            self._names_since_flush = 0
        self._notify_listeners()

    def _fail_segment(self, exc: BaseException) -> None:
        """An I/O error while writing: roll the active chunk back to the committed end."""
        self.logger.error("Write failed, nothing of the current group is acknowledged: %s", exc)
        pending, self._pending = self._pending, _Pending()
        for fut, _ in pending.answers:
            if not fut.done():
                fut.set_exception(_group_failure(exc))
        self._states.clear()
        self._recent_appends.clear()
        try:
            self._log.active_chunk.rollback(self._log.committed - self._log.active_chunk.start_position)
        except BaseException as inner:
            self._failed = inner
            self.logger.critical("Could not roll back the active chunk; refusing further writes: %s", inner)

    def _drain_after_stop(self) -> None:
        while True:
            try:
                request = self._queue.get_nowait()
            except queue.Empty:
                return
            if request is not _STOP:
                request.future.set_exception(DatabaseClosed())

    # -- writer: stream state ---------------------------------------------------------------------------
    def _state_for_write(self, stream: str) -> StreamState:
        state = self._states.get(stream)
        if state is not None:
            self.state_cache_hits += 1
            self._states.move_to_end(stream)
            return state
        self.state_cache_misses += 1
        state = self.stream_state(stream, all_written=True)
        self._cache_state(state)
        return state

    def _cache_state(self, state: StreamState) -> None:
        self._states[state.stream] = state
        self._states.move_to_end(state.stream)
        while len(self._states) > self.config.stream_cache_capacity:
            self._states.popitem(last=False)

    def _remember_append(self, ids: list[bytes], stream: str, first: int, last_position: int) -> None:
        """Remember a recent append by its first event id (idempotency of any-version appends)."""
        recent = self._recent_appends
        recent[ids[0]] = (stream, first, tuple(ids), last_position)
        capacity = self.config.idempotency_cache_capacity
        if len(recent) > capacity + capacity // 4:
            # dicts keep insertion order: keep the newest ``capacity``
            self._recent_appends = dict(itertools.islice(recent.items(), len(recent) - capacity, None))

    # -- writer: appends --------------------------------------------------------------------------------
    def _find_duplicate(self, request: _Append, state: StreamState) -> AppendResult | None:
        """The original result when ``request`` repeats events already written (idempotency).

        With an exact expected version (or no-stream) the events after that version are compared;
        with any/stream-exists the recent-event-id cache says where the first event went. A batch
        that matches only in part is a wrong expected version, as in KurrentDB.
        """
        events = request.events
        if not events or any(e.event_id is None for e in events):
            return None  # events without ids cannot be recognised as repeats
        ids = [e.event_id.bytes for e in events if e.event_id is not None]
        expected = request.expected_version
        stream = request.stream
        if expected < NO_STREAM:  # any, stream exists: ask the recent-append cache
            seen = self._recent_appends.get(ids[0])
            if seen is None or seen[0] != stream:
                return None
            if seen[2] != tuple(ids):
                raise WrongExpectedVersion(stream, expected, state.last_event_number)
            return AppendResult(seen[1] + len(ids) - 1, seen[3], seen[1], duplicate=True)
        first = expected + 1  # an exact version (or no-stream): compare with what follows it
        if state.last_event_number < first:
            return None
        position = -1
        for i, event_id in enumerate(ids):
            record = self._read_stream_event_raw(stream, first + i)
            if record is None or record.event_id != event_id:
                if i == 0:
                    return None
                raise WrongExpectedVersion(stream, expected, state.last_event_number)
            position = record.log_position
        return AppendResult(first + len(ids) - 1, position, first, duplicate=True)

    def _apply_append(self, request: _Append) -> AppendResult:
        stream = request.stream
        expected = request.expected_version
        state = self._state_for_write(stream)
        if state.tombstoned:
            raise StreamDeleted(stream)
        last = state.last_event_number
        soft_deleted = state.soft_deleted
        visible_last = -1 if soft_deleted else last
        ok = (
            expected == ANY
            or (expected == NO_STREAM and visible_last == -1)
            or (expected == STREAM_EXISTS and visible_last >= 0)
            or (expected >= 0 and expected == last)
        )
        if not ok:
            duplicate = self._find_duplicate(request, state)
            if duplicate is not None:
                return duplicate
            raise WrongExpectedVersion(stream, expected, visible_last)
        if expected in (ANY, STREAM_EXISTS):
            duplicate = self._find_duplicate(request, state)
            if duplicate is not None:
                return duplicate
        events = request.events
        if not events:
            return AppendResult(last, -1, last + 1)
        now = self.clock.ticks()
        first = last + 1
        stream_bytes = stream.encode()
        n = len(events)
        client_ids = all(e.event_id is not None for e in events)
        ids = _event_ids(events)  # the client's ids, fresh ones where it gave none
        base_flags = _DATA | _COMMITTED
        if request.event_types is None:
            request.event_types, request.payload_size = self._check_events(list(events))
        event_types = request.event_types
        size = (_FRAME_FIXED + len(stream_bytes)) * n + request.payload_size
        recreate_meta: bytes | None = None
        meta_stream = metastream_of(stream)
        if soft_deleted:
            # recreating a soft-deleted stream: the same append rewrites $tb to its first new event
            raw = dict(state.metadata.raw)
            raw["$tb"] = first
            recreate_meta = json.dumps(raw, separators=(",", ":")).encode()
            size += rec.event_frame_size(len(meta_stream.encode()), len("$metadata"), len(recreate_meta), 0)
        self._make_room(size)
        start = self._log.end
        block, positions = rec.encode_events(
            position=start,
            first_number=first,
            stream=stream_bytes,
            events=events,
            ids=ids,
            timestamp=now,
            base_flags=base_flags,
            end_flag=0 if soft_deleted else _END,
            event_types=event_types,
        )
        h = stream_hash(stream)
        pending = self._pending
        entries = pending.entries
        numbers = range(first, first + n)
        entries.extend(zip(itertools.repeat(h), numbers, positions))
        if client_ids:
            self._remember_append(ids, stream, first, positions[-1])
        pending.names.add(stream)
        last_position = positions[-1]
        new_state = StreamState(stream, first + n - 1, False, state.metadata, state.metadata_version)
        if recreate_meta is not None:
            meta_state = self._state_for_write(meta_stream)
            meta_number = meta_state.last_event_number + 1
            position = start + len(block)
            meta_block, _ = rec.encode_events(
                position=position,
                first_number=meta_number,
                stream=meta_stream.encode(),
                events=[NewEvent("$metadata", recreate_meta, b"", None, True)],
                ids=random_ids(1),
                timestamp=now,
                base_flags=base_flags,
                end_flag=_END,
                begin_flag=0,  # it continues the append
            )
            block += meta_block
            entries.append((stream_hash(meta_stream), meta_number, position))
            pending.names.add(meta_stream)
            metadata = StreamMetadata.from_bytes(recreate_meta)
            new_state = StreamState(stream, first + n - 1, False, metadata, meta_number)
            self._cache_state(StreamState(meta_stream, meta_number, False, StreamMetadata(max_count=1), -1))
        self._log.write(block)
        self._cache_state(new_state)
        if is_metastream(stream):
            self._metadata_written(stream, events[-1].data, new_state.last_event_number)
        return AppendResult(first + n - 1, last_position, first)

    def _metadata_written(self, metastream: str, data: bytes, number: int) -> None:
        """Keep the cached state of the original stream in step with its new metadata."""
        original = original_stream_of(metastream)
        state = self._states.get(original)
        if state is not None:
            self._cache_state(
                StreamState(
                    original,
                    state.last_event_number,
                    state.tombstoned,
                    StreamMetadata.from_bytes(data),
                    number,
                )
            )

    def _make_room(self, size: int) -> None:
        if size > self.config.chunk_size:
            raise EventTooLarge(
                f"The append needs {size} bytes in the log, more than a chunk holds ({self.config.chunk_size} bytes)."
            )
        if self._log.space_left() < size:
            self._commit_segment()
            self._log.complete_active_chunk()

    def _write_system(self, kind: int, payload: bytes) -> int:
        size = rec.FRAME_OVERHEAD + rec.SYSTEM_HEADER.size + len(payload)
        self._make_room(size)
        position = self._log.end
        self._log.write(
            rec.encode_system(log_position=position, kind=kind, timestamp=self.clock.ticks(), payload=payload)
        )
        return position

    def _apply_delete(self, request: _Delete) -> AppendResult:
        stream = request.stream
        expected = request.expected_version
        state = self._state_for_write(stream)
        if state.tombstoned:
            raise StreamDeleted(stream)
        last = state.last_event_number
        if not request.hard:
            if last < 0 and state.metadata_version < 0:  # never existed (KurrentDB: not even metadata)
                raise StreamNotFound(stream)
            if state.soft_deleted and expected == STREAM_EXISTS:
                raise StreamDeleted(stream)
        visible_last = -1 if state.soft_deleted else last
        ok = (
            expected == ANY
            or (expected == NO_STREAM and visible_last == -1)
            or (expected == STREAM_EXISTS and visible_last >= 0)
            or (expected >= 0 and expected == last)
        )
        if not ok:
            raise WrongExpectedVersion(stream, expected, visible_last)
        if not request.hard:
            raw = dict(state.metadata.raw)
            raw["$tb"] = MAX_EVENT_NUMBER
            event = NewEvent("$metadata", json.dumps(raw, separators=(",", ":")).encode(), is_json=True)
            return self._apply_append(
                _Append(stream=metastream_of(stream), events=[event], expected_version=ANY)
            )
        now = self.clock.ticks()
        size = rec.event_frame_size(len(stream.encode()), len("$streamDeleted"), 0, 0)
        self._make_room(size)
        position = self._log.end
        flags = (
            rec.RecordFlags.DATA
            | rec.RecordFlags.STREAM_DELETE
            | rec.RecordFlags.IS_COMMITTED
            | rec.RecordFlags.TRANSACTION_BEGIN
            | rec.RecordFlags.TRANSACTION_END
        )
        frame = rec.encode_event(
            log_position=position,
            event_number=MAX_EVENT_NUMBER,
            stream=stream,
            event_type="$streamDeleted",
            event_id=uuid.uuid4().bytes,
            timestamp=now,
            flags=flags,
            data=b"",
            metadata=b"",
        )
        self._log.write(frame)
        self._pending.entries.append((stream_hash(stream), MAX_EVENT_NUMBER, position))
        self._pending.names.add(stream)
        self._cache_state(StreamState(stream, last, True, state.metadata, state.metadata_version))
        return AppendResult(last, position, last + 1)

    # -- reading -----------------------------------------------------------------------------------------
    def _stream_records_backward(
        self, stream: str, before: int | None = None, limit: int | None = None
    ) -> Iterator[rec.EventRecord]:
        """This stream's committed records, newest first (tombstone included), collisions filtered;
        none at or past log position ``limit`` when given."""
        seen: set[int] = set()
        for number, position in self._index.iter_backward(stream_hash(stream), before):
            if number in seen or (limit is not None and position >= limit):
                continue
            record = self._log.read_record(position)
            if isinstance(record, rec.EventRecord) and record.stream == stream:
                seen.add(number)
                yield record

    def _stream_records_forward(self, stream: str, start: int) -> Iterator[rec.EventRecord]:
        seen: set[int] = set()
        limit = self._visible_limit()
        for number, position in self._index.iter_forward(stream_hash(stream), start):
            if number in seen or (limit is not None and position >= limit):
                continue
            record = self._log.read_record(position)
            if isinstance(record, rec.EventRecord) and record.stream == stream:
                seen.add(number)
                yield record

    def _observe_read(self, events: list[rec.EventRecord], started: float) -> None:
        """Tell the observer (if any) of a read call's events and its time since ``started``."""
        if events and self.observer is not None:
            self.observer.read(events, self.timer() - started, self._log.end, self.config.chunk_size)

    def _visible_limit(self) -> int | None:
        """The log position reads stop at, or None when they see all that is committed here."""
        return None if self._read_limit is None else self.readable_position

    def _read_stream_event_raw(
        self, stream: str, number: int, limit: int | None = None
    ) -> rec.EventRecord | None:
        for position in self._index.get(stream_hash(stream), number):
            if limit is not None and position >= limit:
                continue
            record = self._log.read_record(position)
            if isinstance(record, rec.EventRecord) and record.stream == stream:
                return record
        return None

    def _last_record(self, stream: str, limit: int | None = None) -> tuple[int, bool]:
        """(last event number or -1, tombstoned) from the index and the log."""
        if self._existence is not None and not self._existence.might_exist(stream):
            return -1, False
        tombstoned = False
        for record in self._stream_records_backward(stream, None, limit):
            if record.event_number == MAX_EVENT_NUMBER:
                tombstoned = True
                continue
            return record.event_number, tombstoned
        return -1, tombstoned

    def stream_state(self, stream: str, *, all_written: bool = False) -> StreamState:
        """The state of a stream as readers see it (last event number, tombstone, metadata); with
        ``all_written``, as the writer sees it (every record durable here, committed by the cluster
        or not)."""
        limit = None if all_written else self._visible_limit()
        last, tombstoned = self._last_record(stream, limit)
        if is_metastream(stream):
            return StreamState(stream, last, tombstoned, StreamMetadata(max_count=1), -1)
        meta_last, _ = self._last_record(metastream_of(stream), limit)
        metadata = StreamMetadata()
        if meta_last >= 0:
            record = self._read_stream_event_raw(metastream_of(stream), meta_last, limit)
            if record is not None:
                metadata = StreamMetadata.from_bytes(record.data)
        return StreamState(stream, last, tombstoned, metadata, meta_last)

    def get_stream_metadata(self, stream: str) -> tuple[StreamMetadata, int]:
        """(metadata, metastream version); raises StreamDeleted for a tombstoned stream."""
        check_stream_name(stream)
        state = self.stream_state(stream)
        if state.tombstoned:
            raise StreamDeleted(stream)
        return state.metadata, state.metadata_version

    def _visible_range(self, stream: str) -> tuple[StreamState, int, int | None]:
        """(state, first visible event number, oldest visible timestamp in ticks or None)."""
        check_stream_name(stream)
        state = self.stream_state(stream)
        if state.tombstoned:
            raise StreamDeleted(stream)
        if is_metastream(stream) and self._last_record(original_stream_of(stream))[1]:
            raise StreamDeleted(stream)
        if state.last_event_number < 0 or state.soft_deleted:
            raise StreamNotFound(stream)
        meta = state.metadata
        first = 0
        if meta.truncate_before is not None:
            first = meta.truncate_before
        if meta.max_count is not None:
            first = max(first, state.last_event_number - meta.max_count + 1)
        oldest = None
        if meta.max_age is not None:
            oldest = self.clock.ticks() - meta.max_age * TICKS_PER_SECOND
        return state, first, oldest

    def read_stream_forward(
        self, stream: str, from_event_number: int = 0, max_count: int = 4096
    ) -> StreamSlice:
        """Events of ``stream`` from ``from_event_number`` on, oldest first, as clients see them:
        deleted, truncated and expired events are left out."""
        started = self.timer()
        _check_count(max_count)
        if from_event_number < 0:
            raise InvalidInput("The event number to read from must be >= 0.")
        state, first, oldest = self._visible_range(stream)
        last = state.last_event_number
        start = max(from_event_number, first)
        events: list[rec.EventRecord] = []
        next_number = last + 1
        for record in self._stream_records_forward(stream, start):
            if record.event_number > last:
                break
            if oldest is not None and record.timestamp < oldest:
                continue
            events.append(record)
            if len(events) >= max_count:
                next_number = record.event_number + 1
                break
        self._observe_read(events, started)
        return StreamSlice(stream, events, from_event_number, next_number, last, next_number > last)

    def read_stream_backward(
        self, stream: str, from_event_number: int | None = None, max_count: int = 4096
    ) -> StreamSlice:
        """Events of ``stream`` from ``from_event_number`` (None: the end) backwards, newest first."""
        started = self.timer()
        _check_count(max_count)
        state, first, oldest = self._visible_range(stream)
        last = state.last_event_number
        start = last if from_event_number is None or from_event_number < 0 else min(from_event_number, last)
        events: list[rec.EventRecord] = []
        next_number = -1
        for record in self._stream_records_backward(stream, start + 1, self._visible_limit()):
            if record.event_number == MAX_EVENT_NUMBER:
                continue
            if record.event_number < first:
                break
            next_number = record.event_number - 1
            if oldest is not None and record.timestamp < oldest:
                continue
            events.append(record)
            if len(events) >= max_count:
                break
        if next_number < first:
            next_number = -1
        is_end = next_number < 0 or len(events) < max_count
        self._observe_read(events, started)
        return StreamSlice(stream, events, start, next_number if not is_end else -1, last, is_end)

    def read_event(self, stream: str, event_number: int) -> rec.EventRecord:
        """One event as clients see it; -1 means the last. Raises StreamNotFound when not visible."""
        started = self.timer()
        state, first, oldest = self._visible_range(stream)
        number = state.last_event_number if event_number == -1 else event_number
        if number < first or number > state.last_event_number:
            raise StreamNotFound(stream)
        record = self._read_stream_event_raw(stream, number, self._visible_limit())
        if record is None or (oldest is not None and record.timestamp < oldest):
            raise StreamNotFound(stream)
        self._observe_read([record], started)
        return record

    def _check_all_position(self, position: int) -> None:
        if position < 0:
            raise InvalidInput("A position in $all must be >= 0.")
        if position >= self.readable_position:
            return
        chunk = self._log.chunk_for(position)
        if chunk is None or chunk.is_scavenged or position == chunk.start_position:
            return
        if position >= chunk.data_end_position and chunk.is_completed:
            return
        if not self._log.is_record_boundary(position):
            raise InvalidInput(f"Position {position} is not the position of an event in $all.")

    def read_all_forward(
        self,
        position: int = 0,
        max_count: int = 4096,
        event_filter: EventFilter | None = None,
        *,
        max_scan: int | None = None,
    ) -> AllSlice:
        """Events of the whole log from ``position`` (included), in log order.

        Deleted and expired events are still here until a scavenge removes them. ``max_scan`` bounds
        how many events are looked at (for filtered reads that report checkpoints).
        """
        started = self.timer()
        _check_count(max_count)
        self._check_all_position(position)
        events: list[rec.EventRecord] = []
        next_position = max(position, 0)
        scanned = 0
        event_record = rec.EventRecord
        done = False
        end = self.readable_position
        while not done:
            if next_position >= end:
                break
            batch, after = self._log.read_forward_batch(next_position, min(1024, max_count - len(events) + 8))
            if batch and batch[-1].log_position >= end:  # a cluster member: stop at the commit position
                batch = [r for r in batch if r.log_position < end]
                after = batch[-1].next_position if batch else end  # past a chunk's tail: the end
                done = True
            if not batch:
                next_position = max(next_position, min(after, end))
                break
            if event_filter is None and max_scan is None and len(batch) <= max_count - len(events):
                # the common case, without a per-record Python loop
                events.extend([r for r in batch if type(r) is event_record])
                next_position = after
                done = len(events) >= max_count
                continue
            for record in batch:
                if type(record) is not event_record:
                    next_position = record.next_position
                    continue
                next_position = record[0] + record[9]  # log_position + size
                scanned += 1
                if event_filter is None or event_filter(record):
                    events.append(record)
                    if len(events) >= max_count:
                        done = True
                        break
                if max_scan is not None and scanned >= max_scan:
                    done = True
                    break
            else:
                next_position = after
        self._observe_read(events, started)
        return AllSlice(events, position, next_position, next_position >= end)

    def read_all_backward(
        self, position: int | None = None, max_count: int = 4096, event_filter: EventFilter | None = None
    ) -> AllSlice:
        """Events before ``position`` (None: the end), newest first."""
        started = self.timer()
        _check_count(max_count)
        end = self.readable_position
        start = end if position is None or position < 0 else min(position, end)
        self._check_all_position(start)
        events: list[rec.EventRecord] = []
        next_position = start
        for record in self._log.iter_backward(start):
            next_position = record.log_position
            if not isinstance(record, rec.EventRecord):
                continue
            if event_filter is None or event_filter(record):
                events.append(record)
                if len(events) >= max_count:
                    break
        else:
            next_position = 0
        self._observe_read(events, started)
        return AllSlice(events, start, next_position, next_position <= 0)

    def iter_all(self, position: int = 0) -> Iterator[rec.EventRecord]:
        """Every committed event from ``position`` on (a long scan, for catch-up and tools)."""
        self._check_all_position(position)
        end = self.readable_position
        for record in self._log.iter_forward(position):
            if record.log_position >= end:
                return
            if isinstance(record, rec.EventRecord):
                yield record


def _event_ids(events: Sequence[NewEvent]) -> list[bytes]:
    missing = sum(e.event_id is None for e in events)
    fresh = iter(random_ids(missing) if missing else ())
    return [e.event_id.bytes if e.event_id is not None else next(fresh) for e in events]


def _check_count(max_count: int) -> None:
    if isinstance(max_count, bool) or not isinstance(max_count, int) or max_count <= 0:
        raise InvalidInput("The number of events to read must be a positive integer.")


def _reset_index(index_dir: str | None, max_memtable_entries: int) -> TableIndex:
    if index_dir is not None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(index_dir, "indexmap"))
    return TableIndex.open(index_dir, max_memtable_entries=max_memtable_entries)


def _remove_existence_filter(index_dir: str) -> None:
    for name in ("streamExistenceFilter.dat", "streamExistenceFilter.chk"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(index_dir, "stream-existence", name))


def _concurrent(answer: _Answer) -> concurrent.futures.Future:
    """The concurrent future of a request made through a sync or ``*_async`` method."""
    assert isinstance(answer, concurrent.futures.Future)
    return answer


def _group_failure(exc: BaseException) -> BaseException:
    """What each append of a failed group is told: the same kind of error as the write that failed (a
    full disk stays a full disk, so HTTP answers 507 to every one of them), each its own instance."""
    if isinstance(exc, OSError) and exc.errno is not None:
        return OSError(exc.errno, exc.strerror or str(exc), exc.filename)
    return EvdbError(f"The write failed: {exc}")
