"""Key gating as a pure function of state: each row is a situation, an action and the reason it gives
(None: the key acts). No app, no screen, no I/O."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from tui.gating import CHANGING_ACTIONS, GATED_ACTIONS, LOCAL_JOBS, Situation, why_not
from tui.state import AutoScavengeState, BackupState, DashboardState, NodeState, SourceError

URL = "http://127.0.0.1:2113"
OTHER = "http://127.0.0.1:2114"


@dataclass(frozen=True)
class Proc:
    name: str
    pid: int | None
    running: bool


@dataclass
class Local:
    """The local cluster as the gating reads it."""

    nodes: dict[str, Proc] = field(default_factory=dict)
    error: str | None = None
    data_dir: str = "/data/local"

    def node(self, url: str) -> Proc | None:
        return self.nodes.get(url)


def node(**changes) -> NodeState:
    base = NodeState(url=URL, name="node1", reachable=True, role="Leader")
    for key, value in changes.items():
        setattr(base, key, value)
    return base


def at(selected: NodeState | None = None, *others: NodeState, **changes) -> Situation:
    state = DashboardState(readonly=changes.pop("readonly", False))
    for n in (selected, *others):
        if n is not None:
            state.nodes[n.url] = n
    state.selected = selected.url if selected is not None else ""
    return Situation(state, **changes)


def scavenging(**changes) -> NodeState:
    n = node(**changes)
    n.scavenge.current_id = "sc-1"
    return n


def starting() -> NodeState:
    n = node()
    n.scavenge.starting_id = "sc-2"
    return n


def auto(state: str, **kw) -> AutoScavengeState:
    return AutoScavengeState(available=True, state=state, **kw)


FAILING = {"auto-scavenge": SourceError("HTTP 500 from /auto-scavenge/status: boom", 0.0)}
RUNNING = Proc("node1", 41, True)
STOPPED = Proc("node1", None, False)
follower = NodeState(url=OTHER, name="node2", reachable=True, role="Follower")

ROWS = [
    # (what, situation, action, reason)
    ("read-only refuses a change", at(node(), readonly=True), "start_scavenge", "read-only mode"),
    (
        "read-only refuses a local job",
        at(node(), readonly=True, local=Local()),
        "stop_node",
        "read-only mode",
    ),
    ("read-only lets one look", at(node(), readonly=True), "browse_events", None),
    ("unreachable node", at(node(reachable=False)), "resign", "node1 is not reachable"),
    ("no node polled yet", at(node(reachable=None)), "reload", "node1 is not reachable"),
    ("no node at all", at(None), "reload", "the selected node is not reachable"),
    ("rolling reload", at(node(), follower), "reload_all", None),
    ("events of an unreachable node", at(node(reachable=False)), "browse_events", "node1 is not reachable"),
    ("scavenge on an idle node", at(node()), "start_scavenge", None),
    ("scavenge while one runs", at(scavenging()), "start_scavenge", "a scavenge is running on node1"),
    ("scavenge while one starts", at(starting()), "start_scavenge", "a scavenge is running on node1"),
    ("stop with nothing running", at(node()), "stop_scavenge", "no scavenge is running on node1"),
    ("stop a running one", at(scavenging()), "stop_scavenge", None),
    ("stop one just started", at(starting()), "stop_scavenge", None),
    ("resign a follower", at(node(role="Follower")), "resign", "node1 is not the leader"),
    ("resign the leader", at(node()), "resign", None),
    ("demo load on a busy node", at(node(job="stopping")), "demo_load", "node1 is busy: stopping"),
    ("demo load", at(node()), "demo_load", None),
    (
        "auto-scavenge unknown",
        at(node(errors=FAILING)),
        "pause_resume_auto",
        "the auto-scavenge state of node1 is not known (HTTP 500 from /auto-scavenge/status: boom)",
    ),
    ("auto-scavenge never read", at(node()), "configure_auto", "auto-scavenge is not available on node1"),
    (
        "auto-scavenge absent (404)",
        at(node(auto_scavenge=AutoScavengeState(available=False))),
        "cycle_now",
        "auto-scavenge is not available on node1",
    ),
    ("pause while waiting", at(node(auto_scavenge=auto("Waiting"))), "pause_resume_auto", None),
    (
        "pause when not configured",
        at(node(auto_scavenge=auto("NotConfigured"))),
        "pause_resume_auto",
        "auto-scavenge is NotConfigured on node1",
    ),
    (
        "pause with no state said",
        at(node(auto_scavenge=auto(""))),
        "pause_resume_auto",
        "auto-scavenge is unknown on node1",
    ),
    ("schedule when not configured", at(node(auto_scavenge=auto("NotConfigured"))), "configure_auto", None),
    ("cycle now", at(node(auto_scavenge=auto("Waiting"))), "cycle_now", None),
    (
        "cycle now without the extension",
        at(node(auto_scavenge=auto("Waiting", cycle_available=False))),
        "cycle_now",
        "cycle now is an evdb extension, which node1 does not have",
    ),
    (
        "cycle now during a cycle",
        at(node(auto_scavenge=auto("InProgress"))),
        "cycle_now",
        "a cluster scavenge is InProgress (as node1 says)",
    ),
    (
        "cycle now while paused",
        at(node(auto_scavenge=auto("Paused"))),
        "cycle_now",
        "auto-scavenge is Paused on node1: resume it first (p)",
    ),
    ("backup never read", at(node()), "start_backup", None),
    (
        "backup absent (404)",
        at(node(backup=BackupState(available=False))),
        "start_backup",
        "backups are not available on node1",
    ),
    (
        "backup while one runs",
        at(node(backup=BackupState(available=True, body={"state": "running"}))),
        "start_backup",
        "a backup is running on node1",
    ),
    ("next node alone", at(node()), "next_node", "only one node"),
    ("next node", at(node(), follower), "next_node", None),
    ("log filter without logs", at(node()), "filter_logs", "no log files are followed"),
    ("log filter", at(node(), logs_followed=True), "filter_logs", None),
    ("help is never gated", at(None), "help", None),
    # the followers-first routine: every node takes part
    ("followers-first alone", at(node()), "followers_first", "a single node: scavenge it with s"),
    ("followers-first", at(node(), follower), "followers_first", None),
    (
        "followers-first while one scavenges",
        at(node(), scavenging(url=OTHER, name="node2", role="Follower")),
        "followers_first",
        "a scavenge is running on node2",
    ),
    (
        "followers-first with a node down",
        at(node(), NodeState(url=OTHER, name="node2", reachable=False)),
        "followers_first",
        "node2 not reachable: every node takes part",
    ),
    (
        "followers-first without a leader",
        at(node(role="Candidate"), follower),
        "followers_first",
        "no leader: the cluster is electing one",
    ),
    ("F stops a running routine", at(node(reachable=False), routine_running=True), "followers_first", None),
    # the local cluster's jobs
    (
        "a local job when attached",
        at(node()),
        "stop_node",
        "only on the local cluster (evdb dashboard without --attach)",
    ),
    ("a local job with no node", at(None, local=Local()), "start_node", "no node is selected"),
    (
        "the local cluster unreadable",
        at(node(), local=Local(error="cannot read cluster.json: gone")),
        "stop_node",
        "cannot read cluster.json: gone",
    ),
    (
        "a node not of the local cluster",
        at(node(), local=Local()),
        "restore_node",
        "node1 is not a node of the local cluster in /data/local",
    ),
    ("stop a running node", at(node(), local=Local({URL: RUNNING})), "stop_node", None),
    ("stop a stopped node", at(node(), local=Local({URL: STOPPED})), "stop_node", "node1 is not running"),
    ("stop an unreachable node", at(node(reachable=False), local=Local({URL: RUNNING})), "stop_node", None),
    ("start a stopped node", at(node(reachable=False), local=Local({URL: STOPPED})), "start_node", None),
    (
        "start a running node",
        at(node(), local=Local({URL: RUNNING})),
        "start_node",
        "node1 is running (pid 41)",
    ),
    (
        "restore a running node",
        at(node(), local=Local({URL: RUNNING})),
        "restore_node",
        "node1 is running (pid 41): stop it first (o)",
    ),
    ("restore a stopped node", at(node(reachable=False), local=Local({URL: STOPPED})), "restore_node", None),
    (
        "a local job on a busy node",
        at(node(job="restoring"), local=Local({URL: STOPPED})),
        "start_node",
        "node1 is busy: restoring",
    ),
]


@pytest.mark.parametrize(("what", "situation", "action", "reason"), ROWS, ids=[row[0] for row in ROWS])
def test_why_not(what: str, situation: Situation, action: str, reason: str | None) -> None:
    assert why_not(action, situation) == reason


def test_every_gated_action_has_a_row() -> None:
    """A new gated key gets its rule tested here."""
    assert {row[2] for row in ROWS} >= GATED_ACTIONS
    assert LOCAL_JOBS <= CHANGING_ACTIONS <= GATED_ACTIONS


def test_the_app_gates_its_keys_with_it() -> None:
    """The dashboard's keys, help and palette ask the same function: every gated action is a key."""
    from textual.binding import Binding

    from tui.app import DashboardApp

    bound = {b.action for b in DashboardApp.BINDINGS if isinstance(b, Binding)}
    assert bound >= GATED_ACTIONS
