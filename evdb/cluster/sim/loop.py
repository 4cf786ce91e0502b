"""The simulated event loop: virtual time, asyncio's own scheduling order."""

from __future__ import annotations

import asyncio
import contextvars
import heapq
import selectors
from collections.abc import Callable, Sequence
from contextvars import Context
from typing import Any, TypeVarTuple, Unpack

_Ts = TypeVarTuple("_Ts")


class SimDeadlock(RuntimeError):
    """Nothing is scheduled and nothing is ready: the simulated cluster can never move again."""


class _VirtualSelector(selectors.BaseSelector):
    """A selector with no I/O: waiting ``timeout`` seconds moves the virtual clock by that much."""

    def __init__(self) -> None:
        self.now = 0.0
        self._map: dict[int, selectors.SelectorKey] = {}

    def register(self, fileobj, events, data=None):  # type: ignore[no-untyped-def]
        fd = fileobj if isinstance(fileobj, int) else fileobj.fileno()
        key = selectors.SelectorKey(fileobj, fd, events, data)
        self._map[fd] = key
        return key

    def unregister(self, fileobj):  # type: ignore[no-untyped-def]
        fd = fileobj if isinstance(fileobj, int) else fileobj.fileno()
        return self._map.pop(fd)

    def select(self, timeout=None):  # type: ignore[no-untyped-def]
        if timeout is None:
            raise SimDeadlock("nothing is scheduled")
        self.now += max(timeout, 0.0)
        return []

    def get_map(self):  # type: ignore[no-untyped-def]
        return self._map

    def close(self) -> None:
        self._map.clear()


class _Due(float):
    """A timer's due time as its key in the loop's heap: a float, so the heap compares keys in C where
    it compared TimerHandle._when through TimerHandle.__lt__ (the same comparisons, so the same order,
    ties included); ``timer`` is the handle."""

    __slots__ = ("timer",)
    timer: Any


class _Handle(asyncio.Handle):
    """asyncio's Handle without its debug-mode checks (the simulated loop never runs in debug mode)."""

    __slots__ = ()

    def __init__(
        self, callback: Callable[..., object], args: Sequence[Any], loop: Any, context: Any = None
    ) -> None:
        me: Any = self  # Handle's slots, which typeshed does not declare
        me._context = contextvars.copy_context() if context is None else context
        me._loop = loop
        me._callback = callback
        me._args = args
        me._cancelled = False
        me._repr = None
        me._source_traceback = None


class _Timer(asyncio.TimerHandle):
    __slots__ = ()

    def __init__(
        self,
        when: float,
        callback: Callable[..., object],
        args: Sequence[Any],
        loop: Any,
        context: Any = None,
    ) -> None:
        _Handle.__init__(self, callback, args, loop, context)  # type: ignore[arg-type]
        me: Any = self
        me._when = when
        me._scheduled = False


class SimLoop(asyncio.SelectorEventLoop):
    """An asyncio loop on virtual time: sleeps and timeouts take no real time, in a replayable order.

    It schedules and runs callbacks as asyncio's own loop does (the same heap operations, the same
    order), with less work per step: no debug-mode checks, timers keyed by their due time in C
    (:class:`_Due`), and no wake-up byte through the self-pipe for a loop that never waits on it."""

    def __init__(self) -> None:
        self._virtual = _VirtualSelector()
        super().__init__(selector=self._virtual)
        self._clock_resolution = 1e-9
        #: BaseEventLoop's private state, which typeshed does not declare
        self._base: Any = self

    def time(self) -> float:
        return self._virtual.now

    def _write_to_self(self) -> None:
        pass  # one thread, and a selector that never blocks while callbacks are ready

    def call_soon(
        self, callback: Callable[[Unpack[_Ts]], object], *args: *_Ts, context: Context | None = None
    ) -> asyncio.Handle:
        if self._base._closed:
            raise RuntimeError("Event loop is closed")
        handle = _Handle(callback, args, self, context)
        self._base._ready.append(handle)
        return handle

    def _call_soon(
        self, callback: Callable[..., object], args: Sequence[Any], context: Context | None
    ) -> asyncio.Handle:
        handle = _Handle(callback, args, self, context)
        self._base._ready.append(handle)
        return handle

    def call_later(
        self,
        delay: float,
        callback: Callable[[Unpack[_Ts]], object],
        *args: *_Ts,
        context: Context | None = None,
    ) -> asyncio.TimerHandle:
        if delay is None:
            raise TypeError("delay must not be None")
        return self.call_at(self._virtual.now + delay, callback, *args, context=context)

    def call_at(
        self,
        when: float,
        callback: Callable[[Unpack[_Ts]], object],
        *args: *_Ts,
        context: Context | None = None,
    ) -> asyncio.TimerHandle:
        if when is None:
            raise TypeError("when cannot be None")
        if self._base._closed:
            raise RuntimeError("Event loop is closed")
        timer = _Timer(when, callback, args, self, context)
        due = _Due(when)
        due.timer = timer
        heapq.heappush(self._base._scheduled, due)
        timer._scheduled = True  # type: ignore[attr-defined]
        return timer

    def _run_once(self) -> None:
        """asyncio's BaseEventLoop._run_once (3.11) over :class:`_Due` keys, step for step."""
        base = self._base
        scheduled: list[Any] = base._scheduled
        sched_count = len(scheduled)
        if sched_count > 100 and base._timer_cancelled_count / sched_count > 0.5:
            kept = []
            for due in scheduled:
                if due.timer._cancelled:
                    due.timer._scheduled = False
                else:
                    kept.append(due)
            heapq.heapify(kept)
            base._scheduled = scheduled = kept
            base._timer_cancelled_count = 0
        else:
            while scheduled and scheduled[0].timer._cancelled:
                base._timer_cancelled_count -= 1
                heapq.heappop(scheduled).timer._scheduled = False
        virtual = self._virtual
        ready = base._ready
        if ready or base._stopping:
            pass  # no time passes
        elif scheduled:
            virtual.now += max(min(max(0, scheduled[0] - virtual.now), 24 * 3600), 0.0)
        else:
            raise SimDeadlock("nothing is scheduled")
        end_time = virtual.now + 1e-9
        while scheduled:
            if scheduled[0] >= end_time:
                break
            timer = heapq.heappop(scheduled).timer
            timer._scheduled = False
            ready.append(timer)
        for _ in range(len(ready)):
            handle = ready.popleft()
            if not handle._cancelled:
                handle._run()
