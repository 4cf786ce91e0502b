from __future__ import annotations

import json
import threading
import uuid

import pytest

from evdb.database import Database
from evdb.errors import (
    DatabaseLocked,
    EventTooLarge,
    InvalidInput,
    StreamDeleted,
    StreamNotFound,
    WrongExpectedVersion,
)
from evdb.streams import ANY, MAX_EVENT_NUMBER, NO_STREAM, STREAM_EXISTS, NewEvent


def ev(n: int = 0, **kw) -> NewEvent:
    return NewEvent.json(kw.pop("type", "Happened"), {"n": n}, **kw)


def numbers(events) -> list[int]:
    return [e.event_number for e in events]


def test_append_and_read_forward_backward(db):
    result = db.append("orders-1", [ev(i) for i in range(5)], NO_STREAM)
    assert result.first_event_number == 0 and result.next_expected_version == 4
    forward = db.read_stream_forward("orders-1", 0, 100)
    assert numbers(forward.events) == [0, 1, 2, 3, 4]
    assert forward.is_end_of_stream and forward.last_event_number == 4
    assert json.loads(forward.events[2].data) == {"n": 2}
    backward = db.read_stream_backward("orders-1", None, 2)
    assert numbers(backward.events) == [4, 3] and backward.next_event_number == 2
    assert not backward.is_end_of_stream
    assert numbers(db.read_stream_forward("orders-1", 3, 1).events) == [3]
    assert result.position == forward.events[-1].log_position


def test_positions_increase_strictly_within_a_batch(db):
    db.append("a", [ev(i) for i in range(10)])
    positions = [e.log_position for e in db.read_stream_forward("a").events]
    assert positions == sorted(set(positions))


def test_expected_versions(db):
    db.append("s", [ev()], NO_STREAM)
    with pytest.raises(WrongExpectedVersion) as err:
        db.append("s", [ev()], NO_STREAM)
    assert err.value.current_version == 0
    with pytest.raises(WrongExpectedVersion):
        db.append("s", [ev()], 5)
    db.append("s", [ev()], 0)
    db.append("s", [ev()], STREAM_EXISTS)
    db.append("s", [ev()], ANY)
    with pytest.raises(WrongExpectedVersion) as err:
        db.append("new", [ev()], STREAM_EXISTS)
    assert err.value.current_version == -1


def test_idempotent_append(db):
    events = [ev(i) for i in range(3)]
    first = db.append("s", events, NO_STREAM)
    again = db.append("s", events, NO_STREAM)
    assert again.duplicate and again.position == first.position
    assert again.next_expected_version == 2
    any_again = db.append("s", events, ANY)
    assert any_again.duplicate
    assert db.read_stream_forward("s").last_event_number == 2
    # a batch that repeats only the first event is a conflict, not a duplicate
    with pytest.raises(WrongExpectedVersion):
        db.append("s", [events[0], ev(9)], NO_STREAM)


def test_an_any_version_append_retried_after_a_restart_is_recognised(tmp_path):
    """The recent-append cache is rebuilt from the end of the log when the database opens: a client
    that retries an append across a crash of the node (or a leader change to a restarted node) gets
    the original result, not the events a second time."""
    events = [ev(i) for i in range(3)]
    with Database.open(str(tmp_path / "db")) as db:
        db.append("other", [ev(9)])
        first = db.append("s", events, ANY)
        db.append("later", [ev(8)])
    with Database.open(str(tmp_path / "db")) as db:
        again = db.append("s", events, ANY)
        assert again.duplicate and again.position == first.position
        assert again.next_expected_version == 2
        assert db.read_stream_forward("s").last_event_number == 2
        with pytest.raises(WrongExpectedVersion):  # part of it only: a conflict, as before the restart
            db.append("s", [events[0], ev(7)], ANY)


