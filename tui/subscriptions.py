"""The dashboard's persistent subscriptions screen (``S``): every group as the node reports it, its
consumers, lag, messages in flight and parked ones, and a confirmed replay of the parked messages.

Persistent subscriptions live on the leader. A follower sends ``/subscriptions`` on to its leader and
answers what the leader answered, as KurrentDB's do; a node that knows no leader answers 503 "Server Is
Not Ready", and the screen then says so and shows the leader's groups, as the leader reports them. What is shown is
what the nodes answered, marked stale when a read fails, as on the other panels. The collectors read
them only while this screen is open (``DashboardApp.want_subscriptions``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Label, Static

from evdb.clock import Clock
from tui.calls import PlannedCall
from tui.panels import NOT_AVAILABLE, ago, number, size, stale_lines
from tui.state import DashboardState, NodeState, SubscriptionGroup
from tui.widgets import KeyBar

__all__ = ["SubscriptionsScreen", "SubscriptionsView", "render_subscriptions", "replay_parked", "view_of"]

#: columns of the group table that give way in a narrow terminal, least important first
_OPTIONAL = ("items/s", "checkpoint → known", "strategy", "status")
_STATUS_STYLE = {"Live": "green", "CatchingUp": "cyan", "NotReady": "yellow"}


def replay_parked(node_url: str, stream: str, group: str) -> PlannedCall:
    """``POST /subscriptions/{stream}/{group}/replayParked``: the parked messages are sent again."""
    path = f"/subscriptions/{quote(stream, safe='')}/{quote(group, safe='')}/replayParked"
    return PlannedCall(node_url, "POST", path, title=f"Replay the parked messages of {stream} / {group}")


@dataclass(frozen=True)
class SubscriptionsView:
    """Whose groups the screen shows for the selected node: the node itself, or the leader when the
    node does not serve them; ``note`` says which and why."""

    selected: NodeState | None
    source: NodeState | None  # the node whose answer is shown (replays go to it)
    note: Text | None = None

    @property
    def groups(self) -> tuple[SubscriptionGroup, ...]:
        subs = self.source.subscriptions if self.source is not None else None
        return subs.groups if subs is not None else ()


def view_of(state: DashboardState) -> SubscriptionsView:
    node = state.node()
    if node is None or node.subscriptions is None or node.subscriptions.not_served is None:
        return SubscriptionsView(node, node)
    note = Text(f"{node.label} ({node.role or 'role unknown'}) does not serve persistent subscriptions: ")
    note.append(node.subscriptions.not_served, style="yellow")
    leaders = [n for n in state.ordered() if n.role == "Leader" and n.reachable]
    if not leaders:
        note.append("\nThey are served by the leader, and no node leads now.", style="bold yellow")
        return SubscriptionsView(node, None, note)
    leader = leaders[0]
    note.append(f"\nThey are served by the leader: as {leader.label} (Leader) reports them.")
    return SubscriptionsView(node, leader, note)


def _lag(group: SubscriptionGroup) -> Text:
    lag = group.lag()
    if lag is None:
        return Text("–" if group.last_known is None else "no checkpoint", style="dim")
    amount, unit = lag
    text = size(amount) if unit == "bytes" else f"{number(amount)} events"
    return Text(text, style="yellow" if amount else "green")


def _parked(group: SubscriptionGroup) -> Text:
    if group.parked is None:
        return Text("?", style="dim")
    return Text(number(group.parked), style="bold magenta" if group.parked else "")


def _positions(group: SubscriptionGroup) -> str:
    return f"{group.last_checkpointed or '–'} → {group.last_known or '–'}"


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(1, width - 1)] + "…"


def _group_table(groups: tuple[SubscriptionGroup, ...], chosen: tuple[str, str] | None, width: int) -> Table:
    names = 40 if width >= 120 else 24 if width >= 90 else 16
    rows = []
    for g in groups:
        mark = g.key == chosen
        rows.append(
            {
                "": Text("▶" if mark else " ", style="bold cyan"),
                "stream": Text(_cut(g.stream, names), style="bold" if mark else ""),
                "group": Text(_cut(g.group, names), style="bold" if mark else ""),
                "status": Text(g.status or "–", style=_STATUS_STYLE.get(g.status, "")),
                "strategy": Text(g.strategy or "?", style="" if g.strategy else "dim"),
                "consumers": Text(number(g.connection_count)),
                "in flight": Text(number(g.in_flight)),
                "parked": _parked(g),
                "checkpoint → known": Text(_positions(g)),
                "lag": _lag(g),
                "items/s": Text(f"{g.items_per_second:,.0f}"),
            }
        )
    order = [
        "",
        "stream",
        "group",
        "status",
        "strategy",
        "consumers",
        "in flight",
        "parked",
        "lag",
        "checkpoint → known",
        "items/s",
    ]
    natural = {c: max([len(c), *(r[c].cell_len for r in rows)]) for c in order}
    shown = list(order)
    for optional in _OPTIONAL:
        if sum(natural[c] for c in shown) + 2 * (len(shown) - 1) <= width:
            break
        shown.remove(optional)
    table = Table(box=None, header_style="bold", pad_edge=False, padding=(0, 1))
    for column in shown:
        table.add_column(column, no_wrap=True, width=natural[column])
    for row in rows:
        table.add_row(*(row[c] for c in shown))
    return table


def _detail(group: SubscriptionGroup, width: int, replayable: bool) -> list[RenderableType]:
    head = Text(f"{group.stream} / {group.group}", style="bold")
    head.append(f"  {group.strategy or 'strategy ?'}  ·  {group.status or 'status ?'}", style="cyan")
    out: list[RenderableType] = [Text(""), head]
    lag = group.lag()
    line = Text("  checkpoint ")
    line.append(group.last_checkpointed or "none yet")
    line.append(f", last known {group.last_known or '–'}")
    if lag is not None:
        line.append(": ")
        line.append_text(_lag(group))
        line.append(" behind")
    out.append(line)
    counts = Text(f"  in flight {number(group.in_flight)}")
    if group.outstanding is not None:
        counts.append(f" · outstanding {number(group.outstanding)}")
    counts.append(" · parked ")
    counts.append_text(_parked(group))
    if group.parked and replayable:
        counts.append("  (p replays them)", style="dim")
    counts.append(f" · processed {number(group.total_items)}")
    out.append(counts)
    if group.detail_error is not None:
        error = Text("  details not read: ", style="bold yellow")
        error.append(group.detail_error, style="yellow")
        out.append(error)
        return out
    if not group.connections:
        out.append(Text("  no consumer is connected", style="dim"))
        return out
    out.append(Text(f"  consumers ({len(group.connections)}):"))
    table = Table(box=None, header_style="bold", pad_edge=False, padding=(0, 1))
    wide = width >= 100
    columns = ["from", "user", "in flight", "slots", "items/s", "total"] + (["connection"] if wide else [])
    table.add_column("", width=3)
    for column in columns:
        table.add_column(
            column, no_wrap=True, overflow="ellipsis", max_width=40 if column == "from" else None
        )
    for c in group.connections:
        cells = [
            c.source,
            c.username or "–",
            number(c.in_flight),
            number(c.available_slots),
            f"{c.items_per_second:,.0f}",
            number(c.total_items),
        ]
        if wide:
            cells.append(_cut(c.connection_name or "–", 30))
        table.add_row("", *cells)
    out.append(table)
    return out


def render_subscriptions(
    state: DashboardState, now: float, width: int, chosen: tuple[str, str] | None
) -> RenderableType:
    """The selected node's persistent subscriptions (or the leader's, where the node does not serve
    them): the groups, then the chosen group's lag, counts and consumers."""
    view = view_of(state)
    node = view.selected
    if node is None:
        return Text("No node selected.")
    parts: list[RenderableType] = []
    if view.note is not None:
        parts.append(view.note)
    source = view.source
    if source is None:
        return Group(*parts)
    parts.extend(stale_lines(source, ("subscriptions",), now))
    subs = source.subscriptions
    if subs is None:
        error = source.errors.get("subscriptions")
        if error is not None:
            unknown = Text("Persistent subscriptions: unknown: ", style="bold yellow")
            unknown.append(error.detail, style="yellow")
            return Group(*[p for p in parts if not _is_stale_of(p, error.detail)], unknown)
        parts.append(Text(f"Persistent subscriptions of {source.label}: reading…", style="dim"))
        return Group(*parts)
    if not subs.available:
        parts.append(
            Text(
                f"Persistent subscriptions: {NOT_AVAILABLE} ({source.label} has no /subscriptions).",
                style="dim",
            )
        )
        return Group(*parts)
    if not subs.groups:
        parts.append(Text(f"No persistent subscription group on {source.label}.", style="dim"))
        return Group(*parts)
    parked = sum(g.parked or 0 for g in subs.groups)
    title = Text(
        f"{len(subs.groups)} group{'s' if len(subs.groups) != 1 else ''} on {source.label}", style="bold"
    )
    title.append(f" ({source.role})" if source.role else "")
    title.append(
        f" · {number(parked)} parked message{'s' if parked != 1 else ''}", style="magenta" if parked else ""
    )
    if source is not node:
        title.append(f" · read {ago(now - source.last_ok)} ago" if source.last_ok else "", style="dim")
    parts.append(title)
    keys = [g.key for g in subs.groups]
    chosen = chosen if chosen in keys else keys[0]
    parts.append(_group_table(subs.groups, chosen, width))
    if subs.details_left_out:
        parts.append(
            Text(
                f"{subs.details_left_out} more groups: strategy, consumers and parked count not read",
                style="dim",
            )
        )
    group = subs.groups[keys.index(chosen)]
    parts.extend(_detail(group, width, not state.readonly))
    return Group(*parts)


