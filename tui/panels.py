"""Panels: pure functions from state to Rich renderables (and the widgets that show them).

Nothing here reads the network or the clock: the time a panel needs (countdowns, ages) is passed in.
"""

from __future__ import annotations

from datetime import UTC, datetime

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from tui.state import (
    SCAVENGE_PHASES,
    AutoScavengeState,
    DashboardState,
    LogLine,
    NodeState,
)

__all__ = [
    "NOT_AVAILABLE",
    "render_activity",
    "render_auto_scavenge",
    "render_backup",
    "render_certificates",
    "render_chunks",
    "render_cluster",
    "render_logs",
    "render_mirrors",
    "render_scavenge",
]

NOT_AVAILABLE = "not available on this node"
_ROLE_STYLE = {
    "Leader": "bold green",
    "Follower": "cyan",
    "ReadOnlyReplica": "blue",
    "Unreachable": "bold red",
    "Unknown": "yellow",
    "Shutdown": "red",
}
_RESULT_STYLE = {
    "Success": "green",
    "InProgress": "cyan",
    "Stopped": "yellow",
    "Errored": "bold red",
    "Interrupted": "red",
    "Unknown": "dim",
}
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


def bar(fraction: float, width: int = 20, style: str = "green") -> Text:
    fraction = min(1.0, max(0.0, fraction))
    full = round(fraction * width)
    return Text.assemble(("█" * full, style), ("░" * (width - full), "grey35"))


# -- cluster ------------------------------------------------------------------------------------------
def render_cluster(state: DashboardState, now: float) -> RenderableType:
    """Every node the dashboard polls, with what it says about itself and its process figures."""
    table = Table(expand=True, box=None, header_style="bold", pad_edge=False)
    for column in (
        "",
        "node",
        "role",
        "health",
        "epoch",
        "writer",
        "chaser",
        "lag",
        "cpu",
        "mem",
        "disk r/w",
    ):
        table.add_column(column, no_wrap=True)
    leader_writer = max(
        (m.writer_checkpoint for n in state.nodes.values() for m in n.members if m.state == "Leader"),
        default=None,
    )
    for node in state.ordered():
        own = _own_member(node)
        marker = "▶" if node.url == state.selected else " "
        role = node.role or "…"
        if node.reachable is False:
            health = Text(f"DOWN: {node.error}", style="bold red")
        elif node.reachable is None:
            health = Text("connecting…", style="dim")
        elif own is not None and not own.is_alive:
            health = Text("not alive", style="red")
        else:
            age = now - node.last_ok if node.last_ok else 0
            health = Text(
                "ok" if not node.error else f"ok ({node.error})",
                style="green" if not node.error else "yellow",
            )
            if age > 5:
                health = Text(f"stale {age:.0f}s", style="yellow")
        lag: Text | str = "–"
        if own is not None and leader_writer is not None and own.writer_checkpoint >= 0:
            behind = max(0, leader_writer - own.writer_checkpoint)
            lag = Text(size(behind), style="yellow" if behind else "green")
        p = node.process
        table.add_row(
            marker,
            Text(node.label, style="bold" if node.url == state.selected else ""),
            Text(role, style=_ROLE_STYLE.get(role, "")),
            health,
            str(own.epoch_number) if own else "–",
            str(own.writer_checkpoint) if own else "–",
            str(own.chaser_checkpoint) if own else "–",
            lag,
            f"{p.cpu_percent:.0f}%" if p else "–",
            size(p.rss_bytes) if p else "–",
            f"{size(p.read_bytes_per_s)}/s {size(p.write_bytes_per_s)}/s" if p else "–",
        )
    if not state.mirrors:
        return table
    return Group(table, render_mirrors(state, now))


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


def _own_member(node: NodeState):
    host_port = node.url.split("://", 1)[-1]
    for m in node.members:
        if m.endpoint == host_port or f"[{m.host}]:{m.port}" == host_port:
            return m
    return node.members[0] if node.members and node.is_evdb else None


