"""The cluster box: members, health, whether the cluster can take writes, options, mirrors."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from tui.panels.common import ROLE_STYLE, TRANSITIONS, WIDE, ago, bracketed, number, own_member, size, stamp
from tui.state import (
    SCAVENGE_PHASES,
    DashboardState,
    Member,
    NodeState,
)


def _majority(count: int) -> int:
    return count // 2 + 1


def _voters(members: list[Member]) -> list[Member]:
    return [m for m in members if not m.is_read_only_replica and m.state != "ReadOnlyReplica"]


def cluster_health(state: DashboardState, node: NodeState, now: float) -> Text:
    """What the cluster table says of a node's health: "ok" only for a node that answers, takes part
    in the cluster's majority, and is in a settled role; else what is going on."""
    own = own_member(node)
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
        and any(not m.is_alive and bracketed(m.host, m.port) in endpoints for m in _voters(other.members))
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
    if node.role in TRANSITIONS:
        return Text(TRANSITIONS[node.role], style="yellow")
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
            if bracketed(m.host, m.port) in endpoints:
                said = m.state if m.is_alive else f"{m.state} (dead)"
                if m.state != node.role or not m.is_alive:
                    seen.append(f"{other.label} sees it {said}")
    return ", ".join(seen)


def _followed(leader: NodeState) -> tuple[int, int]:
    """(members with the leader: itself and the alive followers it gossips, voters in all)."""
    voters = _voters(leader.members)
    with_it = sum(1 for m in voters if m.is_alive and m.state in ("Leader", "Follower"))
    own = own_member(leader)
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
        own = own_member(n)
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
        own = own_member(node)
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
                else Text(role, style=ROLE_STYLE.get(role, "")),
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
