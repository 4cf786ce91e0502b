"""The reference's "Facts from KurrentDB's own scavenge tests", on evdb (merging off, threshold 0)."""

from __future__ import annotations

import pytest

from evdb.errors import StreamNotFound
from evdb.storage.records import MAX_EVENT_NUMBER
from evdb.streams import NewEvent


def ev(i: int = 0) -> NewEvent:
    return NewEvent.json("E", {"i": i})


def test_max_count_1_keeps_the_last_event_and_the_metadata(harness):
    harness.db.append("s", [ev(i) for i in range(4)])
    harness.db.set_stream_metadata("s", {"$maxCount": 1})
    assert harness.scavenge()[1] == "Success"
    assert harness.survivors() == [("s", 3), ("$$s", 0)]
    assert harness.index_numbers("s") == [3]


def test_truncate_before_3_keeps_event_3(harness):
    harness.db.append("s", [ev(i) for i in range(4)])
    harness.db.set_stream_metadata("s", {"$tb": 3})
    harness.scavenge()
    assert harness.survivors() == [("s", 3), ("$$s", 0)]


def test_truncate_before_beyond_the_end_keeps_the_last_event(harness):
    harness.db.append("s", [ev(i) for i in range(2)])
    harness.db.set_stream_metadata("s", {"$tb": 4})
    harness.scavenge()
    assert harness.survivors() == [("s", 1), ("$$s", 0)]


def test_max_age_removes_expired_from_the_chunk_and_the_index(harness, clock):
    """The records ``$maxAge`` expired go from their chunk, and their index entries with them (the
    discard point moves past them): no later run weighs them again."""
    harness.db.append("s", [ev(0), ev(1)])
    clock.advance(120)
    harness.db.append("s", [ev(2), ev(3)])
    harness.db.set_stream_metadata("s", {"$maxAge": 60})
    harness.scavenge()
    assert harness.survivors() == [("s", 2), ("s", 3), ("$$s", 0)]
    assert harness.index_numbers("s") == [2, 3]
    assert [e.event_number for e in harness.db.read_stream_forward("s").events] == [2, 3]


def test_max_age_expires_only_after_effective_now_passes(harness, clock):
    harness.db.append("s", [ev(0), ev(1)])
    harness.db.set_stream_metadata("s", {"$maxAge": 60})
    harness.scavenge()  # EffectiveNow is now: nothing is old enough
    assert harness.survivors() == [("s", 0), ("s", 1), ("$$s", 0)]
    clock.advance(61)
    harness.db.append("other", [ev()])
    harness.scavenge()
    assert ("s", 0) not in harness.survivors() and ("s", 1) in harness.survivors()  # the last event stays


def test_one_event_and_a_tombstone_leave_only_the_tombstone(harness):
    harness.db.append("s", [ev()])
    harness.db.set_stream_metadata("s", {"$maxCount": 5})
    harness.db.delete_stream("s", hard=True)
    harness.scavenge()
    assert harness.survivors() == [("s", MAX_EVENT_NUMBER)]
    assert harness.index_numbers("s") == [MAX_EVENT_NUMBER]
    assert harness.index_numbers("$$s") == []


def test_soft_delete_then_recreate_keeps_the_new_event_and_its_metadata(harness):
    harness.db.append("s", [ev(i) for i in range(3)])
    harness.db.delete_stream("s")
    harness.db.append("s", [ev(3)])
    harness.scavenge()
    assert harness.survivors() == [("s", 3), ("$$s", 1)]
    assert [e.event_number for e in harness.db.read_stream_forward("s").events] == [3]


def test_soft_deleted_stream_can_be_recreated_after_a_scavenge(harness):
    harness.db.append("s", [ev(i) for i in range(3)])
    harness.db.delete_stream("s")
    harness.scavenge()
    with pytest.raises(StreamNotFound):
        harness.db.read_stream_forward("s")
    harness.db.append("s", [ev(9)], -1)
    assert [e.event_number for e in harness.db.read_stream_forward("s").events] == [3]


def test_two_metadata_records_keep_only_the_newer(harness):
    harness.db.append("s", [ev()])
    harness.db.set_stream_metadata("s", {"$maxCount": 10})
    harness.db.set_stream_metadata("s", {"$maxCount": 20})
    harness.scavenge()
    assert harness.survivors() == [("s", 0), ("$$s", 1)]


def test_weight_of_max_count(harness):
    harness.db.append("a", [ev(i) for i in range(3)])
    harness.db.set_stream_metadata("a", {"$maxCount": 1})
    harness.scavenge(threshold=1000)  # weigh without executing
    assert sum(harness.service.last_progress().weights.values()) == 4


def test_weight_of_max_age_counts_the_expired_records(harness, clock):
    """A chunk straddling the cut-off weighs 2 for each record older than it (their timestamps are
    read), nothing for the younger ones."""
    harness.db.append("a", [ev(0), ev(1)])
    clock.advance(120)
    harness.db.append("a", [ev(2), ev(3)])
    harness.db.set_stream_metadata("a", {"$maxAge": 60})
    harness.scavenge(threshold=1000)
    assert sum(harness.service.last_progress().weights.values()) == 4


@pytest.mark.parametrize(
    ("threshold", "executed"), [(-1, [True, True, True]), (0, [True, True, False]), (2, [False, True, False])]
)
def test_threshold_decides_which_chunks_are_executed(harness, threshold, executed):
    db = harness.db
    db.append("a", [ev(0), ev(1)])
    harness.complete_chunk()
    db.append("b", [ev(0), ev(1), ev(2)])
    harness.complete_chunk()
    db.append("c", [ev()])
    db.set_stream_metadata("a", {"$maxCount": 1})
    db.set_stream_metadata("b", {"$maxCount": 1})
    harness.scavenge(threshold=threshold)
    progress = harness.service.last_progress()
    assert [progress.weights.get(n, 0) for n in range(3)] == [2, 4, 0]
    reports = sorted((c.start_number, c.executed) for c in progress.chunks if not c.merged)
    assert [e for _, e in reports] == executed
    survivors = harness.survivors()
    assert (("a", 0) in survivors) == (not executed[0])  # a skipped chunk keeps its records...
    assert harness.index_numbers("a") == [1]  # ...but loses their index entries
    assert ("b", 0) not in survivors and ("b", 1) not in survivors


def test_all_before_and_after(harness):
    harness.db.append("keep", [ev()])
    harness.db.append("gone", [ev(i) for i in range(3)])
    harness.db.delete_stream("gone", hard=True)
    before = harness.survivors()
    assert len([s for s in before if s[0] == "gone"]) == 4
    harness.scavenge()
    assert harness.survivors() == [("keep", 0), ("gone", MAX_EVENT_NUMBER)]
    # surviving events keep their positions
    kept = harness.db.read_stream_forward("keep").events[0]
    assert harness.db.read_all_forward(kept.log_position, 1).events[0].stream == "keep"
