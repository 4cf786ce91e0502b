"""Scenarios: YAML files that launch a local cluster, drive it and the dashboard step by step, check what
the nodes report and what the dashboard shows, and save screenshots (``evdb scenario run``;
``evdb dashboard --record`` writes one). The format is in :mod:`evdb.scenario.schema`."""

from evdb.scenario.loader import Scenario, ScenarioInvalid, Step, load_scenario, parse_scenario
from evdb.scenario.recorder import Recorder
from evdb.scenario.runner import RunOptions, ScenarioResult, run_scenario
from evdb.scenario.schema import STEP_KINDS

__all__ = [
    "STEP_KINDS",
    "Recorder",
    "RunOptions",
    "Scenario",
    "ScenarioInvalid",
    "ScenarioResult",
    "Step",
    "load_scenario",
    "parse_scenario",
    "run_scenario",
]
