"""Panels: pure functions from state to Rich renderables (and the widgets that show them).

Nothing here reads the network or the clock: the time a panel needs (countdowns, ages) is passed in,
and so is the width it has (columns that matter least give way first in a narrow terminal).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from tui.calls import explain_backup_error
from tui.collector import parse_timespan
from tui.state import (
    SCAVENGE_PHASES,
    AutoScavengeCycle,
    AutoScavengeState,
    DashboardState,
    LogLine,
    Member,
    NodeState,
    RoutineState,
    ScavengeHistoryEntry,
)

__all__ = [
    "NOT_AVAILABLE",
    "WIDE",
    "cluster_health",
    "render_activity",
    "render_auto_scavenge",
    "render_backup",
    "render_certificates",
    "render_chunks",
    "render_cluster",
    "render_logs",
    "render_mirrors",
    "render_routine",
    "render_scavenge",
]

NOT_AVAILABLE = "not available on this node"
#: the width a panel assumes when it is not told (a wide terminal)
WIDE = 200
_ROLE_STYLE = {
    "Leader": "bold green",
    "Follower": "cyan",
    "ReadOnlyReplica": "blue",
    "Unreachable": "bold red",
    "Unknown": "yellow",
    "Shutdown": "red",
}
#: what a node in a passing state is doing (its gossip ``state``): not "ok" yet
_TRANSITIONS = {
    "Unknown": "electing: no leader known",
    "PreLeader": "becoming leader: writing its epoch",
    "ResigningLeader": "resigning: handing over to another node",
    "CatchingUp": "catching up with the leader",
    "PreReplica": "catching up with the leader",
    "Clone": "catching up with the leader (clone)",
    "PreReadOnlyReplica": "joining as a read-only replica",
    "Initializing": "starting",
    "DiscoverLeader": "looking for the leader",
    "ShuttingDown": "shutting down",
    "Shutdown": "shut down",
}
_RESULT_STYLE = {
    "Success": "green",
    "Completed": "green",
    "InProgress": "cyan",
    "Stopped": "yellow",
    "Errored": "bold red",
    "Interrupted": "red",
    "Unknown": "dim",
}
#: a scavenge's result in the node's own words: KurrentDB and evdb log a successful run as "Scavenge
#: Completed" and write it as ``$scavengeCompleted`` (its ``result`` field says Success)
_RESULT_WORDS = {"Success": "Completed"}


def result_word(result: str) -> str:
    return _RESULT_WORDS.get(result, result)


_LEVEL_STYLE = {
    "Verbose": "dim",
    "Debug": "dim",
    "Information": "",
    "Warning": "yellow",
    "Error": "bold red",
    "Fatal": "bold white on red",
}


def size(n: int | float | None) -> str:
    if n is None:
        return "–"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def number(n: int | float | None) -> str:
    """A count or a log position, with thousands separators."""
    if n is None:
        return "–"
    return f"{n:,}" if isinstance(n, int) else f"{n:,.0f}"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    seconds = max(0, int(seconds))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours:02}:{minutes:02}:{secs:02}"
    return f"{hours:02}:{minutes:02}:{secs:02}" if hours else f"{minutes:02}:{secs:02}"


def ago(seconds: float) -> str:
    """A rough age: ``45s``, ``5m 10s``, ``3h 20m``, ``2d 4h``."""
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m {seconds % 60:02}s"
    if seconds < 86400:
        return f"{seconds // 3600}h {seconds % 3600 // 60:02}m"
    return f"{seconds // 86400}d {seconds % 86400 // 3600}h"


def stamp(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%S")


def bar(fraction: float, width: int = 20, style: str = "green") -> Text:
    fraction = min(1.0, max(0.0, fraction))
    full = round(fraction * width)
    return Text.assemble(("█" * full, style), ("░" * (width - full), "grey35"))


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(1, width - 1)] + "…"


def stale_lines(node: NodeState, sources: tuple[str, ...], now: float | None) -> list[Text]:
    """One line per failing source of the node (and its gossip): the node's answer and since when;
    the figures on screen are the last ones read."""
    lines = []
    for source in ("gossip", *sources):
        error = node.errors.get(source)
        if error is None:
            continue
        age = f" {ago(error.age(now))}" if now is not None else ""
        line = Text(f"⚠ stale{age}: ", style="bold yellow")
        line.append(error.detail, style="yellow")
        line.append("  (last figures read are shown)", style="dim")
        lines.append(line)
    return lines


def _stale_note(node: NodeState, source: str, now: float | None) -> Text | None:
    error = node.errors.get(source)
    if error is None:
        return None
    age = f" {ago(error.age(now))}" if now is not None else ""
    note = Text(f"stale{age}: ", style="bold yellow")
    note.append(error.detail, style="yellow")
    return note


# -- cluster ------------------------------------------------------------------------------------------
def _majority(count: int) -> int:
    return count // 2 + 1


def _voters(members: list[Member]) -> list[Member]:
    return [m for m in members if not m.is_read_only_replica and m.state != "ReadOnlyReplica"]


def cluster_health(state: DashboardState, node: NodeState, now: float) -> Text:
    """What the cluster table says of a node's health: "ok" only for a node that answers, takes part
    in the cluster's majority, and is in a settled role; else what is going on."""
    own = _own_member(node)
    if node.reachable is False:
        text = Text(f"DOWN: {node.error}", style="bold red")
        error = node.errors.get("gossip")
        if error is not None:
            was = f"; was {node.last_role}" if node.last_role else ""
            text.append(f" (for {ago(now - error.since)}{was})", style="red")
        return text
    if node.reachable is None:
        return Text("connecting…", style="dim")
    if own is not None and not own.is_alive:
        return Text("not alive", style="red")
    # a majority of the other nodes the dashboard polls sees it dead: it is cut off from the cluster
    voters = _voters(node.members)
    endpoints = node.endpoints()
    seen_dead = [
        other.label
        for other in state.ordered()
        if other is not node
        and other.reachable
        and any(not m.is_alive and _bracketed(m.host, m.port) in endpoints for m in _voters(other.members))
    ]
    if voters and len(seen_dead) >= _majority(len(voters)):
        return Text(
            f"not in the majority: {len(seen_dead)} of {len(voters)} members see it dead "
            f"({', '.join(seen_dead)})",
            style="bold red",
        )
    alive = sum(1 for m in voters if m.is_alive)
    if len(voters) > 1 and alive < _majority(len(voters)):
        return Text(f"isolated: sees {alive} of {len(voters)} members alive", style="bold red")
    age = row_age(state, node, now)
    if age is not None:
        text = Text(f"stale {ago(age)}", style="yellow")
        seen = others_view(state, node)
        if seen:
            text.append(f"; {seen}", style="bold yellow")
        text.append(f" (last read {stamp(node.last_ok or 0)[11:]})", style="yellow")
        return text
    if node.role in _TRANSITIONS:
        return Text(_TRANSITIONS[node.role], style="yellow")
    if node.role == "Leader":
        followed, members = _followed(node)
        if members > 1 and followed < _majority(members):
            return Text(
                f"leader without a majority: {followed} of {members} with it (needs {_majority(members)})",
                style="bold red",
            )
    failing = [(source, e) for source, e in node.errors.items() if source != "gossip"]
    if failing:
        source, error = failing[0]
        return Text(f"ok; {source} stale: {error.detail}", style="yellow")
    return Text("ok", style="green")


