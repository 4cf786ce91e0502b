"""The Backup tab."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from tui.calls import explain_backup_error
from tui.panels.common import NOT_AVAILABLE, WIDE, ago, bar, duration, number, size, stale_lines, stamp
from tui.state import (
    NodeState,
)

_BACKUP_ENDED = ("completed", "failed", "stopped")


def render_backup(
    node: NodeState | None, *, now: float | None = None, width: int | None = None
) -> RenderableType:
    if node is None:
        return Text("No node selected.")
    backup = node.backup
    stale = stale_lines(node, ("backup",), now)
    if backup is None:
        return Group(*stale, Text("Backup: reading…", style="dim"))
    if not backup.available:
        return Text(f"Backup: {NOT_AVAILABLE} ({node.label} has no /admin/backup endpoints).", style="dim")
    b = backup.body
    if not b:
        return Group(*stale, Text(f"Backup: no backup has run on {node.label}.", style="dim"))
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()
    kind = str(b.get("kind") or b.get("operation") or "–")
    operation = Text(f"{kind} backup")
    if b.get("backupId"):
        operation.append(f"  (id {b['backupId']})", style="dim")
    grid.add_row("operation", operation)
    if b.get("destination"):  # a path is never cut: folded over lines in a narrow terminal
        grid.add_row("folder", Text(str(b["destination"]), overflow="fold"))
    state = str(b.get("state", "–"))
    ended = state in _BACKUP_ENDED
    seconds = backup_seconds(backup)
    state_cell = Text(
        state, style="bold cyan" if not ended else "bold red" if state == "failed" else "bold green"
    )
    if ended:
        started = b.get("startedAt")
        finished_at = b.get("finishedAt")
        finished: float | None = None
        if isinstance(finished_at, (int, float)):
            finished = float(finished_at)
        elif isinstance(started, (int, float)) and seconds is not None:
            finished = float(started) + seconds
        if finished is not None:
            state_cell.append(f"  finished {stamp(finished)}")
            if now is not None:
                state_cell.append(f" ({ago(now - finished)} ago)")
        state_cell.append(
            f", took {short_duration(seconds)}" if seconds is not None else ", duration unknown"
        )
    grid.add_row("state", state_cell)
    if not ended:
        if "step" in b:
            step = f"{b['step']} ({b.get('part', '')}): " if b.get("step") else ""
            grid.add_row("step", f"{step}{b.get('stepName', '')}")
            files_total = b.get("filesTotal") or 0
            bytes_total = b.get("bytesTotal") or 0
            if files_total or bytes_total:
                grid.add_row("files", f"{number(b.get('filesDone', 0))} of {number(files_total)}")
                fraction = (b.get("bytesDone", 0) / bytes_total) if bytes_total else 0.0
                grid.add_row(
                    "bytes",
                    Text.assemble(
                        bar(fraction, max(10, min(30, (width or WIDE) - 50))),
                        f" {size(b.get('bytesDone'))} of {size(bytes_total)}",
                    ),
                )
        grid.add_row("copied", f"{number(b.get('filesCopied', 0))} files, {size(b.get('bytesCopied'))}")
        grid.add_row("speed", f"{size(b.get('bytesPerSecond'))}/s")
        if b.get("elapsedSeconds") is not None:
            grid.add_row("elapsed", duration(b.get("elapsedSeconds")))
    else:
        copied = f"{number(b.get('filesCopied', 0))} files copied, {number(b.get('filesSkipped', 0))} skipped"
        if b.get("filesRemoved"):
            copied += f", {number(b['filesRemoved'])} removed"
        grid.add_row("copied", f"{copied}, {size(b.get('bytesCopied'))}")
        copied_bytes = b.get("bytesCopied")
        if seconds and isinstance(copied_bytes, (int, float)):
            grid.add_row("speed", f"{size(copied_bytes / seconds)}/s (average)")
        else:
            grid.add_row("speed", "–")
        if b.get("chaser") is not None:
            grid.add_row("backed up to", f"position {number(b['chaser'])}")
    if b.get("error"):
        grid.add_row("error", Text(explain_backup_error(str(b["error"])), style="bold red"))
    return Group(*stale, grid) if stale else grid


def backup_seconds(backup) -> float | None:
    """How long an ended backup took, as the node reports it: ``seconds`` of a completed one; else its
    ``elapsedSeconds`` once it says when it finished (``finishedAt``: the node stops that clock at the
    end, a failed backup too); else the elapsed time the dashboard saw when it first saw it ended."""
    b = backup.body
    if isinstance(b.get("seconds"), (int, float)):
        return float(b["seconds"])
    if b.get("finishedAt") is not None and isinstance(b.get("elapsedSeconds"), (int, float)):
        return float(b["elapsedSeconds"])
    return backup.ended_elapsed


def short_duration(seconds: float) -> str:
    """A short job's time as it is (0.003 s), a long one's as a clock."""
    if seconds < 10:
        return f"{seconds:.3g} s"
    return duration(seconds)
