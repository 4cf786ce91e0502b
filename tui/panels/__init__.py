"""Panels: pure functions from state to Rich renderables, one module per panel.

Nothing here reads the network or the clock: the time a panel needs (countdowns, ages) is passed in,
and so is the width it has (columns that matter least give way first in a narrow terminal).
``common`` holds what they share (units, times, stale marks, the nodes' names).
"""

from __future__ import annotations

from tui.panels.archive import render_archive
from tui.panels.auto import render_auto_scavenge
from tui.panels.backup import backup_seconds, render_backup, short_duration
from tui.panels.certificates import render_certificates
from tui.panels.cluster import cluster_health, render_cluster, render_mirrors
from tui.panels.common import NOT_AVAILABLE, WIDE, ago, endpoint_labels, number, size, stale_lines
from tui.panels.logs import render_activity, render_logs
from tui.panels.scavenge import render_chunks, render_routine, render_scavenge

__all__ = [
    "NOT_AVAILABLE",
    "WIDE",
    "ago",
    "backup_seconds",
    "cluster_health",
    "endpoint_labels",
    "number",
    "render_activity",
    "render_archive",
    "render_auto_scavenge",
    "render_backup",
    "render_certificates",
    "render_chunks",
    "render_cluster",
    "render_logs",
    "render_mirrors",
    "render_routine",
    "render_scavenge",
    "short_duration",
    "size",
    "stale_lines",
]
