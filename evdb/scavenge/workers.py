"""Per-chunk scavenge work in worker processes, so the node's GIL stays free for appends and reads.

A worker opens the chunk file itself (read-only) and either summarises it for accumulation (and
writes its hand-off for execution: evdb/scavenge/handoff.py) or writes its scavenged (or merged) copy
under a temporary name, exactly as the scavenge thread would (execution leaves the fsync to the
scavenge thread, which makes it while the next copy is written; it takes the records from the
chunk's hand-off when this run's accumulation wrote one, else walks the chunk); the node keeps the
scavenge state, the switch-in (rename, delete) and the index.

The processes belong to a :class:`WorkerPool` that outlives a run: the scavenge service owns one,
started at the first run that needs it (each process imports evdb and compiles the record walk,
evdb/scavenge/framescan.py, or loads it from numba's cache) and shut down when the service closes, at
node stop. A stop request reaches running work through a shared event, cleared as each run begins.
A worker that dies breaks the pool: the rest of that run works in the scavenge thread, and the next
run starts fresh processes. A worker whose node has died exits at once, idle or busy: it watches the
read end of a pipe whose only write end the node holds, and the node's death (even by SIGKILL)
closes that end; a copy the worker was writing stays behind under its ``*.tmp`` name, which the log
deletes (naming it) when the database opens again. Used for databases on disk with chunks of at
least :data:`PROCESS_MIN_CHUNK_SIZE` holding at least :data:`PROCESS_MIN_DATA`; smaller chunks
(tests, in-memory or near-empty databases) are worked on in the scavenge thread with the same
functions (and the numpy record walk: the node process never imports numba).
"""

from __future__ import annotations

import concurrent.futures
import concurrent.futures.process
import ctypes
import itertools
import logging
import multiprocessing
import os
import platform
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from evdb.errors import CorruptedFile
from evdb.scavenge import chunkscan
from evdb.scavenge.chunkscan import DecisionTable, RecordTable, discard_mask, load_compiled, record_table
from evdb.scavenge.handoff import CopyTable, HandoffUnusable, read_handoff, write_handoff
from evdb.scavenge.pace import PaceValues
from evdb.storage import disk
from evdb.storage.chunk import Chunk, ChunkBuilder
from evdb.storage.disk import OsDisk

if TYPE_CHECKING:
    from multiprocessing.connection import Connection
    from multiprocessing.synchronize import Event

__all__ = [
    "MAX_WORKERS",
    "PROCESS_MIN_CHUNK_SIZE",
    "ChunkWorkers",
    "Summary",
    "WorkerPool",
    "build_copy",
    "summarise",
]

#: chunks at least this big are read and copied in worker processes (when the database is on disk)
PROCESS_MIN_CHUNK_SIZE = 16 * 1024 * 1024
#: ... and only when they hold at least this much data: starting a worker process (importing numpy)
#: costs more than reading a few MiB in the scavenge thread, so a near-empty database never pays it
PROCESS_MIN_DATA = 8 * 1024 * 1024
#: the most worker processes a pool starts (a run's ``threads`` is at most 4: KurrentDB's clamp)
MAX_WORKERS = 4


@dataclass
class Summary:
    """What accumulation needs from one logical chunk's part of a chunk file."""

    names: list[str]  # the streams of its events, in the order they first appear
    lo: int | None  # timestamp range of its events
    hi: int | None
    #: (is tombstone, stream, physical offset) of its tombstones and metastream events
    special: list[tuple[int, str, int]]