def row_age(state: DashboardState, node: NodeState, now: float) -> float | None:
    """The age of a reachable node's figures when they were not refreshed within two poll intervals
    (a poll missed or slow: after a resign, say); None while they are fresh."""
    if not node.reachable or node.last_ok is None:
        return None
    age = now - node.last_ok
    return age if age > 2 * state.interval else None


def others_view(state: DashboardState, node: NodeState) -> str:
    """What the other nodes, read more recently, report of this one where it differs from what it last
    said of itself: ``node1 sees it Unknown``."""
    endpoints = node.endpoints()
    seen = []
    for other in state.ordered():
        if other is node or not other.reachable or other.last_ok is None:
            continue
        if node.last_ok is not None and other.last_ok <= node.last_ok:
            continue
        for m in other.members:
            if _bracketed(m.host, m.port) in endpoints:
                said = m.state if m.is_alive else f"{m.state} (dead)"
                if m.state != node.role or not m.is_alive:
                    seen.append(f"{other.label} sees it {said}")
    return ", ".join(seen)


def _followed(leader: NodeState) -> tuple[int, int]:
    """(members with the leader: itself and the alive followers it gossips, voters in all)."""
    voters = _voters(leader.members)
    with_it = sum(1 for m in voters if m.is_alive and m.state in ("Leader", "Follower"))
    own = _own_member(leader)
    if own is not None and own.state != "Leader":
        with_it += 1
    return with_it, len(voters)


