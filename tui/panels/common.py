"""What every panel shares: units, times, bars, stale marks, the roles' styles, the nodes' names."""

from __future__ import annotations

from datetime import UTC, datetime

from rich.text import Text

from tui.state import (
    DashboardState,
    Member,
    NodeState,
)

NOT_AVAILABLE = "not available on this node"
#: the width a panel assumes when it is not told (a wide terminal)
WIDE = 200
ROLE_STYLE = {
    "Leader": "bold green",
    "Follower": "cyan",
    "ReadOnlyReplica": "blue",
    "Unreachable": "bold red",
    "Unknown": "yellow",
    "Shutdown": "red",
}
#: what a node in a passing state is doing (its gossip ``state``): not "ok" yet
TRANSITIONS = {
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
RESULT_STYLE = {
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


LEVEL_STYLE = {
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


def cut(text: str, width: int) -> str:
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


def stale_note(node: NodeState, source: str, now: float | None) -> Text | None:
    error = node.errors.get(source)
    if error is None:
        return None
    age = f" {ago(error.age(now))}" if now is not None else ""
    note = Text(f"stale{age}: ", style="bold yellow")
    note.append(error.detail, style="yellow")
    return note


def own_member(node: NodeState) -> Member | None:
    endpoints = node.endpoints()
    for m in node.members:
        if bracketed(m.host, m.port) in endpoints:
            return m
    return node.members[0] if node.members and node.is_evdb else None


def endpoint_labels(state: DashboardState) -> dict[str, tuple[str, str]]:
    """``host:port`` (gossip's httpEndPoint; IPv6 in brackets) → (the label the cluster panel shows, the
    role). A member the dashboard does not poll keeps its address as label and its role from gossip."""
    labels: dict[str, str] = {}
    roles: dict[str, str] = {}
    nodes = state.ordered()
    for node in nodes:
        labels[node.url.split("://", 1)[-1]] = node.label
    for node in nodes:  # attached by another name (localhost): gossip's own entry names the address
        own = own_member(node)
        if own is not None:
            labels.setdefault(bracketed(own.host, own.port), node.label)
    for node in sorted(nodes, key=lambda n: n.role == "Leader"):  # the leader's view last: it wins
        for m in node.members:
            roles[bracketed(m.host, m.port)] = m.state
    for key, label in labels.items():  # a polled node's own word about its role
        polled = next((n for n in nodes if n.label == label), None)
        if polled is not None and polled.reachable and polled.role:
            roles[key] = polled.role
    return {key: (labels.get(key, key), roles.get(key, "")) for key in {*labels, *roles}}


def bracketed(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
