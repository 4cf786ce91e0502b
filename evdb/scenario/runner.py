"""Running a scenario: launch its cluster, attach the dashboard (headless through Textual's Pilot, or in
the terminal), carry out the steps in order and stop at the first one that fails, with a screenshot of
that moment."""

from __future__ import annotations

import asyncio
import io
import json
import re
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from rich.console import Console

from evdb.cluster.launcher import ClusterLaunchError
from evdb.scenario.clock import ShiftedClock
from evdb.scenario.cluster import ScenarioCluster, StepFailed, program, substitution_values
from evdb.scenario.loader import Scenario, Step
from evdb.scenario.matching import MISSING, check_json, lookup

__all__ = ["RunOptions", "ScenarioResult", "run_scenario", "widget_text"]

_PLACEHOLDER = re.compile(r"\$\{([^}]+)\}")
WRITE_BATCH = 50


@dataclass
class RunOptions:
    headless: bool = True
    #: where named screenshots go (None: not taken); failure screenshots go here too
    screenshots: Path | None = None
    #: where a failure screenshot goes when ``screenshots`` is None
    failure_dir: Path | None = None
    #: keep the work folder (cluster data, logs) after the run
    keep: bool = False
    #: where the work folder is made (default: the system's temporary folder)
    work_root: Path | None = None
    log: Callable[[str], None] = field(default=lambda text: print(text, file=sys.stderr))


@dataclass
class ScenarioResult:
    scenario: Scenario
    passed: bool
    launch_failed: bool = False
    message: str = ""
    failure_screenshot: str | None = None
    screenshots: list[str] = field(default_factory=list)
    seconds: float = 0.0
    workdir: str = ""


async def run_scenario(scenario: Scenario, options: RunOptions) -> ScenarioResult:
    from tui.app import Connection, DashboardApp, NodeSpec

    started = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix=f"evdb-scenario-{scenario.name}-", dir=options.work_root))
    cluster = ScenarioCluster(workdir, scenario.cluster)
    result = ScenarioResult(scenario, passed=False, workdir=str(workdir))
    try:
        try:
            info = await asyncio.to_thread(cluster.up)
        except ClusterLaunchError as exc:
            result.launch_failed = True
            result.message = f"the cluster could not be launched: {exc}"
            return result
        clock = ShiftedClock()
        specs = [NodeSpec(n["url"], n["name"], n.get("pid"), n.get("log_dir")) for n in info["nodes"]]
        app = DashboardApp(
            specs,
            connection=Connection(info["user"], info["password"], info.get("ca")),
            clock=clock,
            readonly=scenario.dashboard["readonly"],
            interval=scenario.dashboard["interval"],
            local_cluster=cluster.main,  # the node jobs (o, u, B) act on the scenario's cluster
        )
        driver = StepDriver(scenario, cluster, app, clock, options, result)
        if options.headless:
            columns, rows = scenario.dashboard["size"]
            async with app.run_test(size=(columns, rows)) as pilot:
                await driver.drive(pilot)
        else:
            await app.run_async(auto_pilot=driver.drive)
        return result
    finally:
        await cluster.close()
        result.seconds = time.monotonic() - started
        if result.passed and not options.keep:
            shutil.rmtree(workdir, ignore_errors=True)