def cluster_writable(state: DashboardState, now: float) -> Text:
    """The cluster's health as an operator means it: can it take writes now? A leader that answers,
    whose figures are fresh, and that a majority of the members follow."""
    fresh = [n for n in state.ordered() if n.reachable and row_age(state, n, now) is None]
    leaders = [n for n in fresh if n.role == "Leader"]
    if not state.nodes:
        return Text("")
    if not fresh:
        return Text("cluster: NOT writable: no node answers with fresh figures", style="bold red")
    if not leaders:
        return Text(
            "cluster: NOT writable: no leader (an election, or the leader is unreachable)",
            style="bold red",
        )

    def epoch(n: NodeState) -> int:
        own = _own_member(n)
        return own.epoch_number if own is not None else -1

    leader = max(leaders, key=epoch)
    followed, voters = _followed(leader)
    need = _majority(max(voters, 1))
    if followed >= need:
        text = Text(
            f"cluster: writable: {leader.label} leads, {followed} of {voters} with it", style="bold green"
        )
    else:
        text = Text(
            f"cluster: NOT writable: {leader.label} leads, {followed} of {voters} with it (needs {need})",
            style="bold red",
        )
    if len(leaders) > 1:
        text.append(
            f"; {len(leaders)} nodes say Leader: {', '.join(n.label for n in leaders)}", style="yellow"
        )
    return text


def _lag(leader: NodeState | None, leader_writer: int | None, own: Member) -> Text:
    """How much data a node has to receive to be where the leader is: within a chunk the difference of
    the positions; across chunks what the leader wrote after the node's position in the node's chunk
    (its end as the dashboard saw the leader's writer leave it), the chunks between, and what is
    written in the leader's chunk (positions jump to the next chunk's start when a chunk completes)."""
    if leader_writer is None or own.writer_checkpoint < 0:
        return Text("–")
    behind = max(0, leader_writer - own.writer_checkpoint)
    chunk_size = leader.chunk_size if leader is not None else None
    if behind and chunk_size:
        mine, theirs = own.writer_checkpoint // chunk_size, leader_writer // chunk_size
        if theirs > mine:
            end = leader.writer_marks.get(mine) if leader is not None else None
            if end is None:
                behind = (
                    (theirs - mine) * chunk_size
                    - own.writer_checkpoint % chunk_size
                    + leader_writer % chunk_size
                )
                return Text(f"≤{size(behind)}", style="yellow")
            behind = (
                max(0, end - own.writer_checkpoint)
                + (theirs - mine - 1) * chunk_size
                + leader_writer % chunk_size
            )
    return Text(size(behind), style="yellow" if behind else "green")


def _writer_jump_line(state: DashboardState, now: float) -> Text | None:
    """Says why a writer position jumped (a chunk completed), while the jump is recent."""
    for node in state.ordered():
        jump = node.writer_jump
        size_ = node.chunk_size
        if jump is None or size_ is None or now - jump[2] > 120:
            continue
        before, after, _ = jump
        return Text(
            f"{node.label}'s writer {number(before)} → {number(after)}: chunk #{before // size_} completed "
            f"(scavenge point or full chunk); positions go on at chunk #{after // size_}'s start "
            f"{number(after // size_ * size_)}; lag counts data",
            style="dim",
        )
    return None


