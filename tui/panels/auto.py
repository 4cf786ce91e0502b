"""The Auto-scavenge tab: the schedule, the state and its transitions, the cycle node by node."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from tui.panels.common import (
    NOT_AVAILABLE,
    RESULT_STYLE,
    ROLE_STYLE,
    WIDE,
    ago,
    duration,
    endpoint_labels,
    result_word,
    stale_note,
    stamp,
)
from tui.state import (
    AutoScavengeCycle,
    AutoScavengeState,
    DashboardState,
)


def render_auto_scavenge(
    state: DashboardState, monotonic_now: float, now: float | None = None, width: int | None = None
) -> RenderableType:
    node = state.node()
    if node is None:
        return Text("No node selected.")
    auto = node.auto_scavenge
    failing = stale_note(node, "auto-scavenge", now)
    if auto is None and failing is None:
        return Text("Auto-scavenge: reading…", style="dim")
    if auto is not None and not auto.available:
        return Text(
            f"Auto-scavenge: {NOT_AVAILABLE} ({node.label} has no /auto-scavenge endpoints).", style="dim"
        )
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()
    if auto is None or not auto.state:  # never read: what the node answered instead
        grid.add_row("state", Text.assemble(("unknown  ", "yellow"), failing or ""))
        grid.add_row("schedule", Text("unknown", style="yellow"))
        return Group(grid)
    state_cell = Text(auto.state, style="bold cyan")
    if failing is not None:
        state_cell.append("  ")
        state_cell.append_text(failing)
    grid.add_row("state", state_cell)
    if auto.schedule:
        # as the operator typed it where the node says (evdb), else the node's normal form
        grid.add_row("schedule", auto.schedule_as_given or auto.schedule)
    elif auto.state == "NotConfigured":
        grid.add_row("schedule", "not set (press c to configure)")
    else:
        grid.add_row("schedule", Text("not in the node's answer", style="dim"))
    if auto.state in ("Paused", "Pausing"):
        # the node's countdown runs on (00:00 in a paused cycle): no cycle starts until a resume
        how = "none while paused (p resumes)" if auto.state == "Paused" else "none while pausing"
        grid.add_row("next cycle", Text(how, style="yellow"))
    elif auto.state == "InProgress":
        grid.add_row("next cycle", Text("after this one, by the schedule", style="dim"))
    elif auto.time_until_next_cycle is not None:
        left = auto.time_until_next_cycle - (monotonic_now - auto.read_at)
        grid.add_row("next cycle in", duration(max(0.0, left)))
    parts: list[RenderableType] = [grid, Text("")]
    if state.cycle_now is not None:
        parts.extend([_cycle_now_line(state.cycle_now), Text("")])
    parts.extend(_cycle_parts(state, auto))
    parts.extend(_finished_cycle(state, auto, now))
    parts.extend(_transitions(auto, endpoint_labels(state), width or WIDE))
    return Group(*parts)


def _transitions(
    auto: AutoScavengeState, labels: dict[str, tuple[str, str]], width: int
) -> list[RenderableType]:
    """The auto-scavenge's steps, newest first, each with its time: a Pausing that lasted half a
    second stays on screen. Time and state are never cut; the detail gives way."""
    if not auto.transitions:
        return []
    source = "$auto-scavenges" if auto.transitions_from_events else "as the dashboard saw them"
    table = Table.grid(padding=(0, 2))
    table.add_column(no_wrap=True, width=12)
    table.add_column(no_wrap=True, width=10)
    table.add_column(no_wrap=True, overflow="ellipsis", max_width=max(10, width - 28))
    for t in auto.transitions[:8]:
        when = datetime.fromtimestamp(t.at, UTC).strftime("%H:%M:%S.%f")[:-3] if t.at is not None else "–"
        detail = t.detail
        if t.node:
            detail = f"{detail} {labels.get(t.node, (t.node, ''))[0]}"
        table.add_row(
            Text(when, style="dim"), Text(t.state or "", style="bold cyan" if t.state else ""), Text(detail)
        )
    return [Text(""), Text(f"Transitions, newest first ({source})", style="bold"), table]


def _cycle_now_line(answer: tuple[float, str, int | None, str]) -> Text:
    """The last "cycle now" (C): what the node said, a refusal's reason in its own words."""
    at, label, status, text = answer
    line = Text("Cycle now (C, evdb extension) ", style="bold")
    if status is not None and status < 300:
        line.append(f"{stamp(at)} via {label}: started", style="green")
        try:
            body = json.loads(text)
        except ValueError:
            body = None
        if isinstance(body, dict) and body.get("clusterScavengeId"):
            members = body.get("members") or []
            line.append(
                f" cluster scavenge {body['clusterScavengeId']} on {len(members)} nodes", style="green"
            )
        return line
    line.append(f"{stamp(at)} refused by {label}", style="bold red")
    line.append(f" ({status or 'no answer'}): {text}", style="red")
    return line


def _scavenge_result(state: DashboardState, scavenge_id: str | None) -> str | None:
    """A node scavenge's result as any polled node knows it (its figures or its history)."""
    if not scavenge_id:
        return None
    for node in state.ordered():
        sc = node.scavenge
        if sc.shown_id == scavenge_id and not sc.running and sc.result:
            return sc.result
        for entry in sc.history:
            if entry.scavenge_id == scavenge_id and entry.result not in ("InProgress", "Unknown"):
                return entry.result
    return None


