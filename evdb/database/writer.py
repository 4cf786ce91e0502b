"""The group-commit writer: one thread owns every write.

Callers hand it requests through a queue; it takes all that are waiting as one *group*, checks each
against the streams' current state (:class:`~evdb.database.appends.StreamWrites`), writes their
records, makes them durable with one fsync, indexes them, and only then answers every caller (group
commit). A request that cannot fit in the rest of the active chunk ends the group's current segment:
what is written so far is committed, the chunk is completed, and the group goes on in the next chunk.
An append is therefore atomic: all its records sit in one chunk and become visible together.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import queue
import threading
from collections.abc import Callable
from typing import Any, Protocol

from evdb.clock import Clock
from evdb.database.answers import (
    STOP,
    Append,
    Delete,
    LoopAnswer,
    Request,
    answers_batched,
    concurrent_answer,
    group_failure,
)
from evdb.database.appends import Pending, StreamWrites
from evdb.database.config import DatabaseConfig
from evdb.database.reads import StreamReads
from evdb.database.replication import Call, WriterContext
from evdb.database.visibility import Visibility
from evdb.errors import DatabaseClosed, EvdbError, NotLeader
from evdb.index.existence import StreamExistenceFilter
from evdb.index.table_index import TableIndex
from evdb.storage.log import TransactionLog

__all__ = ["GroupCommitWriter", "WriterHost"]

#: the most requests one group takes from the queue
_GROUP_LIMIT = 1000
#: names the existence filter is given between two of its flushes
_EXISTENCE_FLUSH_NAMES = 100_000


class WriterHost(Protocol):
    """What the writer asks of its database: the cluster's hooks (read at each use: the cluster sets
    them as the node's role changes) and the metrics' observer."""

    write_permit: Callable[[], bool] | None
    before_sync: Callable[[int], None] | None
    replication_gate: Callable[[int, list], None] | None
    observer: Any
    timer: Callable[[], float]


class GroupCommitWriter:
    """The writer thread, its queue and its commit rules (see the module's doc)."""

    def __init__(
        self,
        host: WriterHost,
        *,
        config: DatabaseConfig,
        clock: Clock,
        logger: logging.Logger,
        log: TransactionLog,
        index: TableIndex,
        existence: StreamExistenceFilter | None,
        reads: StreamReads,
        visibility: Visibility,
    ) -> None:
        self._host = host
        self._visibility = visibility
        self.logger = logger
        self.log = log
        self.index = index
        self._existence = existence
        self.streams = StreamWrites(config, clock, log, reads, self)
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # held by whichever thread runs a group of writes
        self._stopped = False
        #: the error that stopped the writer accepting writes (a failed rollback), or None
        self.failed: BaseException | None = None
        self._pending = Pending()
        self._names_since_flush = 0

    @property
    def pending(self) -> Pending:
        return self._pending

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="evdb-writer", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Finish the queued writes and stop the thread (the requests queued after it are refused)."""
        self._stopped = True
        if self._thread is not None:
            self._queue.put(STOP)
            self._thread.join()

    # -- taking requests ---------------------------------------------------------------------------------
    def check_accepting(self) -> None:
        if self.failed is not None:
            raise EvdbError(f"The database stopped accepting writes after an error: {self.failed}")

    def submit(self, request: Request) -> concurrent.futures.Future:
        self.check_accepting()
        self._queue.put(request)
        return concurrent_answer(request.future)

    def submit_on_loop(self, request: Request) -> asyncio.Future[Any]:
        answer = request.future
        assert isinstance(answer, LoopAnswer)
        self.check_accepting()
        self._queue.put(request)
        return answer.future

    def run_here_or_queue(self, request: Request) -> concurrent.futures.Future:
        """Run the request in the calling thread when the writer is idle (no thread hand-offs for a
        lone writer); else queue it for the writer thread, which groups it with the others."""
        self.check_accepting()
        if self._queue.empty() and self._lock.acquire(blocking=False):
            try:
                if not self._stopped:
                    self._process_group([request])
                    return concurrent_answer(request.future)
            finally:
                self._lock.release()
        self._queue.put(request)
        return concurrent_answer(request.future)

    # -- the thread ---------------------------------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            first = self._queue.get()
            with self._lock:
                group = [first]
                while len(group) < _GROUP_LIMIT:
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
        host = self._host
        observer = host.observer
        started = host.timer() if observer is not None else 0.0
        # the writer never waits for an archive download (an append to a stream last written in a
        # chunk in the archive only): that request gets ArchiveUnavailable, try again, the others go on
        with answers_batched(), self.log.without_archive_waits():
            for request in group:
                if request is STOP:
                    stop = True
                    continue
                if self.failed is not None:
                    request.future.set_exception(EvdbError(f"The database failed: {self.failed}"))
                    continue
                self._run(request)
            try:
                self.commit_segment()
            except BaseException as exc:  # an I/O error: nothing of this segment is acknowledged
                self._fail_segment(exc)
        if observer is not None:
            observer.group_processed(host.timer() - started)
        return stop

    def _run(self, request: Request) -> None:
        try:
            if (
                isinstance(request, (Append, Delete))
                and self._host.write_permit is not None
                and not self._host.write_permit()
            ):
                raise NotLeader()
            if isinstance(request, Append):
                result = self.streams.apply_append(request)
            elif isinstance(request, Delete):
                result = self.streams.apply_delete(request)
            elif isinstance(request, Call):
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

    # -- committing ---------------------------------------------------------------------------------------
    def commit_segment(self) -> None:
        """Make the pending records durable, index them, then answer their callers."""
        pending = self._pending
        log = self.log
        if not pending.answers and not pending.entries and log.end == log.committed:
            return
        host = self._host
        # the watches (the users' caches) hear of their streams' records before a reader can see them
        visibility = self._visibility
        told = visibility.tell_changing(pending.names) if pending.names else []
        before_sync = host.before_sync if log.end != log.committed else None
        if before_sync is not None:
            log.write_out()  # in the file before the senders read them to ship
            before_sync(log.end)
        observer = host.observer
        flush_started = host.timer() if observer is not None else 0.0
        committed_before = log.committed
        try:
            log.flush()
        except BaseException:
            if before_sync is not None:
                before_sync(-1)
            visibility.settle_watched(-1, told)  # rolled back: readers never see them
            raise
        committed = log.committed
        if observer is not None:
            observer.flushed(committed - committed_before, flush_started, host.timer())
        try:
            self.index.add(pending.entries, committed)
        finally:
            visibility.settle_watched(committed, told)
        if self._existence is not None:
            for name in pending.names:
                self._existence.add(name)
            self._names_since_flush += len(pending.names)
        log.checkpoints.chaser.write(committed, flush=False)
        self._pending = Pending()
        gate = host.replication_gate
        if gate is not None and pending.answers:
            gate(committed, pending.answers)  # answered once a majority has them
        else:
            for answer, result in pending.answers:
                if not answer.done():
                    answer.set_result(result)
        if self._existence is not None and self._names_since_flush >= _EXISTENCE_FLUSH_NAMES:
            self._existence.flush(committed)
            self._names_since_flush = 0
        visibility.notify_listeners()

    def _fail_segment(self, exc: BaseException) -> None:
        """An I/O error while writing: roll the active chunk back to the committed end."""
        self.logger.error("Write failed, nothing of the current group is acknowledged: %s", exc)
        pending, self._pending = self._pending, Pending()
        for answer, _ in pending.answers:
            if not answer.done():
                answer.set_exception(group_failure(exc))
        self.streams.forget()
        log = self.log
        try:
            log.active_chunk.rollback(log.committed - log.active_chunk.start_position)
        except BaseException as inner:
            self.failed = inner
            self.logger.critical("Could not roll back the active chunk; refusing further writes: %s", inner)

    def _drain_after_stop(self) -> None:
        while True:
            try:
                request = self._queue.get_nowait()
            except queue.Empty:
                return
            if request is not STOP:
                request.future.set_exception(DatabaseClosed())