def _jobs(state: DashboardState, node: NodeState) -> str:
    """What the node is doing now: scavenging (how far in the phase), backing up, its turn in the
    auto-scavenge cycle."""
    jobs = [node.job] if node.job else []
    sc = node.scavenge
    if sc.starting_id and not sc.running:
        jobs.append("starting scavenge")
    elif sc.running:
        # the phase named with its own progress: 100% of one phase is never read as the whole run
        fraction = sc.phase_fraction()
        doing = "scavenging"
        if sc.phase in SCAVENGE_PHASES:
            place, phases = sc.overall()
            doing += f" phase {place}/{phases}"
        jobs.append(f"{doing} {fraction * 100:.0f}%" if fraction is not None else doing)
    backup = node.backup
    if backup is not None and backup.body.get("state") == "running":
        jobs.append("backing up")
    endpoints = node.endpoints()
    for other in state.ordered():
        auto = other.auto_scavenge
        cycle = auto.cycle if auto is not None else None
        if cycle is not None and cycle.cycle_id and cycle.designated in endpoints:
            jobs.append("in the paused cycle" if cycle.paused else "in the cycle")
            break
    return ", ".join(jobs) or "–"


#: columns of the cluster table that give way in a narrow terminal, least important first
_CLUSTER_OPTIONAL = ("disk r/w", "mem", "cpu", "chaser", "epoch", "writer", "lag", "doing")


def render_cluster(state: DashboardState, now: float, width: int | None = None) -> RenderableType:
    """Every node the dashboard polls, with what it says about itself and its process figures.
    Names and the selection marker are never cut; the least important columns go first."""
    width = width or WIDE
    leader_writer = max(
        (m.writer_checkpoint for n in state.nodes.values() for m in n.members if m.state == "Leader"),
        default=None,
    )
    leader = next((n for n in state.ordered() if n.role == "Leader" and n.reachable), None)
    rows: list[dict[str, Text]] = []
    for node in state.ordered():
        own = _own_member(node)
        selected = node.url == state.selected
        role = node.role or "…"
        stale = row_age(state, node, now) is not None
        lag = _lag(leader, leader_writer, own) if own is not None else Text("–")
        p = node.process
        rows.append(
            {
                "": Text("▶" if selected else " ", style="bold cyan"),
                "node": Text(node.label, style="bold" if selected else ""),
                "role": Text(f"{role}?", style="dim yellow")
                if stale
                else Text(role, style=_ROLE_STYLE.get(role, "")),
                "doing": Text(_jobs(state, node), style="cyan"),
                "epoch": Text(str(own.epoch_number) if own else "–"),
                "writer": Text(number(own.writer_checkpoint) if own else "–"),
                "chaser": Text(number(own.chaser_checkpoint) if own else "–"),
                "lag": lag,
                "cpu": Text(f"{p.cpu_percent:.0f}%" if p else "–"),
                "mem": Text(size(p.rss_bytes) if p else "–"),
                "disk r/w": Text(f"{size(p.read_bytes_per_s)}/s {size(p.write_bytes_per_s)}/s" if p else "–"),
                "health": cluster_health(state, node, now),
            }
        )
    order = [
        "",
        "node",
        "role",
        "health",
        "doing",
        "epoch",
        "writer",
        "chaser",
        "lag",
        "cpu",
        "mem",
        "disk r/w",
    ]
    natural = {c: max([len(c), *(r[c].cell_len for r in rows)]) for c in order}
    health_min = min(natural["health"], 32)
    shown = list(order)
    for optional in _CLUSTER_OPTIONAL:
        used = sum(natural[c] for c in shown if c != "health") + 2 * (len(shown) - 1)
        if used + health_min <= width:
            break
        shown.remove(optional)
    used = sum(natural[c] for c in shown if c != "health") + 2 * (len(shown) - 1)
    health_width = max(health_min, min(natural["health"], width - used))
    table = Table(box=None, header_style="bold", pad_edge=False, padding=(0, 1))
    for column in shown:
        if column == "health":
            table.add_column(column, no_wrap=True, overflow="ellipsis", width=health_width)
        else:
            table.add_column(column, no_wrap=True, width=natural[column])
    for row in rows:
        table.add_row(*(row[c] for c in shown))
    head = cluster_writable(state, now)
    hidden = [c for c in order if c not in shown]
    if hidden:
        named = f"  ({len(hidden)} column{'s' if len(hidden) > 1 else ''} hidden: {', '.join(hidden)})"
        if head.cell_len + len(named) > width:
            named = f"  (+{len(hidden)} column{'s' if len(hidden) > 1 else ''}: widen)"
        head.append(named, style="dim")
    head.no_wrap, head.overflow = True, "ellipsis"
    parts: list[RenderableType] = [head, table]
    jump = _writer_jump_line(state, now)
    if jump is not None:
        parts.append(jump)
    if state.mirrors:
        parts.append(render_mirrors(state, now))
    parts.extend(_options_lines(state))
    return Group(*parts)


