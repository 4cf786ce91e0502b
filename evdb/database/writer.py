"""The group-commit writer: one thread owns every write.

Callers hand it requests through a queue; it takes all that are waiting as one *group*, checks each
against the streams' current state (:class:`~evdb.database.appends.StreamWrites`), writes their
records, makes them durable with one fsync, indexes them, and only then answers every caller (group
commit). A request that cannot fit in the rest of the active chunk ends the group's current segment:
what is written so far is committed, the chunk is completed, and the group goes on in the next chunk.
An append is therefore atomic: all its records sit in one chunk and become visible together.

On disk the writer thread *pipelines* its groups: a group's records are given to the file and shipped
(``before_sync``: a cluster leader's senders) and its fdatasync is left to the sync thread, while the
writer takes, writes and ships the next group. The rules that keep this safe:

- a group *lands* (the committed end moves past it, it is indexed, readers may see it, its callers
  or the replication gate get their answers) only once its own fdatasync has returned, and groups
  land in the order they were written: one sync is in flight at a time, and the writer waits for it
  before it hands the next one over;
- a failed sync fails its group and rolls back every group written after it (the log goes back to
  the committed end; ``before_sync(-1)`` tells the cluster that records it shipped are gone);
- anything that is not an append or a delete (a function run in the writer: replication, epochs,
  chunk completion, maintenance) and the groups a caller runs in its own thread wait for the group
  in flight to land, and commit synchronously, as before pipelining.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
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
from evdb.storage.chunk import Chunk
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


class _Flight:
    """A written (and shipped) group whose fdatasync the sync thread runs."""

    __slots__ = ("chunk", "done", "end", "ended", "error", "pending", "started")

    def __init__(self, pending: Pending, chunk: Chunk, end: int) -> None:
        self.pending = pending
        self.chunk = chunk  # the active chunk: it stays active until the flight has landed
        self.end = end
        self.done = threading.Event()
        self.error: BaseException | None = None
        self.started = self.ended = 0.0


class _FlightFailed(Exception):
    """The group in flight's sync failed; it and every group written after it are rolled back and
    their callers told (raised to stop what the writer was doing on top of them)."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


