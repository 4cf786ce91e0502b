"""``evdb scenario run|check``: replay scenario files against a freshly launched local cluster.

Exit codes: 0 every scenario passed; 1 a step failed; 2 bad usage or an invalid scenario file (nothing
ran); 3 a scenario's cluster could not be launched.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

__all__ = ["register_cli"]

EXIT_PASSED, EXIT_FAILED, EXIT_INVALID, EXIT_LAUNCH = 0, 1, 2, 3


def register_cli(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "scenario",
        help="replay scenario files: a cluster, client actions, dashboard keys, expectations, screenshots",
        description="Scenarios (docs/scenarios.md): YAML files that launch a local cluster, drive it and the "
        "dashboard step by step, and check what the nodes report and what the dashboard shows.",
    )
    sub = parser.add_subparsers(dest="scenario_command", metavar="COMMAND")
    run = sub.add_parser(
        "run",
        help="run scenarios (exit 0 passed, 1 a step failed, 2 invalid file, 3 cluster not launched)",
        description="Validate every file, then run them one after the other. A failed step stops its "
        "scenario with the step's number and line, what was expected and what was seen, and a screenshot.",
    )
    run.add_argument("files", nargs="+", metavar="FILE", help="scenario files (scenarios/*.yaml)")
    run.add_argument(
        "--headless", action="store_true", help="run without a terminal (Textual's Pilot), as CI does"
    )
    run.add_argument("--screenshots", metavar="DIR", help="save the named screenshots (and failures) in DIR")
    run.add_argument(
        "--update-screenshots",
        action="store_true",
        help="save the named screenshots into the screenshots/ folder beside the scenarios' folder",
    )
    run.add_argument("--keep", action="store_true", help="keep each run's work folder (cluster data, logs)")
    run.set_defaults(func=_run)
    check = sub.add_parser("check", help="validate scenario files without running them (exit 0 or 2)")
    check.add_argument("files", nargs="+", metavar="FILE")
    check.set_defaults(func=_check)
    parser.set_defaults(func=lambda args: (parser.print_help(), EXIT_INVALID)[1])


def _load_all(files: list[str]):
    from evdb.scenario.loader import ScenarioInvalid, load_scenario

    scenarios, problems = [], []
    for name in files:
        try:
            scenarios.append(load_scenario(name))
        except FileNotFoundError:
            problems.append(f"{name}: no such file")
        except ScenarioInvalid as exc:
            problems.append(str(exc))
    return scenarios, problems


def _check(args: argparse.Namespace) -> int:
    scenarios, problems = _load_all(args.files)
    for problem in problems:
        print(problem, file=sys.stderr)
    for scenario in scenarios:
        print(f"{scenario.path}: valid ({len(scenario.steps)} steps)")
    return EXIT_INVALID if problems else EXIT_PASSED


def _run(args: argparse.Namespace) -> int:
    from evdb.scenario.runner import RunOptions, run_scenario

    if args.screenshots and args.update_screenshots:
        print("evdb scenario run: give --screenshots or --update-screenshots, not both", file=sys.stderr)
        return EXIT_INVALID
    scenarios, problems = _load_all(args.files)
    if problems:
        for problem in problems:
            print(problem, file=sys.stderr)
        print("evdb scenario run: nothing ran; fix the files first", file=sys.stderr)
        return EXIT_INVALID
    headless = args.headless
    if not headless and not (sys.stdin.isatty() and sys.stdout.isatty()):
        print("evdb scenario run: no terminal; running headless", file=sys.stderr)
        headless = True
    failures: set[int] = set()
    for scenario in scenarios:
        folder = None
        if args.screenshots:
            folder = Path(args.screenshots)
        elif args.update_screenshots:
            folder = Path(scenario.path).resolve().parent.parent / "screenshots"
        if headless:
            print(
                f"{scenario.path}: {scenario.name}: {len(scenario.steps)} steps …",
                file=sys.stderr,
                flush=True,
            )
        result = asyncio.run(
            run_scenario(scenario, RunOptions(headless=headless, screenshots=folder, keep=args.keep))
        )
        if result.passed:
            print(f"PASSED {scenario.path} ({result.seconds:.1f} s)")
            for path in result.screenshots:
                print(f"  screenshot {path}")
            continue
        print(f"FAILED {scenario.path}: {result.message}")
        if result.failure_screenshot:
            print(f"  screenshot of that moment: {result.failure_screenshot}")
        print(f"  work folder (cluster data and node logs): {result.workdir}")
        failures.add(EXIT_LAUNCH if result.launch_failed else EXIT_FAILED)
    if EXIT_FAILED in failures:
        return EXIT_FAILED
    return EXIT_LAUNCH if failures else EXIT_PASSED
