"""Automatic pacing: a scavenge that yields the disk to clients by itself (issue 38).

A scavenge's copies are written by worker processes (evdb/scavenge/workers.py); an append waits for
its group commit's ``fdatasync``, which waits for whatever the device holds in front of it. So the
harm the scavenge does to clients shows in the time of the group commits' flushes, and that is what
the pacing watches: while a run lasts, :class:`FlushTap` sits in front of ``Database.observer`` (the
metrics' observer, which it still feeds) and hands every flush's duration to :class:`Pacer`.

The pacer's rule (a delay-based controller, in the manner of LEDBAT):

- the flush time the disk gives when the scavenge is not in the way is the lowest flush seen over
  the last :data:`BASE_WINDOW` seconds (kept in buckets, so it forgets a quieter past);
- a flush slower than :data:`SLOW_FACTOR` times that (and :data:`SLOW_MARGIN` more) raises the
  copies' rest ratio ``r`` (``r × 1.5 + 0.1``, at most :data:`MAX_REST_RATIO`); any other lowers it by
  :data:`EASE`: the copies slow down at once when clients wait behind them and speed up gradually;
- the flushes the scavenge thread makes itself (its own ``$scavenges`` events) are not clients'.

The workers read two shared figures (:class:`PaceValues`): the rest ratio and the time of the last
client flush. Within :data:`QUIET` seconds of a client flush a copy is *paced*: it writes 1 MiB at a
time, waits until that step is on the disk (nothing of the copy is left in the device's queue in
front of an append) and then rests ``r`` times what the step took. Otherwise nobody waits and the
copy runs flat out: 8 MiB steps, the writeback of each started at once and waited for one step
later. The worker processes also run in the idle I/O priority class (``ioprio_set``; this machine's
``mq-deadline`` serves idle requests only when no other request is queued): what pacing leaves in
the queue still goes after the clients' writes.

The rule is pure and its time is injected (tests move it); ``throttlePercent`` below 100 keeps its
spec meaning (a fixed pace, evdb/scavenge/run.py ``Throttle``) and turns this off, as does the option
``DisableScavengeAutoPacing``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = [
    "BASE_WINDOW",
    "EASE",
    "MAX_REST_RATIO",
    "QUIET",
    "SLOW_FACTOR",
    "SLOW_MARGIN",
    "FlushTap",
    "PaceValues",
    "Pacer",
]

#: seconds since the last client flush during which the copies stay paced
QUIET = 0.1
#: seconds over which the lowest flush time is the disk's uncontended flush time
BASE_WINDOW = 10.0
_BUCKETS = 5
#: a flush this many times the uncontended one (and SLOW_MARGIN seconds more) was slowed by the scavenge
SLOW_FACTOR = 2.0
SLOW_MARGIN = 0.0002
#: the most a copy rests for each second of its disk work (it keeps at least 1/9 of its pace)
MAX_REST_RATIO = 8.0
#: how much each flush at the uncontended pace lowers the rest ratio
EASE = 0.02


class PaceValues:
    """The figures a run's pacer shares with the copying processes, in a shared-memory array
    (``values``: whether automatic pacing is on in this run, the rest ratio, the monotonic time of
    the last client flush, the seconds the copies rested). Time is ``time.monotonic``
    (CLOCK_MONOTONIC on Linux: one clock for every process)."""

    AUTO, REST_RATIO, LAST_CLIENT, RESTED = range(4)
    SIZE = 4

    def __init__(self, values: Any) -> None:
        self.values = values

    @classmethod
    def local(cls) -> PaceValues:
        """Figures for this process only (tests)."""
        return cls([0.0, 0.0, float("-inf"), 0.0])

    def begin(self, auto: bool) -> None:
        """A run begins: pacing on or off, nobody seen waiting yet."""
        values = self.values
        values[self.REST_RATIO] = 0.0
        values[self.LAST_CLIENT] = float("-inf")
        values[self.RESTED] = 0.0
        values[self.AUTO] = 1.0 if auto else 0.0

    @property
    def auto(self) -> bool:
        return bool(self.values[self.AUTO])

    def paced(self, now: float) -> float | None:
        """The rest ratio when clients flushed within QUIET seconds of ``now``, else None (flat out)."""
        values = self.values
        if now - values[self.LAST_CLIENT] > QUIET:
            return None
        return max(0.0, float(values[self.REST_RATIO]))

    def add_rest(self, seconds: float) -> None:
        self.values[self.RESTED] += seconds  # (several workers may add at once: a figure for the log)


class Pacer:
    """The controller (see the module's text); ``flushed`` is called for each group commit's flush,
    from whichever thread made it. ``now``: monotonic seconds."""

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
        self._lows: list[tuple[int, float]] = []  # (bucket number, lowest flush in it)
        self.rest_ratio = 0.0
        self.slow_flushes = 0
        self.client_flushes = 0
        values.begin(auto=True)

    def base(self) -> float | None:
        """The uncontended flush time: the lowest over the last BASE_WINDOW seconds."""
        return min((low for _, low in self._lows), default=None)

    def flushed(self, seconds: float, thread: int | None = None) -> None:
        if thread is not None and thread == self.own_thread:
            return
        now = self._now()
        bucket = int(now // (BASE_WINDOW / _BUCKETS))
        lows = [(b, low) for b, low in self._lows if b > bucket - _BUCKETS]
        if lows and lows[-1][0] == bucket:
            lows[-1] = (bucket, min(lows[-1][1], seconds))
        else:
            lows.append((bucket, seconds))
        self._lows = lows
        base = self.base()
        assert base is not None
        self.client_flushes += 1
        if seconds > base * SLOW_FACTOR + SLOW_MARGIN:
            self.slow_flushes += 1
            self.rest_ratio = min(MAX_REST_RATIO, self.rest_ratio * 1.5 + 0.1)
        else:
            self.rest_ratio = max(0.0, self.rest_ratio - EASE)
        values = self.values.values
        values[PaceValues.REST_RATIO] = self.rest_ratio
        values[PaceValues.LAST_CLIENT] = now

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
        self.pacer.flushed(ended - started, threading.get_ident())
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
