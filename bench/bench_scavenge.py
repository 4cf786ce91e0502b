"""Scavenge throughput against the disk's copy speed, and append latency during a scavenge.

Builds a database of --size-gib (chunk size --chunk-mib) where half the records are removable (half
the streams are tombstoned), then, --runs times and for each of --threads: copies the database folder
with ``cp -r`` (timed: the disk's copy speed for the same files, into the page cache), removes that copy,
copies it again with ``cp -r`` followed by ``sync`` (timed: the durable copy, which is what a scavenge
does with the bytes it keeps) and scavenges that copy (timed, from the start request to the result).
Ratios are taken within each run; the table gives their medians.

Each scavenge runs in a process of its own, as a node would: it opens the database, starts the worker
processes that read and copy chunks (evdb/scavenge/workers.py; a node starts them at its first
scavenge and keeps them) and only then starts the timed scavenge; the open and the worker start-up
are printed on their own. The peak memory of that process and its workers during the scavenge is
sampled every 50 ms: anonymous memory (``RssAnon``, what the scavenge needs) and RSS (which also counts
the pages of mapped chunk files, page cache shared with every reader). Then single appends are timed
on an idle database, while a scavenge runs, and idle again afterwards (a measure of the machine's own
noise); --no-latency skips that part (big databases).

``--near-empty N`` instead starts a real node (``evdb node --insecure``, its own process, on disk) with
a handful of events and times N scavenges over HTTP: from the ``POST /admin/scavenge`` to the moment
``/admin/scavenge/last`` gives that scavenge's result (its ``$scavengeCompleted`` event is written
before), polled every 2 ms.

    .venv/bin/python bench/bench_scavenge.py --size-gib 2 --chunk-mib 256 --runs 3 --threads 1,2,4
    .venv/bin/python bench/bench_scavenge.py --near-empty 20

``--steady on,off`` instead measures a scavenge under a steady append load at half the node's
capacity (this process's rate of single appends one after another, halved; each append's latency
counted from the moment it was due): per run, the scavenge's time with no load on one fresh copy,
then for each mode of automatic pacing, in a fresh process on a fresh copy, the appends' p99 for 5 s
without a scavenge, during it, and 5 s after, and the scavenge's time (issue 38's goals: p99 during
≤ 2× without, the scavenge within 3× its time with no load).

    .venv/bin/python bench/bench_scavenge.py --size-gib 2 --chunk-mib 256 --runs 3 --steady on,off

With ``--stall-probe`` each steady run also says where its time went (StallProbe): each thread's CPU
in each stage of the scavenge, where the appender stood while an append was over 1 ms long, and each
moment a 1 ms sleeper woke over 2 ms late with the thread that held the GIL meanwhile (if any did).
The appends' own times (not counted from when each was due) are given too: an append p99 far above
them means the appender fell behind its rate, not that one append stalled.

``--writeback-probe none,steps-1m,flat-8m,paced,steps-1m+idle,paced+idle`` measures the disk alone:
300-byte appends with ``fdatasync`` every 2 ms while another process writes 768 MiB in each of those
ways (the copy writer's modes, evdb/scavenge/workers.py; ``+idle``: in the idle I/O class).

``--before DIR`` also scavenges, in each run, a fresh ``cp -r; sync`` copy with the ``evdb`` package in
DIR (an earlier version), for before/after figures measured in the same runs; with ``--steady``, each
pacing mode also runs under the load with that package, alternated with this tree's.
"""

from __future__ import annotations

import argparse
import inspect
import json
import logging
import math
import os
import queue
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable

import psutil

from evdb.clock import SystemClock
from evdb.database import Database
from evdb.scavenge.service import ScavengeRequest, ScavengeService
from evdb.streams import NewEvent

STREAMS = 1000


def build(directory: str, size: int, chunk_size: int) -> int:
    db = Database.open(os.path.join(directory, "db"), chunk_size=chunk_size)
    payload = os.urandom(900)
    n = 0
    while db.committed_position < size:
        for kind in ("keep", "drop"):
            stream = f"{kind}-{n % STREAMS}"
            db.append(stream, [NewEvent("E", payload) for _ in range(200)])
        n += 1
    for i in range(STREAMS):
        db.delete_stream(f"drop-{i}", hard=True)
    written = db.committed_position
    db.close()
    return written