def _finished_cycle(
    state: DashboardState, auto: AutoScavengeState, now: float | None
) -> list[RenderableType]:
    """The last cluster scavenge that ended: when, how long, and each node's result (as the leader
    reported them while it ran, or the node scavenge's own result)."""
    finished = auto.finished
    if finished is None:
        return []
    when = stamp(finished.completed_at)
    if now is not None:
        when += f" ({ago(now - finished.completed_at)} ago)"
    cycle: AutoScavengeCycle | None = finished.cycle
    if cycle is None:
        return [Text(""), Text.assemble(("Last cluster scavenge", "bold"), f" finished {when}")]
    took = ""
    if cycle.started_at is not None:
        took = f", took {duration(finished.completed_at - cycle.started_at)}"
    head = Text.assemble(
        ("Last cluster scavenge ", "bold"), (cycle.cycle_id or "", "bold"), f" finished {when}{took}"
    )
    labels = endpoint_labels(state)
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("#", "node", "role when scavenged", "result"):
        table.add_column(column, no_wrap=True)
    for i, n in enumerate(cycle.nodes(), 1):
        label, role = labels.get(n.endpoint, (n.endpoint, ""))
        if label != n.endpoint:
            label = f"{label} ({n.endpoint})"
        # the role it was scavenged in (as the dashboard saw it designated); else its role now, said so
        then = state.cycle_roles.get((cycle.cycle_id or "", n.endpoint))
        role = then if then is not None else (f"{role} now" if role else "")
        result = n.result
        if result is None and n.endpoint == cycle.designated:
            result = _scavenge_result(state, cycle.node_scavenge_id)
        cell = (
            Text(result_word(result), style=RESULT_STYLE.get(result, "yellow"))
            if result
            else Text("result not seen", style="dim")
        )
        table.add_row(
            str(i), label, Text(role or "–", style=ROLE_STYLE.get(role.split()[0] if role else "", "")), cell
        )
    return [Text(""), head, table]


_CYCLE_STYLE = {
    "done": "green",
    "running": "bold cyan",
    "starting": "cyan",
    "stopping": "yellow",
    "paused": "yellow",
    "waiting": "dim",
}


def _cycle_parts(state: DashboardState, auto: AutoScavengeState) -> list[RenderableType]:
    """The cluster scavenge node by node, from the leader's ``/auto-scavenge/progress``."""
    if auto.state in ("Waiting", "NotConfigured"):
        return [Text("No cluster scavenge is in progress.", style="dim")]
    if auto.state not in ("InProgress", "Pausing", "Paused"):
        return []  # the status itself did not answer: its state row says how
    if auto.cycle_error:
        return [Text(f"Cycle progress: {auto.cycle_error}", style="yellow")]
    cycle = auto.cycle
    if cycle is None:
        if auto.cycle_available is False:
            running = [n.label for n in state.ordered() if n.scavenge.running]
            return [
                Text(
                    f"Cycle progress node by node: {NOT_AVAILABLE} (no /auto-scavenge/progress).", style="dim"
                ),
                Text(f"Scavenging now: {', '.join(running) if running else 'no node'}.", style="dim"),
            ]
        return [Text("Cycle progress: reading…", style="dim")]
    if cycle.cycle_id is None:
        return [Text("No cluster scavenge is in progress (paused between cycles).", style="dim")]
    nodes = cycle.nodes()
    finished = sum(1 for n in nodes if n.status == "done")
    started = (
        datetime.fromtimestamp(cycle.started_at, UTC).strftime("%Y-%m-%d %H:%M:%S")
        if cycle.started_at is not None
        else "–"
    )
    head = Text.assemble(
        ("Cluster scavenge ", "bold"),
        (cycle.cycle_id, "bold"),
        f"  started {started}  {finished} of {len(nodes)} nodes done",
        ("  (paused)" if cycle.paused else "", "yellow"),
    )
    labels = endpoint_labels(state)
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("#", "node", "role", "scavenge", "detail"):
        table.add_column(column, no_wrap=True)
    for i, n in enumerate(nodes, 1):
        label, role = labels.get(n.endpoint, (n.endpoint, ""))
        if label != n.endpoint:
            label = f"{label} ({n.endpoint})"
        if n.status == "done":
            detail = Text(
                result_word(n.result or "Unknown"), style=RESULT_STYLE.get(n.result or "Unknown", "yellow")
            )
        elif n.status in ("running", "stopping"):
            detail = Text(f"node scavenge {cycle.node_scavenge_id}", style="dim")
        elif n.status == "paused":
            detail = Text("resumes here", style="dim")
        else:
            detail = Text("")
        table.add_row(
            str(i),
            label,
            Text(role or "–", style=ROLE_STYLE.get(role, "")),
            Text(n.status, style=_CYCLE_STYLE.get(n.status, "")),
            detail,
        )
    parts: list[RenderableType] = [head, table]
    if cycle.last_problem:
        parts.append(Text(f"last problem: {cycle.last_problem}", style="yellow"))
    return parts