def summarise(
    chunk: Chunk,
    ranges: list[tuple[int, int]],
    should_stop: Callable[[], bool],
    handoff: str | None = None,
) -> tuple[list[Summary], str | None]:
    """One summary per ``[start, end)`` range of log positions of ``chunk``; with ``handoff``, what
    execution needs of the chunk's records is written there too (evdb/scavenge/handoff.py). The
    second value says why that hand-off could not be written (None: written, or not asked for)."""
    table = record_table(chunk, should_stop)
    not_written = None
    if handoff is not None:
        try:
            write_handoff(
                handoff, chunk, offsets=table.offsets, sizes=table.sizes, types=table.types,
                positions=table.positions, numbers=table.numbers, timestamps=table.timestamps,
                run_starts=table.run_starts, run_names=table.run_names,
            )  # fmt: skip
        except (OSError, ValueError) as exc:
            not_written = str(exc)
    names = table.run_names
    meta_runs = np.array([name.startswith("$$") for name in names], dtype=bool)
    events = table.run_of >= 0
    tombstones = (table.flags & 0x08) != 0
    special_all = events & (tombstones | (meta_runs[np.maximum(table.run_of, 0)] if names else False))
    out = []
    for start, end in ranges:
        selected = events & (table.positions >= start) & (table.positions < end)
        if not selected.any():
            out.append(Summary([], None, None, []))
            continue
        stamps = table.timestamps[selected]
        chosen = np.flatnonzero(selected & special_all)
        special = list(
            zip(
                tombstones[chosen].astype(np.int64).tolist(),
                [names[k] for k in table.run_of[chosen].tolist()],
                table.offsets[chosen].tolist(),
                strict=True,
            )
        )
        # the runs it holds, in order (marked in one pass: sorting the run of every event took a
        # tenth of a summary's own time)
        holds = np.zeros(len(names), dtype=bool)
        holds[table.run_of[selected]] = True
        out.append(
            Summary(
                [names[k] for k in np.flatnonzero(holds).tolist()],
                int(stamps.min()),
                int(stamps.max()),
                special,
            )
        )
    return out, not_written


def build_copy(
    chunks: list[Chunk],
    builder: ChunkBuilder,
    decisions: DecisionTable | None,
    should_stop: Callable[[], bool],
    *,
    verify: bool = True,
    sync: bool = True,
    handoffs: list[str | None] | None = None,
    unusable: list[tuple[str, str]] | None = None,
) -> tuple[Chunk, int]:
    """Copy ``chunks`` into ``builder`` without the records ``decisions`` removes (all of them are
    kept without decisions: a merge); returns the finished chunk and how many records went.
    ``verify``: check each chunk's checksum first (off for a chunk this run has checked already);
    ``sync``: fsync the copy (off when the caller fsyncs it, before it is switched in);
    ``handoffs``: per chunk, the hand-off accumulation wrote of it in this run (or None): its records
    are taken from there instead of walking the chunk again (only with ``verify`` off: the walk that
    wrote it checked the checksum); one that does not fit the chunk is noted in ``unusable`` (path,
    reason) and the chunk walked."""
    removed = 0
    try:
        for i, chunk in enumerate(chunks):
            handoff = handoffs[i] if handoffs is not None and decisions is not None and not verify else None
            table: RecordTable | CopyTable | None = None
            if handoff is not None:
                try:
                    table = read_handoff(handoff, chunk)
                except HandoffUnusable as exc:
                    if unusable is not None:
                        unusable.append((exc.path, exc.reason))
            if table is None:
                table = record_table(chunk, should_stop, streams=decisions is not None, verify=verify)
            if decisions is None:
                offsets, sizes, positions = table.offsets, table.sizes, table.positions
            else:
                keep = ~discard_mask(table, decisions)
                removed += len(table) - int(keep.sum())
                offsets, sizes, positions = table.offsets[keep], table.sizes[keep], table.positions[keep]
            del table
            # a window of the chunk at a time, its pages let go once copied (as the walk does)
            done = since = 0
            for a, b in _windows(offsets, chunkscan._WINDOW):
                builder.add_records(chunk.buffer, offsets[a:b], sizes[a:b], positions[a:b], should_stop)
                upto = int(offsets[b - 1])
                chunk.drop_pages(since, upto - since)
                since, done = done, upto
            chunk.drop_pages(since)
        return builder.finish(sync=sync), removed
    except BaseException:
        builder.abort()
        raise


