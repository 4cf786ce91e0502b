"""The one way tests wait: poll a condition until it holds, bounded, and say what was awaited.

Tests never sleep and hope. ``from waiting import wait_until`` works in every test folder: pytest puts
``tests/`` on the path (its conftest.py has no package around it)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["until", "wait_until"]

T = TypeVar("T")


def wait_until(
    condition: Callable[[], T],
    timeout: float = 30.0,
    what: str = "condition",
    *,
    interval: float = 0.1,
    tolerate: tuple[type[BaseException], ...] = (),
    detail: Callable[[], Any] | None = None,
) -> T:
    """Call ``condition`` every ``interval`` seconds until it returns something true, and return that.
    After ``timeout`` seconds: AssertionError naming ``what``, the last value (or an exception in
    ``tolerate``, taken as "not yet") and ``detail()`` when given."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = condition()
            if last:
                return last
        except tolerate as exc:
            last = exc
        if time.monotonic() > deadline:
            extra = f"; {detail()}" if detail is not None else ""
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}; last: {last!r}{extra}")
        time.sleep(interval)


async def until(condition: Callable[[], T], what: str = "condition", timeout: float = 10.0) -> T:
    """:func:`wait_until` for a coroutine: let the event loop (and the threads it hands work to) run
    between the calls of ``condition``, every 5 ms, until it returns something true; bounded."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; last: {value!r}")
        await asyncio.sleep(0.005)
