"""Which keys can act now, and why not: a pure function of what the dashboard knows.

:func:`why_not` reads a :class:`Situation` (the dashboard's state, the local cluster as last read, whether
the followers-first routine runs, whether log files are followed) and nothing else: no screen, no I/O.
The help screen, the ``:`` palette, the key bar and the notice of a refused key all ask it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from tui.routine import why_not_followers_first
from tui.state import AutoScavengeState, DashboardState, NodeState

__all__ = ["CHANGING_ACTIONS", "GATED_ACTIONS", "LOCAL_JOBS", "LocalView", "Situation", "why_not"]

#: jobs on one node of the local cluster (its process): they act on a stopped node too
LOCAL_JOBS = frozenset({"stop_node", "start_node", "restore_node"})

#: Actions that send a call which changes something: confirmed first, refused in read-only mode.
CHANGING_ACTIONS = frozenset(
    {
        "start_scavenge",
        "stop_scavenge",
        "resign",
        "reload",
        "reload_all",
        "pause_resume_auto",
        "configure_auto",
        "start_backup",
        "cycle_now",
        "followers_first",
        "demo_load",
        *LOCAL_JOBS,
    }
)
#: actions whose key can be refused now: the refusal is told (a notice saying why)
GATED_ACTIONS = CHANGING_ACTIONS | {"next_node", "filter_logs", "browse_events"}


class LocalNodeView(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def pid(self) -> int | None: ...
    @property
    def running(self) -> bool: ...


class LocalView(Protocol):
    """The local cluster as last read (``tui.jobs.LocalNodes``): its folder, its nodes, a read error."""

    @property
    def data_dir(self) -> str: ...
    @property
    def error(self) -> str | None: ...
    def node(self, url: str) -> LocalNodeView | None: ...


@dataclass(frozen=True)
class Situation:
    """Everything the gating reads."""

    state: DashboardState
    local: LocalView | None = None  # the local cluster the dashboard runs on (None: --attach)
    routine_running: bool = False  # the followers-first routine runs (F then stops it)
    logs_followed: bool = False  # log files are followed (/ filters them)


def why_not(action: str, at: Situation) -> str | None:
    """None when ``action`` can act now, else the reason, naming the node."""
    if action in CHANGING_ACTIONS and at.state.readonly:
        return "read-only mode"
    if action in LOCAL_JOBS:
        return _why_not_local(action, at)
    if action == "followers_first":
        return None if at.routine_running else why_not_followers_first(at.state.ordered())
    node = at.state.node()
    if action in CHANGING_ACTIONS or action == "browse_events":
        if node is None or not node.reachable:
            return f"{node.label if node else 'the selected node'} is not reachable"
        rule = _NODE_RULES.get(action)
        return rule(node) if rule is not None else None
    if action == "next_node" and len(at.state.nodes) < 2:
        return "only one node"
    if action == "filter_logs" and not at.logs_followed:
        return "no log files are followed"
    return None


def _scavenging(node: NodeState) -> bool:
    return bool(node.scavenge.current_id or node.scavenge.starting_id)


def _auto_unknown(node: NodeState) -> str | None:
    """Why auto-scavenge cannot be acted on at all on ``node`` (None: it is there)."""
    auto = node.auto_scavenge
    failing = node.errors.get("auto-scavenge")
    if auto is None and failing is not None:
        return f"the auto-scavenge state of {node.label} is not known ({failing.detail})"
    if auto is None or not auto.available:
        return f"auto-scavenge is not available on {node.label}"
    return None


def _on_auto(
    rule: Callable[[NodeState, AutoScavengeState], str | None],
) -> Callable[[NodeState], str | None]:
    """A rule of auto-scavenge's state, asked only once the node's auto-scavenge is known to be there."""

    def check(node: NodeState) -> str | None:
        unknown = _auto_unknown(node)
        if unknown or node.auto_scavenge is None:
            return unknown
        return rule(node, node.auto_scavenge)

    return check


def _cycle_now(node: NodeState, auto: AutoScavengeState) -> str | None:
    if auto.cycle_available is False:
        return f"cycle now is an evdb extension, which {node.label} does not have"
    if auto.state in ("InProgress", "Pausing"):
        return f"a cluster scavenge is {auto.state} (as {node.label} says)"
    if auto.state == "Paused":
        return f"auto-scavenge is Paused on {node.label}: resume it first (p)"
    return None


def _pause_resume(node: NodeState, auto: AutoScavengeState) -> str | None:
    if auto.state in ("NotConfigured", "Pausing", ""):
        return f"auto-scavenge is {auto.state or 'unknown'} on {node.label}"
    return None


def _start_backup(node: NodeState) -> str | None:
    if node.backup is not None and not node.backup.available:
        return f"backups are not available on {node.label}"
    if node.backup is not None and node.backup.body.get("state") == "running":
        return f"a backup is running on {node.label}"
    return None


#: the rule of each action on the selected node, once it answers
_NODE_RULES: dict[str, Callable[[NodeState], str | None]] = {
    "demo_load": lambda n: f"{n.label} is busy: {n.job}" if n.job else None,
    "cycle_now": _on_auto(_cycle_now),
    "start_scavenge": lambda n: f"a scavenge is running on {n.label}" if _scavenging(n) else None,
    "stop_scavenge": lambda n: None if _scavenging(n) else f"no scavenge is running on {n.label}",
    "resign": lambda n: None if n.role == "Leader" else f"{n.label} is not the leader",
    "pause_resume_auto": _on_auto(_pause_resume),
    "configure_auto": _auto_unknown,
    "start_backup": _start_backup,
}


def _why_not_local(action: str, at: Situation) -> str | None:
    """Why a job on one node of the local cluster cannot act now (None: it can)."""
    node = at.state.node()
    if at.local is None:
        return "only on the local cluster (evdb dashboard without --attach)"
    if node is None:
        return "no node is selected"
    if at.local.error:
        return at.local.error
    local = at.local.node(node.url)
    if local is None:
        return f"{node.label} is not a node of the local cluster in {at.local.data_dir}"
    if node.job:
        return f"{node.label} is busy: {node.job}"
    if action == "stop_node" and not local.running:
        return f"{local.name} is not running"
    if action == "start_node" and local.running:
        return f"{local.name} is running (pid {local.pid})"
    if action == "restore_node" and local.running:
        return f"{local.name} is running (pid {local.pid}): stop it first (o)"
    return None
