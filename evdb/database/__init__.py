"""The database: stream semantics on top of the transaction log and the index.

:class:`Database` opens and closes the files and is the one way in for its users (the node, the
cluster, the scavenge, the APIs). Its parts: the group-commit writer (:mod:`evdb.database.writer`),
which owns every write and runs the stream rules of :mod:`evdb.database.appends`; the writes a
function run in the writer may make, replication's among them (:mod:`evdb.database.replication`); the
reads (:mod:`evdb.database.reads`).

Readers run on any thread. They see only committed records (up to the writer checkpoint), and read
the stream state from the index and the log, never from the writer's private caches.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import errno
import fcntl
import json
import logging
import os
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from evdb.clock import Clock, SystemClock
from evdb.database.answers import Answer, Append, Delete, LoopAnswer, Request
from evdb.database.appends import check_events
from evdb.database.config import DEFAULT_CHUNK_SIZE, DatabaseConfig
from evdb.database.opening import open_index, reindex, remember_recent_appends
from evdb.database.reads import EventFilter, StreamReads, read_through
from evdb.database.replication import Call, WriterContext
from evdb.database.visibility import Visibility, VisibilityWatch
from evdb.database.writer import GroupCommitWriter
from evdb.errors import DatabaseClosed, DatabaseLocked, DiskFull, InvalidInput
from evdb.index.existence import StreamExistenceFilter
from evdb.index.table_index import TableIndex
from evdb.storage import records as rec
from evdb.storage.log import TransactionLog
from evdb.streams import (
    ANY,
    AppendResult,
    NewEvent,
    StreamMetadata,
    check_expected_version,
    check_metadata_events,
    check_stream_name,
    is_metastream,
    metastream_of,
)

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "Database",
    "DatabaseConfig",
    "EventFilter",
    "VisibilityWatch",
    "WriterContext",
]

_log = logging.getLogger("evdb.database")

#: a single node writes its replication.chk once per this much log (and at close), not per commit
COMMIT_FILE_STEP = 1 << 20


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
        self._reads: StreamReads
        self._writer: GroupCommitWriter | None = None
        self._closed = False
        #: evdb.metrics.DatabaseObserver: told of each group commit and each client read (None: nobody),
        #: with readings of ``timer`` taken around the work
        self.observer: Any = None
        self.timer: Callable[[], float] = time.perf_counter
        self._visibility = Visibility(lambda: self._log.committed, logger)
        #: cluster hooks (see evdb.cluster): on a follower or replica, client writes go to the leader
        #: through ``remote_writer``; on a leader, answers wait in ``replication_gate`` for a majority
        self.remote_writer: Callable[[Request], concurrent.futures.Future] | None = None
        self.replication_gate: Callable[[int, list], None] | None = None
        #: asked in the writer, under its lock, before each client write: a cluster member writes a
        #: client's records only while it leads under its own epoch (a node taking office must not
        #: write anything before its epoch record: see docs/cluster.md, "The common point")
        self.write_permit: Callable[[], bool] | None = None
        #: called in the writer with the log's end when records are written and about to be synced (a
        #: leader ships them to its followers during its own fdatasync), then with -1 if that sync
        #: fails (they are rolled back: the leader must not go on with what it shipped)
        self.before_sync: Callable[[int], None] | None = None
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
        self._log.archive = cfg.archive  # before the index is rebuilt: it may read archived chunks
        #: epoch records read, by position (only durable ones: a record there never changes while open)
        self._epoch_bodies: dict[int, dict] = {}
        self._index, self._existence = open_index(cfg, self._log, self.logger)
        reindex(self._log, self._index, self._existence, self.logger)
        self._reads = StreamReads(self, self._log, self._index, self._existence)
        self._writer = GroupCommitWriter(
            self,
            config=cfg,
            clock=self.clock,
            logger=self.logger,
            log=self._log,
            index=self._index,
            existence=self._existence,
            reads=self._reads,
            visibility=self._visibility,
        )
        remember_recent_appends(self._log, self._writer.streams, cfg.idempotency_cache_capacity, self.logger)
        self._writer.start()

    @property
    def is_closed(self) -> bool:
        """Whether :meth:`close` was called (a follower's reopen closes the database it cut)."""
        return self._closed

    def close(self) -> None:
        """Finish queued writes, stop the writer, and leave every file consistent."""
        if self._closed:
            return
        self._closed = True
        self._visibility.closed = True
        if self._writer is not None:
            self._writer.stop()
        self._release()

    def _release(self) -> None:
        self._visibility.close()
        with contextlib.suppress(AttributeError):
            self._index.close()
        if self._existence is not None:
            with contextlib.suppress(Exception):
                if self._writer is None or self._writer.failed is None:
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
    def state_cache_hits(self) -> int:
        """Writer lookups of a stream's state that found it cached (kurrentdb_cache_hits_misses_total)."""
        return self._writer.streams.hits if self._writer is not None else 0

    @property
    def state_cache_misses(self) -> int:
        return self._writer.streams.misses if self._writer is not None else 0

    @property
    def stream_cache_entries(self) -> int:
        """Streams whose state the writer keeps (at most ``config.stream_cache_capacity``)."""
        return len(self._writer.streams.states) if self._writer is not None else 0

    @property
    def committed_position(self) -> int:
        """End of the committed log: every record before it is durable and readable."""
        return self._log.committed

    @property
    def readable_position(self) -> int:
        """End of what readers see (subscriptions, ``$all``, stream reads): the committed end, or less
        in a cluster, where only what a majority holds is served (see set_read_limit)."""
        return self._visibility.readable_position

    def visible_limit(self) -> int | None:
        """The log position reads stop at, or None when they see all that is committed here."""
        return self._visibility.visible_limit()

    def set_read_limit(self, position: int) -> None:
        """Serve reads up to ``position`` (the cluster's commit position as this node knows it). It is
        kept in ``replication.chk`` (written, synced lazily: a lower value after a power cut is only
        more careful) so a restarted member serves what it had served, and nothing more."""
        moved = self._visibility.set_read_limit(position)
        self.record_commit_position(position)
        if moved:
            self._visibility.notify_listeners()

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
        if self._visibility.read_limit is None and position - file.value < COMMIT_FILE_STEP:
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

    @property
    def is_in_memory(self) -> bool:
        return self.config.db_dir is None

    # -- listeners ---------------------------------------------------------------------------------------
    def add_visibility_watch(self, watch: VisibilityWatch) -> None:
        """Tell ``watch`` of every committed record of a stream it concerns, whoever wrote it (a client
        here, a leader through replication, a chunk file installed whole): :meth:`VisibilityWatch.changing`
        in the writer thread before readers can see the records, then :meth:`VisibilityWatch.changed` once
        they do (in a cluster, when the read limit passes them: the thread that moves it)."""
        self._visibility.add_watch(watch)

    def add_commit_listener(self, callback: Callable[[int], None]) -> None:
        """Call ``callback(readable_position)`` from the writer thread after each commit."""
        self._visibility.add_listener(callback)

    def remove_commit_listener(self, callback: Callable[[int], None]) -> None:
        self._visibility.remove_listener(callback)

    # -- writing (public) --------------------------------------------------------------------------------
    def _local_writer(self, request: Request) -> GroupCommitWriter | None:
        """The writer that takes ``request`` here, or None when it goes to the leader (a follower's
        appends and deletes, through ``remote_writer``)."""
        if self._closed or self._writer is None:
            raise DatabaseClosed()
        if self.remote_writer is not None and isinstance(request, (Append, Delete)):
            return None
        return self._writer

    def _submit(self, request: Request) -> concurrent.futures.Future:
        writer = self._local_writer(request)
        return self.remote_writer(request) if writer is None else writer.submit(request)  # type: ignore[misc]

    def _submit_on_loop(self, request: Request) -> asyncio.Future[Any]:
        """Queue ``request`` (made with a :class:`LoopAnswer` of the running loop) for the writer,
        answered on that loop. A follower's writes go to its leader through ``remote_writer``, as for
        ``_submit``."""
        answer = request.future
        assert isinstance(answer, LoopAnswer)
        writer = self._local_writer(request)
        if writer is None:
            return asyncio.wrap_future(self.remote_writer(request), loop=answer.loop)  # type: ignore[misc]
        return writer.submit_on_loop(request)

    def _run_here_or_queue(self, request: Request) -> concurrent.futures.Future:
        writer = self._local_writer(request)
        return self.remote_writer(request) if writer is None else writer.run_here_or_queue(request)  # type: ignore[misc]

    def _append_request(
        self, stream: str, events: Sequence[NewEvent], expected_version: int, answer: Answer | None = None
    ) -> Append:
        """Validate an append before it is queued (nothing reaches the writer unchecked). ``answer``:
        where the writer puts the result (a new concurrent future when None)."""
        check_stream_name(stream)
        check_expected_version(expected_version)
        events = list(events)
        types, size = check_events(events, self.config.max_append_size)
        check_metadata_events(stream, events)  # metadata appended to $$stream: the same rules as set
        return Append(
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
        answer = LoopAnswer(loop if loop is not None else asyncio.get_running_loop())
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
        return self._submit(Delete(stream=stream, expected_version=expected_version, hard=hard))

    def delete_stream_on_loop(
        self, stream: str, expected_version: int = ANY, *, hard: bool = False
    ) -> asyncio.Future[AppendResult]:
        """:meth:`delete_stream` for a coroutine, answered as :meth:`append_on_loop` is."""
        check_stream_name(stream)
        check_expected_version(expected_version)
        answer = LoopAnswer(asyncio.get_running_loop())
        return self._submit_on_loop(
            Delete(future=answer, stream=stream, expected_version=expected_version, hard=hard)
        )

    def delete_stream(self, stream: str, expected_version: int = ANY, *, hard: bool = False) -> AppendResult:
        """Soft delete (``$tb`` = max in the metadata) or, with ``hard``, write a tombstone."""
        check_stream_name(stream)
        check_expected_version(expected_version)
        return self._run_here_or_queue(
            Delete(stream=stream, expected_version=expected_version, hard=hard)
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
        return self._run_here_or_queue(Call(fn=fn)).result()

    def call_in_writer_on_loop(self, fn: Callable[[WriterContext], Any]) -> asyncio.Future[Any]:
        """:meth:`call_in_writer` for a coroutine: call it on the event loop and await the future there.
        The writer thread runs ``fn`` and answers with one wake-up of the loop (no thread of the loop's
        pool, no concurrent future in between)."""
        return self._submit_on_loop(Call(future=LoopAnswer(asyncio.get_running_loop()), fn=fn))

    def forget_stream_states(self, *, recent_appends: bool = True) -> None:
        """Drop the writer's cached stream states (after a scavenge rewrote the index under them, or
        when a follower takes office: replicated records do not update them). ``recent_appends=False``
        keeps the event ids of recent appends, which a new leader needs to recognise a client's retry
        of a write the old leader took."""

        def forget(ctx: WriterContext) -> None:
            ctx.forget_stream_states(recent_appends=recent_appends)

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
            ctx.commit()
            ctx.note_epoch(position, epoch_number)
            return position

        return self.call_in_writer(write)

    def epochs(self, max_count: int = 64) -> list[dict]:
        """The newest epochs of this log, newest first: ``{"epochNumber", "epochId", "position", ...}``.

        Each epoch record is read once: gossip asks for the newest on every round and each follower's
        handshake for 64, and old epochs may sit in chunks left to the archive (one download each)."""
        out: list[dict] = []
        position = self._log.checkpoints.epoch.value
        durable = self.committed_position
        while position >= 0 and len(out) < max_count:
            body = self._epoch_bodies.get(position)
            if body is None:
                record = self._log.read_record(position)
                if not isinstance(record, rec.SystemRecord) or record.kind != rec.SystemRecordKind.EPOCH:
                    break
                body = json.loads(record.payload)
                body["position"] = position
                if position < durable:
                    self._epoch_bodies[position] = body
            out.append(dict(body))
            previous = body.get("previousEpochPosition", -1)
            if previous is None or previous >= position:
                break
            position = previous
        return out

    def truncate_on_next_open(self, position: int) -> None:
        """Ask the next open to cut the log at ``position`` (a follower whose tail diverged)."""
        self._log.checkpoints.truncate.write(position)
        self._log.checkpoints.truncate.flush()

    # -- reading: StreamReads' methods (evdb.database.reads), with their parameters and docstrings -----
    stream_state = read_through(StreamReads.stream_state)
    get_stream_metadata = read_through(StreamReads.get_stream_metadata)
    read_stream_forward = read_through(StreamReads.read_stream_forward)
    read_stream_backward = read_through(StreamReads.read_stream_backward)
    read_event = read_through(StreamReads.read_event)
    read_all_forward = read_through(StreamReads.read_all_forward)
    read_all_backward = read_through(StreamReads.read_all_backward)
    iter_all = read_through(StreamReads.iter_all)