def folder_size(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def tree_figures(figure: Callable[[psutil.Process], object]) -> list:
    """``figure`` of this process and each of its live children (a child gone meanwhile: none)."""
    me = psutil.Process()
    out = []
    for p in [me, *me.children(recursive=True)]:
        try:
            out.append(figure(p))
        except psutil.Error:
            pass
    return out


class PeakMemory:
    """The highest RSS of this process plus its children (the worker processes), sampled; and the
    highest anonymous part of it (``RssAnon``: RSS counts the pages of mapped chunk files a process
    has touched, which belong to the page cache and are dropped when the chunk is unmapped)."""

    def __init__(self, every: float = 0.05) -> None:
        self.peak = 0
        self.peak_anon = 0
        self.phase = "start"  # set by the scavenge's stage hook: peaks are also kept per phase
        self.phases: dict[str, list[int]] = {}  # phase -> [peak RSS, peak anonymous]
        self._stop = threading.Event()
        self._every = every
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._pids: list[int] = []
        self._listed = -math.inf  # when the children were last listed

    def sample(self) -> tuple[int, int]:
        """(RSS, anonymous RSS) of this process and its children now, from each one's
        ``/proc/PID/status``; the children are listed again once a second (listing them reads every
        process of the machine: 1.5 ms of this process's CPU, which a sample every 50 ms added to the
        scavenge's CPU figure)."""
        now = time.monotonic()
        if now - self._listed >= 1.0:
            me = psutil.Process()
            self._pids = [me.pid, *(p.pid for p in me.children(recursive=True))]
            self._listed = now
        total = anon = 0
        for pid in self._pids:
            try:
                with open(f"/proc/{pid}/status") as f:
                    for line in f:
                        if line.startswith(("VmRSS:", "RssAnon:")):
                            kib = int(line.split()[1]) * 1024
                            if line.startswith("VmRSS:"):
                                total += kib
                            else:
                                anon += kib
            except OSError:  # (a process gone meanwhile)
                pass
        return total, anon

    @staticmethod
    def cpu() -> float:
        """CPU seconds (user + system) used so far by this process and its live children."""
        return sum(t.user + t.system for t in tree_figures(psutil.Process.cpu_times))

    @staticmethod
    def io() -> tuple[int, int]:
        """Bytes read from and written to the disk so far by this process and its live children."""
        counters = tree_figures(psutil.Process.io_counters)
        return sum(c.read_bytes for c in counters), sum(c.write_bytes for c in counters)

    def _run(self) -> None:
        while not self._stop.is_set():
            total, anon = self.sample()
            self.peak = max(self.peak, total)
            self.peak_anon = max(self.peak_anon, anon)
            peaks = self.phases.setdefault(self.phase, [0, 0])
            peaks[0], peaks[1] = max(peaks[0], total), max(peaks[1], anon)
            self._stop.wait(self._every)

    def __enter__(self) -> PeakMemory:
        self.before = self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def scavenge_here(directory: str, chunk_size: int, threads: int) -> dict:
    """One scavenge of the database in ``directory``, in this process, as a node runs it: the database
    is opened and the worker processes started first (each timed on its own), then the scavenge is
    timed from the start request to its result, and memory sampled while it runs."""
    db_dir = os.path.join(directory, "db")
    started = time.perf_counter()
    db = Database.open(db_dir, chunk_size=chunk_size)
    opened = time.perf_counter() - started
    try:
        from evdb.scavenge.workers import WorkerPool
    except ImportError:  # an evdb from before worker pools (--before): its scavenge starts its workers
        WorkerPool = None  # type: ignore[assignment,misc]
    pool = WorkerPool(logging.getLogger("bench")) if WorkerPool is not None else None
    startup = pool.start(threads) if pool is not None else 0.0
    # (an evdb from before the clock seam, --before, takes no clock)
    clock = {"clock": SystemClock()} if "clock" in inspect.signature(ScavengeService).parameters else {}
    service = ScavengeService(
        db,
        state_path=ScavengeService.state_path_for(os.path.join(db_dir, "index")),
        logger=logging.getLogger("bench"),
        **clock,
        **({"workers": pool} if pool is not None else {}),
    )
    before = folder_size(db_dir)
    with PeakMemory() as memory:
        service.stage_hook = lambda stage: setattr(memory, "phase", stage)
        cpu = memory.cpu()
        started = time.perf_counter()
        service.start(ScavengeRequest(threads=threads))
        service.wait()
        took = time.perf_counter() - started
        cpu = memory.cpu() - cpu
    assert service.last()[1] == "Success", service.last()
    service.close()
    if pool is not None:
        pool.close()
    db.close()
    return {
        "took": took,
        "cpu": cpu,
        "open": opened,
        "startup": startup,
        "before": before,
        "after": folder_size(db_dir),
        "peak_rss": memory.peak,
        "peak_anon": memory.peak_anon,
        "anon_before": memory.before[1],  # the node (database open) and its idle workers, at the start
        "rss_before": memory.before[0],
        "phases": memory.phases,  # stage -> [peak RSS, peak anonymous] of the node and its workers
    }


def scavenge(directory: str, chunk_size: int, threads: int, evdb_from: str | None = None) -> dict:
    """:func:`scavenge_here` in a process of its own (a fresh node), its figures as a dict;
    ``evdb_from``: a folder holding another version of the ``evdb`` package to run instead."""
    env = dict(os.environ, PYTHONPATH=evdb_from) if evdb_from else None
    out = subprocess.run(
        [sys.executable, __file__, "--one", directory, "--chunk-mib", str(chunk_size >> 20),
         "--threads", str(threads)],
        check=True, capture_output=True, text=True, env=env, cwd="/" if evdb_from else None,
    )  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


def latency(directory: str, chunk_size: int) -> dict[str, float]:
    """p50/p99 of single appends: idle, then while a scavenge runs."""
    db = Database.open(os.path.join(directory, "db"), chunk_size=chunk_size)
    service = ScavengeService(
        db,
        clock=SystemClock(),
        state_path=ScavengeService.state_path_for(os.path.join(directory, "db", "index")),
        logger=logging.getLogger("bench"),
    )
    service.workers.start()  # started once per node, before this scavenge

    def sample(count: int | None, until: threading.Event | None) -> list[float]:
        out = []
        while (count is None or len(out) < count) and not (until is not None and until.is_set()):
            t = time.perf_counter()
            db.append("latency", [NewEvent("E", b"x" * 200)])
            out.append(time.perf_counter() - t)
        return out

    idle = sample(3000, None)
    done = threading.Event()
    service.start(ScavengeRequest())
    waiter = threading.Thread(target=lambda: (service.wait(), done.set()))
    waiter.start()
    busy = sample(None, done)
    waiter.join()
    idle_after = sample(3000, None)  # the machine's noise: idle again, after the scavenge
    service.close()
    db.close()

    def pct(xs: list[float], p: float) -> float:
        return sorted(xs)[min(len(xs) - 1, int(len(xs) * p))] * 1000

    return {
        "idle p50 ms": pct(idle, 0.5),
        "idle p99 ms": pct(idle, 0.99),
        "idle after p50 ms": pct(idle_after, 0.5),
        "idle after p99 ms": pct(idle_after, 0.99),
        "scavenging p50 ms": pct(busy, 0.5),
        "scavenging p99 ms": pct(busy, 0.99),
        "scavenging p99.9 ms": pct(busy, 0.999),
        "scavenging max ms": max(busy) * 1000,
        "appends over 10 ms during scavenge": sum(x > 0.010 for x in busy),
        "appends during scavenge": len(busy),
    }


class StallProbe:
    """--stall-probe: a thread that sleeps 1 ms at a time and, when it wakes over ``late`` later than
    asked (the GIL, or a CPU, was not to be had), notes how late, the scavenge's stage, each thread's
    CPU time in that window (the thread that used it held the GIL: a window where no thread of the
    process ran is the machine's, not the process's) and where that thread stands (it has just let the
    GIL go: its innermost frames say what held it). For finding the node process's stalls; never in
    a node."""

    def __init__(self, late: float = 0.002) -> None:
        self.late = late
        self.stage = "none"
        self.stalls: list[dict] = []
        #: CPU ms of each thread (by name) in each stage
        self.stage_cpu: dict[str, dict[str, float]] = {}
        #: bytes the process and its workers read from and wrote to the disk in each stage
        self.stage_io: dict[str, list[int]] = {}
        #: (kind, start, end) of the node's disk steps the probe watches (see watch_disk_steps)
        self.steps: list[tuple[str, float, float]] = []
        #: (start, seconds) of each append whose own time was over 10 ms
        self.slow_own: list[tuple[float, float]] = []
        #: when the append under way began (set by the appender; None: none is)
        self.appending: float | None = None
        #: ms that appends over 1 ms long spent at each (stage, innermost frames of the appender)
        self.append_wait: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stall-probe", daemon=True)

    @staticmethod
    def _cpu(threads: dict[int, tuple[str, int]]) -> dict[int, float]:
        out = {}
        for ident, (_, clock) in threads.items():
            try:
                out[ident] = time.clock_gettime(clock)
            except OSError:  # the thread has ended
                pass
        return out

    def _run(self) -> None:
        me = threading.get_ident()
        threads: dict[int, tuple[str, int]] = {}
        count = -1
        io_stage, io_at, stage_began = self.stage, PeakMemory.io(), time.perf_counter()
        while not self._stop.is_set():
            if self.stage != io_stage or self._stop.is_set():
                now = PeakMemory.io()
                self.stage_io[io_stage] = [now[0] - io_at[0], now[1] - io_at[1]]
                self.steps.append((f"stage {io_stage}", stage_began, time.perf_counter()))
                io_stage, io_at, stage_began = self.stage, now, time.perf_counter()
            if threading.active_count() != count:
                count = threading.active_count()
                threads = {}
                for t in threading.enumerate():
                    if t.ident is not None and t.ident != me:
                        try:
                            threads[t.ident] = (t.name, time.pthread_getcpuclockid(t.ident))
                        except OSError:
                            pass
            cpu_before = self._cpu(threads)
            stage = self.stage
            asked = time.perf_counter()
            time.sleep(0.001)
            late = time.perf_counter() - asked - 0.001
            used = {i: c - cpu_before.get(i, c) for i, c in self._cpu(threads).items()}
            began = self.appending
            if began is not None and time.perf_counter() - began > 0.001:
                frame = sys._current_frames().get(threading.main_thread().ident)
                inner = []
                while frame is not None and len(inner) < 3:
                    inner.append(
                        f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno} {frame.f_code.co_name}"
                    )
                    frame = frame.f_back
                key = f"{stage} | {' < '.join(inner)}"
                self.append_wait[key] = self.append_wait.get(key, 0.0) + (late + 0.001) * 1000
            totals = self.stage_cpu.setdefault(stage, {})
            for i, c in used.items():
                totals[threads[i][0]] = totals.get(threads[i][0], 0.0) + c * 1000
            if late <= self.late:
                continue
            frames = sys._current_frames()
            holder = max(used, key=lambda i: used[i], default=None)
            stack: list[str] = []
            frame = frames.get(holder) if holder is not None else None
            while frame is not None and len(stack) < 8:
                code = frame.f_code
                stack.append(f"{os.path.basename(code.co_filename)}:{frame.f_lineno} {code.co_name}")
                frame = frame.f_back
            self.stalls.append(
                {
                    "ms": round(late * 1000, 1),
                    "stage": stage,
                    "at": time.strftime("%H:%M:%S", time.localtime()),
                    "process cpu ms": round(sum(used.values()) * 1000, 1),
                    "holder": threads[holder][0] if holder is not None else None,
                    "holder cpu ms": round(used[holder] * 1000, 1) if holder is not None else 0,
                    "where": stack,
                }
            )

    def watch_disk_steps(self) -> None:
        """Time the node's own disk steps of a scavenge (its copies' fsync, the switch of a copy into
        the log: rename and folder fsyncs, the freeing of a replaced file's blocks), to set the slow
        appends beside them. Wraps them in this process (a bench child) for its lifetime."""
        from evdb.scavenge import executor
        from evdb.storage import disk
        from evdb.storage.log import TransactionLog

        def timed(kind: str, fn: Callable) -> Callable:
            def run(*args, **kwargs):
                started = time.perf_counter()
                try:
                    return fn(*args, **kwargs)
                finally:
                    self.steps.append((kind, started, time.perf_counter()))

            return run

        executor._sync = timed("copy fsync", executor._sync)  # type: ignore[attr-defined]
        TransactionLog.switch_chunk = timed("switch into the log", TransactionLog.switch_chunk)  # type: ignore[method-assign]
        disk.Reclaimer.shrink = timed("freeing a replaced file", disk.Reclaimer.shrink)  # type: ignore[method-assign]

    def beside_steps(self) -> list[dict]:
        """Per kind of disk step: the share of the appends over 10 ms that overlapped one, against
        the share of the time from the first slow append to the last that those steps covered (what
        chance alone would give)."""
        if not self.slow_own:
            return []
        first = min(start for start, _ in self.slow_own)
        last = max(start + took for start, took in self.slow_own)
        span = max(1e-9, last - first)
        out = []
        for kind in sorted({k for k, _, _ in self.steps}):
            steps = [(a, b) for k, a, b in self.steps if k == kind]
            hit = sum(any(a < start + took and start < b for a, b in steps) for start, took in self.slow_own)
            covered = sum(max(0.0, min(b, last) - max(a, first)) for a, b in steps)
            out.append(
                {
                    "appends over 10 ms beside": kind,
                    "steps": len(steps),
                    "step ms (max)": round(max(b - a for a, b in steps) * 1000, 1),
                    "share of those appends": round(hit / len(self.slow_own), 3),
                    "share of the time": round(covered / span, 3),
                }
            )
        return out

    def __enter__(self) -> StallProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.steps.append(
            (f"stage {self.stage}", max((b for _, _, b in self.steps), default=0.0), time.perf_counter())
        )

    def summary(self) -> list[dict]:
        """The CPU each thread used in each stage; where the appender stood while an append was over
        1 ms long; every stall's milliseconds summed by stage, the thread that used the CPU meanwhile
        (none: under half the window) and its innermost frames; then each stall over 20 ms."""
        by: dict[str, list[float]] = {}
        for stall in self.stalls:
            ran = stall["holder cpu ms"] >= stall["ms"] / 2
            where = " < ".join(stall["where"][:3]) if ran else ""
            key = f"{stall['stage']} | {stall['holder'] if ran else '(no thread ran)'} | {where}"
            by.setdefault(key, []).append(stall["ms"])
        cpu = [
            {
                "stage": stage,
                "cpu ms": {n: round(ms, 1) for n, ms in sorted(t.items()) if ms >= 1},
                "disk MiB read, written": [round(b / 2**20, 1) for b in self.stage_io.get(stage, [])],
            }
            for stage, t in self.stage_cpu.items()
        ]
        waits = sorted(self.append_wait.items(), key=lambda kv: -kv[1])[:15]
        top = sorted(by.items(), key=lambda kv: -sum(kv[1]))[:20]
        slowest = sorted(self.slow_own, key=lambda a: -a[1])[:15]
        return (
            cpu
            + [{"appends over 10 ms": len(self.slow_own)}]
            + self.beside_steps()
            + [
                {
                    "slow append ms": round(took * 1000, 1),
                    # the steps it overlapped, each with when it began relative to the append (ms)
                    "beside": [
                        f"{kind} ({(a - start) * 1000:+.0f} ms)"
                        for kind, a, b in self.steps
                        if a < start + took and start < b
                    ],
                }
                for start, took in slowest
            ]
            + [{"slow appends at": k, "ms": round(v, 1)} for k, v in waits]
            + [
                {"stage | holder | where": k, "stalls": len(v), "ms": round(sum(v), 1), "max": max(v)}
                for k, v in top
            ]
            + [s for s in self.stalls if s["ms"] > 20]
        )


