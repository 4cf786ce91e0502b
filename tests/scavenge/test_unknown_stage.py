"""A scavenge state whose checkpoint names a stage evdb does not know (the state file changed under the
run) fails the run with an error that names the state file and the stage."""

from __future__ import annotations

import json

from evdb.streams import NewEvent


def test_a_checkpoint_naming_an_unknown_stage_fails_the_run_naming_the_state(harness):
    for k in range(3):
        harness.db.append(f"s-{k}", [NewEvent("E", b"{}", is_json=True) for _ in range(20)])

    def stop_at(stage: str) -> None:
        if stage == "Calculating":
            harness.service._current.stop()  # what DELETE /admin/scavenge/current does

    harness.service.stage_hook = stop_at
    assert harness.scavenge()[1] == "Stopped"
    harness.service.stage_hook = lambda stage: None
    harness.service.state.update_checkpoint(stage="Reticulating")  # the resumed run reads this stage

    scavenge_id, result = harness.scavenge()

    assert result == "Errored"
    completed = harness.db.read_stream_backward(f"$scavenges-{scavenge_id}", None, 1).events[0]
    error = json.loads(completed.data)["error"]
    assert "no known stage: 'Reticulating'" in error
    assert harness.service.state.path in error
