"""The clock port (evdb/clock.py Clock): one contract, inherited by a test class for the real
SystemClock and one for each stand-in the code is run with — ManualClock (tests and the simulator's
nodes: time moves only when told) and the scenario replays' ShiftedClock (real time plus jumps) — so a
stand-in cannot drift from what the real clock promises the code that decides things.

The meta-test at the end fails when a stand-in lacks a member of the port, or takes other parameters."""

from __future__ import annotations

import asyncio

import pytest
from port_members import drift, port_members

from evdb.clock import TICKS_PER_SECOND, Clock, ManualClock, SystemClock
from evdb.scenario.clock import ShiftedClock


class ClockContract:
    """What every clock promises. ``make`` builds one; ``elapse`` lets ``seconds`` of its time pass
    (the real clock: nothing to do, its sleepers wait; a stand-in: moved by its own means)."""

    def make(self) -> Clock:
        raise NotImplementedError

    async def elapse(self, clock: Clock, seconds: float) -> None:
        raise NotImplementedError

    def test_wall_time_and_ticks_agree(self) -> None:
        clock = self.make()
        before = clock.time()
        ticks = clock.ticks()
        after = clock.time()
        assert isinstance(ticks, int)
        assert before - 1.0 <= ticks / TICKS_PER_SECOND <= after + 1.0

    async def test_monotonic_never_goes_back(self) -> None:
        clock = self.make()
        seen = [clock.monotonic()]
        for _ in range(3):
            await self.elapse(clock, 0.01)
            await clock.sleep(0)
            seen.append(clock.monotonic())
        assert seen == sorted(seen)

    async def test_a_sleep_of_nothing_returns_at_once(self) -> None:
        clock = self.make()
        await asyncio.wait_for(clock.sleep(0), timeout=5)
        await asyncio.wait_for(clock.sleep(-1), timeout=5)

    async def test_a_sleep_returns_once_its_time_has_passed_and_not_before(self) -> None:
        clock = self.make()
        start_mono, start_wall = clock.monotonic(), clock.time()
        sleeper = asyncio.ensure_future(clock.sleep(0.05))
        await self.elapse(clock, 0.05)
        await asyncio.wait_for(sleeper, timeout=10)
        assert clock.monotonic() - start_mono >= 0.05
        # wall time moved with it (a clock whose wall time stood still would never expire a lease)
        assert clock.time() - start_wall >= 0.04


class TestSystemClock(ClockContract):
    def make(self) -> Clock:
        return SystemClock()

    async def elapse(self, clock: Clock, seconds: float) -> None:
        return None  # real time passes by itself


class TestManualClock(ClockContract):
    def make(self) -> Clock:
        return ManualClock()

    async def elapse(self, clock: Clock, seconds: float) -> None:
        assert isinstance(clock, ManualClock)
        await asyncio.sleep(0)  # a sleeper started just before is parked first
        clock.advance(seconds)

    async def test_a_sleeper_waits_for_the_clock_not_for_real_time(self) -> None:
        clock = ManualClock()
        sleeper = asyncio.ensure_future(clock.sleep(5))
        await asyncio.sleep(0.02)
        assert not sleeper.done()
        clock.advance(4.9)
        await asyncio.sleep(0.02)
        assert not sleeper.done()
        clock.advance(0.1)
        await asyncio.wait_for(sleeper, timeout=5)

    def test_it_cannot_go_back(self) -> None:
        with pytest.raises(ValueError):
            ManualClock().advance(-1)


class TestShiftedClock(ClockContract):
    def make(self) -> Clock:
        return ShiftedClock()

    async def elapse(self, clock: Clock, seconds: float) -> None:
        return None  # its sleeps take real time; advance() only makes it jump


def test_every_clock_has_the_whole_port() -> None:
    assert port_members(Clock) == ["monotonic", "sleep", "ticks", "time"]
    for stand_in in (ManualClock, ShiftedClock):
        assert drift(Clock, SystemClock, stand_in) == []


def test_the_meta_test_finds_a_missing_member() -> None:
    class NoTicks:
        def time(self) -> float:
            return 0.0

        def monotonic(self) -> float:
            return 0.0

        async def sleep(self, seconds: float) -> None:
            return None

    assert drift(Clock, SystemClock, NoTicks) == ["NoTicks lacks Clock.ticks"]
