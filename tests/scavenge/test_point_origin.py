"""The progress of a run says which scavenge point it goes to and where that point came from: written
by this run ("new"), written before it (by an earlier scavenge here, or by another node's, replicated:
"reused"), or the point of a stopped run this one resumes ("resumed")."""

from __future__ import annotations

import json

from evdb.scavenge.point import write_point
from evdb.scavenge.service import ScavengeRequest
from evdb.streams import NewEvent


def _write(h) -> None:
    h.db.append("s", [NewEvent("E", json.dumps({"i": i}).encode(), is_json=True) for i in range(5)])
    h.db.set_stream_metadata("s", {"$maxCount": 1})


def _point(h) -> dict:
    progress = h.service.last_progress()
    assert progress is not None and progress.point is not None
    return progress.point


def test_the_point_of_a_run_is_new_reused_or_resumed(harness):
    _write(harness)
    harness.scavenge()
    assert _point(harness)["origin"] == "new"
    assert _point(harness)["number"] == 0
    first = write_point(harness.db, 0)  # as if another node's scavenge wrote it and it replicated here
    harness.scavenge()
    assert _point(harness)["origin"] == "reused"
    assert _point(harness)["number"] == first.number
    assert _point(harness)["position"] == first.position

    def stop_in_calculation(stage: str) -> None:
        if stage == "Calculating":
            harness.service._current.stop()  # what DELETE /admin/scavenge/current does

    harness.service.stage_hook = stop_in_calculation
    assert harness.scavenge()[1] == "Stopped"
    stopped = _point(harness)
    assert stopped["origin"] == "new" and stopped["number"] == first.number + 1
    harness.service.stage_hook = lambda stage: None
    assert harness.scavenge()[1] == "Success"
    assert _point(harness)["origin"] == "resumed"
    assert _point(harness)["number"] == stopped["number"]


def test_the_running_progress_names_the_point_and_its_origin(harness):
    """``GET /admin/scavenge/progress`` while the run goes: ``scavengePoint`` with its origin."""
    import threading

    _write(harness)
    reached = threading.Event()
    release = threading.Event()

    def hold(stage: str) -> None:
        if stage == "Calculating":
            reached.set()
            release.wait(30)

    harness.service.stage_hook = hold
    harness.service.start(ScavengeRequest())
    try:
        assert reached.wait(30), "the run did not reach the calculation"
        body = harness.service.progress()
        assert body is not None
        assert body["scavengePoint"]["origin"] == "new"
        assert body["scavengePoint"]["number"] == 0
    finally:
        release.set()
        assert harness.service.wait(60)


def test_the_progress_names_each_phase_s_time_and_what_a_stopped_run_executed(harness):
    """For the dashboard: every phase a run finished with its seconds (a run that ends in a second
    still shows its Calculation), and a resumed run says through which chunk the stopped one had
    executed (those chunks are done, not pending)."""
    _write(harness)
    harness.complete_chunk()
    harness.scavenge()
    body = harness.service.last_progress().to_json(0.0)
    assert [p["phase"] for p in body["phaseSeconds"]] == [
        "Beginning",
        "Accumulation",
        "Calculation",
        "Chunk execution",
        "Chunk merging",
        "Index execution",
        "Cleaning",
    ]
    assert all(p["seconds"] >= 0 for p in body["phaseSeconds"])
    assert body["executedThrough"] == -1

    _write(harness)
    harness.complete_chunk()

    def stop_after_execution(stage: str) -> None:
        if stage == "MergingChunks":
            harness.service._current.stop()

    harness.service.stage_hook = stop_after_execution
    assert harness.scavenge()[1] == "Stopped"
    harness.service.stage_hook = lambda stage: None
    assert harness.scavenge()[1] == "Success"
    body = harness.service.last_progress().to_json(0.0)
    assert body["scavengePoint"]["origin"] == "resumed"
    assert body["executedThrough"] >= 1  # the stopped run had executed the completed chunks
    phases = [p["phase"] for p in body["phaseSeconds"]]
    assert phases[0] == "Beginning" and "Calculation" not in phases and phases[-1] == "Cleaning"