def _options_lines(state: DashboardState) -> list[Text]:
    """Options as the nodes run them (evdb's ``GET /info/options``): an option waiting for a restart is
    "pending" on each node that does not run it yet; the local cluster's ``--option`` values are "set"
    only on nodes that run with them. Without ``/info/options`` (KurrentDB, an older evdb: 404) the
    ``--option`` values are shown as given, not as in effect."""
    lines: list[Text] = []
    nodes = [n for n in state.ordered() if n.options is not None]
    pending: dict[str, list[str]] = {}
    for node in nodes:
        for row in node.options or ():
            if row.get("restartPending"):
                key = f"{row.get('name')}={_option_value(row.get('configured'))}"
                pending.setdefault(key, []).append(f"{node.label} runs {_option_value(row.get('value'))}")
    if state.node_options:
        given = []
        for name, value in state.node_options.items():
            if not nodes:
                given.append(f"{name}={value}")
                continue
            running = [
                n.label
                for n in nodes
                if _option_value((n.option(name) or {}).get("value")).lower() == value.lower()
            ]
            if len(running) == len(nodes):
                given.append(f"{name}={value} set")
            elif not any(key.startswith(f"{name}=") for key in pending):
                given.append(f"{name}={value} on {', '.join(running) or 'no node'}")
        if given:
            note = "" if nodes else " (given; the nodes do not say what they run)"
            lines.append(Text(f"node options (--option): {', '.join(given)}{note}", style="dim"))
    for key, where in pending.items():
        line = Text(f"restart pending: {key} ", style="bold yellow")
        how = "o then u restarts a node" if state.node_options is not None else "restart each to apply it"
        line.append(f"({'; '.join(where)}: {how})", style="yellow")
        lines.append(line)
    return lines


def _option_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "–" if value is None else str(value)


#: a mirror rewrites its status every second; older than this while it should be running: stale
MIRROR_STALE_SECONDS = 10.0
_MIRROR_STYLE = {
    "live": "green",
    "catching-up": "cyan",
    "starting": "cyan",
    "reconnecting": "yellow",
    "stopped": "yellow",
    "failed": "bold red",
    "failed-over": "magenta",
}


def render_mirrors(state: DashboardState, now: float) -> RenderableType:
    """``evdb mirror`` processes given with ``--mirror``: state, direction, lag, pace, last error."""
    table = Table(expand=True, box=None, header_style="bold", pad_edge=False)
    for column in ("", "mirror", "state", "from → to", "lag", "events/s", "copied"):
        table.add_column(column, no_wrap=True)
    table.add_column("note", ratio=1)
    for source, m in state.mirrors.items():
        name = _mirror_name(source)
        if m.error:
            table.add_row(
                "⇉", name, Text("unknown", style="yellow"), "", "", "", "", Text(m.error, style="red")
            )
            continue
        if m.lag_bytes is None:
            lag = Text("unknown", style="dim")
        else:
            lag = Text(size(m.lag_bytes), style="green" if m.caught_up else "yellow")
            if m.lag_seconds is not None:
                lag.append(f" / {m.lag_seconds:.2f} s")
        age = None if m.updated is None else now - m.updated
        note = Text()
        if age is not None and age > MIRROR_STALE_SECONDS:
            if m.state in ("stopped", "failed", "failed-over"):
                note.append(f"{m.state} {ago(age)} ago", style="dim")
            else:
                note.append(f"STALE: not updated for {ago(age)}; is the mirror running?", style="bold yellow")
        if m.last_error:
            if note:
                note.append("  ")
            note.append(f"last error: {m.last_error}", style="red")
        table.add_row(
            "⇉",
            name,
            Text(m.state or "–", style=_MIRROR_STYLE.get(m.state, "")),
            f"{_host_port(m.from_url)} → {_host_port(m.to_url)}",
            lag,
            "–" if m.events_per_second is None else f"{m.events_per_second:g}",
            str(m.events_copied),
            note,
        )
    return table


