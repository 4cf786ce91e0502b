"""What the database tells the metrics (evdb.metrics.DatabaseObserver): each group commit's flush (its
bytes and time) and processing time, each read call's events, bytes, time and chunk distances, and the
writer's stream-info cache lookups. The times come from the database's timer, replaced here by a counter, so the figures are exact."""

from __future__ import annotations

import uuid
from types import SimpleNamespace

import pytest

from evdb.database import Database, DatabaseConfig
from evdb.metrics import CHUNK_DISTANCE_BUCKETS, SECONDS_BUCKETS, DatabaseObserver
from evdb.metrics_config import MetricsConfig
from evdb.streams import NewEvent


class Ticks:
    """time.perf_counter as the database sees it: each reading 1 ms after the one before."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        self.now += 0.001
        return self.now


@pytest.fixture
def observed():
    ticks = Ticks()
    observer = DatabaseObserver(MetricsConfig(), lambda: ticks.now)
    with Database.open(DatabaseConfig(db_dir=None, chunk_size=65536)) as db:
        db.observer, db.timer = observer, ticks
        yield db, observer


def event(data: bytes = b'{"a": 1}', metadata: bytes = b"{}") -> NewEvent:
    return NewEvent("Happened", data, metadata, uuid.uuid4(), True)


def test_a_group_commit_reports_its_flush_and_processing(observed):
    db, observer = observed
    before = db.committed_position
    db.append("s", [event(), event()])
    assert observer.flush_size.observe() == db.committed_position - before > 0
    assert observer.flush_duration.observe() == pytest.approx(0.001)  # two readings, 1 ms apart
    assert observer.group_seconds.count >= 1
    assert sum(observer.group_seconds.buckets) == observer.group_seconds.count


def test_a_read_reports_its_events_bytes_time_and_chunk_distance(observed):
    db, observer = observed
    db.append("s", [event(b"12345", b"678"), event(b"", b"")])
    db.read_stream_forward("s")
    events, size, record, distance = observer.reads()
    assert (events, size) == (2, 8)
    assert record.count == 2
    # one call, two readings 1 ms apart: its time shared by its two events (0.5 ms each)
    assert record.total == pytest.approx(0.001)
    assert record.buckets[SECONDS_BUCKETS.index(0.001)] == 2
    assert distance.count == 2 and distance.buckets[0] == 2  # both in the active chunk


def test_an_empty_read_reports_nothing(observed):
    db, observer = observed
    db.append("s", [event()])
    db.read_stream_forward("s", 5)
    assert observer.reads()[:2] == (0, 0)


def test_events_over_several_chunks_each_counted_at_their_distance():
    observer = DatabaseObserver(MetricsConfig(), lambda: 0.0)
    events = [
        SimpleNamespace(log_position=p, data=b"x", metadata=b"") for p in (10, 100_000, 250_000, 300_000)
    ]
    observer.read(events, 0.004, end=5 * 65536 + 7, chunk_size=65536)  # active chunk: 5
    _, size, _, distance = observer.reads()
    assert size == 4
    assert distance.count == 4 and distance.total == 5 + 4 + 2 + 1
    for d in (5, 4, 2, 1):
        assert (
            distance.buckets[CHUNK_DISTANCE_BUCKETS.index(next(b for b in CHUNK_DISTANCE_BUCKETS if b >= d))]
            >= 1
        )


def test_reads_in_several_threads_are_all_counted():
    import threading

    observer = DatabaseObserver(MetricsConfig(), lambda: 0.0)
    one = [SimpleNamespace(log_position=0, data=b"ab", metadata=b"c")]

    def reader() -> None:
        for _ in range(1000):
            observer.read(one, 0.0, end=1, chunk_size=65536)

    threads = [threading.Thread(target=reader) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert observer.reads()[:2] == (4000, 12000)


def test_stream_info_cache_lookups_are_counted():
    with Database.open(None) as db:
        db.append("s", [event()])
        misses = db.state_cache_misses
        db.append("s", [event()])
        db.append("s", [event()])
        assert db.state_cache_hits == 2
        assert db.state_cache_misses == misses
        assert db.stream_cache_entries >= 1
