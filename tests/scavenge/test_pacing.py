"""Automatic pacing (evdb/scavenge/pace.py): the controller's rule with its time moved by the test,
the copy writer's steps in each mode, and a run that puts the database's observer back."""

from __future__ import annotations

import dataclasses
import os
import threading

import pytest

from evdb.scavenge import pace, workers
from evdb.scavenge.pace import FlushTap, Pacer, PaceValues
from evdb.streams import NewEvent

MIB = 1 << 20


class Time:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _rest(values: PaceValues, t: Time) -> None:
    """A copy wrote, waited for its writes and rests from now."""
    values.writing(t.now - 0.01)
    values.resting(t.now, 0.005)


def test_flushes_are_judged_against_the_ones_made_while_the_copies_rested():
    t = Time()
    values = PaceValues.local()
    pacer = Pacer(values, now=t)
    assert values.auto and values.paced(t.now) is None  # nobody has flushed: flat out
    values.writing(t.now)
    for _ in range(50):  # while a copy writes, and nothing to judge them against yet
        pacer.flushed(t.now, 0.05)
        t.now += 0.01
    assert pacer.reference() is None and pacer.rest_ratio == 0.0 and pacer.slow_flushes == 0
    # clients are writing: paced, with the least rest
    assert values.paced(t.now) == pace.MIN_REST_RATIO
    _rest(values, t)
    for k in range(pace.MIN_BASE_SAMPLES):  # uncontended: begun during the rest
        pacer.flushed(t.now, 0.001 if k < 18 else 0.002)
        t.now += 0.001
    assert pacer.reference() == 0.002  # the 90th percentile of the uncontended ones
    values.writing(t.now)
    # begun during the rest, but the copy wrote before it ended: judged, and over twice the reference
    pacer.flushed(t.now - 0.0005, 0.0041 + pace.SLOW_MARGIN)
    slowed = pacer.rest_ratio
    assert slowed > 0 and values.paced(t.now) == max(slowed, pace.MIN_REST_RATIO)
    pacer.flushed(t.now, 0.01)
    assert pacer.rest_ratio > slowed and pacer.slow_flushes == 2
    assert len(pacer._base) == pace.MIN_BASE_SAMPLES
    while pacer.rest_ratio < pace.MAX_REST_RATIO:
        pacer.flushed(t.now, 0.05)
    assert pacer.rest_ratio == pace.MAX_REST_RATIO
    eased = [pacer.flushed(t.now, 0.003) or pacer.rest_ratio for _ in range(3)]
    assert eased == pytest.approx([pace.MAX_REST_RATIO - pace.EASE * k for k in (1, 2, 3)])
    # nobody flushes for a moment: flat out again
    t.now += pace.QUIET + 0.001
    assert values.paced(t.now) is None


def test_the_scavenge_s_own_flushes_are_not_clients():
    t = Time()
    values = PaceValues.local()
    pacer = Pacer(values, now=t, own_thread=7)
    pacer.flushed(t.now, 0.5, thread=7)
    assert pacer.client_flushes == 0 and values.paced(t.now) is None
    pacer.flushed(t.now, 0.5, thread=8)
    assert pacer.client_flushes == 1 and values.paced(t.now) == pace.MIN_REST_RATIO


class _Calls:
    def __init__(self, t: Time, wait_takes: float = 0.004, supported: bool = True) -> None:
        self.t, self.wait_takes, self.supported = t, wait_takes, supported
        self.log: list[tuple] = []

    def start(self, fd, offset, length):
        self.log.append(("start", offset, length))
        return self.supported

    def wait(self, fd, offset, length):
        self.log.append(("wait", offset, length))
        self.t.now += self.wait_takes
        return self.supported

    def sleep(self, seconds):
        self.log.append(("rest", round(seconds, 6)))
        self.t.now += seconds