def _mirror_name(source: str) -> str:
    if "://" in source:
        return source.split("://", 1)[1].rstrip("/").removesuffix("/status")
    return source.rstrip("/").rsplit("/", 1)[-1]


def _host_port(url: str) -> str:
    return url.split("://", 1)[-1].rstrip("/") if url else "?"


def _own_member(node: NodeState) -> Member | None:
    endpoints = node.endpoints()
    for m in node.members:
        if _bracketed(m.host, m.port) in endpoints:
            return m
    return node.members[0] if node.members and node.is_evdb else None


# -- scavenge -----------------------------------------------------------------------------------------
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
                (f"Last run: {result_word(result)}", _RESULT_STYLE.get(result, "")), f"  id {sc.shown_id}"
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
                cells.append(Text(_cut(value, id_width)))
            elif column == "result":
                cells.append(Text(value, style=_RESULT_STYLE.get(value, "")))
            else:
                cells.append(Text(value))
        table.add_row(*cells)
    out: list[RenderableType] = [heading, table]
    for h in shown:
        if h.error:
            out.append(Text(f"{_cut(h.scavenge_id, 12)}: {h.error}", style="red"))
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
    for number in (*sc.weights, *done_earlier):
        if not any(c.start <= number <= c.end for c in sc.chunks):
            rows[(number, number)] = None  # type: ignore[assignment]
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


# -- auto-scavenge ------------------------------------------------------------------------------------
def render_auto_scavenge(
    state: DashboardState, monotonic_now: float, now: float | None = None, width: int | None = None
) -> RenderableType:
    node = state.node()
    if node is None:
        return Text("No node selected.")
    auto = node.auto_scavenge
    failing = _stale_note(node, "auto-scavenge", now)
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
            Text(result_word(result), style=_RESULT_STYLE.get(result, "yellow"))
            if result
            else Text("result not seen", style="dim")
        )
        table.add_row(
            str(i), label, Text(role or "–", style=_ROLE_STYLE.get(role.split()[0] if role else "", "")), cell
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
                result_word(n.result or "Unknown"), style=_RESULT_STYLE.get(n.result or "Unknown", "yellow")
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
            Text(role or "–", style=_ROLE_STYLE.get(role, "")),
            Text(n.status, style=_CYCLE_STYLE.get(n.status, "")),
            detail,
        )
    parts: list[RenderableType] = [head, table]
    if cycle.last_problem:
        parts.append(Text(f"last problem: {cycle.last_problem}", style="yellow"))
    return parts


def endpoint_labels(state: DashboardState) -> dict[str, tuple[str, str]]:
    """``host:port`` (gossip's httpEndPoint; IPv6 in brackets) → (the label the cluster panel shows, the
    role). A member the dashboard does not poll keeps its address as label and its role from gossip."""
    labels: dict[str, str] = {}
    roles: dict[str, str] = {}
    nodes = state.ordered()
    for node in nodes:
        labels[node.url.split("://", 1)[-1]] = node.label
    for node in nodes:  # attached by another name (localhost): gossip's own entry names the address
        own = _own_member(node)
        if own is not None:
            labels.setdefault(_bracketed(own.host, own.port), node.label)
    for node in sorted(nodes, key=lambda n: n.role == "Leader"):  # the leader's view last: it wins
        for m in node.members:
            roles[_bracketed(m.host, m.port)] = m.state
    for key, label in labels.items():  # a polled node's own word about its role
        polled = next((n for n in nodes if n.label == label), None)
        if polled is not None and polled.reachable and polled.role:
            roles[key] = polled.role
    return {key: (labels.get(key, key), roles.get(key, "")) for key in {*labels, *roles}}