class StepDriver:
    """Carries out the steps against the cluster and the running dashboard."""

    def __init__(self, scenario, cluster: ScenarioCluster, app, clock: ShiftedClock, options, result) -> None:
        self.scenario: Scenario = scenario
        self.cluster = cluster
        self.app = app
        self.clock = clock
        self.options: RunOptions = options
        self.result: ScenarioResult = result
        self.variables: dict[str, str] = {}
        self.background: list[tuple[Step, asyncio.Task]] = []
        self.pilot: Any = None
        self.current: Step | None = None

    async def drive(self, pilot) -> None:
        self.pilot = pilot
        await self.app.poll_all()  # the first frame: every node answered (or failed) once
        step: Step | None = None
        try:
            for step in self.scenario.steps:
                if step.args.get("after"):
                    await asyncio.sleep(step.args["after"])
                if not self.options.headless:
                    self.app.notify(f"{step.describe()}", title=self.scenario.name, timeout=3)
                await self.run_step(step)
            await self._join(30.0)
            self.result.passed = True
            if not self.options.headless:
                self.app.notify("Every step passed. Press q to quit.", title=self.scenario.name, timeout=600)
        except Exception as exc:
            for _, task in self.background:
                task.cancel()
            detail = str(exc) if isinstance(exc, StepFailed) else f"{type(exc).__name__}: {exc}"
            where = step.describe() if step else "before the first step"
            self.result.message = f"{where}: {detail}"
            try:
                stopped = await asyncio.to_thread(self.cluster.stopped_nodes) if self.cluster else ""
            except Exception as report_failed:  # the report must not hide the failure
                stopped = f"(the nodes' states could not be read: {report_failed!r})"
            if stopped:
                self.result.message += f"\n{stopped}"
            self.result.failure_screenshot = self._failure_screenshot(step)
            if not self.options.headless:
                self.app.notify(
                    f"{self.result.message}\nPress q to quit.",
                    title="Scenario failed",
                    severity="error",
                    timeout=600,
                )

    def _failure_screenshot(self, step: Step | None) -> str | None:
        folder = self.options.screenshots or self.options.failure_dir or Path(tempfile.gettempdir())
        folder.mkdir(parents=True, exist_ok=True)
        name = f"scenario-{self.scenario.name}-failed-step-{step.index if step else 0}.svg"
        try:
            return self.app.save_screenshot(name, str(folder))
        except Exception:
            return None

    # -- steps -----------------------------------------------------------------------------------------
    async def run_step(self, step: Step) -> None:
        self.current = step
        args = self.substitute(step.args)
        handler = getattr(self, f"step_{step.kind}")
        await handler(args)

    def substitute(self, value: Any) -> Any:
        if isinstance(value, str):
            if "${" not in value:
                return value
            values = {**(substitution_values(self.cluster) if self.cluster else {}), **self.variables}

            def replace(match: re.Match) -> str:
                key = match.group(1)
                if key not in values:
                    raise StepFailed(f"unknown placeholder ${{{key}}} (known: {', '.join(sorted(values))})")
                return str(values[key])

            return _PLACEHOLDER.sub(replace, value)
        if isinstance(value, list):
            return [self.substitute(v) for v in value]
        if isinstance(value, dict):
            return {k: self.substitute(v) for k, v in value.items()}
        return value

    async def _expect_status(self, response, expected: Any, what: str) -> None:
        ok = (
            200 <= response.status_code < 300
            if expected is None
            else response.status_code in (expected if isinstance(expected, list) else [expected])
        )
        if not ok:
            want = "a 2xx status" if expected is None else f"status {expected}"
            raise StepFailed(f"{what}: expected {want}, saw {response.status_code} {response.text[:300]!r}")

    async def step_write(self, args: dict) -> None:
        if args["background"]:
            assert self.current is not None
            self.background.append((self.current, asyncio.ensure_future(self._write(args))))
            return
        await self._write(args)

    async def _write(self, args: dict) -> None:
        pad = "x" * args["size"]
        for first in range(0, args["count"], WRITE_BATCH):
            batch = [
                {
                    "eventId": str(uuid.uuid4()),
                    "eventType": args["event_type"],
                    "data": {"n": first + i, "pad": pad} if pad else {"n": first + i},
                }
                for i in range(min(WRITE_BATCH, args["count"] - first))
            ]
            response = await self.cluster.request(
                args["node"],
                "POST",
                f"/streams/{args['stream']}",
                content=json.dumps(batch).encode(),
                headers={"Content-Type": "application/vnd.kurrent.events+json"},
            )
            await self._expect_status(response, 201, f"writing to {args['stream']}")

    async def step_join(self, args: dict) -> None:
        await self._join(args["timeout"])

    async def _join(self, timeout: float) -> None:
        tasks, self.background = self.background, []
        if not tasks:
            return
        done, pending = await asyncio.wait([t for _, t in tasks], timeout=timeout)
        for task in pending:
            task.cancel()
        if pending:
            raise StepFailed(f"{len(pending)} background write(s) still running after {timeout:g} s")
        for task in done:
            if task.exception() is not None:
                origin = next(step for step, t in tasks if t is task)
                raise StepFailed(f"the background write of {origin.describe()} failed: {task.exception()}")

    async def step_metadata(self, args: dict) -> None:
        response = await self.cluster.request(
            args["node"], "POST", f"/streams/{args['stream']}/metadata", json_body=args["metadata"]
        )
        await self._expect_status(response, 201, f"setting the metadata of {args['stream']}")

    async def step_delete(self, args: dict) -> None:
        headers = {"Kurrent-HardDelete": "true"} if args["hard"] else {}
        response = await self.cluster.request(
            args["node"], "DELETE", f"/streams/{args['stream']}", headers=headers
        )
        await self._expect_status(response, 204, f"deleting {args['stream']}")

    async def step_http(self, args: dict) -> None:
        response = await self.cluster.request(
            args["node"], args["method"], args["path"], json_body=args.get("body"), timeout=120.0
        )
        await self._expect_status(response, args.get("status"), f"{args['method']} {args['path']}")
        for variable, path in (args.get("save") or {}).items():
            try:
                document = response.json()
            except ValueError:
                raise StepFailed(
                    f"cannot save {variable}: the answer is not JSON: {response.text[:200]!r}"
                ) from None
            value = lookup(document, path)
            if value is MISSING:
                raise StepFailed(f"cannot save {variable}: the answer has no {path}: {response.text[:300]}")
            self.variables[variable] = value if isinstance(value, str) else json.dumps(value)

    async def step_create_subscription(self, args: dict) -> None:
        path = f"/subscriptions/{quote(args['stream'], safe='')}/{quote(args['group'], safe='')}"
        # a leader that has just taken office answers 503 "Server Is Not Ready" until its persistent
        # subscriptions have started: asked again, bounded, as KurrentDB's clients do
        deadline = time.monotonic() + 30
        while True:
            response = await self.cluster.request(args["node"], "PUT", path, json_body=args["settings"])
            if response.status_code != 503 or time.monotonic() >= deadline:
                break
            await asyncio.sleep(0.25)
        await self._expect_status(response, 201, f"PUT {path}")

    async def step_consume(self, args: dict) -> None:
        """Take ``count`` messages of the group over HTTP (KurrentDB's competing-consumer read: a group
        hands out what it has read so far, so ask again until they have come, bounded), then answer
        them all with one ack or nack."""
        base = f"/subscriptions/{quote(args['stream'], safe='')}/{quote(args['group'], safe='')}"
        taken: list[tuple[int, str]] = []  # (event number, message id)
        deadline = time.monotonic() + args["timeout"]
        while len(taken) < args["count"]:
            path = f"{base}/{args['count'] - len(taken)}?embed=body"
            response = await self.cluster.request(args["node"], "GET", path)
            await self._expect_status(response, 200, f"GET {path}")
            try:
                entries = response.json()["entries"]
                # each message's id is the one its ack link names (a replayed parked message's too)
                taken += [(int(e["eventNumber"]), _message_id(e)) for e in entries]
            except (ValueError, KeyError, TypeError, StopIteration):
                raise StepFailed(f"GET {path}: not a feed of messages: {response.text[:300]!r}") from None
            if len(taken) >= args["count"]:
                break
            if time.monotonic() >= deadline:
                raise StepFailed(
                    f"waited {args['timeout']:g} s for {args['count']} messages of {args['stream']} / "
                    f"{args['group']}; took {len(taken)}: {sorted(n for n, _ in taken)}"
                )
            await asyncio.sleep(0.25)
        numbers = sorted(n for n, _ in taken)
        if "expect" in args and numbers != sorted(args["expect"]):
            raise StepFailed(
                f"{args['stream']} / {args['group']}: expected the messages {sorted(args['expect'])}, "
                f"took {numbers}"
            )
        ids = ",".join(message_id for _, message_id in taken)
        action = args["action"]
        path = f"{base}/ack?ids={ids}" if action == "ack" else f"{base}/nack?ids={ids}&action={action}"
        response = await self.cluster.request(args["node"], "POST", path)
        await self._expect_status(response, 202, f"POST {path}")

    async def step_kill(self, args: dict) -> None:
        node = await self.cluster.resolve(args["node"])
        await asyncio.to_thread(self.cluster.kill, node)

    async def step_name_node(self, args: dict) -> None:
        node = await self.cluster.resolve(args["node"])
        self.cluster.name_node(args["as"], node)

    async def step_restart(self, args: dict) -> None:
        node = await self.cluster.resolve(args["node"])
        await self.cluster.restart(node, args["timeout"])

    async def step_restore_node(self, args: dict) -> None:
        await self.cluster.restore_node(args["name"], args["backup"], args["timeout"])

    async def step_run(self, args: dict) -> None:
        argv = [str(a) for a in args["argv"]]
        process = await asyncio.create_subprocess_exec(
            *program(argv[0]),
            *argv[1:],
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            stdin=asyncio.subprocess.DEVNULL,
        )
        try:
            output, _ = await asyncio.wait_for(process.communicate(), args["timeout"])
        except TimeoutError:
            process.kill()
            await process.wait()
            raise StepFailed(f"{' '.join(argv)} did not finish within {args['timeout']:g} s") from None
        text = output.decode(errors="replace")
        if process.returncode != args["exit_code"]:
            raise StepFailed(
                f"{' '.join(argv)}: expected exit code {args['exit_code']}, saw {process.returncode}; "
                f"output: {text[-800:]!r}"
            )
        if args.get("output_contains") and args["output_contains"] not in text:
            raise StepFailed(
                f"{' '.join(argv)}: expected output containing {args['output_contains']!r}, saw {text[-800:]!r}"
            )

    async def step_advance_clock(self, args: dict) -> None:
        self.clock.advance(args["seconds"])
        self.app.render_panels(force=True)
        await self.pilot.pause()

    async def step_press(self, args: dict) -> None:
        keys = args["keys"] if isinstance(args["keys"], list) else [args["keys"]]
        await self.pilot.press(*keys)
        await self.pilot.pause()

    async def step_fill(self, args: dict) -> None:
        from textual.widgets import Input

        try:
            widget = self.app.screen.query_one(args["field"], Input)
        except Exception:
            raise StepFailed(
                f"no input {args['field']} on the current screen ({type(self.app.screen).__name__})"
            ) from None
        widget.focus()
        widget.value = args["value"]
        widget.cursor_position = len(args["value"])
        await self.pilot.pause()

    async def step_click(self, args: dict) -> None:
        try:
            self.app.screen.query_one(args["target"])
        except Exception:
            raise StepFailed(
                f"no widget {args['target']} on the current screen ({type(self.app.screen).__name__})"
            ) from None
        await self.pilot.click(args["target"])
        await self.pilot.pause()

    async def step_select_node(self, args: dict) -> None:
        from tui.collector import normalise_url

        node = await self.cluster.resolve(args["node"])
        url = normalise_url(node.url)
        if url not in self.app.state.nodes:
            raise StepFailed(f"the dashboard does not watch {node.name} ({url})")
        self.app.select_node(url)
        await self.pilot.pause()

    async def step_expect_http(self, args: dict) -> None:
        problem = await self._check_http(args)
        if problem:
            raise StepFailed(problem)

    async def step_wait_http(self, args: dict) -> None:
        deadline = time.monotonic() + args["timeout"]
        while problem := await self._check_http(args):
            if time.monotonic() >= deadline:
                raise StepFailed(f"waited {args['timeout']:g} s; {problem}")
            await asyncio.sleep(0.25)

    async def _check_http(self, args: dict) -> str | None:
        what = f"{args['method']} {args['path']} on {args['node']}"
        try:
            response = await self.cluster.request(args["node"], args["method"], args["path"], timeout=10.0)
        except StepFailed as exc:
            return str(exc)
        expected = args.get("status")
        if expected is not None and response.status_code not in (
            expected if isinstance(expected, list) else [expected]
        ):
            return f"{what}: expected status {expected}, saw {response.status_code} {response.text[:300]!r}"
        if args.get("contains") and args["contains"] not in response.text:
            return f"{what}: expected the body to contain {args['contains']!r}, saw {response.text[:500]!r}"
        if args.get("json"):
            try:
                document = response.json()
            except ValueError:
                return f"{what}: expected JSON, saw {response.status_code} {response.text[:300]!r}"
            failures = check_json(document, args["json"])
            if failures:
                return f"{what}: " + "; ".join(failures)
        return None

    async def step_expect_screen(self, args: dict) -> None:
        await self.pilot.pause()
        problem = self._check_screen(args)
        if problem:
            raise StepFailed(problem)

    async def step_wait_screen(self, args: dict) -> None:
        deadline = time.monotonic() + args["timeout"]
        while True:
            await self.pilot.pause()
            problem = self._check_screen(args)
            if not problem:
                return
            if time.monotonic() >= deadline:
                raise StepFailed(f"waited {args['timeout']:g} s; {problem}")
            await asyncio.sleep(0.2)
            self.app.render_panels()

    def _check_screen(self, args: dict) -> str | None:
        selector = args["widget"]
        try:
            text = widget_text(self.app, selector)
        except LookupError as exc:
            return str(exc)
        flat = " ".join(text.split())
        excerpt = text.strip()[-1500:]
        for wanted in _as_list(args.get("contains")):
            if wanted not in text and " ".join(wanted.split()) not in flat:
                return f"expected {selector} to show {wanted!r}; it shows:\n{excerpt}"
        for unwanted in _as_list(args.get("not_contains")):
            if unwanted in text or " ".join(unwanted.split()) in flat:
                return f"expected {selector} not to show {unwanted!r}; it shows:\n{excerpt}"
        if args.get("matches") and not re.search(args["matches"], text, re.MULTILINE):
            return f"expected {selector} to match /{args['matches']}/; it shows:\n{excerpt}"
        return None

    async def step_screenshot(self, args: dict) -> None:
        folder = self.options.screenshots
        if folder is None:
            return
        folder.mkdir(parents=True, exist_ok=True)
        await self.pilot.pause()
        path = self.app.save_screenshot(f"scenario-{self.scenario.name}-{args['name']}.svg", str(folder))
        self.result.screenshots.append(path)


