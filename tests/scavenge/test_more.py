"""Throttle, online operation, UnsafeIgnoreHardDelete, hash collisions, metrics."""

from __future__ import annotations

import threading

import pytest

from evdb.clock import SystemClock
from evdb.scavenge.run import ScavengeStopped, Throttle
from evdb.storage.records import MAX_EVENT_NUMBER
from evdb.streams import NewEvent


def ev(i: int = 0) -> NewEvent:
    return NewEvent.json("E", {"i": i})


class RecordingStop(threading.Event):
    """A stop flag whose waits return at once and remember how long they were asked to last."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float] = []

    def wait(self, timeout=None):
        self.waits.append(timeout)
        return self.is_set()


@pytest.mark.parametrize(("percent", "factor"), [(100, 0.0), (50, 1.0), (25, 3.0), (10, 9.0)])
def test_throttle_rests_in_proportion_to_work(percent, factor):
    stop = RecordingStop()
    throttle = Throttle(percent, stop)
    throttle.rest_after(0.2)
    throttle.rest_after(0.1)
    assert throttle.rested == pytest.approx(0.3 * factor)
    # total time = work + rest = work × 100 / percent
    assert (0.3 + throttle.rested) == pytest.approx(0.3 * 100 / percent)


def test_throttle_rest_is_cut_short_by_stop():
    stop = RecordingStop()
    stop.set()
    with pytest.raises(ScavengeStopped):
        Throttle(50, stop).rest_after(1.0)


def test_appends_and_reads_continue_during_a_scavenge(harness):
    db = harness.db
    for k in range(5):
        db.append(f"s-{k}", [ev(i) for i in range(50)])
        db.set_stream_metadata(f"s-{k}", {"$maxCount": 2})
    written = []

    def during(stage: str) -> None:
        if stage == "ExecutingChunks":
            result = db.append("during", [ev()])
            written.append(result.position)
            assert db.read_stream_forward("s-0").events

    harness.service.stage_hook = during
    assert harness.scavenge()[1] == "Success"
    assert written and db.read_stream_forward("during").events[0].log_position == written[0]


def test_unsafe_ignore_hard_delete_removes_tombstones(tmp_path, make_harness):
    h = make_harness(tmp_path / "unsafe")
    h.service.defaults = h.service.defaults.__class__(
        **{**h.service.defaults.__dict__, "unsafe_ignore_hard_delete": True}
    )
    h.db.append("s", [ev(0), ev(1)])
    h.db.delete_stream("s", hard=True)
    h.db.append("other", [ev()])
    h.scavenge()
    assert ("s", MAX_EVENT_NUMBER) not in h.survivors() and ("s", 0) not in h.survivors()
    h.db.append("s", [ev(5)])  # the stream accepts appends again
    assert h.db.read_stream_forward("s").events[-1].stream == "s"


def test_hash_collisions_never_remove_another_streams_events(tmp_path, make_harness, monkeypatch):
    import evdb.database.appends
    import evdb.database.opening
    import evdb.database.reads
    import evdb.database.replication
    import evdb.scavenge.accumulator
    import evdb.scavenge.calculator
    import evdb.scavenge.index_executor
    from evdb.index import hashing

    real = hashing.stream_hash

    def colliding(name: str) -> int:
        return real("same") if name in ("victim", "tombstoned") else real(name)

    for module in (
        evdb.database.appends,
        evdb.database.opening,
        evdb.database.reads,
        evdb.database.replication,
        evdb.scavenge.accumulator,
        evdb.scavenge.calculator,
        evdb.scavenge.index_executor,
    ):
        monkeypatch.setattr(module, "stream_hash", colliding)
    h = make_harness(tmp_path / "collide")
    h.db.append("victim", [ev(i) for i in range(3)])
    h.db.append("tombstoned", [ev(i) for i in range(3)])
    h.db.delete_stream("tombstoned", hard=True)
    h.scavenge()
    assert [e.event_number for e in h.db.read_stream_forward("victim").events] == [0, 1, 2]
    assert ("tombstoned", 0) not in h.survivors()
    assert h.service.last_progress().hash_collisions >= 1


def test_scavenge_metrics(harness):
    from evdb.metrics import NodeMetrics, NodeSources

    harness.db.append("s", [ev(i) for i in range(4)])
    harness.db.set_stream_metadata("s", {"$maxCount": 1})
    harness.scavenge()
    sources = NodeSources(lambda: harness.db, lambda: harness.service, lambda: {"Scavenge": ("Idle", 1.0)})
    text = NodeMetrics(sources, clock=SystemClock()).render().decode()
    assert "evdb_scavenge_records_removed_total 3.0" in text
    assert "evdb_scavenge_chunks_executed_total" in text and "evdb_scavenge_runs_total 1.0" in text
    assert 'kurrentdb_statuses{name="Scavenge",status="Idle"}' in text


class ClockedStop(threading.Event):
    """A stop flag whose waits move a fake clock (a rest takes the time it is asked for)."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.waits: list[float] = []

    def wait(self, timeout=None):
        self.waits.append(timeout)
        self.now += timeout
        return self.is_set()


def test_throttled_work_since_the_last_rest_keeps_each_rest_in_proportion():
    """Overlapping chunk copies: each rest is for the work since the last rest ended, never for a time
    that holds the rests before it (which made each rest 1/percent times the one before)."""
    stop = ClockedStop()
    throttle = Throttle(20, stop, now=lambda: stop.now)
    throttle.mark()
    for _ in range(5):
        stop.now += 0.1  # a chunk's copy, sync and switch
        throttle.rest_after_work()
    assert stop.waits == pytest.approx([0.4] * 5)
    assert throttle.rested == pytest.approx(2.0)