def steady(
    directory: str, chunk_size: int, auto_pacing: bool, seconds: float = 5.0, probe: bool = False
) -> dict[str, object]:
    """Appends at a steady rate of half the node's capacity (this process's single-append rate,
    measured first): their latency without a scavenge for ``seconds``, then while a scavenge runs
    (timed), then without one again. Each append's latency is counted from the moment it was due
    (an append that waits behind a slow one is as slow as the client sees it)."""
    db = Database.open(os.path.join(directory, "db"), chunk_size=chunk_size)
    service = ScavengeService(
        db,
        clock=SystemClock(),
        state_path=ScavengeService.state_path_for(os.path.join(directory, "db", "index")),
        logger=logging.getLogger("bench"),
        **({} if auto_pacing else {"auto_pacing": False}),
    )
    service.workers.start()
    payload = [NewEvent("E", b"x" * 200)]
    count, started = 0, time.perf_counter()
    while time.perf_counter() - started < 2.0:  # capacity: appends one after another
        db.append("steady", payload)
        count += 1
    capacity = count / (time.perf_counter() - started)
    every = 2.0 / capacity

    # (wall-clock time due, ms[, the scavenge's stage with --stall-probe]) of appends over 50 ms
    slow: list[tuple] = []
    stalls = StallProbe() if probe else None
    if stalls is not None:
        stalls.watch_disk_steps()

    service_times: list[list[float]] = []  # each load's appends' own times (not counted from due)

    def load(until: Callable[[], bool]) -> list[float]:
        out = []
        own: list[float] = []
        service_times.append(own)
        due = time.perf_counter()
        while not until():
            now = time.perf_counter()
            if now < due:
                time.sleep(due - now)
            began = time.perf_counter()
            if stalls is not None:
                stalls.appending = began
            db.append("steady", payload)
            if stalls is not None:
                stalls.appending = None
            own.append(time.perf_counter() - began)
            if stalls is not None and own[-1] > 0.010 and stalls.stage != "none":
                stalls.slow_own.append((began, own[-1]))
            took = time.perf_counter() - due
            out.append(took)
            if took > 0.05:
                slow.append(
                    (
                        time.strftime("%H:%M:%S", time.localtime(time.time() - took)),
                        took * 1000,
                        *((stalls.stage,) if stalls is not None else ()),
                    )
                )
            due += every
        return out

    def for_seconds(length: float) -> Callable[[], bool]:
        end = time.perf_counter() + length
        return lambda: time.perf_counter() >= end

    before = load(for_seconds(seconds))
    done = threading.Event()
    if stalls is not None:
        service.stage_hook = lambda stage: setattr(stalls, "stage", stage)
        stalls.__enter__()
    began = time.perf_counter()
    service.start(ScavengeRequest())
    took = [0.0]
    waiter = threading.Thread(
        target=lambda: (service.wait(), took.__setitem__(0, time.perf_counter() - began), done.set())
    )
    waiter.start()
    during = load(done.is_set)
    waiter.join()
    if stalls is not None:
        stalls.__exit__()
        stalls.stage = "none"  # (the appends after the scavenge are not its)
    assert service.last()[1] == "Success", service.last()
    after = load(for_seconds(seconds))
    service.close()
    db.close()

    def pct(xs: list[float], p: float) -> float:
        return sorted(xs)[min(len(xs) - 1, int(len(xs) * p))] * 1000

    return {
        "capacity": capacity,
        "rate": 1 / every,
        "took": took[0],
        "before p50 ms": pct(before, 0.5),
        "before p99 ms": pct(before, 0.99),
        "during p50 ms": pct(during, 0.5),
        "during p99 ms": pct(during, 0.99),
        "during p99.9 ms": pct(during, 0.999),
        "during max ms": max(during) * 1000,
        "after p99 ms": pct(after, 0.99),
        "appends during": len(during),
        "slow": slow,
        # each append's own time, without the wait for those before it: a p99 of it far below the
        # p99 counted from due means the appender fell behind (its appends slower than their rate)
        "own p50 ms before/during/after": [pct(xs, 0.5) for xs in service_times],
        "own p99 ms before/during/after": [pct(xs, 0.99) for xs in service_times],
        "own mean ms before/during/after": [1000 * sum(xs) / max(1, len(xs)) for xs in service_times],
        **({"stalls": stalls.summary()} if stalls is not None else {}),
    }