def test_the_rebuild_at_open_reads_a_bounded_number_of_events(tmp_path, monkeypatch):
    """Large appends: the rebuild stops at an append's first event once it has read the bound of
    events, so opening a big database does not read (and map) millions of records; the newest
    appends are still recognised."""
    import evdb.database.opening as opening

    monkeypatch.setattr(opening, "_REBUILT_EVENTS", 50)
    with Database.open(str(tmp_path / "db")) as db:
        batches = [[ev(100 * b + i) for i in range(20)] for b in range(10)]
        results = [db.append(f"s-{b}", batch, ANY) for b, batch in enumerate(batches)]
    seen: list[int] = []
    from evdb.database.appends import StreamWrites

    real = StreamWrites.follow_replicated_append

    def counting(self, record):
        seen.append(record.log_position)
        return real(self, record)

    monkeypatch.setattr(StreamWrites, "follow_replicated_append", counting)
    with Database.open(str(tmp_path / "db")) as db:
        assert len(seen) == 60  # three whole appends of 20: the bound of 50 reached at an append's start
        again = db.append("s-9", batches[9], ANY)
        assert again.duplicate and again.position == results[9].position


def test_stream_not_found_and_all_contains_everything(db):
    with pytest.raises(StreamNotFound):
        db.read_stream_forward("nope")
    db.append("x", [ev(1)])
    db.append("y", [ev(2)])
    all_events = db.read_all_forward(0, 100).events
    assert [e.stream for e in all_events] == ["x", "y"]
    backward = db.read_all_backward(None, 100).events
    assert [e.stream for e in backward] == ["y", "x"]


def test_all_forward_includes_from_position_and_backward_excludes(db):
    db.append("x", [ev(i) for i in range(4)])
    events = db.read_all_forward(0, 100).events
    p = events[2].log_position
    assert db.read_all_forward(p, 1).events[0].log_position == p
    assert db.read_all_backward(p, 1).events[0].log_position == events[1].log_position


def test_all_from_a_position_that_is_not_a_boundary_is_an_error(db):
    db.append("x", [ev(i) for i in range(4)])
    p = db.read_all_forward(0, 100).events[1].log_position
    with pytest.raises(InvalidInput):
        db.read_all_forward(p + 3, 10)


def test_max_count_hides_old_events_in_stream_reads_but_not_in_all(db):
    db.append("s", [ev(i) for i in range(4)])
    db.set_stream_metadata("s", {"$maxCount": 1})
    assert numbers(db.read_stream_forward("s").events) == [3]
    assert numbers(db.read_stream_backward("s").events) == [3]
    assert len([e for e in db.read_all_forward(0, 100).events if e.stream == "s"]) == 4


def test_truncate_before(db):
    db.append("s", [ev(i) for i in range(4)])
    db.set_stream_metadata("s", {"$tb": 3})
    assert numbers(db.read_stream_forward("s").events) == [3]


def test_max_age_expires_by_the_clock(db, clock):
    db.append("s", [ev(0), ev(1)])
    clock.advance(100)
    db.append("s", [ev(2)])
    db.set_stream_metadata("s", {"$maxAge": 50})
    assert numbers(db.read_stream_forward("s").events) == [2]
    clock.advance(60)
    assert numbers(db.read_stream_forward("s").events) == []


def test_soft_delete_and_recreate(db):
    db.append("s", [ev(i) for i in range(3)])
    db.set_stream_metadata("s", {"custom": "kept"})
    db.delete_stream("s", 2)
    with pytest.raises(StreamNotFound):
        db.read_stream_forward("s")
    with pytest.raises(StreamDeleted):
        db.delete_stream("s", STREAM_EXISTS)
    result = db.append("s", [ev(10)], NO_STREAM)
    assert result.first_event_number == 3  # numbering continues
    assert numbers(db.read_stream_forward("s").events) == [3]
    metadata, _ = db.get_stream_metadata("s")
    assert metadata.truncate_before == 3 and metadata.raw["custom"] == "kept"


def test_soft_delete_recreate_with_old_last_revision(db):
    db.append("s", [ev(i) for i in range(2)])
    db.delete_stream("s")
    db.append("s", [ev()], 1)
    assert numbers(db.read_stream_forward("s").events) == [2]


def test_delete_never_existing_stream_is_not_found(db):
    with pytest.raises(StreamNotFound):
        db.delete_stream("ghost")
    db.delete_stream("ghost2", ANY, hard=True)  # tombstoning with any works
    with pytest.raises(StreamDeleted):
        db.read_stream_forward("ghost2")