def _windows(offsets: np.ndarray, window: int) -> list[tuple[int, int]]:
    """``[a, b)`` index ranges of ``offsets`` (ascending) that each span about ``window`` bytes."""
    if not len(offsets):
        return []
    cuts = np.searchsorted(offsets, np.arange(int(offsets[0]) + window, int(offsets[-1]) + 1, window))
    bounds = [0, *np.unique(cuts).tolist(), len(offsets)]
    return [(a, b) for a, b in itertools.pairwise(bounds) if b > a]


# -- the worker processes ----------------------------------------------------------------------------
_stop: Event | None = None  # set by _init, the initializer of every worker process
_parent = 0


class _Corrupted(Exception):
    """CorruptedFile, in a form that crosses the process boundary."""


class _WritebackDisk:
    """The worker processes' disk: a copy's writes reach the disk as they are made, in steps, so the
    copy's fsync finds little left to do and the device never holds much of the copy in front of the
    node's appends (an append's ``fdatasync``, a device cache flush, waits for what is in flight).
    How big the steps are and what the writer waits for follows the run's pacing
    (evdb/scavenge/pace.py, ``pace``):

    - paced (a client flushed a moment ago): every ``_STEP`` written, the writer waits until all of
      the copy so far is on the disk (``disk.wait_writeback``), then rests the pacer's rest ratio
      times what that wait took: nothing of the copy stays queued in front of an append;
    - flat out (automatic pacing on and nobody waiting): every ``_FLAT_STEP``, writeback of it starts
      (``disk.start_writeback``) and the writer waits for the step before it;
    - automatic pacing off (``DisableScavengeAutoPacing``, a ``throttlePercent`` below 100): the fixed
      steps of issue 23, ``_STEP`` at a time, waiting for the step before (8 MiB in flight cost an
      append about 2 ms, 1 MiB about 0.5 ms: docs/performance-lab-notes.md).

    Without ``sync_file_range`` (not Linux) a copy ``fdatasync``s every ``_FALLBACK_STEP`` bytes
    instead (every ``_STEP`` when paced). Everything else is the plain OS disk."""

    _STEP = 1 << 20
    _FLAT_STEP = 8 << 20
    _FALLBACK_STEP = 8 << 20
    #: the longest rest after one step (a stop request is seen between steps)
    _MAX_REST = 0.1

    ftruncate = staticmethod(os.ftruncate)
    fallocate = staticmethod(OsDisk.fallocate)
    fdatasync = staticmethod(os.fdatasync)
    rename = staticmethod(os.rename)
    replace = staticmethod(os.replace)
    unlink = staticmethod(os.unlink)
    fsync_dir = staticmethod(OsDisk.fsync_dir)

    def __init__(
        self,
        pace: PaceValues | None = None,
        *,
        now: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        start_writeback: Callable[[int, int, int], bool] | None = None,
        wait_writeback: Callable[[int, int, int], bool] | None = None,
    ) -> None:
        self.pace = pace
        self._now = now
        self._sleep = sleep
        self._start_writeback = start_writeback or disk.start_writeback
        self._wait_writeback = wait_writeback or disk.wait_writeback
        # fd -> (where writeback was last started, where the bytes written so far end)
        self._ranges: dict[int, tuple[int, int]] = {}
        #: seconds in ``pwrite`` itself, waiting for the copy's writeback (or its ``fdatasync``), and
        #: resting (paced): what a copy's time went to besides its CPU (:class:`CopyTimes`)
        self.write_seconds = 0.0
        self.wait_seconds = 0.0
        self.rest_seconds = 0.0

    def open(self, path: str, flags: int, mode: int = 0o644) -> int:
        fd = os.open(path, flags, mode)
        self._ranges.pop(fd, None)  # a number a closed file had before
        return fd

    def pwrite(self, fd: int, data, offset: int) -> int:
        began = time.perf_counter()
        count = os.pwrite(fd, data, offset)
        self.write_seconds += time.perf_counter() - began
        started, end = self._ranges.get(fd, (0, 0))
        end = max(end, offset + count)
        pace = self.pace
        auto = pace is not None and pace.auto
        ratio = pace.paced(self._now()) if pace is not None and auto else None
        if ratio is not None:
            if end - started >= self._STEP:
                started = self._paced_step(fd, end, ratio)
        elif end - started >= (self._FLAT_STEP if auto else self._STEP):
            if pace is not None:
                pace.writing(self._now())
            began = time.perf_counter()
            if self._start_writeback(fd, started, end - started):
                if started:  # every step before this one (all but the last are on the disk already)
                    self._wait_writeback(fd, 0, started)
                started = end
            elif end - started >= self._FALLBACK_STEP:
                os.fdatasync(fd)
                started = end
            self.wait_seconds += time.perf_counter() - began
        self._ranges[fd] = (started, end)
        return count

    def _paced_step(self, fd: int, end: int, ratio: float) -> int:
        """All of the copy written so far onto the disk, then a rest in proportion to that wait."""
        pace = self.pace
        assert pace is not None
        began = self._now()
        pace.writing(began)
        waiting = time.perf_counter()
        if not self._wait_writeback(fd, 0, end):
            os.fdatasync(fd)
        resting = time.perf_counter()
        self.wait_seconds += resting - waiting
        done = self._now()
        rest = min(self._MAX_REST, ratio * (done - began))
        pace.resting(done, rest)
        if rest > 0:
            self._sleep(rest)
            self.rest_seconds += time.perf_counter() - resting
        return end

    def fsync(self, fd: int) -> None:
        self._ranges.pop(fd, None)
        os.fsync(fd)


