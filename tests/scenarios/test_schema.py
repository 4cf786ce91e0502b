"""Scenario files are validated before anything runs, with the line of each problem; the schema and
docs/scenarios.md cannot drift apart; JSON expectations; the recorder writes replayable scenarios."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from evdb.scenario import STEP_KINDS, ScenarioInvalid, load_scenario, parse_scenario
from evdb.scenario.cli import EXIT_INVALID
from evdb.scenario.matching import check_json
from evdb.scenario.schema import CLUSTER_FIELDS, COMMON_STEP_FIELDS, DASHBOARD_FIELDS, TOP_LEVEL_FIELDS

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = sorted((ROOT / "scenarios").glob("*.yaml"))

GOOD = """\
name: demo
cluster:
  nodes: 3
steps:
  - write: {stream: a, count: 5}
  - press: s
  - fill: {field: "#threshold", value: 5}
  - wait_screen: {widget: "#scavenge-panel", contains: Running, timeout: 5}
  - expect_http:
      node: follower
      path: /admin/scavenge/progress
      json: {running: false, "last.chunks[0].executed": {eq: true}}
  - screenshot: done
"""


def problems(text: str) -> list[tuple[int, str]]:
    with pytest.raises(ScenarioInvalid) as info:
        parse_scenario(text, "t.yaml")
    return info.value.problems


def test_a_valid_scenario_gets_defaults_and_line_numbers():
    scenario = parse_scenario(GOOD, "t.yaml")
    assert scenario.cluster == {
        "nodes": 3,
        "replicas": 0,
        "chunk_size": "64KiB",
        "insecure": False,
        "options": {},
        "timeout": 60,
        "archive": {},
    }
    assert scenario.dashboard["size"] == [120, 36]
    assert [(s.index, s.line, s.kind) for s in scenario.steps] == [
        (1, 5, "write"),
        (2, 6, "press"),
        (3, 7, "fill"),
        (4, 8, "wait_screen"),
        (5, 9, "expect_http"),
        (6, 13, "screenshot"),
    ]
    write, press, fill = scenario.steps[:3]
    assert write.args == {
        "stream": "a",
        "count": 5,
        "event_type": "ScenarioEvent",
        "size": 0,
        "node": "leader",
        "background": False,
    }
    assert press.args == {"keys": "s"}
    assert fill.args == {"field": "#threshold", "value": "5"}  # a number typed as text
    assert scenario.steps[3].describe() == "step 4 (line 8) wait_screen"


def test_an_unknown_step_is_reported_with_its_line():
    text = GOOD.replace("  - press: s\n", "  - presss: s\n")
    [(line, message)] = problems(text)
    assert line == 6 and "unknown step 'presss' in step 2" in message


def test_a_missing_field_is_reported_with_the_steps_line():
    text = GOOD.replace('  - fill: {field: "#threshold", value: 5}', '  - fill: {field: "#threshold"}')
    [(line, message)] = problems(text)
    assert line == 7 and "missing field 'value' in step 3 (fill)" in message


def test_bad_values_are_reported_with_their_own_lines_all_at_once():
    text = GOOD.replace("count: 5", "count: many").replace("timeout: 5}", "timeout: -1}")
    text = text.replace("nodes: 3", "nodes: 12")
    found = problems(text)
    assert [line for line, _ in found] == [3, 5, 8]
    assert "'nodes' in cluster must be at most 9, not 12" in found[0][1]
    assert "'count' in step 1 (write) must be an integer, not 'many'" in found[1][1]
    assert "'timeout' in step 4 (wait_screen) must be at least 0, not -1" in found[2][1]


def test_unknown_fields_operators_and_programs_are_refused():
    text = GOOD.replace("count: 5", "count: 5, colour: red")
    text = text.replace("{eq: true}", "{almost: true}")
    text += "  - run: {argv: [rm, -rf, /]}\n  - press: {keys: [s, 1]}\n"
    found = problems(text)
    assert any(line == 5 and "unknown field 'colour'" in m for line, m in found)
    assert any(line == 12 and "one operator of" in m for line, m in found)
    assert len(found) == 4  # a bad value is not reported missing too
    assert any(line == 14 and "must start with one of evdb, evdb-redact" in m for line, m in found)
    assert any(line == 15 and "'keys'" in m and "a string or a list of strings" in m for line, m in found)


def test_structure_errors():
    assert problems("")[0] == (1, "the file is empty")
    assert "not valid YAML" in problems("name: [\n")[0][1]
    found = problems("name: x\ncluster: {}\nsteps:\n  - press: s\n    click: '#a'\n")
    assert found[0][0] == 4 and "one key" in found[0][1]
    assert any("missing field 'steps'" in m for _, m in problems("name: x\ncluster: {}\n"))
    dup = problems("name: x\ncluster: {}\nsteps:\n  - screenshot: a\n  - screenshot: a\n")
    assert dup == [(5, "screenshot name 'a' is already used at line 4")]
    assert "restart names a node" in problems("name: x\ncluster: {}\nsteps:\n  - restart: leader\n")[0][1]


def test_every_shipped_scenario_is_valid():
    assert SCENARIOS, "no scenarios shipped"
    names = [load_scenario(path).name for path in SCENARIOS]
    assert len(set(names)) == len(names)


def test_every_step_kind_and_field_is_documented():
    docs = (ROOT / "docs" / "scenarios.md").read_text()
    headings = set(re.findall(r"^### `([a-z_]+)`", docs, re.MULTILINE))
    assert headings == set(STEP_KINDS), "docs/scenarios.md needs one '### `kind`' heading per step kind"
    for kind in STEP_KINDS.values():
        section = docs.split(f"### `{kind.name}`", 1)[1].split("\n### ", 1)[0]
        for field in kind.fields:
            assert f"`{field.name}`" in section, f"{kind.name}.{field.name} is not documented"
    for field in (*TOP_LEVEL_FIELDS, *CLUSTER_FIELDS, *DASHBOARD_FIELDS, *COMMON_STEP_FIELDS):
        assert f"`{field.name}`" in docs, f"{field.name} is not documented"


def test_json_expectations():
    document = {"running": False, "last": {"chunks": [{"executed": True}], "chunkWeights": {"0": 78.0}}}
    assert check_json(document, {"running": False, "last.chunks[0].executed": True}) == []
    assert check_json(document, {"last.chunkWeights.0": {"gte": 78}, "last.chunks": {"len": 1}}) == []
    assert check_json(document, {"last.error": {"exists": False}, "running": {"in": [False]}}) == []
    [failure] = check_json(document, {"last.chunks[1].executed": True})
    assert failure == "last.chunks[1].executed: expected = true, saw nothing (the path is absent)"
    [failure] = check_json(document, {"last.chunkWeights.0": {"lt": 10}})
    assert failure == "last.chunkWeights.0: expected < 10, saw 78.0"


def test_scenario_check_exit_codes(tmp_path, capsys):
    from evdb.cli import main

    bad = tmp_path / "bad.yaml"
    bad.write_text(GOOD.replace("press: s", "presss: s"))
    assert main(["scenario", "check", str(bad)]) == EXIT_INVALID
    assert f"{bad}:6: unknown step 'presss'" in capsys.readouterr().err
    assert main(["scenario", "run", "--headless", str(bad)]) == EXIT_INVALID
    assert "nothing ran" in capsys.readouterr().err
    assert main(["scenario", "check", *map(str, SCENARIOS)]) == 0


async def terminal_click(app, pilot, selector: str) -> None:
    """A click as a terminal delivers it: mouse down and up through the app (Pilot.click bypasses the
    app, where the recorder listens)."""
    from textual import events

    region = app.screen.query_one(selector).region
    x, y = region.x + region.width // 2, region.y + region.height // 2
    for cls in (events.MouseDown, events.MouseUp):
        app._driver.send_message(cls(None, x, y, 0, 0, 1, False, False, False, screen_x=x, screen_y=y))
        await pilot.pause()


async def test_the_recorder_writes_a_session_that_replays_the_same_call(tmp_path):
    from evdb.clock import ManualClock
    from evdb.scenario.recorder import Recorder
    from evdb.scenario.runner import RunOptions, ScenarioResult, StepDriver
    from tests.tui.conftest import make_app
    from tests.tui.fake_node import FakeNode

    clock = ManualClock()
    recorder = Recorder(clock=clock)
    first = FakeNode(port=2113, state="Leader")
    app = make_app(first)
    app.recorder = recorder
    async with app.run_test(size=(120, 36)) as pilot:
        await app.poll_all()
        await pilot.pause()
        await pilot.press("2", "1", "s")
        clock.advance(2.0)
        await pilot.press("tab", "backspace", "7")  # threads -> threshold, typed over
        await pilot.press("enter")
        await pilot.pause()
        clock.advance(1.0)
        await terminal_click(app, pilot, "#send")
        await pilot.press("q")
    assert first.changes() == [
        "POST http://127.0.0.1:2113/admin/scavenge?threads=1&threshold=7&throttlePercent=100&syncOnly=false"
    ]
    path = tmp_path / "session.yaml"
    recorder.save(path, {"nodes": 1}, {"interval": 1.0, "readonly": False}, "test")
    text = path.read_text()
    document = yaml.safe_load(text)
    assert document["steps"] == [
        {"press": ["2", "1", "s"]},
        {"press": {"keys": "tab", "after": 2.0}},
        {"fill": {"field": "#threshold", "value": "7"}},
        {"press": "enter"},
        {"click": {"target": "#send", "after": 1.0}},
        {"screenshot": "end"},
    ]
    scenario = parse_scenario(text, str(path))
    assert scenario.name == "session"

    second = FakeNode(port=2113, state="Leader")
    replay = make_app(second)
    result = ScenarioResult(scenario, passed=False)
    async with replay.run_test(size=(120, 36)) as pilot:
        driver = StepDriver(scenario, None, replay, None, RunOptions(screenshots=tmp_path), result)
        await driver.drive(pilot)
    assert result.passed, result.message
    assert second.changes() == first.changes()
    assert (tmp_path / "scenario-session-end.svg").read_text().startswith("<svg")


async def test_a_failed_step_names_the_nodes_that_stopped_with_the_end_of_their_output(tmp_path):
    """A CI run's scenario failed on "node3 DOWN" and its work folder, with node3's output, was gone
    when the run ended: the failure's message carries each stopped node's stdout.log tail."""

    from evdb.scenario.cluster import ScenarioCluster
    from evdb.scenario.runner import RunOptions, ScenarioResult, StepDriver
    from tests.tui.conftest import make_app
    from tests.tui.fake_node import FakeNode

    class Stopped:  # the LocalCluster calls stopped_nodes makes
        def exists(self):
            return True

        def status(self):
            return [{"name": "node1", "state": "Leader"}, {"name": "node3", "state": "Down"}]

        def stdout_tail(self, name, lines):
            return f"The end of /x/{name}/stdout.log:\nTraceback: boom"

    cluster = ScenarioCluster.__new__(ScenarioCluster)
    cluster.clusters = [Stopped()]  # type: ignore[list-item]
    text = (
        "name: fails\ndescription: a step that fails\ncluster: {nodes: 3}\nsteps:\n"
        "  - wait_screen: {widget: '#cluster', contains: nothing-like-this, timeout: 0.2}\n"
    )
    scenario = parse_scenario(text, str(tmp_path / "fails.yaml"))
    result = ScenarioResult(scenario, passed=False)
    app = make_app(FakeNode(port=2113, state="Leader"))
    async with app.run_test(size=(120, 36)) as pilot:
        driver = StepDriver(scenario, cluster, app, None, RunOptions(failure_dir=tmp_path), result)
        await driver.drive(pilot)
    assert not result.passed
    assert "node3 is not running. The end of /x/node3/stdout.log:\nTraceback: boom" in result.message
    assert "node1" not in result.message.split("\n", 1)[1]


def test_an_archive_needs_a_read_only_replica_to_archive():
    text = "name: a\ncluster: {nodes: 1, archive: {RetainAtLeast: {Days: 0, LogicalBytes: 65536}}}\nsteps: [press: q]\n"
    with pytest.raises(ScenarioInvalid) as info:
        parse_scenario(text, "a.yaml")
    assert "an archive needs a read-only replica to be its archiver (replicas: 1)" in str(info.value)
    fine = parse_scenario(text.replace("nodes: 1,", "nodes: 1, replicas: 1,"), "a.yaml")
    assert fine.cluster["archive"] == {"RetainAtLeast": {"Days": 0, "LogicalBytes": 65536}}
