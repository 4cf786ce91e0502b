"""The Scavenge tab (the run, its phases, the history, the followers-first routine) and the Chunks tab."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from tui.collector import parse_timespan
from tui.panels.common import (
    RESULT_STYLE,
    WIDE,
    bar,
    cut,
    duration,
    endpoint_labels,
    number,
    result_word,
    size,
    stale_lines,
    stamp,
)
from tui.state import (
    SCAVENGE_PHASES,
    DashboardState,
    NodeState,
    RoutineState,
    ScavengeHistoryEntry,
)

_POINT_ORIGINS = {
    "new": "new: written by this run",
    "reused": "reused: written before this run (here, or by another node and replicated)",
    "resumed": "resumed: the point of the stopped run this one continues",
}
#: the mark of the phase a finished run ended in, by its result
_END_MARK = {"Stopped": ("■", "bold yellow"), "Interrupted": ("■", "bold red"), "Errored": ("✖", "bold red")}


def _seconds(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 60 else duration(seconds)


def phase_line(
    running: bool, phase: str, result: str | None, width: int, seconds: dict[str, float] | None = None
) -> Text:
    """Every phase with its mark: done ✔ (with the time it took, as the node reports it; a phase a
    stopped run did before this run resumed it: "earlier run"), the current one ● (where a stopped run
    stopped: ■; where it failed: ✖), not started ○. Wrapped between phases, never inside a name."""
    seconds = seconds or {}
    index = SCAVENGE_PHASES.index(phase) if phase in SCAVENGE_PHASES else -1
    ran = [SCAVENGE_PHASES.index(p) for p in seconds if p in SCAVENGE_PHASES and p != "Beginning"]
    resumed_at = min(ran) if ran else None  # the first phase this run worked in (after Beginning)
    items: list[Text] = []
    for i, name in enumerate(SCAVENGE_PHASES):
        took = ""
        if (not running and result == "Success") or i < index:
            mark, style = "✔", "green"
            if name in seconds:
                took = f" {_seconds(seconds[name])}"
            elif seconds and resumed_at is not None and 0 < i < resumed_at:
                took = " (earlier run)"
        elif i == index:
            mark, style = (
                ("●", "bold reverse cyan") if running else _END_MARK.get(result or "", ("●", "yellow"))
            )
        else:
            mark, style = "○", "dim"
        item = Text(f"{mark} {name}", style=style)
        if took:
            item.append(took, style="dim")
        items.append(item)
    lines: list[Text] = [Text()]
    for item in items:
        line = lines[-1]
        separator = " → " if line.cell_len else ""
        if line.cell_len and line.cell_len + len(separator) + item.cell_len > width:
            lines.append(Text())
            line, separator = lines[-1], ""
        line.append(separator, style="dim")
        line.append_text(item)
    return Text("\n").join(lines)


def _point_text(point: dict | None) -> Text:
    if not point:
        return Text("not reported by this node", style="dim")
    text = Text(f"#{point.get('number', '?')}", style="bold")
    position = point.get("position")
    if isinstance(position, int):
        text.append(f" at position {number(position)}")
    if point.get("threshold") is not None:
        text.append(f", threshold {point['threshold']}")
    origin = point.get("origin")
    if origin in _POINT_ORIGINS:
        text.append(" — ")
        text.append(_POINT_ORIGINS[origin], style="cyan" if origin == "new" else "yellow")
    return text


def render_scavenge(
    node: NodeState | None,
    *,
    state: DashboardState | None = None,
    now: float | None = None,
    width: int | None = None,
) -> RenderableType:
    """The node's running (or last) scavenge from its own figures, then its history."""
    if node is None:
        return Text("No node selected.")
    width = width or WIDE
    sc = node.scavenge
    parts: list[RenderableType] = []
    if state is not None and state.routine is not None:
        parts.extend([*render_routine(state.routine, now), Text("")])
    title = Text.assemble(("Scavenge on ", "bold"), (node.label, "bold cyan"))
    if node.name:
        title.append(f" ({node.address})", style="dim")
    parts.append(title)
    if node.reachable is False:
        parts.append(Text(f"Node unreachable: {node.error}", style="bold red"))
    parts.extend(stale_lines(node, ("scavenge",), now))
    starting = sc.starting_id and not (sc.running and sc.current_id == sc.starting_id)
    if starting:
        parts.append(
            Text.assemble(
                ("Starting scavenge ", "bold cyan"),
                (sc.starting_id, "bold"),
                ("  the node accepted it; its figures come with the next poll", "dim"),
            )
        )
    if sc.running or sc.shown_id:
        settings = f"  threads / threshold / throttle {_v(sc.threads)} / {_v(sc.threshold)} / {_v(sc.throttle_percent)}%"
        if sc.running:
            heading = Text.assemble(("Running", "bold cyan"), f"  id {sc.current_id or sc.shown_id}")
        else:
            result = sc.result or "Unknown"
            heading = Text.assemble(
                (f"Last run: {result_word(result)}", RESULT_STYLE.get(result, "")), f"  id {sc.shown_id}"
            )
        heading.append(settings, style="dim")
        parts.append(heading)
        if sc.phase:
            parts.append(phase_line(sc.running, sc.phase, sc.result, width, sc.phase_seconds))
        else:
            parts.append(Text("phase: not reported by this node", style="dim"))
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold", no_wrap=True)
        grid.add_column()
        if sc.progress_available is not False:
            if sc.point is None and sc.running and sc.phase == "Beginning":
                grid.add_row("scavenge point", Text("being chosen (resume, reuse or write one)", style="dim"))
            elif sc.point is not None or sc.result != "Success":
                grid.add_row("scavenge point", _point_text(sc.point))
            else:
                grid.add_row("scavenge point", Text("none: no unreached point (syncOnly)", style="dim"))
        count = sc.phase_count()
        fraction = sc.phase_fraction()
        if sc.running and sc.phase in SCAVENGE_PHASES:
            place, phases = sc.overall()
            grid.add_row("overall", f"phase {place} of {phases}: {sc.phase}")
        if count is not None:
            what, done, total = count
            progress = Text()
            if fraction is not None:
                progress.append_text(bar(fraction, max(10, min(30, width - 70))))
                progress.append(f" {fraction * 100:5.1f}%  ")
            progress.append(f"{what} {number(done)} of {number(total)}")
            grid.add_row("in phase" if sc.running else "where it got", progress)
        executed = sum(1 for c in sc.chunks if c.executed and not c.merged)
        skipped = sum(1 for c in sc.chunks if c.executed is False)
        merged = sum(1 for c in sc.chunks if c.merged)
        if sc.chunks or sc.current_chunk:
            chunks = f"{executed} executed, {skipped} skipped, {merged} merged"
            if sc.current_chunk and sc.running:
                chunks += f"  (at {sc.current_chunk})"
            grid.add_row("chunks", chunks)
        grid.add_row(
            "elapsed",
            duration(sc.elapsed) + (f"  (phase {duration(sc.phase_elapsed)})" if sc.running else ""),
        )
        if sc.running:
            left = sc.remaining_seconds()
            grid.add_row(
                "estimate",
                f"{duration(left)} left in this phase"
                if left is not None
                else Text("– (no rate yet: nothing done in this phase)", style="dim"),
            )
        grid.add_row("bytes reclaimed", size(sc.bytes_reclaimed))
        if sc.records_removed:
            grid.add_row("records removed", number(sc.records_removed))
        parts.append(grid)
    elif not starting:
        parts.append(Text("No scavenge is running. Press s to start one.", style="dim"))
        if not sc.history and not (state is not None and (state.readonly or state.demo)):
            parts.append(Text("Nothing to scavenge yet? Press d to write demo data.", style="dim"))
    if state is not None and state.demo is not None:
        through, lines = state.demo
        parts.append(Text(""))
        parts.append(Text(f"Demo data written through {through}", style="bold"))
        parts.extend(Text(line.strip(), style="dim") for line in lines)
    parts.append(Text(""))
    parts.extend(_history(node, state, width))
    return Group(*parts)


