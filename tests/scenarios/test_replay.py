"""Every scenario under scenarios/ replays headless against real node processes and passes."""

from __future__ import annotations

from pathlib import Path

import pytest

from evdb.scenario import RunOptions, load_scenario, run_scenario

pytestmark = pytest.mark.slow

SCENARIOS = sorted((Path(__file__).resolve().parents[2] / "scenarios").glob("*.yaml"))


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
async def test_scenario_passes(path, tmp_path):
    scenario = load_scenario(path)
    result = await run_scenario(scenario, RunOptions(headless=True, failure_dir=tmp_path, work_root=tmp_path))
    assert result.passed, (
        f"{result.message}\nscreenshot: {result.failure_screenshot}\nwork folder: {result.workdir}"
    )