def test_hard_delete(db):
    db.append("s", [ev(i) for i in range(2)])
    db.delete_stream("s", 1, hard=True)
    with pytest.raises(StreamDeleted):
        db.read_stream_forward("s")
    with pytest.raises(StreamDeleted):
        db.append("s", [ev()])
    with pytest.raises(StreamDeleted):
        db.get_stream_metadata("s")
    with pytest.raises(StreamDeleted):
        db.read_stream_forward("$$s")
    db.append("$$s", [NewEvent("$metadata", b"{}")])  # still allowed
    tombstone = db.read_all_backward(None, 10).events[1]
    assert tombstone.event_type == "$streamDeleted" and tombstone.event_number == MAX_EVENT_NUMBER
    with pytest.raises(StreamDeleted):
        db.delete_stream("s", hard=True)


def test_delete_with_wrong_version(db):
    db.append("s", [ev(i) for i in range(2)])
    with pytest.raises(WrongExpectedVersion):
        db.delete_stream("s", 5)


def test_metastream_keeps_only_last(db):
    db.set_stream_metadata("s", {"$maxCount": 5})
    db.set_stream_metadata("s", {"$maxCount": 6})
    events = db.read_stream_forward("$$s").events
    assert len(events) == 1 and json.loads(events[0].data) == {"$maxCount": 6}


def test_invalid_input(db):
    with pytest.raises(InvalidInput):
        db.append("", [ev()])
    with pytest.raises(InvalidInput):
        db.append("s", [NewEvent("")])
    with pytest.raises(InvalidInput):
        db.append("s", [ev()], -3)
    with pytest.raises(InvalidInput):
        db.read_stream_forward("s", 0, 0)
    with pytest.raises(InvalidInput):
        db.read_stream_forward("s", -1, 10)
    with pytest.raises(InvalidInput):
        db.set_stream_metadata("s", {"$maxCount": -1})
    with pytest.raises(EventTooLarge):
        db.append("s", [NewEvent("big", b"x" * (64 * 1024))])
    # nothing was written by any of these
    assert db.read_all_forward(0, 10).events == []


def test_reopen_keeps_every_event(tmp_path, clock):
    path = str(tmp_path / "db")
    db = Database.open(
        path, clock=clock, chunk_size=8192, existence_filter_capacity=10_000, max_memtable_entries=50
    )
    for i in range(300):
        db.append(f"s-{i % 7}", [ev(i)])
    db.delete_stream("s-1", hard=True)
    db.close()
    db = Database.open(
        path, clock=clock, chunk_size=8192, existence_filter_capacity=10_000, max_memtable_entries=50
    )
    assert len(db.read_stream_forward("s-0", 0, 1000).events) == 43
    with pytest.raises(StreamDeleted):
        db.append("s-1", [ev()])
    db.append("s-0", [ev()], 42)
    db.close()


def test_second_process_cannot_open_the_same_folder(tmp_path):
    path = str(tmp_path / "db")
    db = Database.open(path, chunk_size=8192, existence_filter_capacity=10_000)
    with pytest.raises(DatabaseLocked):
        Database.open(path, chunk_size=8192, existence_filter_capacity=10_000)
    db.close()


def test_truncate_checkpoint_rebuilds_the_index(tmp_path, clock):
    path = str(tmp_path / "db")
    db = Database.open(
        path, clock=clock, chunk_size=8192, existence_filter_capacity=10_000, max_memtable_entries=20
    )
    for i in range(100):
        db.append("s", [ev(i)])
    cut = db.read_stream_forward("s", 60, 1).events[0].log_position
    db.log.checkpoints.truncate.write(cut)
    db.close()
    db = Database.open(
        path, clock=clock, chunk_size=8192, existence_filter_capacity=10_000, max_memtable_entries=20
    )
    assert db.read_stream_forward("s", 0, 1000).last_event_number == 59
    db.append("s", [ev()], 59)
    db.close()