_STEP_MARK = {
    "done": ("✔", "green"),
    "running": ("●", "bold cyan"),
    "failed": ("✖", "bold red"),
    "stopped": ("■", "bold yellow"),
    "waiting": ("○", "dim"),
    "not run": ("○", "dim"),
}


def render_routine(routine: RoutineState, now: float | None = None) -> list[RenderableType]:
    """The followers-first cluster scavenge: each step with its mark and what it found."""
    current = routine.current()
    if routine.running:
        where = f"step {current + 1} of {len(routine.steps)}" if current is not None else "starting"
        head = Text.assemble(
            ("Followers-first cluster scavenge ", "bold"),
            (f"running, {where}", "bold cyan"),
            ("  (F stops it)", "dim"),
        )
    else:
        ok = routine.outcome == "completed"
        head = Text.assemble(
            ("Followers-first cluster scavenge ", "bold"), (routine.outcome, "green" if ok else "bold red")
        )
        if routine.ended_at is not None:
            head.append(
                f"  at {stamp(routine.ended_at)}, took {duration(routine.ended_at - routine.started_at)}",
                style="dim",
            )
    lines: list[RenderableType] = [head]
    for i, step in enumerate(routine.steps, 1):
        mark, style = _STEP_MARK.get(step.status, ("○", "dim"))
        line = Text.assemble((f" {mark} ", style), f"{i}. {step.what}")
        if step.detail:
            line.append(f": {step.detail}", style="red" if step.status == "failed" else "dim")
        lines.append(line)
    return lines


