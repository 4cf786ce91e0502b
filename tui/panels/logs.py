"""The Logs and Activity tabs."""

from __future__ import annotations

from datetime import UTC, datetime

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from tui.panels.common import LEVEL_STYLE
from tui.state import (
    DashboardState,
    LogLine,
)


def log_text(line: LogLine) -> Text:
    style = "bold red" if line.is_certificate_error else LEVEL_STYLE.get(line.level, "")
    text = Text.assemble(
        (line.time[11:23] if len(line.time) > 23 else line.time, "dim"),
        " ",
        (f"{line.node:<9}", "cyan"),
        " ",
        (f"{line.level[:3].upper():<3}", style),
        " ",
        (line.message, style),
    )
    return text


def render_logs(lines: list[LogLine], filter_text: str, available: bool) -> RenderableType:
    head = Text(f"filter: {filter_text or '(none)'}   / to change, esc to clear", style="dim")
    if not available:
        return Group(
            head,
            Text(
                "Logs are read from the log files of nodes this dashboard launched (none here). "
                "Attached nodes: give --logs DIR for a folder holding their log-*.json files.",
                style="dim",
            ),
        )
    if not lines:
        return Group(head, Text("no matching lines", style="dim"))
    return Group(head, *(log_text(line) for line in lines))


_OUTCOME_STYLE = {"running": "cyan", "done": "green", "failed": "bold red", "stopped": "yellow"}


def render_activity(state: DashboardState) -> RenderableType:
    if not state.activity:
        return Text(
            "No calls made yet. Calls that change something appear here with their answers.", style="dim"
        )
    table = Table(expand=True, box=None, header_style="bold")
    for column in ("time", "node", "request", "status", "answer"):
        # the request and the answer wrap (a narrow terminal); time, node and status never do
        table.add_column(column, no_wrap=column in ("time", "node", "status"), overflow="fold")
    for a in reversed(state.activity[-50:]):
        when = datetime.fromtimestamp(a.at, UTC).strftime("%H:%M:%S")
        if a.outcome:
            status = Text(a.outcome, style=_OUTCOME_STYLE.get(a.outcome, ""))
        elif a.status is None:
            status = Text("no answer", style="bold red")
        else:
            status = Text(str(a.status), style="green" if a.status < 300 else "bold red")
        table.add_row(when, a.node, a.request, status, a.body[:600] if a.outcome else a.body[:200])
    return table
