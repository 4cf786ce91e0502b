"""The one way tests wait: poll a condition until it holds, bounded, and say what was awaited.

Tests never sleep and hope. ``from waiting import wait_until`` works in every test folder: pytest puts
``tests/`` on the path (its conftest.py has no package around it)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["wait_until"]

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
