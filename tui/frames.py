"""What each part of the main screen is drawn from: a pure function of the dashboard's state, the tab
shown, the time and the width. Each :class:`Frame` names its widget, the inputs it is drawn from (the
app redraws it only when they change) and how to draw it (tui/panels.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rich.console import RenderableType

from tui.logtail import LogBook, LogFilter
from tui.panels import (
    render_activity,
    render_archive,
    render_auto_scavenge,
    render_backup,
    render_certificates,
    render_chunks,
    render_cluster,
    render_logs,
    render_scavenge,
)
from tui.state import DashboardState

__all__ = ["Frame", "FrameCache", "frames"]


@dataclass(frozen=True)
class Frame:
    widget_id: str
    key: tuple[Any, ...]  # the inputs it is drawn from
    draw: Callable[[], RenderableType]


def frames(
    state: DashboardState,
    active: str,
    *,
    now: float,
    mono: float,
    width: int,
    interval: float,
    logbook: LogBook,
    log_filter: LogFilter,
) -> list[Frame]:
    """The cluster box, and the panel of the ``active`` tab."""
    node = state.node()
    versions = tuple(n.version for n in state.ordered())
    nv = node.version if node else -1
    jv = state.jobs_version
    # a panel showing stale figures tells their age: redrawn each second while a read fails
    ticking = int(now) if node is not None and node.errors else 0
    # every second while a row ages towards stale (two intervals unread), else every 5 s
    aging = any(n.last_ok is not None and now - n.last_ok > interval for n in state.ordered())
    cluster_key = (
        versions,
        state.mirrors_version,
        state.selected,
        int(now) // (1 if aging else 5),
        width,
        jv,
    )
    shown = [Frame("cluster", cluster_key, lambda: render_cluster(state, now, width))]
    if active == "scavenge":
        key: tuple[Any, ...] = (nv, versions, state.selected, state.all_history, width, ticking, jv)
        shown.append(
            Frame("scavenge-panel", key, lambda: render_scavenge(node, state=state, now=now, width=width))
        )
    elif active == "chunks":
        key = (nv, state.selected, width, ticking)
        shown.append(Frame("chunks-panel", key, lambda: render_chunks(node, panel_width=width, now=now)))
    elif active == "auto":
        key = (versions, state.selected, int(mono), width, jv)
        shown.append(Frame("auto-panel", key, lambda: render_auto_scavenge(state, mono, now, width)))
    elif active == "backup":
        key = (nv, state.selected, width, int(now) // 10, ticking)
        shown.append(Frame("backup-panel", key, lambda: render_backup(node, now=now, width=width)))
    elif active == "certs":
        key = (versions, logbook.version, int(now) // 60, width, ticking)
        shown.append(
            Frame(
                "certs-panel",
                key,
                lambda: render_certificates(
                    state, now, list(logbook.lines) if logbook.tails else None, width
                ),
            )
        )
    elif active == "logs":

        def logs() -> RenderableType:
            lines = logbook.filtered(log_filter, limit=500)
            return render_logs(lines, log_filter.describe(), bool(logbook.tails))

        shown.append(Frame("logs-panel", (logbook.version, log_filter), logs))
    elif active == "archive":
        errors = int(now) if any(n.errors for n in state.ordered()) else 0  # stale ages tick
        key = (versions, state.selected, width, errors)
        shown.append(Frame("archive-panel", key, lambda: render_archive(state, now, width)))
    elif active == "activity":
        shown.append(Frame("activity-panel", (len(state.activity), jv), lambda: render_activity(state)))
    return shown


class FrameCache:
    """The inputs each widget was last drawn from."""

    def __init__(self) -> None:
        self._keys: dict[str, tuple[Any, ...]] = {}

    def changed(self, frame: Frame) -> bool:
        """True (and remembered) when the frame's inputs changed since it was last drawn."""
        if self._keys.get(frame.widget_id) == frame.key:
            return False
        self._keys[frame.widget_id] = frame.key
        return True

    def clear(self) -> None:
        self._keys.clear()
