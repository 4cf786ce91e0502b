"""``$maxAge`` weights count only the records a chunk still holds that a run would remove: a run right
after a completed scavenge executes nothing, although the expired records' index entries were left by
it, and what expires later is still found (with merging and without, across a restart)."""

from __future__ import annotations

import pytest

from evdb.streams import NewEvent

START = 1_700_000_000.0


def ev(i) -> NewEvent:
    return NewEvent.json("E", {"i": i})


def executed(harness) -> list[int]:
    """The chunks the run's chunk execution rewrote (not the merging phase's merges)."""
    return sorted(
        c.start_number for c in harness.service.last_progress().chunks if c.executed and not c.merged
    )


@pytest.mark.parametrize("merging", [False, True])
def test_a_rerun_after_a_max_age_scavenge_weighs_and_executes_nothing(make_harness, tmp_path, clock, merging):
    harness = make_harness(tmp_path, merging)
    harness.db.append("a", [ev(0), ev(1)])
    clock.advance(120)
    harness.db.append("a", [ev(2), ev(3)])
    harness.db.set_stream_metadata("a", {"$maxAge": 60})
    assert harness.scavenge()[1] == "Success"
    assert harness.service.last_progress().weights == {0: 4.0}
    assert executed(harness) == [0]
    assert harness.survivors() == [("a", 2), ("a", 3), ("$$a", 0)]
    for _ in range(2):
        assert harness.scavenge()[1] == "Success"
        assert harness.service.last_progress().weights == {}
        assert executed(harness) == []
        harness.reopen()  # the same after a restart
    assert harness.scavenge()[1] == "Success"
    assert executed(harness) == []

    clock.advance(61)  # now event 2 expires too (3, the last, stays)
    harness.db.append("other", [ev(0)])
    assert harness.scavenge()[1] == "Success"
    assert harness.service.last_progress().weights.get(0) == 2.0
    assert executed(harness)[0] == 0
    assert harness.survivors() == [("a", 3), ("$$a", 0), ("other", 0)]
    assert harness.index_numbers("a") == [3]
    assert harness.scavenge()[1] == "Success"
    assert executed(harness) == []


@pytest.mark.parametrize("merging", [False, True])
def test_whole_chunks_older_than_the_cutoff_are_weighed_once(make_harness, tmp_path, clock, merging):
    harness = make_harness(tmp_path, merging)
    harness.db.append("a", [ev(i) for i in range(3)])
    harness.complete_chunk()
    clock.advance(120)
    harness.db.append("a", [ev(i) for i in range(3, 5)])
    harness.db.set_stream_metadata("a", {"$maxAge": 60})
    assert harness.scavenge(threshold=1000)[1] == "Success"  # weighed, skipped
    assert harness.service.last_progress().weights == {0: 6.0}
    assert executed(harness) == []
    assert harness.index_numbers("a") == [3, 4]  # the discard point passed them: reads skip them
    assert harness.scavenge(threshold=1000)[1] == "Success"
    assert harness.service.last_progress().weights == {0: 6.0}  # kept, not counted again
    assert harness.scavenge()[1] == "Success"
    assert executed(harness) == [0]
    assert harness.survivors() == [("a", 3), ("a", 4), ("$$a", 0)]
    assert harness.scavenge()[1] == "Success"
    assert harness.service.last_progress().weights == {}
    assert executed(harness) == []


@pytest.mark.parametrize("merging", [False, True])
def test_index_only_entries_weigh_nothing_and_later_expiries_are_found(
    make_harness, tmp_path, clock, merging
):
    """A wall clock set back writes an older record after a younger one: the older is removed from its
    chunk, but the discard point stops at the younger, so its index entry stays (index-only). Later
    runs weigh it nothing; once the younger expires too, both go from the index."""
    harness = make_harness(tmp_path, merging)
    clock.set_time(START + 1000)
    harness.db.append("a", [ev(0)])
    clock.set_time(START)  # an NTP correction: 1, 2 are stamped before 0
    harness.db.append("a", [ev(1), ev(2)])
    harness.db.set_stream_metadata("a", {"$maxAge": 60})
    clock.set_time(START + 1000)
    assert harness.scavenge()[1] == "Success"
    assert executed(harness) == [0]
    assert harness.survivors() == [("a", 0), ("a", 2), ("$$a", 0)]
    assert harness.index_numbers("a") == [0, 1, 2]  # 1 is index-only now
    harness.reopen()
    assert harness.scavenge()[1] == "Success"
    assert harness.service.last_progress().weights == {}
    assert executed(harness) == []

    clock.advance(100)
    harness.db.append("a", [ev(3)])  # 2 is not the last any more; 0 has expired
    assert harness.scavenge()[1] == "Success"
    assert harness.service.last_progress().weights.get(0) == 4.0  # 0 and 2; 1 is gone already
    assert 0 in executed(harness)
    assert harness.survivors() == [("$$a", 0), ("a", 3)]
    assert harness.index_numbers("a") == [3]
    assert [e.event_number for e in harness.db.read_stream_forward("a").events] == [3]