def _init(stop: Event, parent: int, lifeline, pace=None) -> None:
    global _stop, _parent
    _stop, _parent = stop, parent
    os.nice(4)  # background work: the node's request threads come first when the CPUs are busy
    set_idle_io_priority()
    disk.current = _WritebackDisk(PaceValues(pace) if pace is not None else None)
    threading.Thread(target=_watch_parent, args=(lifeline,), name="evdb-parent-watch", daemon=True).start()
    load_compiled()  # compile the record walk (or load it from numba's cache) before any chunk waits


#: Linux's ioprio_set system call number, by machine; IOPRIO_WHO_PROCESS; IOPRIO_CLASS_IDLE
_IOPRIO_SET = {"x86_64": 251, "aarch64": 30}
_IOPRIO_WHO_PROCESS = 1
_IOPRIO_CLASS_IDLE = 3


def set_idle_io_priority() -> bool:
    """Put this process's I/O in the idle class (Linux ``ioprio_set``): the disk's scheduler serves
    it when no other request waits (``mq-deadline`` and ``bfq`` do; requests waiting longer than the
    scheduler's ``prio_aging_expire``, 10 s by default, are served anyway). False where the call is
    missing or refused (then nothing changed)."""
    number = _IOPRIO_SET.get(platform.machine())
    if not sys.platform.startswith("linux") or number is None:
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return False
    return libc.syscall(number, _IOPRIO_WHO_PROCESS, 0, _IOPRIO_CLASS_IDLE << 13) == 0


def _watch_parent(lifeline) -> None:
    """Exit this worker when the node dies: nothing is ever sent on ``lifeline``, so its read ends
    only when the node's write end closes (the node exits, or is killed)."""
    try:
        lifeline.recv_bytes()
    except (EOFError, OSError):
        pass
    os._exit(0)


def _should_stop() -> bool:
    assert _stop is not None  # called in worker processes only, after _init
    return _stop.is_set() or os.getppid() != _parent


def _ready() -> int:
    return os.getpid()


def _summarise_file(
    path: str, ranges: list[tuple[int, int]], handoff: str | None
) -> tuple[list[Summary], str | None]:
    try:
        return summarise(Chunk.open(path, verify=False), ranges, _should_stop, handoff)
    except CorruptedFile as exc:
        raise _Corrupted(exc.path, exc.reason) from None


