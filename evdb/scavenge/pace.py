"""Automatic pacing: a scavenge that yields the disk to clients by itself (issue 38).

A scavenge's copies are written by worker processes (evdb/scavenge/workers.py); an append waits for
its group commit's ``fdatasync``, which waits for whatever the device holds in front of it. So the
harm the scavenge does to clients shows in the time of the group commits' flushes, and that is what
the pacing watches: while a run lasts, :class:`FlushTap` sits in front of ``Database.observer`` (the
metrics' observer, which it still feeds) and hands every flush's duration to :class:`Pacer`.

The pacer's rule (a delay-based controller, in the manner of LEDBAT, that tells the flushes the
copies were in the way of from the ones they were not):

- the copying processes mark in the shared figures when their writes are in the device's queue
  (from the start of a step's writeback to the end of the wait for it) and when they rest; a flush
  made wholly while every copy rested is *uncontended*: the flush time the disk gives clients without
  the scavenge, whatever else the machine does. The 90th percentile of the last
  :data:`BASE_SAMPLES` of them is the reference (a flush's tail without the scavenge);
- any other flush slower than :data:`SLOW_FACTOR` times the reference (and :data:`SLOW_MARGIN`
  more) raises the copies' rest ratio ``r`` (``r × 1.5 + 0.1``, at most :data:`MAX_REST_RATIO`);
  any other lowers it by :data:`EASE`: the copies slow down at once when clients wait behind them
  and speed up gradually. Until :data:`MIN_BASE_SAMPLES` uncontended flushes are known, none is
  judged;
- while clients write, a copy rests at least :data:`MIN_REST_RATIO` times its waits: the rests are
  where the uncontended flushes come from;
- the flushes the scavenge thread makes itself (its own ``$scavenges`` events) are not clients'.

The workers read the rest ratio and the time of the last client flush. Within :data:`QUIET` seconds
of a client flush a copy is *paced*: it writes 1 MiB at a time, waits until that step is on the disk
(nothing of the copy is left in the device's queue in front of an append) and then rests ``r`` times
what the wait took. Otherwise nobody waits and the copy runs flat out: 8 MiB steps, the writeback of
each started at once and waited for one step later. The worker processes also run in the idle I/O
priority class (``ioprio_set``; ``mq-deadline`` serves idle requests when no other request is
queued): what pacing leaves in the queue still goes after the clients' writes.

With several copies at once (``threads`` above 1) the marks are the last copy's: the attribution is
exact for one copy at a time.

The rule is pure and its time is injected (tests move it); ``throttlePercent`` below 100 keeps its
spec meaning (a fixed pace, evdb/scavenge/run.py ``Throttle``) and turns this off, as does the option
``DisableScavengeAutoPacing``.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = [
    "BASE_SAMPLES",
    "EASE",
    "MAX_REST_RATIO",
    "MIN_BASE_SAMPLES",
    "MIN_REST_RATIO",
    "QUIET",
    "SLOW_FACTOR",
    "SLOW_MARGIN",
    "FlushTap",
    "PaceValues",
    "Pacer",
]

#: seconds since the last client flush during which the copies stay paced
QUIET = 0.1
#: how many uncontended flushes make the reference, and how many are needed before any flush is judged
BASE_SAMPLES = 200
MIN_BASE_SAMPLES = 20
#: a flush over this many times the reference (and SLOW_MARGIN seconds more) was slowed by the scavenge
SLOW_FACTOR = 2.0
SLOW_MARGIN = 0.0002
#: the most a copy rests for each second of its disk work (it keeps at least 1/9 of its pace), and the
#: least while clients write
MAX_REST_RATIO = 8.0
MIN_REST_RATIO = 0.25
#: how much each flush at the uncontended pace lowers the rest ratio
EASE = 0.02


class PaceValues:
    """The figures a run's pacer shares with the copying processes, in a shared-memory array
    (``values``: whether automatic pacing is on in this run, the rest ratio, the monotonic time of
    the last client flush, the seconds the copies rested, when a copy's writes last went to the
    device and when they were last all on it). Time is ``time.monotonic`` (CLOCK_MONOTONIC on Linux:
    one clock for every process, and the clock of the database's flush times)."""

    AUTO, REST_RATIO, LAST_CLIENT, RESTED, BUSY_SINCE, IDLE_SINCE = range(6)
    SIZE = 6

    def __init__(self, values: Any) -> None:
        self.values = values

    @classmethod
    def local(cls) -> PaceValues:
        """Figures for this process only (tests)."""
        return cls([0.0, 0.0, float("-inf"), 0.0, 0.0, 0.0])

    def begin(self, auto: bool) -> None:
        """A run begins: pacing on or off, nobody seen waiting yet."""
        values = self.values
        values[self.REST_RATIO] = 0.0
        values[self.LAST_CLIENT] = float("-inf")
        values[self.RESTED] = 0.0
        values[self.BUSY_SINCE] = values[self.IDLE_SINCE] = 0.0
        values[self.AUTO] = 1.0 if auto else 0.0

    @property
    def auto(self) -> bool:
        return bool(self.values[self.AUTO])

    def paced(self, now: float) -> float | None:
        """The rest ratio when clients flushed within QUIET seconds of ``now``, else None (flat out)."""
        values = self.values
        if now - values[self.LAST_CLIENT] > QUIET:
            return None
        return max(MIN_REST_RATIO, float(values[self.REST_RATIO]))

    def writing(self, now: float) -> None:
        """A copy's writes go to the device from ``now``."""
        self.values[self.BUSY_SINCE] = now

    def resting(self, now: float, seconds: float) -> None:
        """Every write of the copy is on the disk at ``now``; it rests ``seconds``."""
        self.values[self.IDLE_SINCE] = now
        self.values[self.RESTED] += seconds  # (several workers may add at once: a figure for the log)

    def uncontended(self, started: float) -> bool:
        """Whether a flush that began at ``started`` and ends now was made wholly while every copy
        rested (no copy wrote since it began)."""
        idle_since = self.values[self.IDLE_SINCE]
        return idle_since > self.values[self.BUSY_SINCE] and started >= idle_since


class Pacer:
    """The controller (see the module's text); ``flushed`` is called for each group commit's flush,
    from whichever thread made it, with its start and length (monotonic seconds). ``now``: monotonic
    seconds, the system's own (``time.monotonic``) and not the node's clock: the worker processes
    compare the times the pacer writes with their own clock, and the flush times are the database's
    ``timer`` readings (perf_counter: on Linux the same clock)."""

    def __init__(
        self,
        values: PaceValues,
        *,
        now: Callable[[], float] = time.monotonic,
        own_thread: int | None = None,
    ) -> None:
        self.values = values
        self._now = now
        #: the thread whose flushes are the scavenge's own (its events), not clients'
        self.own_thread = own_thread
        self._base: collections.deque[float] = collections.deque(maxlen=BASE_SAMPLES)
        self._reference: float | None = None
        self.rest_ratio = 0.0
        self.slow_flushes = 0
        self.client_flushes = 0
        values.begin(auto=True)

    def reference(self) -> float | None:
        """The 90th percentile of the last uncontended flushes (None: too few yet)."""
        return self._reference

    def flushed(self, started: float, seconds: float, thread: int | None = None) -> None:
        if thread is not None and thread == self.own_thread:
            return
        self.client_flushes += 1
        if self.values.uncontended(started):
            self._base.append(seconds)
            if len(self._base) >= MIN_BASE_SAMPLES:
                ordered = sorted(self._base)
                self._reference = ordered[int(len(ordered) * 0.9)]
        elif self._reference is not None and seconds > self._reference * SLOW_FACTOR + SLOW_MARGIN:
            self.slow_flushes += 1
            self.rest_ratio = min(MAX_REST_RATIO, self.rest_ratio * 1.5 + 0.1)
        else:
            self.rest_ratio = max(0.0, self.rest_ratio - EASE)
        values = self.values.values
        values[PaceValues.REST_RATIO] = self.rest_ratio
        values[PaceValues.LAST_CLIENT] = self._now()

    @property
    def rested(self) -> float:
        return float(self.values.values[PaceValues.RESTED])


class FlushTap:
    """Stands in front of ``Database.observer`` while a run lasts: every flush goes to the pacer, and
    every call to the observer it replaced (None: to nobody)."""

    def __init__(self, inner: Any, pacer: Pacer) -> None:
        self.inner = inner
        self.pacer = pacer

    def flushed(self, size: int, started: float, ended: float) -> None:
        self.pacer.flushed(started, ended - started, threading.get_ident())
        if self.inner is not None:
            self.inner.flushed(size, started, ended)

    def group_processed(self, seconds: float) -> None:
        if self.inner is not None:
            self.inner.group_processed(seconds)

    def read(self, events: list, seconds: float, end: int, chunk_size: int) -> None:
        if self.inner is not None:
            self.inner.read(events, seconds, end, chunk_size)

    def __getattr__(self, name: str) -> Any:  # anything else the observer offers (metrics' figures)
        return getattr(self.inner, name)

    @classmethod
    def install(cls, db: Any, pacer: Pacer) -> FlushTap:
        tap = cls(db.observer, pacer)
        db.observer = tap
        return tap

    def remove(self, db: Any) -> None:
        """Put the observer back (only when this tap is still the one in place)."""
        if db.observer is self:
            db.observer = self.inner
