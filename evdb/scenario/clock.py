"""The dashboard's clock during a scenario: the system clock, moved forward by ``advance_clock`` steps."""

from __future__ import annotations

import asyncio
import time

__all__ = ["ShiftedClock"]


class ShiftedClock:
    """System time plus an offset the scenario advances. Sleeps take real time: the dashboard's polls
    keep their pace while countdowns and certificate ages jump."""

    def __init__(self) -> None:
        self.offset = 0.0

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("a clock cannot be advanced by a negative amount")
        self.offset += seconds

    def time(self) -> float:
        return time.time() + self.offset

    def monotonic(self) -> float:
        return time.monotonic() + self.offset

    def ticks(self) -> int:
        return time.time_ns() // 100 + round(self.offset * 10_000_000)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))