class CountingQueue:
    """The writer's queue, counting what is put in it."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self._puts: list[int] = []  # list.append is atomic across threads; += on an int is not

    @property
    def count(self) -> int:
        return len(self._puts)

    def put(self, item) -> None:
        self._puts.append(1)
        self.inner.put(item)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_concurrent_appends_group_commit(db, monkeypatch):
    """Appends that arrive while the writer is busy are committed together: one commit (one fsync of
    the chunk on disk) answers them all. The writer is kept busy by a function run in it
    (``call_in_writer``) until every thread's first append waits in its queue."""
    import bisect
    import time
    from collections import Counter

    from evdb.storage.chunk import Chunk

    syncs = []
    real_flush = Chunk.flush
    monkeypatch.setattr(Chunk, "flush", lambda self: (syncs.append(self.path), real_flush(self))[1])
    commits: list[int] = []
    db.add_commit_listener(commits.append)
    running, release = threading.Event(), threading.Event()

    def busy(ctx) -> None:
        running.set()
        assert release.wait(10), "the appends never queued up"

    blocker = threading.Thread(target=db.call_in_writer, args=(busy,))
    blocker.start()
    assert running.wait(10)
    errors = []
    positions: list[int] = []

    def worker(k: int) -> None:
        try:
            for i in range(50):
                positions.append(db.append(f"w-{k}", [ev(i)], i - 1 if i else NO_STREAM).position)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    writer = db._writer
    queued = CountingQueue(writer._queue)
    writer._queue = queued
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    # the writer is busy: the writer thread takes one request off the queue and waits; the others queue.
    # Wait until all eight first appends were queued (counted as they are put: how many are still in
    # the queue depends on whether the writer thread has taken one yet)
    deadline = time.monotonic() + 10
    try:
        while queued.count < 8:
            assert time.monotonic() < deadline, f"only {queued.count} appends queued"
            time.sleep(0.001)
    finally:
        release.set()
    for t in [*threads, blocker]:
        t.join()
    assert errors == []
    for k in range(8):
        assert numbers(db.read_stream_forward(f"w-{k}", 0, 100).events) == list(range(50))
    # an append is made durable by the first commit past its record
    # the commits that made appends durable (the busy function's own commit at 0 wrote nothing)
    distinct = sorted({c for c in commits if c > 0})
    groups = Counter(bisect.bisect_right(distinct, p) for p in positions)
    assert len(positions) == 400 and max(groups) < len(distinct)
    largest = max(groups.values())
    assert largest >= 8, f"the eight queued appends were not committed together (largest group {largest})"
    assert len(distinct) <= 400 - 7
    if not db.is_in_memory:
        assert 0 < len(syncs) <= len(distinct)  # one fsync per commit, not one per append


def test_commit_listener_sees_positions(db):
    seen = []
    db.add_commit_listener(seen.append)
    db.append("s", [ev()])
    assert seen and seen[-1] == db.committed_position


def test_epoch_is_a_system_event_in_all(db):
    db.write_epoch(0, uuid.uuid4())
    events = db.read_all_forward(0, 10).events
    assert events[0].stream == "$epochs" and events[0].event_type == "$epoch-information"


def test_corrupt_chunk_is_named_at_start(tmp_path, clock):
    from evdb.errors import CorruptedFile

    path = str(tmp_path / "db")
    db = Database.open(path, clock=clock, chunk_size=8192, existence_filter_capacity=10_000)
    for i in range(100):
        db.append("s", [ev(i)])
    first_chunk = db.log.distinct_chunks()[0].path
    db.close()
    with open(first_chunk, "r+b") as f:
        f.seek(500)
        byte = f.read(1)
        f.seek(500)
        f.write(bytes([byte[0] ^ 0x55]))
    with pytest.raises(CorruptedFile) as err:
        Database.open(path, clock=clock, chunk_size=8192, existence_filter_capacity=10_000)
    assert first_chunk in str(err.value)


def test_each_epoch_record_is_read_once(tmp_path):
    """Gossip asks for the newest epoch every round and each follower's handshake for 64; old epochs
    may sit in chunks left to the archive, one download each: each record is read once while open."""
    db = Database.open(str(tmp_path / "db"), chunk_size=1 << 16)
    try:
        for n in range(3):
            db.write_epoch(n, uuid.uuid4())
            db.append(f"s-{n}", [ev(), ev()])
        reads: list[int] = []
        original = db._log.read_record

        def counting(position, *args, **kwargs):
            reads.append(position)
            return original(position, *args, **kwargs)

        db._log.read_record = counting  # type: ignore[method-assign]
        first = db.epochs()
        assert [e["epochNumber"] for e in first] == [2, 1, 0] and len(reads) == 3
        first[0]["epochNumber"] = 99  # a caller's change stays its own
        assert [e["epochNumber"] for e in db.epochs()] == [2, 1, 0] and len(reads) == 3
        db.write_epoch(3, uuid.uuid4())
        assert [e["epochNumber"] for e in db.epochs()] == [3, 2, 1, 0] and len(reads) == 4
    finally:
        db.close()