class _Synced:
    """Put in the writer's queue by the sync thread: ``flight``'s sync returned (the writer lands it)."""

    __slots__ = ("flight",)

    def __init__(self, flight: _Flight) -> None:
        self.flight = flight


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
        #: pipelining (on disk only: in memory a sync costs nothing): the group in flight, the sync
        #: thread and its queue
        self._pipelined = log.directory is not None
        self._flight: _Flight | None = None
        self._syncs: queue.SimpleQueue[_Flight | None] = queue.SimpleQueue()
        self._syncer: threading.Thread | None = None
        #: (before_sync hook, end) of the records last shipped: rolled back, the hook hears -1
        self._shipped: tuple[Callable[[int], None], int] | None = None

    @property
    def pending(self) -> Pending:
        return self._pending

    def start(self) -> None:
        if self._pipelined:
            self._syncer = threading.Thread(target=self._sync_loop, name="evdb-sync", daemon=True)
            self._syncer.start()
        self._thread = threading.Thread(target=self._loop, name="evdb-writer", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Finish the queued writes and stop the threads (the requests queued after it are refused)."""
        self._stopped = True
        if self._thread is not None:
            self._queue.put(STOP)
            self._thread.join()
        if self._syncer is not None:
            self._syncs.put(None)
            self._syncer.join()

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
                    self._process_group([request], pipelined=False)
                    return concurrent_answer(request.future)
            finally:
                self._lock.release()
        self._queue.put(request)
        return concurrent_answer(request.future)

    # -- the threads --------------------------------------------------------------------------------------
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
                if self._process_group(group, pipelined=self._pipelined):
                    break
        self._drain_after_stop()

    def _sync_loop(self) -> None:
        """The sync thread: each flight's fdatasync, then a word to the writer (its queue)."""
        timer = self._host.timer
        while True:
            flight = self._syncs.get()
            if flight is None:
                return
            flight.started = timer()
            try:
                flight.chunk.sync()
            except BaseException as exc:
                flight.error = exc
            flight.ended = timer()
            flight.done.set()
            self._queue.put(_Synced(flight))

    def _process_group(self, group: list, *, pipelined: bool) -> bool:
        """Run a group of requests and commit them (``pipelined``: hand their sync to the sync thread
        and land them later); True when the group holds the stop request. The group's answers awaited
        on an event loop reach it together, with one wake-up."""
        stop = False
        host = self._host
        observer = host.observer
        started = host.timer() if observer is not None else 0.0
        with answers_batched():
            for request in group:
                if request is STOP:
                    stop = True
                    continue
                if type(request) is _Synced:
                    if request.flight is self._flight:
                        try:
                            self._land_flight()
                        except _FlightFailed:
                            pass  # undone with what follows it, its callers told
                        except BaseException as exc:
                            self._fail_segment(exc)
                    continue
                if self.failed is not None:
                    request.future.set_exception(EvdbError(f"The database failed: {self.failed}"))
                    continue
                self._run(request)
            try:
                if pipelined and not stop:
                    self._hand_over()
                else:
                    self.commit_segment()
            except _FlightFailed:
                pass  # this segment is rolled back with the group in flight, its callers told
            except BaseException as exc:  # an I/O error: nothing of this segment is acknowledged
                self._fail_segment(exc)
        if observer is not None:
            observer.group_processed(host.timer() - started)
        return stop

    def _run(self, request: Request) -> None:
        try:
            if isinstance(request, (Append, Delete)):
                if self._host.write_permit is not None and not self._host.write_permit():
                    raise NotLeader()
                result = (
                    self.streams.apply_append(request)
                    if isinstance(request, Append)
                    else self.streams.apply_delete(request)
                )
            elif isinstance(request, Call):
                self._land_flight()  # a function run here sees every earlier write committed
                result = request.fn(WriterContext(self))
            else:  # pragma: no cover - programming error
                raise TypeError(request)
        except _FlightFailed as exc:
            request.future.set_exception(group_failure(exc.error))
            return
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
    def _tell_changing(self, pending: Pending) -> None:
        """Just before the records of ``pending`` land: the watches hear of their streams (the users'
        caches; a leader's SecurityWatch marks the gate call that comes next, so a group's watches are
        told only when it lands, never while an earlier group is still to land)."""
        if pending.names and not pending.told:
            pending.told = self._visibility.tell_changing(pending.names)

    def _announce(self) -> int:
        """The file gets the records written since the last call and a leader's senders ship them
        (before they are durable here). Returns the end they reach."""
        log = self.log
        end = log.end
        shipped = self._shipped[1] if self._shipped is not None else log.committed
        before_sync = self._host.before_sync
        if before_sync is not None and end > max(shipped, log.committed):
            log.write_out()  # in the file before the senders read them to ship
            self._shipped = (before_sync, end)
            before_sync(end)
        return end

    def _hand_over(self) -> None:
        """(pipelined) Ship the group written since the last one, let the group in flight land, and
        hand this one's sync to the sync thread."""
        pending = self._pending
        log = self.log
        flight = self._flight
        if log.end == (flight.end if flight is not None else log.committed):
            # nothing new in the log (answers of duplicates, refusals): they follow the group in flight
            self.commit_segment()
            return
        end = self._announce()
        log.write_out()
        self._land_flight()  # raises when its sync failed: this group is rolled back with it
        self._pending = Pending()
        flight = self._flight = _Flight(pending, log.active_chunk, end)
        self._syncs.put(flight)

    def _take_flight(self) -> _Flight | None:
        """The group in flight once its sync has returned (None when there is none)."""
        flight = self._flight
        if flight is not None:
            flight.done.wait()
            self._flight = None
        return flight

    def _land_flight(self) -> None:
        """Wait for the group in flight (if any) to be durable and land it. When its sync failed, it
        and everything written after it are rolled back (:meth:`_fail_segment`) and _FlightFailed is
        raised."""
        flight = self._take_flight()
        if flight is None:
            return
        if flight.error is not None:
            self._fail_segment(flight.error, failed=flight)
            raise _FlightFailed(flight.error)
        self._land_synced(flight)

    def _land_synced(self, flight: _Flight) -> None:
        pending = flight.pending
        committed_before = self.log.committed
        try:
            self._tell_changing(pending)
            self.log.commit_to(flight.end)  # the writer checkpoint's write can fail
        except BaseException as exc:
            self._refuse(pending, exc)
            raise
        self._land(pending, committed_before, flight.started, flight.ended)

    def commit_segment(self) -> None:
        """Make the pending records durable (after the group in flight, if any), index them, then
        answer their callers."""
        self._land_flight()
        pending = self._pending
        log = self.log
        if not pending.answers and not pending.entries and log.end == log.committed:
            return
        self._tell_changing(pending)
        self._announce()
        host = self._host
        flush_started = host.timer() if host.observer is not None else 0.0
        committed_before = log.committed
        try:
            log.flush()
        except BaseException:
            self._unship()
            told, pending.told = pending.told, []
            self._visibility.settle_watched(-1, told)  # rolled back: readers never see them
            raise
        self._pending = Pending()
        self._land(pending, committed_before, flush_started, host.timer() if host.observer else 0.0)

    def _land(self, pending: Pending, committed_before: int, flush_started: float, flushed: float) -> None:
        """``pending``'s records are durable up to the committed end: index them, let readers see them,
        and answer their callers (or hand the answers to the replication gate)."""
        host = self._host
        committed = self.log.committed
        observer = host.observer
        try:
            if observer is not None:
                observer.flushed(committed - committed_before, flush_started, flushed)
            try:
                self.index.add(pending.entries, committed)
            finally:
                told, pending.told = pending.told, []
                self._visibility.settle_watched(committed, told)
            if self._existence is not None:
                for name in pending.names:
                    self._existence.add(name)
                self._names_since_flush += len(pending.names)
            self.log.checkpoints.chaser.write(committed, flush=False)
        except BaseException as exc:  # durable, but not indexed: its callers cannot count on it
            self._refuse(pending, exc)
            raise
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
        self._visibility.notify_listeners()

    def _refuse(self, pending: Pending, exc: BaseException) -> None:
        """``pending`` will not land: its watches hear that readers never see it, its callers get the
        error (each its own instance of the same kind)."""
        told, pending.told = pending.told, []
        self._visibility.settle_watched(-1, told)
        for answer, _ in pending.answers:
            if not answer.done():
                answer.set_exception(group_failure(exc))

    def _unship(self) -> None:
        """Records shipped past the committed end are being rolled back: tell the hook (-1) once."""
        shipped, self._shipped = self._shipped, None
        if shipped is not None and shipped[1] > self.log.committed:
            shipped[0](-1)

    def _fail_segment(self, exc: BaseException, *, failed: _Flight | None = None) -> None:
        """An I/O error while writing (or ``failed``, the group in flight, could not be synced): roll
        the active chunk back to the committed end; the callers of every group rolled back are told.
        A group in flight whose sync worked lands first."""
        self.logger.error("Write failed, nothing of the current group is acknowledged: %s", exc)
        if failed is None:
            flight = self._take_flight()
            if flight is not None and flight.error is None:
                with contextlib.suppress(BaseException):  # landing failed: its callers are told
                    self._land_synced(flight)
            else:
                failed = flight
        pending, self._pending = self._pending, Pending()
        self._unship()
        self.streams.forget()
        log = self.log
        try:
            log.active_chunk.rollback(log.committed - log.active_chunk.start_position)
        except BaseException as inner:
            self.failed = inner
            self.logger.critical("Could not roll back the active chunk; refusing further writes: %s", inner)
        for group in (failed.pending, pending) if failed is not None else (pending,):
            self._refuse(group, exc)  # told once the log is back at the committed end

    def _drain_after_stop(self) -> None:
        while True:
            try:
                request = self._queue.get_nowait()
            except queue.Empty:
                return
            if request is not STOP and type(request) is not _Synced:
                request.future.set_exception(DatabaseClosed())