def _bracketed(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


# -- backup -------------------------------------------------------------------------------------------
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


# -- certificates -------------------------------------------------------------------------------------
def render_certificates(
    state: DashboardState, now: float, log_lines: list[LogLine] | None = None, width: int | None = None
) -> RenderableType:
    """Each node's certificate (from its TLS handshake); then what goes wrong now (calls between nodes
    refused, certificate errors in the logs), so errors are seen first; then the CA and the last reload."""
    width = width or WIDE
    rows: list[tuple[Text, Text, Text, Text, Text]] = []
    for node in state.ordered():
        c = node.certificate
        if c is None:
            plain = node.url.startswith("http://")
            note = Text("plain HTTP: no certificate" if plain else "reading…", style="dim")
            rows.append((Text(node.label), note, Text(""), Text(""), Text("")))
            continue
        expires = Text("–")
        if c.not_after is not None:
            left = c.not_after - now
            style = "bold red" if left < 7 * 86400 else "yellow" if left < 30 * 86400 else "green"
            when = datetime.fromtimestamp(c.not_after, UTC).strftime("%Y-%m-%d %H:%M")
            expires = Text(f"{when} ({'expired' if left < 0 else 'in ' + ago(left)})", style=style)
        chain = Text("valid", style="green") if c.verified else Text(f"INVALID: {c.error}", style="bold red")
        rows.append((Text(node.label), Text(c.subject), Text(c.issuer), expires, chain))

    def natural(i: int, title: str) -> int:
        return max([len(title), *(r[i].cell_len for r in rows)])

    node_w, subject_w, issuer_w, expires_w = (
        natural(0, "node"), natural(1, "subject"), natural(2, "issuer"), natural(3, "expires"),
    )  # fmt: skip
    table: Table
    if node_w + subject_w + expires_w + len("valid") + 4 * 2 <= width:
        # one line a node: the issuer gives way first (the CA is shown below); the verdict wraps
        with_issuer = node_w + subject_w + issuer_w + expires_w + 16 + 5 * 2 <= width
        table = Table(expand=True, box=None, header_style="bold", pad_edge=False)
        table.add_column("node", no_wrap=True, width=node_w)
        table.add_column("subject", no_wrap=True, width=subject_w)
        if with_issuer:
            table.add_column("issuer", no_wrap=True, width=issuer_w)
        table.add_column("expires", no_wrap=True, width=expires_w)
        table.add_column("chain", ratio=1, overflow="fold")
        for row in rows:
            table.add_row(*(row if with_issuer else (row[0], row[1], row[3], row[4])))
    else:  # narrow: each node on two lines, its subject whole
        table = Table.grid(padding=(0, 2))
        table.add_column(no_wrap=True, width=node_w)
        table.add_column(ratio=1, overflow="fold")
        table.add_row(Text("node", style="bold"), Text("subject / expires, chain, issuer", style="bold"))
        for label, subject, issuer, expires, chain in rows:
            second = Text.assemble(expires, "  ", chain)
            if issuer.plain:
                second.append(f"  issuer {issuer.plain}", style="dim")
            table.add_row(label, Text.assemble(subject, "\n", second) if expires.plain else subject)
    parts: list[RenderableType] = [table, Text(""), *_peer_failures(state, now)]
    if log_lines is not None:
        errors = [line for line in log_lines if line.is_certificate_error][-10:]
        parts.append(Text("Certificate errors (logs)", style="bold"))
        parts.extend([_log_text(line) for line in errors] or [Text("none seen", style="dim")])
        parts.append(Text(""))
    fingerprints = {
        n.certificates.ca_fingerprint
        for n in state.ordered()
        if n.certificates is not None and n.certificates.ca_fingerprint
    }
    if len(fingerprints) > 1:
        parts.append(
            Text(
                f"The nodes chain to {len(fingerprints)} different CAs: a rolling certificate update is "
                "under way, or a node was missed.",
                style="bold yellow",
            )
        )
    parts.append(_reload_table(state, now))
    for node in state.ordered():
        stale = _stale_note(node, "certificates", now)
        if stale is not None:
            parts.append(Text.assemble((f"{node.label}: ", "bold"), stale))
    if log_lines is not None:
        reloads = [line for line in log_lines if "reload" in line.message.lower()][-5:]
        parts.append(Text("\nLast configuration reloads (logs)", style="bold"))
        parts.extend([_log_text(line) for line in reloads] or [Text("none seen", style="dim")])
    return Group(*parts)


def _peer_failures(state: DashboardState, now: float) -> list[RenderableType]:
    """What each node reports of its calls to other nodes failing now (``peerErrors``): the peer and
    the reason, certificate refusals in red. Nothing when every call succeeds."""
    lines: list[RenderableType] = []
    for node in state.ordered():
        info = node.certificates
        if info is None or not info.peer_failures:
            continue
        for failure in info.peer_failures:
            line = Text()
            line.append(node.label, style="bold")
            line.append(f" → {failure.peer}: ")
            line.append(failure.reason, style="bold red" if failure.certificate else "yellow")
            if failure.since is not None:
                line.append(f"  (for {ago(now - failure.since)}, {failure.failures}×)", style="dim")
            lines.append(line)
    if not lines:
        return []
    return [Text("Calls to other nodes failing now (peerErrors)", style="bold"), *lines, Text("")]


def _reload_table(state: DashboardState, now: float) -> Table:
    """evdb's ``/admin/certificates``: the CA each node chains to and its last configuration reload,
    two lines per node (the result and its error wrap at any terminal width instead of being cut)."""
    table = Table.grid(padding=(0, 2))
    table.title = "CA in use and last reload (/admin/certificates)"
    table.title_justify = "left"
    table.title_style = "bold"
    table.add_column(no_wrap=True, min_width=_label_width(state))
    table.add_column(ratio=1)
    for node in state.ordered():
        info = node.certificates
        if info is None:
            table.add_row(node.label, Text("reading…", style="dim"))
            continue
        if not info.available:
            table.add_row(node.label, Text(NOT_AVAILABLE, style="dim"))
            continue
        if info.error:
            table.add_row(node.label, Text(info.error, style="yellow"))
            continue
        details = Text()
        if info.secure:
            details.append("CA ")
            if info.ca_subject:
                details.append(info.ca_subject)
            else:
                details.append("no trusted root found for the certificate", style="yellow")
            if info.ca_fingerprint:
                details.append(f"  sha256 {_short_fingerprint(info.ca_fingerprint)}", style="dim")
        else:
            details.append("insecure node: no certificate", style="dim")
        details.append("\nlast reload ")
        if info.reload_at is None:
            loaded = (
                f" (certificate loaded {_when(info.loaded_at, now)})" if info.loaded_at is not None else ""
            )
            details.append("none since the start" + loaded, style="dim")
            table.add_row(node.label, details)
            continue
        trigger = info.reload_trigger  # "/admin/reloadconfig" or "SIGHUP"
        if trigger in ("http", "/admin/reloadconfig"):
            trigger = "POST /admin/reloadconfig"
        details.append(f"{_when(info.reload_at, now)} via {trigger or '?'}: ")
        if info.reload_result == "Success":
            details.append("Success", style="green")
            if info.certificate_changed:
                details.append(", new certificate", style="green")
        else:
            details.append(info.reload_result or "Unknown", style="bold red")
            if info.reload_error:
                details.append(f": {info.reload_error}", style="red")
        table.add_row(node.label, details)
    return table


def _label_width(state: DashboardState) -> int:
    return max((len(n.label) for n in state.ordered()), default=4)


def _when(epoch: float, now: float) -> str:
    stamp = datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%S")
    return f"{stamp} ({ago(now - epoch)} ago)"


def _short_fingerprint(hex_digest: str) -> str:
    """The first 8 bytes, as ``openssl x509 -fingerprint -sha256`` prints them."""
    pairs = [hex_digest[i : i + 2].upper() for i in range(0, min(len(hex_digest), 16), 2)]
    return ":".join(pairs) + ("…" if len(hex_digest) > 16 else "")


# -- logs and activity --------------------------------------------------------------------------------
def _log_text(line: LogLine) -> Text:
    style = "bold red" if line.is_certificate_error else _LEVEL_STYLE.get(line.level, "")
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
    return Group(head, *(_log_text(line) for line in lines))


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