def _took(time_taken: str) -> str:
    seconds = parse_timespan(time_taken)
    if seconds is None:
        return time_taken or "–"
    return f"{seconds:.1f} s" if seconds < 60 else duration(seconds)


def _history(node: NodeState, state: DashboardState | None, width: int) -> list[RenderableType]:
    """``$scavenges``: the selected node's runs (every event names its node), or every node's with a
    node column. Ids are shortened before any other column gives way."""
    every = bool(state and state.all_history)
    mine = node.endpoints()
    entries = node.scavenge.history
    shown = entries if every else [h for h in entries if not h.node or h.node in mine]
    labels = endpoint_labels(state) if state is not None else {}
    if every:
        title = f"History of every node ($scavenges; a: {node.label} only)"
    else:
        title = f"History of {node.label} ($scavenges; a: every node)"
    heading = Text(title, style="bold")
    if not entries:
        return [heading, Text("no scavenges recorded", style="dim")]
    if not shown:
        runs = f"{len(entries)} run" + ("s" if len(entries) > 1 else "")
        return [heading, Text(f"none on {node.label} among the {runs} recorded (a: every node)", style="dim")]
    shown = shown[:10]

    def node_label(h: ScavengeHistoryEntry) -> str:
        return labels.get(h.node, (h.node, ""))[0] if h.node else "?"

    sc = node.scavenge
    rows = []
    for h in shown:
        result = h.result
        if (
            h.scavenge_id == sc.shown_id
            and not sc.running
            and sc.result
            and result in ("InProgress", "Unknown")
        ):
            result = sc.result  # the node's progress says it ended; its $scavengeCompleted is on its way
        rows.append(
            {
                "started": h.started[:19].replace("T", " "),
                "node": node_label(h),
                "scavenge id": h.scavenge_id,
                "result": result_word(result),
                "took": _took(h.time_taken),
                "saved": size(h.space_saved),
            }
        )
    columns = ["started", *(["node"] if every else []), "scavenge id", "result", "took", "saved"]
    natural = {c: max([len(c), *(len(r[c]) for r in rows)]) for c in columns}
    others = sum(natural[c] for c in columns if c != "scavenge id") + 2 * (len(columns) - 1)
    id_width = min(natural["scavenge id"], max(9, width - others))
    table = Table.grid(padding=(0, 2))
    for column in columns:
        table.add_column(no_wrap=True, width=id_width if column == "scavenge id" else natural[column])
    table.add_row(*(Text(c, style="bold") for c in columns))
    for row in rows:
        cells = []
        for column in columns:
            value = row[column]
            if column == "scavenge id":
                cells.append(Text(cut(value, id_width)))
            elif column == "result":
                cells.append(Text(value, style=RESULT_STYLE.get(value, "")))
            else:
                cells.append(Text(value))
        table.add_row(*cells)
    out: list[RenderableType] = [heading, table]
    for h in shown:
        if h.error:
            out.append(Text(f"{cut(h.scavenge_id, 12)}: {h.error}", style="red"))
    return out


def _v(value) -> str:
    return "–" if value is None else str(value)


