"""Calculation works on the streams that changed since the last scavenge point (new metadata, a
tombstone, new events, a new hash collision) and on those with ``$maxAge`` (whose cut-off moves with
time), not on every stream the scavenge database knows; the weights and the result are the same as a
calculation over every stream."""

from __future__ import annotations

import sqlite3

from evdb.scavenge.state import ScavengeState
from evdb.streams import NewEvent


def ev(i: int) -> NewEvent:
    return NewEvent("E", f'{{"i": {i}}}'.encode(), is_json=True)


def fill(h) -> None:
    db = h.db
    for k in range(40):
        db.append(f"count-{k}", [ev(i) for i in range(10)])
        db.set_stream_metadata(f"count-{k}", {"$maxCount": 2})
    for k in range(20):
        db.append(f"tomb-{k}", [ev(i) for i in range(5)])
        db.delete_stream(f"tomb-{k}", hard=True)
    db.append("aged", [ev(i) for i in range(5)])
    db.set_stream_metadata("aged", {"$maxAge": 60})


def grow(h) -> None:
    """What happens between the two scavenges: one stream gets events, one a new limit, one a tombstone."""
    h.db.append("count-3", [ev(i) for i in range(6)])
    h.db.set_stream_metadata("count-7", {"$maxCount": 1})
    h.db.append("tomb-new", [ev(0)])
    h.db.delete_stream("tomb-new", hard=True)
    h.clock.advance(120)


def test_a_second_scavenge_calculates_only_the_streams_that_changed(tmp_path, make_harness):
    full = make_harness(tmp_path / "full")
    fill(full)
    assert full.scavenge()[1] == "Success"
    h = make_harness(tmp_path / "incremental")
    fill(h)
    assert h.scavenge()[1] == "Success"
    rows = h.service.state.stream_count()
    assert rows > 100

    grow(full)
    full.service.state.execute("UPDATE streams SET dirty = 1")  # as if every stream had changed
    assert full.scavenge()[1] == "Success"
    grow(h)
    assert h.scavenge()[1] == "Success"

    progress = h.service.last_progress()
    # count-3, count-7 and $$count-7, tomb-new, aged ($maxAge), the scavenge history streams
    assert progress.streams_total <= 12, progress.streams_total
    assert full.service.last_progress().streams_total >= rows
    assert progress.weights == full.service.last_progress().weights
    assert h.survivors() == full.survivors()
    assert h.index_numbers("count-3") == full.index_numbers("count-3") == [14, 15]


def test_a_scavenge_database_of_an_earlier_version_calculates_every_stream_once(tmp_path):
    path = str(tmp_path / "scavenging.db")
    conn = sqlite3.connect(path)
    conn.execute(
        "CREATE TABLE streams (stream TEXT PRIMARY KEY, tombstoned INTEGER NOT NULL DEFAULT 0, "
        "max_age INTEGER, max_count INTEGER, truncate_before INTEGER, meta_number INTEGER, "
        "last_number INTEGER, discard_point INTEGER NOT NULL DEFAULT 0)"
    )
    conn.execute("INSERT INTO streams (stream, tombstoned) VALUES ('a', 1), ('b', 0)")
    conn.commit()
    conn.close()
    state = ScavengeState(path)
    try:
        assert [r.stream for r in state.rows_to_calculate(None, 10)] == ["a", "b"]
        row = state.row("a")
        assert row is not None
        state.save_row(row, dirty=False)
        assert [r.stream for r in state.rows_to_calculate(None, 10)] == ["b"]
        assert state.count_to_calculate() == 1
    finally:
        state.close()