def _write(tmp_path, d: workers._WritebackDisk, mib: int) -> None:
    fd = d.open(str(tmp_path / "copy"), os.O_CREAT | os.O_WRONLY)
    try:
        for i in range(mib * 2):
            d.pwrite(fd, b"z" * (MIB // 2), i * (MIB // 2))
    finally:
        os.close(fd)


def _disk(values: PaceValues, calls: _Calls) -> workers._WritebackDisk:
    return workers._WritebackDisk(
        values, now=calls.t, sleep=calls.sleep, start_writeback=calls.start, wait_writeback=calls.wait
    )


def test_a_paced_copy_has_nothing_in_flight_and_rests_in_proportion_to_its_waits(tmp_path):
    t = Time()
    values = PaceValues.local()
    pacer = Pacer(values, now=t)
    _rest(values, t)
    for _ in range(pace.MIN_BASE_SAMPLES):
        pacer.flushed(t.now, 0.001)
    values.writing(t.now)
    for _ in range(3):
        pacer.flushed(t.now, 0.01)  # slowed: the rest ratio rises
    ratio = pacer.rest_ratio
    calls = _Calls(t)
    _write(tmp_path, _disk(values, calls), 3)
    # every MiB: all of the copy so far onto the disk, then a rest of ratio × that wait
    rest = round(ratio * calls.wait_takes, 6)
    assert calls.log == [
        ("wait", 0, MIB), ("rest", rest), ("wait", 0, 2 * MIB), ("rest", rest), ("wait", 0, 3 * MIB), ("rest", rest),
    ]  # fmt: skip
    assert pacer.rested == pytest.approx(3 * ratio * calls.wait_takes + 0.005)
    # the marks: the copy's writes went to the device at the last wait, and were all on it after it
    assert values.values[PaceValues.BUSY_SINCE] == pytest.approx(t.now - rest - calls.wait_takes)
    assert values.values[PaceValues.IDLE_SINCE] == pytest.approx(t.now - rest)


def test_a_copy_nobody_waits_for_runs_in_big_steps_and_one_without_pacing_in_the_fixed_ones(tmp_path):
    t = Time()
    values = PaceValues.local()
    Pacer(values, now=t)  # pacing on, no client flush: flat out
    calls = _Calls(t)
    _write(tmp_path, _disk(values, calls), 17)
    flat = workers._WritebackDisk._FLAT_STEP
    assert calls.log == [("start", 0, flat), ("start", flat, flat), ("wait", 0, flat)]
    values.begin(auto=False)  # off (DisableScavengeAutoPacing, or a throttlePercent below 100)
    values.values[PaceValues.LAST_CLIENT] = t.now  # even with clients writing
    calls = _Calls(t)
    _write(tmp_path, _disk(values, calls), 3)
    assert calls.log == [("start", 0, MIB), ("start", MIB, MIB), ("wait", 0, MIB), ("start", 2 * MIB, MIB),
                         ("wait", 0, 2 * MIB)]  # fmt: skip


def test_without_sync_file_range_a_paced_copy_syncs_each_step(tmp_path, monkeypatch):
    t = Time()
    values = PaceValues.local()
    Pacer(values, now=t).flushed(t.now, 0.001)
    synced = []
    monkeypatch.setattr(os, "fdatasync", lambda fd: synced.append(fd))
    calls = _Calls(t, supported=False)
    _write(tmp_path, _disk(values, calls), 2)
    assert len(synced) == 2


class Observer:
    """What the metrics' DatabaseObserver is told, recorded."""

    def __init__(self) -> None:
        self.seen: list[tuple] = []
        self.figure = 42

    def flushed(self, size, started, ended):
        self.seen.append(("flushed", size))

    def group_processed(self, seconds):
        self.seen.append(("group", round(seconds, 6)))

    def read(self, events, seconds, end, chunk_size):
        self.seen.append(("read", len(events)))


def test_the_tap_feeds_the_pacer_and_the_observer_it_stands_in_front_of():
    class Db:
        observer: object = None

    db = Db()
    inner = db.observer = Observer()
    values = PaceValues.local()
    pacer = Pacer(values, now=Time(), own_thread=threading.get_ident() + 1)
    tap = FlushTap.install(db, pacer)
    assert db.observer is tap
    tap.flushed(300, 1.0, 1.002)
    tap.group_processed(0.003)
    tap.read([1, 2], 0.001, 0, 0)
    assert inner.seen == [("flushed", 300), ("group", 0.003), ("read", 2)]
    assert (
        tap.figure == 42 and pacer.client_flushes == 1 and values.paced(values.values[PaceValues.LAST_CLIENT])
    )
    tap.remove(db)
    assert db.observer is inner
    empty = Db()  # a database nobody observes: the tap has no one to pass calls to
    FlushTap.install(empty, pacer).flushed(1, 0.0, 0.001)
    assert pacer.client_flushes == 2


@pytest.mark.parametrize(
    ("auto", "throttle", "tapped"), [(True, 100, True), (True, 50, False), (False, 100, False)]
)
def test_a_run_paces_at_throttle_100_unless_turned_off_and_puts_the_observer_back(
    make_harness, tmp_path, auto, throttle, tapped
):
    h = make_harness(tmp_path)
    h.service.defaults = dataclasses.replace(h.service.defaults, auto_pacing=auto)
    observer = h.db.observer = Observer()
    seen = []
    h.service.stage_hook = lambda stage: seen.append(type(h.db.observer).__name__)
    h.db.append("s", [NewEvent("E", b"x" * 100)])
    h.db.delete_stream("s", hard=True)
    h.complete_chunk()
    assert h.scavenge(throttle_percent=throttle)[1] == "Success"
    assert set(seen) == {"FlushTap" if tapped else "Observer"}
    assert h.db.observer is observer
    assert not h.service.workers.pace.auto  # the pool's processes copy for nobody between runs