def _message_id(entry: dict[str, Any]) -> str:
    ack = next(link["uri"] for link in entry["links"] if link["relation"] == "ack")
    return str(ack).rsplit("/", 1)[1]


def _as_list(value: Any) -> list[str]:
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def widget_text(app, selector: str) -> str:
    """The text a widget shows (``screen``: everything visible), as the terminal would show it."""
    from textual.css.query import NoMatches
    from textual.widgets import Button, Input, Static

    if selector == "screen":
        width, height = app.size
        console = Console(width=width, height=height, file=io.StringIO(), record=True, legacy_windows=False)
        # what App.export_screenshot renders, as text instead of SVG
        console.print(app.screen._compositor.render_update(full=True, screen_stack=app._background_screens))
        return console.export_text()
    widget = None
    for screen in reversed(app.screen_stack):  # the open dialog first, then the screens under it
        try:
            widget = screen.query_one(selector)
            break
        except NoMatches:
            continue
    if widget is None:
        raise LookupError(f"no widget matches {selector!r} on the screen ({type(app.screen).__name__})")
    if isinstance(widget, Input):
        return widget.value
    if isinstance(widget, Button):
        return str(widget.label)
    if isinstance(widget, Static):
        content = widget.content
        if isinstance(content, str):
            return content
        plain = getattr(content, "plain", None)
        if isinstance(plain, str):
            return plain
        width = max(widget.size.width, 40) if widget.size.width else app.size.width
        console = Console(width=width, file=io.StringIO(), record=True, legacy_windows=False)
        console.print(content)
        return console.export_text()
    return "\n".join(strip.text for strip in widget.render_lines(widget.size.region))
