"""Time as a parameter.

evdb code never calls ``time.time()`` directly: it asks a :class:`Clock`. Production uses
:class:`SystemClock`; tests use :class:`ManualClock` and move time with :meth:`ManualClock.advance`
instead of waiting for it.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import threading
import time
from typing import Protocol

__all__ = ["TICKS_PER_SECOND", "Clock", "ManualClock", "SystemClock", "ticks_from_seconds"]

#: Timestamps in records are 100-nanosecond ticks since the Unix epoch (what KurrentDB's clients expect).
TICKS_PER_SECOND = 10_000_000


def ticks_from_seconds(seconds: float) -> int:
    return round(seconds * TICKS_PER_SECOND)


class Clock(Protocol):
    def time(self) -> float:
        """Wall-clock time in seconds since the Unix epoch."""

    def monotonic(self) -> float:
        """Seconds from an arbitrary start; never goes backwards."""

    async def sleep(self, seconds: float) -> None:
        """Wait until ``seconds`` of this clock's time have passed."""

    def ticks(self) -> int:
        """Wall-clock time in 100 ns ticks since the Unix epoch."""


class SystemClock:
    """The real clock."""

    def time(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))

    def ticks(self) -> int:
        return time.time_ns() // 100


class ManualClock:
    """A clock that moves only when told to.

    ``sleep`` returns once :meth:`advance` has moved the clock past the sleeper's deadline, so
    time-dependent code runs instantly and deterministically in tests.
    """

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = float(start)
        self._mono = 0.0
        self._lock = threading.Lock()
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def time(self) -> float:
        return self._now

    def monotonic(self) -> float:
        return self._mono

    def ticks(self) -> int:
        return ticks_from_seconds(self._now)

    def set_time(self, when: float) -> None:
        """Jump the wall clock (monotonic time is untouched), as an NTP correction would."""
        self._now = float(when)

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("a clock cannot be advanced by a negative amount")
        with self._lock:
            self._now += seconds
            self._mono += seconds
            due = []
            while self._sleepers and self._sleepers[0][0] <= self._mono:
                due.append(heapq.heappop(self._sleepers)[2])
        for fut in due:
            loop = fut.get_loop()
            loop.call_soon_threadsafe(_wake, fut)

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        with self._lock:
            heapq.heappush(self._sleepers, (self._mono + seconds, next(self._seq), fut))
        await fut

    @property
    def sleepers(self) -> int:
        """How many coroutines are waiting on this clock (lets a test wait until a task is parked)."""
        return len(self._sleepers)

    def due_in(self) -> list[float]:
        """In how many seconds each waiting coroutine wakes, soonest first (lets a test wait until a
        particular task is parked: the one that sleeps for its own period)."""
        with self._lock:
            return sorted(when - self._mono for when, _, _ in self._sleepers)


def _wake(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