# -- chunks -------------------------------------------------------------------------------------------
def render_chunks(
    node: NodeState | None, width: int = 30, *, panel_width: int | None = None, now: float | None = None
) -> RenderableType:
    """Each chunk's weight against the threshold; ``width`` is the bar's (narrower in a narrow
    ``panel_width``)."""
    if node is None:
        return Text("No node selected.")
    narrow = panel_width is not None and panel_width < 100
    if panel_width is not None:
        width = max(8, min(width, panel_width - (54 if narrow else 66)))
    stale = stale_lines(node, ("scavenge",), now)
    table = _chunk_table(node, width, narrow)
    return Group(*stale, table) if stale else table


def _chunk_table(node: NodeState, width: int, narrow: bool = False) -> RenderableType:
    sc = node.scavenge
    threshold = sc.threshold if sc.threshold is not None else 0
    rows = {(c.start, c.end): c for c in sc.chunks}
    done_earlier = range(sc.executed_through + 1) if sc.executed_through is not None else range(0)
    # weighed but not yet reached in execution, and the chunks a stopped run this one resumes executed
    # (their weights were spent when they were switched in: they are in no weight table any more)
    for chunk in (*sc.weights, *done_earlier):
        if not any(c.start <= chunk <= c.end for c in sc.chunks):
            rows[(chunk, chunk)] = None  # type: ignore[assignment]
    if not rows:
        return Text(
            f"Chunks of {node.label}: no chunk figures yet (they appear once a scavenge has calculated weights).",
            style="dim",
        )
    top = max([float(threshold), 1.0, *sc.weights.values(), *[c.weight or 0 for c in sc.chunks]])
    table = Table(
        title=f"Chunks of {node.label}: weight against threshold {threshold}"
        + (" (-1: every chunk)" if threshold == -1 else ""),
        title_justify="left",
        expand=True,
        box=None,
        header_style="bold",
    )
    # sizes are never cut (``1011.7 KiB``): in a narrow panel "after" (before less saved) gives way
    sizes = ("before", "saved") if narrow else ("before", "after", "saved")
    for column in ("chunks", "weight", "", "outcome", *sizes):
        least = 10 if column in sizes else 12 if column == "outcome" else None
        table.add_column(column, no_wrap=True, min_width=least)
    mark = round(max(0, threshold) / top * width) if top else 0
    for (start, end), c in sorted(rows.items()):
        weight = c.weight if c is not None and c.weight is not None else sc.weights.get(start)
        if c is None:
            if sc.done_before(start):
                outcome = Text("done earlier", style="green")
            else:
                outcome = Text("pending", style="dim")
        elif c.merged:
            outcome = Text("merged", style="magenta")
        elif c.executed:
            outcome = Text("executed", style="green")
        elif c.executed is False:
            outcome = Text("skipped", style="yellow")
        else:
            outcome = Text("pending", style="dim")
        meets = weight is not None and meets_threshold(weight, threshold)
        heat = bar((weight or 0) / top, width, "green" if meets else "grey50")
        if 0 < mark < width:
            heat = heat[:mark] + Text("│", style="bold red") + heat[mark + 1 :]
        figures = {
            "before": size(c.size_before) if c else "–",
            "after": size(c.size_after) if c else "–",
            "saved": size(c.space_saved) if c and c.space_saved is not None else "–",
        }
        table.add_row(
            f"{start}" if start == end else f"{start}–{end}",
            "–" if weight is None else f"{weight:g}",
            heat,
            outcome,
            *(figures[column] for column in sizes),
        )
    executed = sum(1 for c in sc.chunks if c.executed and not c.merged)
    skipped = sum(1 for c in sc.chunks if c.executed is False)
    merged = sum(1 for c in sc.chunks if c.merged)
    earlier = sum(1 for (start, _), c in rows.items() if c is None and sc.done_before(start))
    before = f"  done earlier {earlier} (by the stopped run this one resumed)" if earlier else ""
    summary = Text(
        f"executed {executed}  skipped {skipped}  merged {merged}{before}  │ marks the threshold", style="dim"
    )
    return Group(table, summary)


def meets_threshold(weight: float, threshold: int) -> bool:
    """The spec's rule: -1 every chunk, 0 a chunk with something to remove, N a weight of at least N."""
    if threshold == -1:
        return True
    if threshold == 0:
        return weight > 0
    return weight >= threshold
