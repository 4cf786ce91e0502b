"""Metadata the scavenge cannot represent, already in a log (written by an older version, before
validation refused it): the scavenge clamps or ignores the values and completes, every time.

The records are written through the writer context, which does not validate metadata, so the log
holds exactly what an older node could have written.
"""

from __future__ import annotations

import json

import pytest

from evdb.storage.records import MAX_EVENT_NUMBER
from evdb.streams import NewEvent, StreamMetadata


def ev(i: int = 0) -> NewEvent:
    return NewEvent.json("E", {"i": i})


def write_raw_metadata(harness, stream: str, body: str) -> None:
    event = NewEvent("$metadata", body.encode(), is_json=True)
    harness.db.call_in_writer(lambda ctx: ctx.append("$$" + stream, [event]))


HUGE = [
    ("$maxAge", 2**63),
    ("$maxAge", 2**64 + 5),
    ("$maxAge", 2**63 - 1),  # fits SQLite, but not as ticks
    ("$maxAge", 10**40),
    ("$maxCount", 2**63),
    ("$maxCount", 10**30),
    ("$tb", 2**63),
    ("$tb", 2**64),
]


@pytest.mark.parametrize(("key", "value"), HUGE)
def test_scavenge_completes_over_unrepresentable_metadata_in_the_log(harness, clock, key, value):
    harness.db.append("s", [ev(i) for i in range(3)])
    write_raw_metadata(harness, "s", json.dumps({key: value}))
    # a neighbour with something to remove, so that the chunk is executed
    harness.db.append("n", [ev(i) for i in range(3)])
    harness.db.set_stream_metadata("n", {"$maxCount": 1})
    clock.advance(10)
    assert harness.scavenge()[1] == "Success"
    # a second run (and one after a restart) completes too: nothing is stuck in the accumulation
    harness.db.append("t", [ev()])
    assert harness.scavenge()[1] == "Success"
    harness.reopen()
    harness.db.append("t", [ev(1)])
    assert harness.scavenge()[1] == "Success"
    survivors = [n for s, n in harness.survivors() if s == "s"]
    if key == "$tb":  # truncated before a number past the end: only the last event stays
        assert survivors == [2]
    else:  # no limit that removes anything
        assert survivors == [0, 1, 2]
    assert [n for s, n in harness.survivors() if s == "n"] == [2]


def test_scavenge_completes_after_the_bad_metadata_is_replaced_and_the_stream_hard_deleted(harness):
    harness.db.append("s", [ev(i) for i in range(3)])
    write_raw_metadata(harness, "s", json.dumps({"$maxAge": 2**63, "$tb": 2**64}))
    harness.complete_chunk()  # the reset below lands in another chunk, accumulated separately
    harness.db.set_stream_metadata("s", {})
    harness.db.delete_stream("s", hard=True)
    assert harness.scavenge()[1] == "Success"


def test_the_scavenge_reads_limits_it_can_represent():
    from evdb.scavenge.accumulator import scavenge_limits

    limits = scavenge_limits(StreamMetadata.from_bytes(json.dumps({"$maxAge": 2**70}).encode()))
    assert limits == (None, None, None)  # an age no event can reach: no limit
    limits = scavenge_limits(
        StreamMetadata.from_bytes(json.dumps({"$maxCount": 2**70, "$tb": 2**64}).encode())
    )
    assert limits == (None, MAX_EVENT_NUMBER, MAX_EVENT_NUMBER)
    assert scavenge_limits(StreamMetadata(max_age=60, max_count=2, truncate_before=5)) == (60, 2, 5)


def test_scavenge_completes_over_an_age_an_older_version_saved_in_the_scavenge_database(harness, clock):
    """An older version stored any 64-bit ``$maxAge`` in the scavenge database (and then failed in
    every chunk execution: the age in ticks does not fit 64 bits); this one reads it as no limit."""
    from evdb.scavenge.state import StreamRow

    harness.db.append("s", [ev(i) for i in range(3)])
    harness.db.append("n", [ev(i) for i in range(3)])
    harness.db.set_stream_metadata("n", {"$maxCount": 1})
    with harness.service.state.transaction():
        harness.service.state.save_row(StreamRow("s", max_age=2**62))
    clock.advance(10)
    assert harness.scavenge()[1] == "Success"
    assert [n for s, n in harness.survivors() if s == "s"] == [0, 1, 2]
    assert [n for s, n in harness.survivors() if s == "n"] == [2]