def _is_stale_of(part: RenderableType, detail: str) -> bool:
    return isinstance(part, Text) and part.plain.startswith("⚠ stale") and detail in part.plain


class Dashboard(Protocol):
    """What this screen asks of the dashboard app (tui/app.py DashboardApp is it)."""

    state: DashboardState
    clock: Clock

    def want_subscriptions(self, wanted: bool) -> None: ...

    def confirm(self, calls: list[PlannedCall], note: str = "") -> None: ...

    def action_next_node(self) -> None: ...


class SubscriptionsScreen(Screen[None]):
    """``S``: the persistent subscription groups of the selected node (or of the leader), polled while
    the screen is open; ↑/↓ choose a group, ``p`` replays its parked messages (confirmed first)."""

    DEFAULT_CSS = """
    SubscriptionsScreen #title { text-style: bold; padding: 0 1; }
    SubscriptionsScreen VerticalScroll { padding: 0 1; }
    """
    BINDINGS = [
        Binding("down,j", "choose(1)", "Next group", key_display="↓"),
        Binding("up,k", "choose(-1)", "Previous group", key_display="↑"),
        Binding("p", "replay_parked", "Replay parked"),
        Binding("n", "next_node", "Next node"),
        Binding("escape", "back", "Back"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.chosen: tuple[str, str] | None = None
        self._drawn: Any = None

    @property
    def dashboard(self) -> Dashboard:
        return self.app  # type: ignore[return-value]

    def compose(self) -> ComposeResult:
        yield Label("Persistent subscriptions", id="title")
        with VerticalScroll():
            yield Static(id="subscriptions-panel")
        yield KeyBar(last=("back",))

    def on_mount(self) -> None:
        self.dashboard.want_subscriptions(True)
        self.show()
        self.set_interval(0.25, self.show)

    def on_unmount(self) -> None:
        self.dashboard.want_subscriptions(False)

    def _groups(self) -> tuple[SubscriptionGroup, ...]:
        return view_of(self.dashboard.state).groups

    def show(self) -> None:
        """Redraw when what it shows changed (a poll, the choice, the width, a stale age)."""
        app = self.dashboard
        state = app.state
        now = app.clock.time()
        groups = self._groups()
        keys = [g.key for g in groups]
        if self.chosen not in keys:
            self.chosen = keys[0] if keys else None
        width = max(40, self.size.width - 4)
        failing = any(n.errors for n in state.ordered())
        key = (
            tuple(n.version for n in state.ordered()),
            state.selected,
            self.chosen,
            width,
            int(now) if failing else 0,
            state.readonly,
        )
        if key == self._drawn:
            return
        self._drawn = key
        label = state.node().label if state.node() else "–"  # type: ignore[union-attr]
        self.query_one("#title", Label).update(f"Persistent subscriptions · {label}")
        self.query_one("#subscriptions-panel", Static).update(
            render_subscriptions(state, now, width, self.chosen)
        )

    def action_choose(self, step: int) -> None:
        keys = [g.key for g in self._groups()]
        if not keys:
            return
        index = keys.index(self.chosen) if self.chosen in keys else 0
        self.chosen = keys[(index + step) % len(keys)]
        self.show()

    def why_not_replay(self) -> str | None:
        """None when ``p`` can replay now, else why not (told in a notice)."""
        state = self.dashboard.state
        if state.readonly:
            return "read-only mode"
        view = view_of(state)
        if view.source is None:
            return "no node leads now: persistent subscriptions are served by the leader"
        if not view.source.reachable:
            return f"{view.source.label} is not reachable"
        group = next((g for g in view.groups if g.key == self.chosen), None)
        if group is None:
            return f"no persistent subscription group on {view.source.label}"
        if group.parked == 0:
            return f"{group.stream} / {group.group} has no parked message (as {view.source.label} reports)"
        return None

    def action_replay_parked(self) -> None:
        reason = self.why_not_replay()
        if reason is not None:
            self.notify(f"Replay parked: {reason}", severity="warning", timeout=5)
            return
        view = view_of(self.dashboard.state)
        assert view.source is not None and self.chosen is not None
        stream, group = self.chosen
        chosen = next(g for g in view.groups if g.key == self.chosen)
        count = "its parked message" if chosen.parked == 1 else f"its {number(chosen.parked)} parked messages"
        self.dashboard.confirm(
            [replay_parked(view.source.url, stream, group)],
            note=f"The leader sends {count} to the group's consumers again, oldest first, and then "
            "truncates the parked stream ($persistentsubscription-…-parked); messages parked from now on "
            "stay parked until the next replay.",
        )

    def action_next_node(self) -> None:
        self.dashboard.action_next_node()
        self.show()

    def action_back(self) -> None:
        self.app.pop_screen()
