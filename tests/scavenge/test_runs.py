"""Stop and resume, merging, syncOnly, existing points, interruption, threads, throttle, streams."""

from __future__ import annotations

import json
import os

import pytest

from evdb.errors import StreamNotFound
from evdb.scavenge.scavenger import STAGES
from evdb.scavenge.service import ScavengeRequest
from evdb.storage.records import MAX_EVENT_NUMBER
from evdb.streams import NewEvent


def ev(i: int = 0, size: int = 200) -> NewEvent:
    return NewEvent("E", json.dumps({"i": i, "pad": "x" * size}).encode(), is_json=True)


def fill(h) -> None:
    """Several chunks of events, half of them removable in various ways."""
    db = h.db
    for k in range(6):
        db.append(f"count-{k}", [ev(i) for i in range(40)])
        db.set_stream_metadata(f"count-{k}", {"$maxCount": 5})
        db.append(f"tomb-{k}", [ev(i) for i in range(30)])
        db.delete_stream(f"tomb-{k}", hard=True)
        db.append(f"keep-{k}", [ev(i) for i in range(20)])
        db.append(f"tb-{k}", [ev(i) for i in range(20)])
        db.set_stream_metadata(f"tb-{k}", {"$tb": 15})


@pytest.mark.parametrize("stage", [s for s, _ in STAGES])
def test_stop_at_each_stage_then_resume_gives_the_same_result(tmp_path, make_harness, stage):
    control = make_harness(tmp_path / "control")
    fill(control)
    control.scavenge()
    expected = control.survivors()
    control.close()

    h = make_harness(tmp_path / "stopped")
    fill(h)

    def stop_at(s: str) -> None:
        if s == stage:
            h.service._current.stop()  # what DELETE /admin/scavenge/current does, from inside the run

    h.service.stage_hook = stop_at
    assert h.scavenge()[1] == "Stopped"
    h.service.stage_hook = lambda s: None
    h.reopen()  # resume survives a restart too
    assert h.scavenge()[1] == "Success"
    assert h.survivors() == expected


def test_merging_on_and_off(tmp_path, make_harness):
    results = {}
    for merging in (False, True):
        h = make_harness(tmp_path / str(merging), merging=merging)
        fill(h)
        h.scavenge()
        names = sorted(n for n in os.listdir(h.path / "db") if n.startswith("chunk-"))
        results[merging] = (names, h.survivors())
    assert results[True][1] == results[False][1]
    assert len(results[True][0]) < len(results[False][0])
    assert any(not n.endswith(".000000") for n in results[True][0])


def test_sync_only_with_no_point_does_nothing(harness):
    harness.db.append("s", [ev(i) for i in range(3)])
    harness.db.set_stream_metadata("s", {"$maxCount": 1})
    harness.scavenge(sync_only=True)
    assert harness.service.last_progress().point is None
    assert ("s", 0) in harness.survivors()
    with pytest.raises(StreamNotFound):
        harness.db.read_stream_forward("$scavengePoints")


def test_a_later_scavenge_goes_to_an_existing_unreached_point(harness):
    from evdb.scavenge.point import write_point

    harness.db.append("s", [ev(i) for i in range(3)])
    harness.db.set_stream_metadata("s", {"$maxCount": 1})
    point = write_point(harness.db, 0)  # as if replicated from another node
    harness.scavenge(sync_only=True)
    assert harness.service.last_progress().point["number"] == point.number
    assert harness.survivors() == [("s", 2), ("$$s", 0)]
    # and now there is no newer point: syncOnly does nothing, a normal start writes point #1
    harness.scavenge(sync_only=True)
    assert harness.service.last_progress().point is None
    harness.scavenge()
    assert harness.service.last_progress().point["number"] == point.number + 1


def test_scavenge_streams_record_the_run(harness):
    harness.db.append("s", [ev(i) for i in range(100)])  # more than a memtable: PTables exist
    harness.db.set_stream_metadata("s", {"$maxCount": 1})
    harness.db.index.wait_idle()
    scavenge_id, _ = harness.scavenge()
    events = harness.db.read_stream_forward(f"$scavenges-{scavenge_id}").events
    types = [e.event_type for e in events]
    assert types[0] == "$scavengeStarted" and types[-1] == "$scavengeCompleted"
    assert "$scavengeChunksCompleted" in types and "$scavengeIndexCompleted" in types
    completed = json.loads(events[-1].data)
    assert completed["result"] == "Success" and completed["scavengeId"] == scavenge_id
    assert set(completed) >= {
        "nodeEndpoint",
        "result",
        "error",
        "timeTaken",
        "spaceSaved",
        "maxChunkScavenged",
    }
    links = harness.db.read_stream_forward("$scavenges").events
    assert [link.data.decode() for link in links] == [
        f"0@$scavenges-{scavenge_id}",
        f"{len(events) - 1}@$scavenges-{scavenge_id}",
    ]
    metadata, _ = harness.db.get_stream_metadata(f"$scavenges-{scavenge_id}")
    assert metadata.max_age == 30 * 86400


def test_interrupted_scavenge_is_marked_and_resumes(harness):
    fill(harness)
    harness.service.state.update_checkpoint(running=None)

    def crash(stage: str) -> None:
        if stage == "ExecutingChunks":
            raise SystemExit  # the thread dies as if the process had

    harness.service.stage_hook = crash
    harness.service.start(ScavengeRequest())
    harness.service.wait(30)
    scavenge_id = harness.service._last[0]
    harness.service.state.update_checkpoint(running=scavenge_id)  # what a killed process leaves behind
    harness.reopen()
    assert harness.service.mark_interrupted() == scavenge_id
    last = harness.db.read_stream_backward(f"$scavenges-{scavenge_id}", None, 1).events[0]
    assert json.loads(last.data)["result"] == "Interrupted"
    assert harness.scavenge()[1] == "Success"
    assert ("tomb-0", MAX_EVENT_NUMBER) in harness.survivors() and ("tomb-0", 0) not in harness.survivors()


def test_multithreaded_scavenge_gives_the_same_result(tmp_path, make_harness):
    outcomes = []
    for threads in (1, 3):
        h = make_harness(tmp_path / str(threads))
        fill(h)
        h.scavenge(threads=threads)
        outcomes.append(h.survivors())
    assert outcomes[0] == outcomes[1]


def test_validation_messages():
    with pytest.raises(Exception, match="throttlePercent must be between 1 and 100 inclusive"):
        ScavengeRequest(throttle_percent=0).validate()
    with pytest.raises(Exception, match="throttlePercent must be 100 for a multi-threaded scavenge"):
        ScavengeRequest(threads=2, throttle_percent=50).validate()
    with pytest.raises(Exception, match="threads must be a 1 or above"):
        ScavengeRequest(threads=0).validate()


def test_second_start_while_running_is_refused(harness):
    from evdb.errors import ScavengeAlreadyRunning

    fill(harness)
    errors = []

    def hook(stage: str) -> None:
        if stage == "Accumulating":
            try:
                harness.service.start(ScavengeRequest())
            except ScavengeAlreadyRunning as exc:
                errors.append(exc)

    harness.service.stage_hook = hook
    harness.scavenge()
    assert len(errors) == 1 and str(errors[0]) == "Scavenge is already running"