def run_steady(
    source: str,
    base: str,
    chunk_size: int,
    runs: int,
    modes: list[bool],
    probe: bool = False,
    evdb_before: str | None = None,
) -> None:
    """--steady: per run, a scavenge with no load (its idle time) and, for each pacing mode, one under
    a steady append load at half capacity, each on a fresh ``cp -r; sync`` copy in a fresh process;
    with ``evdb_before`` (--before), each mode also with the evdb package in that folder, alternated."""
    copy = os.path.join(base, "steady")
    trees: list[str | None] = [None] + ([evdb_before] if evdb_before else [])
    rows: dict[tuple[bool, str | None], list[tuple[float, dict]]] = {
        (mode, tree): [] for mode in modes for tree in trees
    }
    for run in range(runs):
        subprocess.run(["cp", "-r", source, copy], check=True)
        subprocess.run(["sync"], check=True)
        idle = scavenge(copy, chunk_size, 1)["took"]
        shutil.rmtree(copy)
        print(f"run {run + 1}: scavenge with no load {idle:.2f} s, load {os.getloadavg()[0]:.1f}", flush=True)
        for mode, tree in rows:
            subprocess.run(["cp", "-r", source, copy], check=True)
            subprocess.run(["sync"], check=True)
            out = subprocess.run(
                [sys.executable, __file__, "--steady-one", copy, "--chunk-mib", str(chunk_size >> 20)]
                + ([] if mode else ["--no-auto-pacing"])
                + (["--stall-probe"] if probe else []),
                check=True, capture_output=True, text=True,
                env=dict(os.environ, PYTHONPATH=tree) if tree else None, cwd="/" if tree else None,
            )  # fmt: skip
            got = json.loads(out.stdout.strip().splitlines()[-1])
            shutil.rmtree(copy)
            rows[mode, tree].append((idle, got))
            own = got.get("own p99 ms before/during/after", [0.0, 0.0, 0.0])
            print(
                f"run {run + 1}, automatic pacing {'on' if mode else 'off'}"
                f"{f', the evdb in {tree}' if tree else ''}: {got['rate']:.0f} appends/s "
                f"(capacity {got['capacity']:.0f}/s); p99 {got['before p99 ms']:.2f} ms without a scavenge, "
                f"{got['during p99 ms']:.2f} ms during it ({got['during p99 ms'] / got['before p99 ms']:.2f}×; "
                f"p50 {got['during p50 ms']:.2f} ms, p99.9 {got['during p99.9 ms']:.2f} ms, max "
                f"{got['during max ms']:.1f} ms, {got['appends during']} appends), {got['after p99 ms']:.2f} ms "
                f"after; each append's own time (not from due) p99 {own[0]:.2f} ms without, {own[1]:.2f} ms "
                f"during; scavenge {got['took']:.2f} s ({got['took'] / idle:.2f}× its time with no load), "
                f"load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
            for stall in got.get("stalls", []):
                print("  stall:", json.dumps(stall), flush=True)
    med = statistics.median
    print()
    print(
        "| automatic pacing | evdb | appends/s | p99 without a scavenge | p99 during | × (goal 2) | scavenge "
        "| × with no load (goal 3) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for (mode, tree), got in rows.items():
        print(
            f"| {'on' if mode else 'off'} | {tree or 'this tree'} | {med(g['rate'] for _, g in got):.0f} | "
            f"{med(g['before p99 ms'] for _, g in got):.2f} ms | {med(g['during p99 ms'] for _, g in got):.2f} ms | "
            f"{med(g['during p99 ms'] / g['before p99 ms'] for _, g in got):.2f} | "
            f"{med(g['took'] for _, g in got):.2f} s | {med(g['took'] / i for i, g in got):.2f} |"
        )


def _probe_writer(directory: str, variant: str, out) -> None:
    """--writeback-probe's copy writer: 768 MiB in six files of 128 MiB, written 1 MiB at a time the
    way ``variant`` says (see writeback_probe), each file fsynced; puts its time on ``out``."""
    from evdb.scavenge.workers import set_idle_io_priority
    from evdb.storage import disk

    if variant.endswith("+idle"):
        set_idle_io_priority()
    step = 8 << 20 if variant.startswith("flat") else 1 << 20
    piece = os.urandom(1 << 20)
    started = time.perf_counter()
    for n in range(6):
        path = os.path.join(directory, f"copy-{n}")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        since = end = 0
        while end < 128 << 20:
            os.pwrite(fd, piece, end)
            end += len(piece)
            if end - since < step:
                continue
            if variant.startswith("paced"):  # all of it on the disk, then a rest of a quarter of the wait
                began = time.perf_counter()
                disk.wait_writeback(fd, 0, end)
                time.sleep(0.25 * (time.perf_counter() - began))
            else:  # steps-1m, flat-8m: start this step, wait for the ones before
                disk.start_writeback(fd, since, end - since)
                if since:
                    disk.wait_writeback(fd, 0, since)
            since = end
        os.fsync(fd)
        os.close(fd)
        os.unlink(path)
    out.put(time.perf_counter() - started)


def _probe_appender(directory: str, stop, out) -> None:
    """A 300-byte pwrite + fdatasync every 2 ms (an append's disk work); puts the latencies on ``out``."""
    fd = os.open(os.path.join(directory, "log"), os.O_WRONLY | os.O_CREAT, 0o644)
    taken: list[float] = []
    offset, due = 0, time.perf_counter()
    while not stop.is_set():
        now = time.perf_counter()
        if now < due:
            time.sleep(due - now)
        due += 0.002
        began = time.perf_counter()
        os.pwrite(fd, b"x" * 300, offset)
        os.fdatasync(fd)
        taken.append(time.perf_counter() - began)
        offset += 300
    os.close(fd)
    out.put(taken)


def writeback_probe(base: str, variants: list[str], rounds: int) -> None:
    """--writeback-probe: the disk alone, without evdb's scavenge. One process writes a copy (or
    nothing: ``none``) while another times 300-byte appends with fdatasync, every 2 ms; variants:
    ``steps-1m`` (each MiB started, the one before waited for: automatic pacing off), ``flat-8m``
    (the same in 8 MiB steps: pacing on, nobody writing), ``paced`` (each MiB waited for, then a rest
    of a quarter of that wait: pacing on, clients writing, the least rest); ``+idle``: the writer in
    the idle I/O class. Alternated, ``rounds`` times."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    results: dict[str, list[tuple[float, float]]] = {v: [] for v in variants}
    for round_number in range(rounds):
        for variant in variants:
            stop, times, took = context.Event(), context.Queue(), context.Queue()
            appender = context.Process(target=_probe_appender, args=(base, stop, times))
            appender.start()
            time.sleep(0.5)
            if variant == "none":
                time.sleep(2.0)
                seconds = 0.0
            else:
                writer = context.Process(target=_probe_writer, args=(base, variant, took))
                writer.start()
                seconds = took.get()
                writer.join()
            stop.set()
            taken = times.get()[100:]  # (the appender's first appends: before the writer starts)
            appender.join()
            ordered = sorted(taken)
            p50, p99 = (ordered[min(len(ordered) - 1, int(len(ordered) * q))] * 1000 for q in (0.5, 0.99))
            results[variant].append((p99, seconds))
            print(
                f"round {round_number + 1}, {variant}: append p50 {p50:.2f} ms, p99 {p99:.2f} ms "
                f"({len(taken)} appends); writer {seconds:.2f} s; load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
    print("\n| writer | append p99 (median) | writer, 768 MiB (median) |\n|---|---|---|")
    for variant, rows in results.items():
        print(
            f"| {variant} | {statistics.median(r[0] for r in rows):.2f} ms | "
            f"{statistics.median(r[1] for r in rows):.2f} s |"
        )


def latency_in_child(directory: str, chunk_size: int, evdb_from: str | None = None) -> dict[str, float]:
    """:func:`latency` in a process of its own (``evdb_from``: another version of ``evdb``)."""
    env = dict(os.environ, PYTHONPATH=evdb_from) if evdb_from else None
    out = subprocess.run(
        [sys.executable, __file__, "--latency-one", directory, "--chunk-mib", str(chunk_size >> 20)],
        check=True, capture_output=True, text=True, env=env, cwd="/" if evdb_from else None,
    )  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


def read_all(folder: str) -> None:
    """Read every file of ``folder`` (into the page cache), so that each timed copy starts alike."""
    for d, _, files in os.walk(folder):
        for name in files:
            with open(os.path.join(d, name), "rb") as f:
                while f.read(1 << 24):
                    pass


def timed_copy(source: str, target: str, sync: bool) -> float:
    read_all(source)
    started = time.perf_counter()
    subprocess.run(["cp", "-r", source, target], check=True)
    if sync:
        subprocess.run(["sync"], check=True)
    return time.perf_counter() - started


def near_empty(times: int) -> None:
    """Scavenges of a near-empty database on a real node, over HTTP (start to result)."""
    import httpx

    base = tempfile.mkdtemp(prefix="bench-scavenge-empty-")
    lines: queue.Queue[str] = queue.Queue()
    node = subprocess.Popen(
        [sys.executable, "-m", "evdb.cli", "node", "--insecure", "--db", os.path.join(base, "db"),
         "--log", os.path.join(base, "log"), "--http-port", "0", "--stats-period-sec", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    threading.Thread(target=lambda: [lines.put(line) for line in node.stdout or []], daemon=True).start()
    try:
        deadline = time.monotonic() + 60
        while True:
            line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            if "Node is ready: " in line:
                url = line.split("Node is ready: ", 1)[1].strip()
                break
        client = httpx.Client(base_url=url, auth=("admin", "changeit"), timeout=30)
        json_headers = {"Accept": "application/json"}
        events = [
            {"eventId": f"00000000-0000-0000-0000-{i:012d}", "eventType": "E", "data": {"i": i}}
            for i in range(5)
        ]
        client.post(
            "/streams/few", json=events, headers={"Content-Type": "application/vnd.kurrent.events+json"}
        )
        took = []
        for _ in range(times):
            started = time.perf_counter()
            answer = client.post("/admin/scavenge", headers=json_headers)
            assert answer.status_code == 200, answer.text
            scavenge_id = answer.json()["scavengeId"]
            while True:
                last = client.get("/admin/scavenge/last", headers=json_headers).json()
                if last["scavengeId"] == scavenge_id and last["scavengeResult"] != "InProgress":
                    break
                time.sleep(0.002)
            took.append(time.perf_counter() - started)
            assert last["scavengeResult"] == "Success", last
        client.close()
        print(
            f"near-empty database, {times} scavenges over HTTP (POST to result): median "
            f"{statistics.median(took):.3f} s, min {min(took):.3f} s, max {max(took):.3f} s"
        )
    finally:
        node.terminate()
        node.wait(60)
        shutil.rmtree(base, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size-gib", type=float, default=2.0)
    parser.add_argument("--chunk-mib", type=int, default=256)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--threads", default="1", help="thread counts to measure in each run, e.g. 1,2,4")
    parser.add_argument("--dir", default=None)
    parser.add_argument("--no-latency", action="store_true")
    parser.add_argument("--near-empty", type=int, default=0, metavar="N")
    parser.add_argument(
        "--before",
        default=None,
        metavar="DIR",
        help="also scavenge, in the same runs, with the evdb package found in DIR (e.g. HEAD's, from "
        "`git archive HEAD evdb | tar -x -C DIR`)",
    )
    parser.add_argument(
        "--latency-runs",
        type=int,
        default=1,
        help="append latency measurements (each alternated with --before's)",
    )
    parser.add_argument(
        "--steady",
        default="",
        metavar="MODES",
        help="instead of the copy and latency figures: a steady append load at half capacity during a "
        "scavenge, with automatic pacing 'on', 'off' or 'on,off' (alternated in each run)",
    )
    parser.add_argument(
        "--writeback-probe",
        default="",
        metavar="VARIANTS",
        help="instead: the disk alone, appends timed while a writer writes a copy in each way named "
        "(none, steps-1m, flat-8m, paced, each also with +idle), alternated --runs times",
    )
    parser.add_argument(
        "--stall-probe",
        action="store_true",
        help="with --steady: note each moment the steady process's 1 ms sleeper woke over 5 ms late, "
        "with the scavenge's stage and its threads' frames then (printed: totals by stage and frame, and "
        "every stall over 20 ms)",
    )
    parser.add_argument("--steady-one", default=None, help=argparse.SUPPRESS)  # steady, in a child
    parser.add_argument("--no-auto-pacing", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)  # scavenge_here, in a child
    parser.add_argument("--latency-one", default=None, help=argparse.SUPPRESS)  # latency, in a child
    args = parser.parse_args()
    if args.dir:
        os.makedirs(args.dir, exist_ok=True)  # a --dir that is not there yet is made, not a traceback
    if args.near_empty:
        near_empty(args.near_empty)
        return
    if args.writeback_probe:
        probe_dir = tempfile.mkdtemp(dir=args.dir, prefix="bench-writeback-")
        try:
            writeback_probe(probe_dir, args.writeback_probe.split(","), args.runs)
        finally:
            shutil.rmtree(probe_dir, ignore_errors=True)
        return
    thread_counts = [int(t) for t in args.threads.split(",")]
    chunk_size = args.chunk_mib * 1024 * 1024
    if args.one:
        print(json.dumps(scavenge_here(args.one, chunk_size, thread_counts[0])))
        return
    if args.latency_one:
        print(json.dumps(latency(args.latency_one, chunk_size)))
        return
    if args.steady_one:
        print(
            json.dumps(steady(args.steady_one, chunk_size, not args.no_auto_pacing, probe=args.stall_probe))
        )
        return
    base = tempfile.mkdtemp(dir=args.dir, prefix="bench-scavenge-")
    try:
        source = os.path.join(base, "source")
        started = time.perf_counter()
        written = build(source, int(args.size_gib * 1024**3), chunk_size)
        print(f"built {written / 1024**3:.2f} GiB in {time.perf_counter() - started:.0f} s", flush=True)
        if args.steady:
            modes = [mode.strip() == "on" for mode in args.steady.split(",")]
            run_steady(source, base, chunk_size, args.runs, modes, args.stall_probe, args.before)
            return
        results: dict[int, list[tuple[float, float, dict]]] = {t: [] for t in thread_counts}
        befores: dict[int, list[tuple[float, dict]]] = {t: [] for t in thread_counts}
        for run in range(args.runs):
            for threads in thread_counts:
                copy = os.path.join(base, f"run-{run}")
                cp = timed_copy(source, copy, sync=False)
                shutil.rmtree(copy)
                subprocess.run(["sync"], check=True)
                cp_sync = timed_copy(source, copy, sync=True)
                got = scavenge(copy, chunk_size, threads)
                results[threads].append((cp, cp_sync, got))
                took = got["took"]
                print(
                    f"run {run + 1}, {threads} thread(s): cp -r {cp:.2f} s, cp -r; sync {cp_sync:.2f} s, "
                    f"scavenge {took:.2f} s ({took / cp_sync:.2f}× cp -r; sync, {took / cp:.2f}× cp -r; "
                    f"CPU {got.get('cpu', 0):.2f} s), load {os.getloadavg()[0]:.1f}, "
                    f"{got['before'] / 1024**3:.2f} -> {got['after'] / 1024**3:.2f} GiB; peak memory of the node "
                    f"and its workers: anonymous {got['peak_anon'] / 2**20:.0f} MiB "
                    f"({got.get('anon_before', 0) / 2**20:.0f} MiB at the start), RSS "
                    f"{got['peak_rss'] / 2**20:.0f} MiB ({got.get('rss_before', 0) / 2**20:.0f} MiB at the start); "
                    f"worker start-up {got['startup']:.2f} s "
                    f"(database open {got['open']:.2f} s)",
                    flush=True,
                )
                print(
                    "  peak RSS (anonymous) by phase: "
                    + ", ".join(
                        f"{stage} {rss / 2**20:.0f} ({anon / 2**20:.0f}) MiB"
                        for stage, (rss, anon) in got.get("phases", {}).items()
                    ),
                    flush=True,
                )
                shutil.rmtree(copy)
                subprocess.run(["sync"], check=True)
                if args.before:
                    cp_sync = timed_copy(source, copy, sync=True)
                    old = scavenge(copy, chunk_size, threads, args.before)
                    befores[threads].append((cp_sync, old))
                    print(
                        f"run {run + 1}, {threads} thread(s), the evdb in {args.before}: cp -r; sync "
                        f"{cp_sync:.2f} s, scavenge {old['took']:.2f} s ({old['took'] / cp_sync:.2f}× cp -r; sync; "
                        f"CPU {old.get('cpu', 0):.2f} s)",
                        flush=True,
                    )
                    shutil.rmtree(copy)
                    subprocess.run(["sync"], check=True)
        sizes = results[thread_counts[0]][-1][2]
        med = statistics.median
        print()
        print(
            f"{written / 1024**3:.2f} GiB ({sizes['before'] / 1024**3:.2f} GiB on disk with the index) -> "
            f"{sizes['after'] / 1024**3:.2f} GiB, chunks of {args.chunk_mib} MiB, half removable; "
            f"medians of {args.runs} runs (ratios: medians of the ratios within each run)"
        )
        print()
        print(
            "| threads | cp -r | cp -r; sync | scavenge | × cp -r; sync | × cp -r | × the first "
            "| CPU (node and workers) | peak anonymous memory | peak RSS | worker start-up |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        first = results[thread_counts[0]]
        for threads, rows in results.items():
            print(
                f"| {threads} | {med(r[0] for r in rows):.2f} s | {med(r[1] for r in rows):.2f} s | "
                f"{med(r[2]['took'] for r in rows):.2f} s | {med(r[2]['took'] / r[1] for r in rows):.2f} | "
                f"{med(r[2]['took'] / r[0] for r in rows):.2f} | "
                f"{med(r[2]['took'] / f[2]['took'] for r, f in zip(rows, first, strict=True)):.2f} | "
                f"{med(r[2].get('cpu', 0.0) for r in rows):.2f} s | "
                f"{max(r[2]['peak_anon'] for r in rows) / 2**20:.0f} MiB | "
                f"{max(r[2]['peak_rss'] for r in rows) / 2**20:.0f} MiB | "
                f"{med(r[2]['startup'] for r in rows):.2f} s |"
            )
        for threads, rows in befores.items():
            if rows:
                print(
                    f"\nthe evdb in {args.before}, {threads} thread(s): scavenge "
                    f"{med(r[1]['took'] for r in rows):.2f} s, {med(r[1]['took'] / r[0] for r in rows):.2f}× "
                    f"cp -r; sync, CPU {med(r[1].get('cpu', 0.0) for r in rows):.2f} s; this evdb / that one "
                    "(same runs): "
                    f"{med(a[2]['took'] / b[1]['took'] for a, b in zip(results[threads], rows, strict=True)):.2f}"
                )
        if args.no_latency:
            return
        copy = os.path.join(base, "latency")
        versions = [("this evdb", None)] + (
            [(f"the evdb in {args.before}", args.before)] if args.before else []
        )
        ratios: dict[str, list[float]] = {label: [] for label, _ in versions}
        for run in range(args.latency_runs):
            for label, evdb_from in versions:  # alternately, each on a fresh copy
                subprocess.run(["cp", "-r", source, copy], check=True)
                subprocess.run(["sync"], check=True)
                lat = latency_in_child(copy, chunk_size, evdb_from)
                shutil.rmtree(copy)
                ratio = lat["scavenging p99 ms"] / lat["idle p99 ms"]
                ratios[label].append(ratio)
                print()
                print(f"append latency, run {run + 1}, {label} (load {os.getloadavg()[0]:.1f}):")
                print("| append latency | p50 | p99 |")
                print("|---|---|---|")
                print(f"| idle | {lat['idle p50 ms']:.2f} ms | {lat['idle p99 ms']:.2f} ms |")
                print(
                    f"| during the scavenge ({lat['appends during scavenge']} appends) | "
                    f"{lat['scavenging p50 ms']:.2f} ms | {lat['scavenging p99 ms']:.2f} ms |"
                )
                print(
                    f"| idle again, after it | {lat['idle after p50 ms']:.2f} ms | {lat['idle after p99 ms']:.2f} ms |"
                )
                print(
                    f"during the scavenge: p99.9 {lat['scavenging p99.9 ms']:.2f} ms, max "
                    f"{lat['scavenging max ms']:.1f} ms, {lat['appends over 10 ms during scavenge']} "
                    "appends over 10 ms"
                )
                print(f"p99 ratio: {ratio:.2f}×", flush=True)
        print()
        for label, values in ratios.items():
            print(
                f"p99 during / idle, {label}: median {med(values):.2f}× "
                f"({', '.join(f'{v:.2f}' for v in values)})"
            )
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