# -- scavenge -----------------------------------------------------------------------------------------
def render_scavenge(node: NodeState | None) -> RenderableType:
    if node is None:
        return Text("No node selected.")
    sc = node.scavenge
    parts: list[RenderableType] = []
    title = Text.assemble(("Scavenge on ", "bold"), (node.label, "bold cyan"))
    parts.append(title)
    if node.reachable is False:
        parts.append(Text(f"Node unreachable: {node.error}", style="bold red"))
    if sc.running or sc.shown_id:
        phases = Text()
        index = sc.phase_index()
        for i, phase in enumerate(SCAVENGE_PHASES):
            if i < index or (not sc.running and sc.result == "Success"):
                style = "green"
                mark = "✔"
            elif i == index:
                style = "bold reverse cyan" if sc.running else "yellow"
                mark = "●"
            else:
                style = "dim"
                mark = "○"
            phases.append(f" {mark} {phase} ", style=style)
            if i < len(SCAVENGE_PHASES) - 1:
                phases.append("→", style="dim")
        heading = "Running" if sc.running else f"Last run: {sc.result or 'Unknown'}"
        parts.append(
            Text.assemble(
                (heading, _RESULT_STYLE.get(sc.result or "Unknown", "") if not sc.running else "bold cyan"),
                f"  id {sc.shown_id or sc.current_id}",
            )
        )
        parts.append(phases if sc.phase else Text("phase: not reported by this node", style="dim"))
        fraction = sc.phase_fraction()
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold")
        grid.add_column()
        if fraction is not None:
            grid.add_row("in phase", Text.assemble(bar(fraction, 30), f" {fraction * 100:5.1f}%"))
        grid.add_row(
            "threads / threshold / throttle",
            f"{_v(sc.threads)} / {_v(sc.threshold)} / {_v(sc.throttle_percent)}%",
        )
        grid.add_row(
            "chunks",
            f"{sc.chunks_done} of {sc.chunks_total}"
            + (f"  (at {sc.current_chunk})" if sc.current_chunk and sc.running else ""),
        )
        if sc.streams_total:
            grid.add_row("streams", f"{sc.streams_done} of {sc.streams_total}")
        grid.add_row(
            "elapsed",
            duration(sc.elapsed) + (f"  (phase {duration(sc.phase_elapsed)})" if sc.running else ""),
        )
        if sc.running:
            grid.add_row("remaining (estimate)", duration(sc.remaining_seconds()))
        grid.add_row("bytes reclaimed", size(sc.bytes_reclaimed))
        if sc.records_removed:
            grid.add_row("records removed", str(sc.records_removed))
        parts.append(grid)
    else:
        parts.append(Text("No scavenge is running. Press s to start one.", style="dim"))
    history = Table(
        title="History ($scavenges)", title_justify="left", expand=True, box=None, header_style="bold"
    )
    for column in ("started", "scavenge id", "result", "time taken", "space saved"):
        history.add_column(column, no_wrap=True)
    for h in node.scavenge.history[:10]:
        result = Text(h.result, style=_RESULT_STYLE.get(h.result, ""))
        if h.error:
            result.append(f" ({h.error})", style="dim")
        history.add_row(
            h.started[:19].replace("T", " "), h.scavenge_id, result, h.time_taken or "–", size(h.space_saved)
        )
    if not node.scavenge.history:
        history.add_row("–", "no scavenges recorded", "", "", "")
    parts.append(Text(""))
    parts.append(history)
    return Group(*parts)


def _v(value) -> str:
    return "–" if value is None else str(value)