@dataclass(frozen=True)
class CopyTimes:
    """Where one copy's time went in its worker process (the node logs it at DEBUG level, naming the
    chunks): ``seconds`` from the start to the finished file; the process's CPU (``user``, ``system``)
    and page faults meanwhile; the checksum's seconds (``hashing``); seconds in ``pwrite``
    (``writing``), waiting for the copy's writeback (``waiting``) and resting for the pacing
    (``resting``)."""

    seconds: float
    user: float
    system: float
    hashing: float
    writing: float
    waiting: float
    resting: float
    minor_faults: int
    major_faults: int

    def describe(self) -> str:
        return (
            f"{self.seconds:.3f} s: CPU {self.user:.3f} s user + {self.system:.3f} s system; "
            f"checksum {self.hashing:.3f} s, writes {self.writing:.3f} s, waiting for the writeback "
            f"{self.waiting:.3f} s, paced rests {self.resting:.3f} s; "
            f"{self.minor_faults} minor and {self.major_faults} major page faults"
        )


def _usage() -> tuple[float, float, int, int]:
    """This process's CPU seconds (user, system) and page faults (minor, major) so far (the faults
    are 0 where there is no getrusage)."""
    try:
        import resource
    except ImportError:
        times = os.times()
        return times.user, times.system, 0, 0
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime, usage.ru_stime, usage.ru_minflt, usage.ru_majflt


def _copy_files(
    paths: list[str],
    builder_args: dict,
    decisions: DecisionTable | None,
    verify: bool,
    sync: bool,
    handoffs: list[str | None] | None,
) -> tuple[str, int, list[tuple[str, str]], CopyTimes | None]:
    unusable: list[tuple[str, str]] = []
    writer = disk.current if isinstance(disk.current, _WritebackDisk) else None
    before = (writer.write_seconds, writer.wait_seconds, writer.rest_seconds) if writer else (0.0, 0.0, 0.0)
    usage, began = _usage(), time.perf_counter()
    try:
        chunks = [Chunk.open(p, verify=False) for p in paths]
        builder = ChunkBuilder(**builder_args)
        new, removed = build_copy(
            chunks, builder, decisions, _should_stop, verify=verify, sync=sync, handoffs=handoffs,
            unusable=unusable,
        )  # fmt: skip
    except CorruptedFile as exc:
        raise _Corrupted(exc.path, exc.reason) from None
    assert new.path is not None  # builder_args name a folder: workers copy on-disk chunks only
    times = None
    if writer is not None:
        now = _usage()
        times = CopyTimes(
            seconds=time.perf_counter() - began,
            user=now[0] - usage[0],
            system=now[1] - usage[1],
            hashing=builder.hash_seconds,
            writing=writer.write_seconds - before[0],
            waiting=writer.wait_seconds - before[1],
            resting=writer.rest_seconds - before[2],
            minor_faults=now[2] - usage[2],
            major_faults=now[3] - usage[3],
        )
    return new.path, removed, unusable, times


def _builder_args(builder: ChunkBuilder) -> dict:
    header = builder.header
    return {
        "directory": builder.directory,
        "chunk_size": header.chunk_size,
        "start_number": header.start_number,
        "end_number": header.end_number,
        "version": header.version,
        "data_end_position": builder.data_end_position,
        "temp_suffix": builder.temp_suffix,
    }


class WorkerPool:
    """Scavenge worker processes that outlive a run: started when the first run needs them (at most
    :data:`MAX_WORKERS`, one more only when every started one is busy), kept for the next runs, and
    shut down by :meth:`close` (the scavenge service's, when the node stops or reopens its database).
    One run uses the pool at a time; :meth:`begin_run` clears the stop flag the last one may have set.
    A pool whose process died is dropped; the next run starts fresh processes."""

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self.logger = logger or logging.getLogger(__name__)
        self._lock = threading.Lock()
        self._executor: concurrent.futures.ProcessPoolExecutor | None = None
        self._shared_stop: Event | None = None
        #: (read end, write end): the workers exit when the write end closes
        self._lifeline: tuple[Connection, Connection] | None = None
        self._closed = False
        self.starts = 0  # how many times worker processes were started afresh (tests, the log)
        #: what a run's pacing shares with the processes (evdb/scavenge/pace.py), kept for the
        #: processes the pool starts again after one died
        self.pace = PaceValues(multiprocessing.get_context("spawn").RawArray("d", PaceValues.SIZE))
        self.pace.begin(auto=False)

    def begin_run(self) -> None:
        with self._lock:
            if self._shared_stop is not None:
                self._shared_stop.clear()

    def submit(self, fn, *args) -> tuple[concurrent.futures.Future, Event]:
        with self._lock:
            if self._closed:
                raise concurrent.futures.process.BrokenProcessPool("the scavenge worker pool was closed")
            if self._executor is None:
                context = multiprocessing.get_context("spawn")  # never fork a node's threads
                self._shared_stop = context.Event()
                self._lifeline = lifeline = context.Pipe(duplex=False)
                self._executor = concurrent.futures.ProcessPoolExecutor(
                    max_workers=MAX_WORKERS,
                    mp_context=context,
                    initializer=_init,
                    initargs=(self._shared_stop, os.getpid(), lifeline[0], self.pace.values),
                )
                self.starts += 1
            assert self._shared_stop is not None  # made with the executor
            return self._executor.submit(fn, *args), self._shared_stop

    def start(self, count: int = 1) -> float:
        """Start ``count`` worker processes now (each imports evdb and compiles the record walk) and
        wait until they answer; returns the seconds it took."""
        started = time.perf_counter()
        futures = [self.submit(_ready)[0] for _ in range(count)]
        for future in futures:
            future.result()
        return time.perf_counter() - started

    def pids(self) -> list[int]:
        """The worker processes running now (tests)."""
        with self._lock:
            executor = self._executor
            processes = dict(getattr(executor, "_processes", None) or {}) if executor is not None else {}
        return sorted(processes)

    def broken(self, exc: BaseException) -> None:
        """A worker process died: drop this set of processes (the next run starts new ones)."""
        with self._lock:
            executor, self._executor = self._executor, None
            lifeline, self._lifeline = self._lifeline, None
            self._shared_stop = None
        if executor is not None:
            self.logger.warning(
                "SCAVENGING: Scavenge worker processes failed (%s); they are started again when needed.", exc
            )
            executor.shutdown(wait=False, cancel_futures=True)
        _close_lifeline(lifeline)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            executor, self._executor = self._executor, None
            lifeline, self._lifeline = self._lifeline, None
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)
        _close_lifeline(lifeline)


def _close_lifeline(lifeline: tuple[Connection, Connection] | None) -> None:
    if lifeline is not None:
        for end in lifeline:
            end.close()