# -- chunks -------------------------------------------------------------------------------------------
def render_chunks(node: NodeState | None, width: int = 30) -> RenderableType:
    if node is None:
        return Text("No node selected.")
    sc = node.scavenge
    threshold = sc.threshold if sc.threshold is not None else 0
    rows = {(c.start, c.end): c for c in sc.chunks}
    for number in sc.weights:  # weighed but not yet reached in execution
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
    for column in ("chunks", "weight", "", "outcome", "before", "after", "saved"):
        table.add_column(column, no_wrap=True)
    mark = round(max(0, threshold) / top * width) if top else 0
    for (start, end), c in sorted(rows.items()):
        weight = c.weight if c is not None and c.weight is not None else sc.weights.get(start)
        if c is None:
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
        table.add_row(
            f"{start}" if start == end else f"{start}–{end}",
            "–" if weight is None else f"{weight:g}",
            heat,
            outcome,
            size(c.size_before) if c else "–",
            size(c.size_after) if c else "–",
            size(c.space_saved) if c and c.space_saved is not None else "–",
        )
    executed = sum(1 for c in sc.chunks if c.executed and not c.merged)
    skipped = sum(1 for c in sc.chunks if c.executed is False)
    merged = sum(1 for c in sc.chunks if c.merged)
    summary = Text(
        f"executed {executed}  skipped {skipped}  merged {merged}  │ marks the threshold", style="dim"
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
def render_auto_scavenge(state: DashboardState, monotonic_now: float) -> RenderableType:
    node = state.node()
    if node is None:
        return Text("No node selected.")
    auto = node.auto_scavenge
    if auto is None:
        return Text("Auto-scavenge: reading…", style="dim")
    if not auto.available:
        return Text(
            f"Auto-scavenge: {NOT_AVAILABLE} ({node.label} has no /auto-scavenge endpoints).", style="dim"
        )
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    grid.add_row("state", Text(auto.state or "–", style="bold cyan"))
    grid.add_row("schedule", auto.schedule or "not set (press c to configure)")
    if auto.time_until_next_cycle is not None:
        left = auto.time_until_next_cycle - (monotonic_now - auto.read_at)
        grid.add_row("next cycle in", duration(max(0.0, left)))
    parts: list[RenderableType] = [grid, Text("")]
    parts.extend(_cycle_parts(state, auto))
    return Group(*parts)


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
            detail = Text(n.result or "Unknown", style=_RESULT_STYLE.get(n.result or "Unknown", "yellow"))
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
def render_backup(node: NodeState | None) -> RenderableType:
    if node is None:
        return Text("No node selected.")
    backup = node.backup
    if backup is None:
        return Text("Backup: reading…", style="dim")
    if not backup.available:
        return Text(f"Backup: {NOT_AVAILABLE} ({node.label} has no /admin/backup endpoints).", style="dim")
    b = backup.body
    if not b:
        return Text(f"Backup: no backup has run on {node.label}.", style="dim")
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    grid.add_row("operation", str(b.get("operation", "–")))
    grid.add_row("state", Text(str(b.get("state", "–")), style="bold cyan"))
    if "step" in b:
        grid.add_row("step", f"{b.get('step')} ({b.get('part', '')}): {b.get('stepName', '')}")
        files_total = b.get("filesTotal") or 0
        bytes_total = b.get("bytesTotal") or 0
        grid.add_row("files", f"{b.get('filesDone', 0)} of {files_total}")
        fraction = (b.get("bytesDone", 0) / bytes_total) if bytes_total else 0.0
        grid.add_row(
            "bytes", Text.assemble(bar(fraction, 30), f" {size(b.get('bytesDone'))} of {size(bytes_total)}")
        )
    grid.add_row("copied", f"{b.get('filesCopied', 0)} files, {size(b.get('bytesCopied'))}")
    grid.add_row("speed", f"{size(b.get('bytesPerSecond'))}/s")
    if b.get("error"):
        grid.add_row("error", Text(str(b["error"]), style="bold red"))
    return grid


# -- certificates -------------------------------------------------------------------------------------
def render_certificates(
    state: DashboardState, now: float, log_lines: list[LogLine] | None = None
) -> RenderableType:
    table = Table(expand=True, box=None, header_style="bold")
    # the node, its expiry and the verdict never shrink; long names give way (ellipsis) first
    table.add_column("node", no_wrap=True, min_width=_label_width(state))
    table.add_column("subject", no_wrap=True, overflow="ellipsis", ratio=1)
    table.add_column("issuer", no_wrap=True, overflow="ellipsis", ratio=2)
    table.add_column("expires", no_wrap=True, min_width=30)
    table.add_column("chain", no_wrap=True, min_width=5)
    for node in state.ordered():
        c = node.certificate
        if c is None:
            plain = node.url.startswith("http://")
            table.add_row(
                node.label,
                Text("plain HTTP: no certificate" if plain else "reading…", style="dim"),
                "",
                "",
                "",
            )
            continue
        expires: Text | str = "–"
        if c.not_after is not None:
            left = c.not_after - now
            style = "bold red" if left < 7 * 86400 else "yellow" if left < 30 * 86400 else "green"
            when = datetime.fromtimestamp(c.not_after, UTC).strftime("%Y-%m-%d %H:%M")
            expires = Text(f"{when} ({'expired' if left < 0 else 'in ' + duration(left)})", style=style)
        chain = Text("valid", style="green") if c.verified else Text(f"INVALID: {c.error}", style="bold red")
        table.add_row(node.label, c.subject, c.issuer, expires, chain)
    parts: list[RenderableType] = [table, Text(""), *_peer_failures(state, now), _reload_table(state, now)]
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
    if log_lines is not None:
        reloads = [line for line in log_lines if "reload" in line.message.lower()][-5:]
        errors = [line for line in log_lines if line.is_certificate_error][-10:]
        parts.append(Text("\nLast configuration reloads", style="bold"))
        parts.extend([_log_text(line) for line in reloads] or [Text("none seen", style="dim")])
        parts.append(Text("\nCertificate errors", style="bold"))
        parts.extend([_log_text(line) for line in errors] or [Text("none seen", style="dim")])
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


def render_activity(state: DashboardState) -> RenderableType:
    if not state.activity:
        return Text(
            "No calls made yet. Calls that change something appear here with their answers.", style="dim"
        )
    table = Table(expand=True, box=None, header_style="bold")
    for column in ("time", "node", "request", "status", "answer"):
        table.add_column(column, no_wrap=column != "answer")
    for a in reversed(state.activity[-50:]):
        when = datetime.fromtimestamp(a.at, UTC).strftime("%H:%M:%S")
        status = (
            Text("no answer", style="bold red")
            if a.status is None
            else Text(str(a.status), style="green" if a.status < 300 else "bold red")
        )
        table.add_row(when, a.node, a.request, status, a.body[:200])
    return table