class ChunkWorkers:
    """One run's per-chunk work: in the pool's worker processes when that pays, else in the calling
    thread (with the same functions). Without a ``pool`` the run starts one of its own and shuts it
    down at :meth:`close`."""

    def __init__(
        self,
        threads: int,
        stop: threading.Event,
        logger: logging.Logger | None = None,
        pool: WorkerPool | None = None,
    ) -> None:
        self.threads = max(1, threads)
        self.stop = stop
        self.logger = logger or logging.getLogger(__name__)
        self._own_pool = pool is None
        self.pool = pool if pool is not None else WorkerPool(self.logger)
        self.pool.begin_run()
        self._broken = False

    def wanted(self, chunk: Chunk) -> bool:
        return (
            not self._broken
            and chunk.path is not None
            and chunk.chunk_size >= PROCESS_MIN_CHUNK_SIZE
            and chunk.physical_end >= PROCESS_MIN_DATA
        )

    def _wanted_together(self, chunks: list[Chunk]) -> bool:
        """A copy of several chunks (a merge) goes to a worker when they hold enough data together:
        a merge of a big scavenged chunk with a small one is a big copy."""
        return (
            not self._broken
            and all(c.path is not None and c.chunk_size >= PROCESS_MIN_CHUNK_SIZE for c in chunks)
            and sum(c.physical_end for c in chunks) >= PROCESS_MIN_DATA
        )

    def _broke(self, exc: BaseException) -> None:
        """A worker process died (or could not start: an embedding whose main module cannot be
        imported again): the rest of the run works in the scavenge thread."""
        if not self._broken:
            self._broken = True
            self.logger.warning(
                "SCAVENGING: Scavenge worker processes failed (%s); continuing in the scavenge thread.", exc
            )
            self.pool.broken(exc)

    def _submit(self, fn, *args):
        future, shared_stop = self.pool.submit(fn, *args)
        while True:
            try:
                return future.result(timeout=0.05)
            except concurrent.futures.TimeoutError:
                if self.stop.is_set():
                    shared_stop.set()
            except _Corrupted as exc:
                raise CorruptedFile(*exc.args) from None

    def summarise(
        self, chunk: Chunk, ranges: list[tuple[int, int]], handoff: str | None = None
    ) -> tuple[list[Summary], bool]:
        """The summaries of ``chunk``'s ranges, and whether its hand-off for execution was written
        at ``handoff`` (when given; a warning names the file when it could not be: execution then
        reads the chunk again)."""
        if self.wanted(chunk):
            try:
                summaries, not_written = self._submit(_summarise_file, chunk.path, ranges, handoff)
            except concurrent.futures.process.BrokenProcessPool as exc:
                self._broke(exc)
                summaries, not_written = summarise(chunk, ranges, self.stop.is_set, handoff)
        else:
            summaries, not_written = summarise(chunk, ranges, self.stop.is_set, handoff)
        if not_written is not None:
            self.logger.warning(
                "SCAVENGING: Could not write the hand-off %s of chunk %s (%s); execution reads the chunk again.",
                handoff,
                chunk.path or chunk.file_name,
                not_written,
            )
        return summaries, handoff is not None and not_written is None

    def copy(
        self,
        chunks: list[Chunk],
        builder: ChunkBuilder,
        decisions: DecisionTable | None,
        *,
        verify: bool = True,
        sync: bool = True,
        handoffs: list[str | None] | None = None,
    ) -> tuple[Chunk, int]:
        """The finished copy (under its temporary name; fsynced unless ``sync`` is off) and how many
        records it left out; ``verify`` off skips the checksum of chunks this run checked already;
        ``handoffs``: per chunk, its hand-off from this run's accumulation, or None (see
        :func:`build_copy`; a warning names a hand-off that could not be used)."""
        unusable: list[tuple[str, str]] = []
        try:
            if not self._wanted_together(chunks):
                return build_copy(
                    chunks, builder, decisions, self.stop.is_set, verify=verify, sync=sync,
                    handoffs=handoffs, unusable=unusable,
                )  # fmt: skip
            args = _builder_args(builder)
            builder.abort()  # the worker writes a file of its own
            try:
                path, removed, unusable[:], times = self._submit(
                    _copy_files, [c.path for c in chunks], args, decisions, verify, sync, handoffs
                )
                if times is not None:
                    self.logger.debug(
                        "SCAVENGING: The copy of %s in a worker process took %s.",
                        ", ".join(c.file_name for c in chunks),
                        times.describe(),
                    )
            except concurrent.futures.process.BrokenProcessPool as exc:
                self._broke(exc)
                return build_copy(
                    chunks, ChunkBuilder(**args), decisions, self.stop.is_set, verify=verify, sync=sync,
                    handoffs=handoffs, unusable=unusable,
                )  # fmt: skip
            try:
                return Chunk.open(path, verify=False), removed
            except BaseException:
                os.unlink(path)
                raise
        finally:
            for where, reason in unusable:
                self.logger.warning(
                    "SCAVENGING: The hand-off %s was not used (%s); the chunk was read again.", where, reason
                )

    def close(self) -> None:
        if self._own_pool:
            self.pool.close()
