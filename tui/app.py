"""The dashboard application: collectors fill state, panels render it, keys issue confirmed calls."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import httpx
from textual import events
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.containers import VerticalScroll
from textual.notifications import SeverityLevel
from textual.widgets import Header, Static, TabbedContent, TabPane

from evdb.clock import Clock, SystemClock
from evdb.tls.trust import FollowedTrust
from tui.calls import (
    BackupForm,
    FormError,
    PlannedCall,
    ScavengeForm,
    answer_text,
    configure_auto_scavenge,
    cycle_now,
    pause_auto_scavenge,
    reload_config,
    resign_leader,
    resume_auto_scavenge,
    stop_scavenge,
)
from tui.client import HttpNodeClient, NodeClient
from tui.collector import MirrorCollector, NodeCollector, json_or_text, member_url, normalise_url
from tui.dialogs import (
    BackupDialog,
    Confirmable,
    ConfirmCall,
    CronDialog,
    FilterDialog,
    HelpScreen,
    QuitDialog,
    RestoreDialog,
    ScavengeDialog,
)
from tui.event_browser import EventBrowser, EventSource
from tui.gating import CHANGING_ACTIONS, GATED_ACTIONS, LOCAL_JOBS, Situation, why_not
from tui.jobs import (
    DEMO_EVENTS,
    LocalNode,
    LocalNodes,
    PlannedJob,
    RestoreForm,
    demo_job,
    node_job,
    restore_job,
    restore_summary,
    run_demo_load,
)
from tui.logtail import LogBook, LogFilter, LogTail
from tui.panels import (
    backup_seconds,
    endpoint_labels,
    render_activity,
    render_auto_scavenge,
    render_backup,
    render_certificates,
    render_chunks,
    render_cluster,
    render_logs,
    render_scavenge,
    short_duration,
    size,
)
from tui.routine import (
    LEADER_WAIT_SECONDS,
    FollowersFirst,
    RoutineItem,
    plan_followers_first,
)
from tui.state import Activity, DashboardState, NodeState
from tui.subscriptions import SubscriptionsScreen
from tui.widgets import KeyBar

if TYPE_CHECKING:
    from evdb.cluster.launcher import LocalCluster

__all__ = ["CHANGING_ACTIONS", "LOCAL_JOBS", "DashboardApp", "NodeSpec"]

TABS = ("scavenge", "chunks", "auto", "backup", "certs", "logs", "activity")
#: the tabs' labels, and shorter ones where the terminal is narrow (below 100 columns)
TAB_LABELS = ("Scavenge", "Chunks", "Auto-scavenge", "Backup", "Certificates", "Logs", "Activity")
SHORT_TAB_LABELS = ("Scavenge", "Chunks", "Auto", "Backup", "Certs", "Logs", "Activity")
_BACKUP_ENDED = ("completed", "failed", "stopped")


@dataclass(frozen=True)
class NodeSpec:
    """A node to watch: its address, and for a launched node its name, pid and log folder."""

    url: str
    name: str = ""
    pid: int | None = None
    log_dir: str | None = None


@dataclass
class Connection:
    """How to talk to the nodes: credentials, trust, and (tests) the httpx transport."""

    user: str | None = None
    password: str | None = None
    ca_file: str | None = None
    insecure_skip_verify: bool = False
    transport: httpx.AsyncBaseTransport | None = None
    timeout: float = 2.0
    extra: dict[str, Any] = field(default_factory=dict)

    trust: FollowedTrust | None = field(default=None, init=False, repr=False)

    def client(self) -> httpx.AsyncClient:
        verify: Any = True
        if self.insecure_skip_verify:
            verify = False
        elif self.ca_file:
            self.trust = FollowedTrust(self.ca_file)
            verify = self.trust.context
        auth = (self.user, self.password or "") if self.user else None
        return httpx.AsyncClient(
            auth=auth, verify=verify, transport=self.transport, timeout=self.timeout, **self.extra
        )

    def sync_client(self, base_url: str, timeout: float = 60.0) -> httpx.Client:
        """A blocking client of one node with the same credentials and trust (for a worker thread)."""
        verify: Any = True
        if self.insecure_skip_verify:
            verify = False
        elif self.ca_file:
            verify = (self.trust or FollowedTrust(self.ca_file)).context
        auth = (self.user, self.password or "") if self.user else None
        transport = self.transport if isinstance(self.transport, httpx.BaseTransport) else None
        return httpx.Client(
            base_url=base_url, auth=auth, verify=verify, transport=transport, timeout=timeout, **self.extra
        )


class JobReport:
    """What a job running in a worker thread tells the dashboard: lines for its activity entry, its
    progress (the entry and the node's "doing" column), and what to do on the event loop once it is done."""

    def __init__(
        self, app: DashboardApp, node: NodeState, index: int, loop: asyncio.AbstractEventLoop
    ) -> None:
        self.app = app
        self.node = node
        self.index = index
        self.loop = loop
        self.lines: list[str] = []
        self.on_finish: list[Callable[[], None]] = []

    def log(self, text: str) -> None:
        self.loop.call_soon_threadsafe(self._add, text)

    def progress(self, text: str, doing: str) -> None:
        self.loop.call_soon_threadsafe(self._progress, text, doing)

    def finish(self, callback: Callable[[], None]) -> None:
        self.on_finish.append(callback)

    def _add(self, text: str) -> None:
        self.lines.append(text)
        self.app.state.update_activity(self.index, body="; ".join(self.lines))
        self.app.render_panels()

    def _progress(self, text: str, doing: str) -> None:
        self.app.state.update_activity(self.index, body="; ".join([*self.lines, text]))
        if self.node.job:
            self.node.job = doing
            self.node.version += 1
        self.app.render_panels()


class DashboardCommands(Provider):
    """The ``:`` palette: jump to a node, or run any action that can act now."""

    def _entries(self) -> list[tuple[str, Any, str]]:
        app = self.app
        assert isinstance(app, DashboardApp)
        return app.palette_entries()

    async def discover(self) -> Hits:
        for label, callback, help_text in self._entries():
            yield DiscoveryHit(label, callback, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for label, callback, help_text in self._entries():
            score = matcher.match(label)
            if score > 0:
                yield Hit(score, matcher.highlight(label), callback, help=help_text)


class DashboardApp(App[str | None]):
    """``evdb dashboard``. The return value is ``"stop"`` when the operator asked to stop the local cluster."""

    TITLE = "evdb dashboard"
    COMMANDS = {DashboardCommands}
    CSS = """
    #cluster { height: auto; max-height: 16; border: round $accent; padding: 0 1; }
    /* a narrow terminal: a call's notice is one line over the title bar, not a box over the panel */
    App.-narrow ToastRack { dock: top; align: right top; margin-bottom: 0; }
    App.-narrow Toast { padding: 0 1; margin-top: 0; width: auto; max-width: 100%; }
    TabbedContent { height: 1fr; }
    TabPane { padding: 0 1; }
    """
    # in order of importance: in a narrow terminal the key bar keeps the first ones (? lists them all)
    BINDINGS = [
        Binding("s", "start_scavenge", "Scavenge"),
        Binding("x", "stop_scavenge", "Stop scavenge"),
        Binding("n", "next_node", "Next node"),
        Binding("b", "start_backup", "Backup"),
        Binding("r", "resign", "Resign leader"),
        Binding("p", "pause_resume_auto", "Pause/resume auto"),
        Binding("c", "configure_auto", "Schedule auto"),
        Binding("l", "reload", "Reload config"),
        Binding("R", "reload_all", "Rolling reload"),
        # listed by ? and the : palette (the key bar keeps its room for the keys above)
        Binding("d", "demo_load", "Demo data (write some to scavenge)", show=False),
        Binding("F", "followers_first", "Followers-first cluster scavenge", show=False),
        Binding("C", "cycle_now", "Cycle now (auto-scavenge)", show=False),
        Binding("o", "stop_node", "Stop node (local cluster)", show=False),
        Binding("u", "start_node", "Start node (local cluster)", show=False),
        Binding("B", "restore_node", "Restore node from a backup (local cluster)", show=False),
        Binding("S", "subscriptions", "Persistent subscriptions (groups, consumers, parked)", show=False),
        Binding("e", "browse_events", "Events"),
        Binding("slash", "filter_logs", "Filter logs", key_display="/"),
        Binding("colon", "command_palette", "Commands", key_display=":"),
        Binding("a", "toggle_history", "History of every node / this node", show=False),
        Binding("question_mark", "help", "Help", key_display="?"),
        Binding("escape", "back", "Back", show=False),
        # the panel below the fold (a scavenge's history at 80×24): scrolled without focusing it
        Binding("pagedown", "scroll_panel('page_down')", "Scroll down a page", show=False),
        Binding("pageup", "scroll_panel('page_up')", "Scroll up a page", show=False),
        Binding("down", "scroll_panel('down')", "Scroll down", show=False),
        Binding("up", "scroll_panel('up')", "Scroll up", show=False),
        Binding("end", "scroll_panel('end')", "Scroll to the end", show=False),
        Binding("home", "scroll_panel('home')", "Scroll to the top", show=False),
        Binding("q", "quit_dashboard", "Quit"),
        *(Binding(str(i + 1), f"show_tab('{tab}')", f"{tab} tab", show=False) for i, tab in enumerate(TABS)),
    ]

    def __init__(
        self,
        nodes: Iterable[NodeSpec],
        *,
        connection: Connection | None = None,
        clock: Clock | None = None,
        readonly: bool = False,
        discover: bool = True,
        interval: float = 1.0,
        cluster_dir: str | None = None,
        log_dirs: Iterable[str] = (),
        start_collectors: bool = True,
        mirrors: Iterable[str] = (),
        local_cluster: LocalCluster | None = None,
    ) -> None:
        super().__init__()
        self.connection = connection or Connection()
        self.clock = clock or SystemClock()
        self.state = DashboardState(readonly=readonly, interval=interval)
        self.discover = discover
        self.interval = interval
        self.cluster_dir = cluster_dir
        self.start_collectors = start_collectors
        self.logbook = LogBook()
        self.log_filter = LogFilter()
        self.collectors: dict[str, NodeCollector] = {}
        #: ``--mirror``: evdb mirror processes shown under the cluster members (URL or status file)
        self.mirror_sources = list(dict.fromkeys(mirrors))
        self.mirror_collectors: list[MirrorCollector] = []
        #: the one way to the nodes (tui/client.py), made when the app mounts
        self.client: NodeClient | None = None
        self._specs = list(nodes)
        self._extra_log_dirs = list(log_dirs)
        self._rendered: dict[str, Any] = {}
        self._gates: tuple = ()
        self._seen_versions: dict[str, int] = {}
        self._last_form: ScavengeForm | None = None
        self._last_backup: dict[str, BackupForm] = {}  # per node: the dialog starts from the last one
        self._first_frame_at: float | None = None
        self._started_at = self.clock.monotonic()
        #: backups this dashboard started, by node: the id the node answered (their end is told)
        self._backup_watch: dict[str, str | None] = {}
        self._backups_told: set[tuple] = set()
        #: ``evdb dashboard --record``: an ``evdb.scenario.Recorder`` that sees every key and click
        self.recorder: Any = None
        #: the local cluster the dashboard launched or was given: the node jobs (o, u, B) act on it
        self.local = LocalNodes(local_cluster) if local_cluster is not None else None
        self._last_restore: dict[str, str] = {}  # per node: the restore dialog starts from the last folder
        self._routine: FollowersFirst | None = None
        #: how long the followers-first routine waits for a new leader after the resign
        self.routine_leader_wait = LEADER_WAIT_SECONDS
        self._subscriptions_wanted = False  # the subscriptions screen is open: collectors read them
        for spec in self._specs:
            self._add_node(spec)
        for folder in self._extra_log_dirs:
            self.logbook.follow(LogTail(os.path.basename(os.path.normpath(folder)), folder))
        if self._specs:
            self.state.selected = normalise_url(self._specs[0].url)

    # -- layout ----------------------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield Header(show_clock=False)
        yield Static(id="cluster")
        with TabbedContent(initial="scavenge"):
            with TabPane("1 Scavenge", id="scavenge"), VerticalScroll():
                yield Static(id="scavenge-panel")
            with TabPane("2 Chunks", id="chunks"), VerticalScroll():
                yield Static(id="chunks-panel")
            with TabPane("3 Auto-scavenge", id="auto"), VerticalScroll():
                yield Static(id="auto-panel")
            with TabPane("4 Backup", id="backup"), VerticalScroll():
                yield Static(id="backup-panel")
            with TabPane("5 Certificates", id="certs"), VerticalScroll():
                yield Static(id="certs-panel")
            with TabPane("6 Logs", id="logs"), VerticalScroll(id="logs-scroll"):
                yield Static(id="logs-panel")
            with TabPane("7 Activity", id="activity"), VerticalScroll():
                yield Static(id="activity-panel")
        yield KeyBar()

    @property
    def narrow(self) -> bool:
        """80×24 and the like: notices of calls are one short line."""
        return self.size.width < 100 or self.size.height < 30

    def tell_call(self, label: str, request: str, outcome: str, detail: str = "", **kwargs: Any) -> None:
        """The notice of a call the operator sent: the request and its outcome (and the node's words);
        in a narrow terminal one line for 3 s over the title bar (the Activity tab keeps it all)."""
        if self.narrow:
            method, _, url = request.partition(" ")
            path = urlsplit(url).path or url
            kwargs["timeout"] = min(kwargs.get("timeout", 8), 3)
            said = f"{label}: {method} {path} {outcome}"
            if detail and kwargs.get("severity") == "error":
                said += f": {detail}"
            self.notify(said[: max(20, self.size.width - 8)], **kwargs)
            return
        self.notify(f"{request}\n{outcome}" + (f"\n{detail}" if detail else ""), title=label, **kwargs)

    def on_resize(self, event: events.Resize) -> None:
        self.set_class(event.size.width < 100 or event.size.height < 30, "-narrow")
        labels = SHORT_TAB_LABELS if event.size.width < 100 else TAB_LABELS
        try:
            tabs = self.query_one(TabbedContent)
        except Exception:
            return
        for i, (tab, label) in enumerate(zip(TABS, labels, strict=True), 1):
            tabs.get_tab(tab).label = f"{i} {label}"
        self.render_panels()

    def _panel_width(self) -> int:
        """Columns a panel has: the terminal less the tab's padding and a scroll bar."""
        return max(40, self.size.width - 4)

    async def on_mount(self) -> None:
        self.client = HttpNodeClient(self.connection.client(), timeout=self.connection.timeout)
        self._refresh_local(force=True)
        self.sub_title = "read-only" if self.state.readonly else ""
        for node in self.state.ordered():
            self._start_collector(node)
        for source in self.mirror_sources:
            self._start_mirror_collector(source)
        self.render_panels(force=True)
        self.set_interval(self.interval, self.tick)

    async def on_event(self, event: events.Event) -> None:
        if self.recorder is not None and isinstance(event, events.InputEvent) and not event.is_forwarded:
            self.recorder.observe(self, event)  # before dispatch: a dialog's inputs still hold their text
        await super().on_event(event)

    async def on_unmount(self) -> None:
        if self.client is not None:
            await self.client.aclose()

    # -- nodes and collectors --------------------------------------------------------------------------
    def _add_node(self, spec: NodeSpec) -> NodeState:
        url = normalise_url(spec.url)
        node = self.state.nodes.get(url)
        if node is None:
            node = NodeState(url=url, name=spec.name, pid=spec.pid, log_dir=spec.log_dir)
            self.state.nodes[url] = node
            if spec.log_dir:
                self.logbook.follow(LogTail(spec.name or url, spec.log_dir))
        return node

    def _start_collector(self, node: NodeState) -> None:
        if node.url in self.collectors or self.client is None:
            return
        collector = NodeCollector(
            node,
            self.client,
            self.clock,
            interval=self.interval,
            timeout=self.connection.timeout,
            ca_file=self.connection.ca_file,
            trust=lambda: self.connection.trust.context if self.connection.trust is not None else None,
            on_members=self._on_poll,
        )
        collector.subscriptions_wanted = self._subscriptions_wanted
        self.collectors[node.url] = collector
        if self.start_collectors:
            self.run_worker(
                collector.run(), group="collectors", name=f"collect {node.url}", exit_on_error=False
            )

    def _start_mirror_collector(self, source: str) -> None:
        assert self.client is not None
        collector = MirrorCollector(
            source,
            self.state,
            self.client,
            self.clock,
            interval=self.interval,
            timeout=self.connection.timeout,
            on_change=self.render_panels,
        )
        self.mirror_collectors.append(collector)
        if self.start_collectors:
            self.run_worker(collector.run(), group="collectors", name=f"mirror {source}", exit_on_error=False)

    def _on_poll(self, node: NodeState) -> None:
        self._note_cycle_roles(node)
        if self.discover:
            scheme = urlsplit(node.url).scheme
            for member in node.members:
                if not member.host or member.port <= 0 or member.host in ("0.0.0.0", "::"):
                    continue
                url = member_url(member, scheme)
                if url not in self.state.nodes:
                    self._start_collector(self._add_node(NodeSpec(url)))
        if self._seen_versions.get(node.url) != node.version:
            self._seen_versions[node.url] = node.version
            self._tell_backup_end(node)
            self.render_panels()

    def _note_cycle_roles(self, node: NodeState) -> None:
        """The role of the node a cluster scavenge works on, as first seen while designated: the summary
        names the role each node was scavenged in, not the one it has by then."""
        auto = node.auto_scavenge
        cycle = auto.cycle if auto is not None else None
        if cycle is None or not cycle.cycle_id or cycle.designated is None:
            return
        key = (cycle.cycle_id, cycle.designated)
        if key in self.state.cycle_roles:
            return
        for other in self.state.ordered():
            if cycle.designated in other.endpoints() and other.reachable and other.role:
                self.state.cycle_roles[key] = other.role
                return

    def _tell_backup_end(self, node: NodeState) -> None:
        """A backup that ended (one this dashboard started, or one it saw running) is told once."""
        backup = node.backup
        if backup is None or not backup.available or backup.body.get("state") not in _BACKUP_ENDED:
            return
        body = backup.body
        key = (node.url, body.get("backupId"), body.get("startedAt"), body.get("destination"))
        if key in self._backups_told:
            return
        watched = node.url in self._backup_watch
        if (
            watched
            and self._backup_watch[node.url] not in (None, body.get("backupId"))
            and body.get("backupId")
        ):
            return  # still the answer of an earlier backup
        if not watched and not backup.seen_running:
            return
        self._backups_told.add(key)
        self._backup_watch.pop(node.url, None)
        from tui.calls import explain_backup_error

        state = str(body.get("state"))
        seconds = backup_seconds(backup)
        took = f", took {short_duration(seconds)}" if seconds is not None else ""
        if state == "completed":
            message = (
                f"{body.get('kind') or body.get('operation', '')} backup completed into {body.get('destination', '?')}: "
                f"{body.get('filesCopied', 0)} files, {size(body.get('bytesCopied'))}{took}"
            )
            self.notify(message, title=node.label, timeout=10)
        else:
            error = explain_backup_error(str(body.get("error") or "no reason given"))
            self.notify(f"The backup {state}{took}: {error}", title=node.label, severity="error", timeout=20)

    async def poll_all(self) -> None:
        """One poll of every node now (tests, and the first frame)."""
        await asyncio.gather(
            *(c.poll_once() for c in list(self.collectors.values())),
            *(m.poll_once() for m in self.mirror_collectors),
        )
        self.render_panels()

    # -- rendering -------------------------------------------------------------------------------------
    def tick(self) -> None:
        if self.connection.trust is not None:
            self.connection.trust.refresh()  # a rolling certificate update: trust the new CA as well
        self.logbook.poll()
        self._refresh_local()
        self.render_panels()

    def _refresh_local(self, force: bool = False) -> None:
        """The local cluster's processes and node options (read at most once a second)."""
        if self.local is None or not self.local.refresh(self.clock.monotonic(), force=force):
            return
        self.state.node_options = dict(self.local.options)
        for node in self.state.ordered():
            local = self.local.node(node.url)
            if local is not None and local.pid != node.pid and local.running:
                node.pid = local.pid  # a restarted node: its new process's figures
        self.state.jobs_version += 1

    def _update(self, widget_id: str, key: Any, make) -> None:
        if not force_needed(self._rendered, widget_id, key):
            return
        self.query_one(f"#{widget_id}", Static).update(make())

    def render_panels(self, force: bool = False) -> None:
        if not self.screen_stack:
            return
        try:
            tabs = self.query_one(TabbedContent)
            self.query_one("#cluster", Static)  # gone first while the app shuts down; a tick may still fire
        except Exception:
            return
        if force:
            self._rendered.clear()
        now = self.clock.time()
        mono = self.clock.monotonic()
        node = self.state.node()
        versions = tuple(n.version for n in self.state.ordered())
        nv = node.version if node else -1
        width = self._panel_width()
        jv = self.state.jobs_version
        # a panel showing stale figures tells their age: redrawn each second while a read fails
        ticking = int(now) if node is not None and node.errors else 0
        # every second while a row ages towards stale (two intervals unread), else every 5 s
        aging = any(n.last_ok is not None and now - n.last_ok > self.interval for n in self.state.ordered())
        self._update(
            "cluster",
            (
                versions,
                self.state.mirrors_version,
                self.state.selected,
                int(now) // (1 if aging else 5),
                width,
                jv,
            ),
            lambda: render_cluster(self.state, now, width),
        )
        active = tabs.active
        if active == "scavenge":
            self._update(
                "scavenge-panel",
                (nv, versions, self.state.selected, self.state.all_history, width, ticking, jv),
                lambda: render_scavenge(node, state=self.state, now=now, width=width),
            )
        elif active == "chunks":
            self._update(
                "chunks-panel",
                (nv, self.state.selected, width, ticking),
                lambda: render_chunks(node, panel_width=width, now=now),
            )
        elif active == "auto":
            self._update(
                "auto-panel",
                (versions, self.state.selected, int(mono), width, jv),
                lambda: render_auto_scavenge(self.state, mono, now, width),
            )
        elif active == "backup":
            self._update(
                "backup-panel",
                (nv, self.state.selected, width, int(now) // 10, ticking),
                lambda: render_backup(node, now=now, width=width),
            )
        elif active == "certs":
            self._update(
                "certs-panel",
                (versions, self.logbook.version, int(now) // 60, width, ticking),
                lambda: render_certificates(
                    self.state, now, list(self.logbook.lines) if self.logbook.tails else None, width
                ),
            )
        elif active == "logs":
            self._update("logs-panel", (self.logbook.version, self.log_filter), lambda: self._render_logs())
        elif active == "activity":
            self._update(
                "activity-panel", (len(self.state.activity), jv), lambda: render_activity(self.state)
            )
        if self._first_frame_at is None and all(n.reachable is not None for n in self.state.ordered()):
            self._first_frame_at = self.clock.monotonic() - self._started_at
        gates = tuple(self.why_not(a) for a in sorted(GATED_ACTIONS))
        if gates != self._gates:  # the footer only needs redrawing when a key's state changed
            self._gates = gates
            self.refresh_bindings()

    def _render_logs(self):
        lines = self.logbook.filtered(self.log_filter, limit=500)
        renderable = render_logs(lines, self.log_filter.describe(), bool(self.logbook.tails))
        self.call_after_refresh(self.query_one("#logs-scroll", VerticalScroll).scroll_end, animate=False)
        return renderable

    @property
    def first_frame_seconds(self) -> float | None:
        """Seconds from start until every node had answered (or failed) once and was drawn."""
        return self._first_frame_at

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        self.render_panels()

    # -- what can act now ------------------------------------------------------------------------------
    def why_not(self, action: str) -> str | None:
        """None when the action can act now, else the reason, naming the node (shown in help, and as a
        notice when its key is pressed): ``tui.gating.why_not`` of what the dashboard knows now."""
        routine_running = self._routine is not None and self._routine.state.running
        situation = Situation(self.state, self.local, routine_running, bool(self.logbook.tails))
        return why_not(action, situation)

    async def run_action(self, action: Any, default_namespace: Any = None, namespaces: Any = None) -> bool:
        """As App.run_action; a key of the dashboard that cannot act now says why instead of nothing."""
        handled = await super().run_action(action, default_namespace, namespaces)
        if handled or not isinstance(action, str) or len(self.screen_stack) > 1:
            return handled
        if default_namespace not in (None, self):
            return handled
        name = action.removeprefix("app.").split("(")[0]
        reason = self.why_not(name) if name in GATED_ACTIONS else None
        if reason:
            description = next(
                (b.description for b in self.BINDINGS if isinstance(b, Binding) and b.action == name), name
            )
            self.notify(f"{description}: {reason}", severity="warning", timeout=5)
        return handled

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if len(self.screen_stack) > 1 and action not in ("command_palette", "focus_next", "focus_previous"):
            return False  # a dialog is open: its own keys apply
        return None if self.why_not(action) else True

    def help_rows(self) -> list[tuple[str, str, str]]:
        rows = []
        for binding in self.BINDINGS:
            assert isinstance(binding, Binding)
            action = binding.action.split("(")[0]
            if action in ("show_tab", "scroll_panel"):
                continue
            reason = self.why_not(action)
            rows.append((binding.key_display or binding.key, binding.description, reason or "available"))
        labels = ", ".join(f"{i} {label}" for i, label in enumerate(TAB_LABELS, 1))
        rows.append((f"1–{len(TABS)}", f"show a panel: {labels}", "available"))
        rows.append(
            ("PgDn PgUp ↓ ↑ End Home", "scroll the panel (its lower part in a small terminal)", "available")
        )
        return rows

    def palette_entries(self) -> list[tuple[str, Any, str]]:
        entries: list[tuple[str, Any, str]] = []
        for node in self.state.ordered():
            entries.append(
                (f"Jump to node {node.label}", lambda url=node.url: self.select_node(url), node.url)
            )
        for binding in self.BINDINGS:
            assert isinstance(binding, Binding)
            action = binding.action
            if (
                action in ("command_palette", "back")
                or action.startswith(("show_tab", "scroll_panel"))
                or self.why_not(action)
            ):
                continue
            entries.append(
                (
                    binding.description,
                    lambda a=action: self.run_action(a),
                    f"key {binding.key_display or binding.key}",
                )
            )
        for tab in TABS:
            entries.append((f"Show {tab}", lambda t=tab: self.action_show_tab(t), "panel"))
        return entries

    # -- actions ---------------------------------------------------------------------------------------
    def select_node(self, url: str) -> None:
        if url in self.state.nodes:
            self.state.selected = url
            self.render_panels(force=True)

    def action_next_node(self) -> None:
        urls = list(self.state.nodes)
        if not urls:
            return
        index = urls.index(self.state.selected) if self.state.selected in urls else -1
        self.select_node(urls[(index + 1) % len(urls)])
        self.notify(f"Node: {self.state.node().label}", timeout=2)  # type: ignore[union-attr]

    def action_toggle_history(self) -> None:
        self.state.all_history = not self.state.all_history
        self.notify(
            "History of every node" if self.state.all_history else "History of the selected node", timeout=2
        )
        self.render_panels()

    def action_scroll_panel(self, how: str) -> None:
        """Scroll the panel of the tab shown (the main screen has nothing else that scrolls)."""
        active = self.query_one(TabbedContent).active
        scroller = self.query_one(f"#{active}", TabPane).query_one(VerticalScroll)
        step = {
            "page_down": scroller.scroll_page_down,
            "page_up": scroller.scroll_page_up,
            "down": scroller.scroll_down,
            "up": scroller.scroll_up,
            "end": scroller.scroll_end,
            "home": scroller.scroll_home,
        }[how]
        step(animate=False)

    def action_show_tab(self, tab: str) -> None:
        self.query_one(TabbedContent).active = tab
        self.render_panels()

    def action_help(self) -> None:
        self._refresh_local(force=True)
        self.push_screen(HelpScreen(self.help_rows(), self.help_notes()))

    def help_notes(self) -> list[str]:
        """What help says of the local cluster: where it is, and its node options and how to set them."""
        how = (
            "Node options: evdb dashboard --option KEY=VALUE (any node option by its KurrentDB name, e.g. "
            "EnableUnixSocket=true; repeatable; checked before anything is written; kept for later starts; "
            "KEY= brings the default back)."
        )
        if self.local is None:
            return [
                "o, u and B act on the local cluster that evdb dashboard launches (without --attach).",
                how,
            ]
        options = self.local.options
        given = ", ".join(f"{k}={v}" for k, v in options.items()) if options else "none"
        return [
            f"Local cluster: {self.local.data_dir}",
            f"Node options (--option): {given}",
            how + " A running node takes new options when it restarts: o stops it, u starts it.",
        ]

    async def action_back(self) -> None:  # async, as App.action_back (the one it overrides)
        if self.log_filter != LogFilter():
            self.log_filter = LogFilter()
            self.notify("Log filter cleared", timeout=2)
            self.render_panels()
        else:
            self.action_show_tab("scavenge")

    def action_filter_logs(self) -> None:
        def validate(text: str) -> str | None:
            try:
                LogFilter.parse(text)
            except ValueError as exc:
                return str(exc)
            return None

        def done(value: str | None) -> None:
            if value is not None:
                self.log_filter = LogFilter.parse(value)
                self.action_show_tab("logs")

        self.push_screen(FilterDialog(self.log_filter.describe(), validate), done)

    def action_start_scavenge(self) -> None:
        node = self.state.node()
        assert node is not None

        def done(call: PlannedCall | None) -> None:
            if call is not None:
                self._last_form = ScavengeForm(
                    dict(call.params)["threads"],
                    dict(call.params)["threshold"],
                    dict(call.params)["throttlePercent"],
                    dict(call.params)["syncOnly"] == "true",
                )
                self.confirm([call])

        self.push_screen(ScavengeDialog(node.url, node.label, self._last_form), done)

    def action_start_backup(self) -> None:
        node = self.state.node()
        assert node is not None
        previous = self._last_backup.get(node.url) or BackupForm(self._default_backup_folder(node.label))

        running = node.scavenge.current_id or node.scavenge.starting_id or None

        def done(call: PlannedCall | None) -> None:
            if call is not None:
                body = call.json_body
                self._last_backup[node.url] = BackupForm(body["to"], True, body["stopScavenge"])
                note = "The node copies its files in the spec's order; progress shows in the Backup tab."
                if running and body["stopScavenge"]:
                    note = (
                        f"The node stops scavenge {running} first and starts it again after the backup "
                        "(it resumes where it stopped). " + note
                    )
                self.confirm([call], note=note)

        self.push_screen(BackupDialog(node.url, node.label, previous, running), done)

    def _default_backup_folder(self, label: str) -> str:
        """For a cluster this dashboard launched: a folder beside it; else the operator types one."""
        folder = self.local.data_dir if self.local is not None else self.cluster_dir
        if not folder:
            return ""
        safe = "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in label)
        return os.path.join(os.path.abspath(folder), "backups", safe)

    def action_browse_events(self) -> None:
        node = self.state.node()
        assert node is not None and self.client is not None
        source = EventSource(self.client, node.url, timeout=max(self.connection.timeout, 10.0))
        self.push_screen(EventBrowser(source, node.label))

    def action_subscriptions(self) -> None:
        if not any(isinstance(screen, SubscriptionsScreen) for screen in self.screen_stack):
            self.push_screen(SubscriptionsScreen())

    def want_subscriptions(self, wanted: bool) -> None:
        """The subscriptions screen opened (every node's are read at once, then each poll) or closed."""
        self._subscriptions_wanted = wanted
        for collector in self.collectors.values():
            collector.subscriptions_wanted = wanted
            if wanted:
                collector.state.subscriptions = None  # nothing older than this opening is shown
                collector.full_poll_next = True
                collector.wake.set()

    def action_stop_scavenge(self) -> None:
        node = self.state.node()
        assert node is not None
        self.confirm(
            [stop_scavenge(node.url, node.scavenge.current_id or node.scavenge.starting_id)],
            note="The node answers once the scavenge has stopped; the next start resumes it.",
        )

    def action_resign(self) -> None:
        node = self.state.node()
        assert node is not None
        self.confirm(
            [resign_leader(node.url)], note="The leader steps down and the cluster elects a new one."
        )

    def action_reload(self) -> None:
        node = self.state.node()
        assert node is not None
        self.confirm([reload_config(node.url)])

    def action_reload_all(self) -> None:
        # the leader last: during a rolling certificate update the majority that still trusts each
        # other keeps the leader as long as possible (docs/operations/certificates.md)
        nodes = sorted((n for n in self.state.ordered() if n.reachable), key=lambda n: n.role == "Leader")
        calls = [reload_config(n.url) for n in nodes]
        self.confirm(calls, note="One node after the other, the leader last; stops at the first failure.")

    def action_pause_resume_auto(self) -> None:
        node = self.state.node()
        assert node is not None and node.auto_scavenge is not None
        paused = node.auto_scavenge.state in ("Paused",)
        self.confirm([resume_auto_scavenge(node.url) if paused else pause_auto_scavenge(node.url)])

    def action_configure_auto(self) -> None:
        node = self.state.node()
        assert node is not None and node.auto_scavenge is not None

        def done(schedule: str | None) -> None:
            if schedule:
                self.confirm([configure_auto_scavenge(node.url, schedule, self.clock.time())])

        auto = node.auto_scavenge
        self.push_screen(CronDialog(auto.schedule_as_given or auto.schedule, self.clock.time), done)

    # -- jobs of the local cluster, the demo load, the followers-first routine, cycle now ----------------
    def _local_target(self) -> tuple[NodeState, LocalNode]:
        node = self.state.node()
        assert node is not None and self.local is not None
        local = self.local.node(node.url)
        assert local is not None
        return node, local

    def action_stop_node(self) -> None:
        node, local = self._local_target()
        assert self.local is not None
        job = node_job("stop", self.local, local, node.label)
        note = (
            f"{local.name} is asked to shut down (POST /admin/shutdown; SIGTERM if it does not answer) and "
            "killed if it has not stopped after 15 s; the other nodes keep running."
        )
        if node.role == "Leader":
            note += " It leads: the others elect a new leader."
        cluster = self.local.cluster

        def work(report: JobReport) -> str:
            stopped = cluster.stop_node(local.name, timeout=15.0, log=report.log)
            return f"{local.name} stopped" if stopped else f"{local.name} was not running"

        self.confirm_items([job], note=note, on_send=lambda: self._start_job(node, "stopping", job, work))

    def action_start_node(self) -> None:
        node, local = self._local_target()
        assert self.local is not None
        job = node_job("start", self.local, local, node.label)
        cluster = self.local.cluster

        def work(report: JobReport) -> str:
            pid = cluster.start_node(local.name)
            report.log(f"Started {local.name} (pid {pid}); waiting until it joins the cluster")
            row = cluster.wait_for_node(local.name, timeout=60.0)
            return f"{local.name} is {row['state']}"

        self.confirm_items(
            [job],
            note=f"{local.name} starts with its node.yaml (the cluster's node options) and catches up from the "
            "leader; the job ends once it is a follower, leader or read-only replica (at most 60 s).",
            on_send=lambda: self._start_job(node, "starting", job, work),
        )

    def action_restore_node(self) -> None:
        node, local = self._local_target()
        assert self.local is not None
        nodes = self.local
        folder = (
            self._last_restore.get(node.url)
            or (self._last_backup[node.url].destination if node.url in self._last_backup else "")
            or self._default_backup_folder(node.label)
        )

        def check(text: str, start: bool) -> str:
            return RestoreForm(text, start).check(nodes, local)

        def done(answer: tuple[str, bool] | None) -> None:
            if answer is None:
                return
            chosen, start = answer
            self._last_restore[node.url] = chosen
            job = restore_job(nodes, local, node.label, chosen, start)
            cluster = nodes.cluster

            def work(report: JobReport) -> str:
                result = cluster.restore_node(local.name, chosen, start=start, log=report.log)
                # its next backup is a full one into a new folder (the restore's reminder): the backup
                # dialog no longer offers a differential one into the old folder
                report.finish(lambda: self._restored(node))
                summary = restore_summary(result)
                if not start:
                    return f"{summary}; {local.name} stays stopped (u starts it)"
                report.log(f"waiting until {local.name} follows again")
                row = cluster.wait_for_node(local.name, timeout=60.0)
                return f"{summary}; {local.name} is {row['state']}"

            note = (
                f"{local.name}'s database files are replaced by those of {chosen} (evdb restore's procedure: "
                "the backup is verified first)."
            )
            if start:
                note += (
                    " Then it starts, cuts its log at the backup's position and catches up from the leader."
                )
            self.confirm_items(
                [job], note=note, on_send=lambda: self._start_job(node, "restoring", job, work)
            )

        self.push_screen(RestoreDialog(node.label, folder, check), done)

    def _restored(self, node: NodeState) -> None:
        """After a restore the node's next backup is a full one into a new folder of its own (the
        restore's reminder): the dialog offers one, named after the node and the time."""
        folder = self._default_backup_folder(node.label)
        when = datetime.fromtimestamp(self.clock.time(), UTC).strftime("%Y%m%d-%H%M%S")
        self._last_backup[node.url] = BackupForm(f"{folder}-after-restore-{when}" if folder else "")

    def action_demo_load(self) -> None:
        node = self.state.node()
        assert node is not None
        local = self.local if self.local is not None and self.local.node(node.url) else None
        job = demo_job(
            node.url,
            node.label,
            events=DEMO_EVENTS,
            local=local,
            ca_file=self.connection.ca_file,
            user=self.connection.user,
        )
        connection = self.connection

        def work(report: JobReport) -> str:
            with connection.sync_client(node.url) as client:
                demo = run_demo_load(
                    client,
                    DEMO_EVENTS,
                    lambda done, total: report.progress(
                        f"wrote {done:,} of {total:,} events", f"writing demo data {100 * done // total}%"
                    ),
                )
            lines = demo.summary()
            report.finish(lambda: self._demo_written(node, lines))
            return " ".join(line.strip() for line in lines)

        note = (
            f"Writes {DEMO_EVENTS:,} events over ten new streams demo-<run>-* through {node.label} (a follower "
            "forwards them to the leader), then sets $maxCount 10 on three, soft-deletes two and hard-deletes "
            "two: a scavenge then has something to reclaim on every node."
        )
        self.confirm_items(
            [job], note=note, on_send=lambda: self._start_job(node, "writing demo data", job, work)
        )

    def _demo_written(self, node: NodeState, lines: list[str]) -> None:
        self.state.demo = (node.label, lines)
        self.state.jobs_version += 1
        self.notify("\n".join(lines), title=f"Demo data through {node.label}", timeout=20)

    def _start_job(
        self, node: NodeState, doing: str, job: PlannedJob, work: Callable[[JobReport], str]
    ) -> None:
        """Run a confirmed job in a worker thread: its progress and result go to the activity log (and
        the node's "doing" column), its end to a notice."""
        index = self.state.add_activity(
            Activity(self.clock.time(), node.label, job.command_line(), None, f"{doing}…", outcome="running")
        )
        node.job = doing
        node.version += 1
        self.render_panels()
        self.run_worker(self._job_worker(node, job, index, work), group="jobs", exit_on_error=False)

    async def _job_worker(
        self, node: NodeState, job: PlannedJob, index: int, work: Callable[[JobReport], str]
    ) -> None:
        report = JobReport(self, node, index, asyncio.get_running_loop())
        try:
            result = await asyncio.to_thread(work, report)
        except Exception as exc:  # every failure of a job is told (the launcher's, the restore's, HTTP)
            reason = str(exc) or type(exc).__name__
            body = "; ".join([*report.lines, f"failed: {reason}"])
            self.state.update_activity(index, body=body, outcome="failed")
            self.notify(
                f"{job.command_line()}\nfailed: {reason}", title=node.label, severity="error", timeout=20
            )
        else:
            self.state.update_activity(index, body="; ".join([*report.lines, result]), outcome="done")
            self.notify(f"{job.title}: {result}", title=node.label, timeout=8)
            for callback in report.on_finish:
                callback()
        finally:
            node.job = ""
            node.version += 1
            self._refresh_local(force=True)
            local = self.local.node(node.url) if self.local is not None else None
            if local is not None:
                node.pid = local.pid
            for collector in self.collectors.values():  # the node's new state, and its peers' views of it
                collector.full_poll_next = True
                collector.wake.set()
            self.render_panels()

    def action_cycle_now(self) -> None:
        node = self.state.node()
        assert node is not None
        self.confirm(
            [cycle_now(node.url)],
            note="An evdb extension: the leader starts a cluster scavenge now, as if the schedule fired "
            "(followers and replicas first, then the leader resigns and is scavenged last). Progress shows in "
            "the Auto-scavenge tab (3).",
        )

    def action_followers_first(self) -> None:
        routine = self._routine
        if routine is not None and routine.state.running:
            self._confirm_stop_routine(routine)
            return
        form = self._last_form or ScavengeForm()
        try:
            items = plan_followers_first(self.state.ordered(), form)
        except FormError as exc:
            self.notify(f"Followers-first scavenge: {exc}", severity="error", timeout=8)
            return
        threads, threshold, throttle, sync_only = form.validate()
        whence = "your last start-scavenge dialog (s)" if self._last_form else "the defaults (s sets others)"
        note = (
            f"Scavenge parameters from {whence}: threads {threads}, threshold {threshold}, throttlePercent "
            f"{throttle}, syncOnly {str(sync_only).lower()}. One node at a time, each scavenge awaited; the "
            "first failure ends the routine; F again stops it. Every request is sent with "
            + (f"Authorization: Basic <{self.connection.user}:•••••> and " if self.connection.user else "")
            + "Accept: application/json."
        )
        title = f"Followers-first cluster scavenge: {len(items)} steps, in this order"
        self.confirm_items(items, note=note, title=title, on_send=lambda: self._start_routine(items))

    def _confirm_stop_routine(self, routine: FollowersFirst) -> None:
        calls: list[PlannedCall] = []
        if routine.current_scavenge is not None:
            url, scavenge_id = routine.current_scavenge
            calls.append(stop_scavenge(url, scavenge_id))
        note = "No further step starts."
        if calls:
            note += " The scavenge it waits for is stopped now (the next start on that node resumes it)."
        labelled = self._labelled(calls)

        def stop() -> None:
            routine.stop()
            if labelled:
                self.run_worker(self.send_all(labelled), group="calls", exit_on_error=False)

        self.confirm_items(
            labelled, note=note, title="Stop the followers-first cluster scavenge", on_send=stop
        )

    def _start_routine(self, items: list[RoutineItem]) -> None:
        assert self.client is not None
        routine = FollowersFirst(
            items,
            send=self._request,
            client=self.client,
            clock=self.clock,
            interval=min(self.interval, 1.0),
            on_change=self._routine_changed,
            label_of=self._label_of,
            leader_wait=self.routine_leader_wait,
        )
        self._routine = routine
        self.state.routine = routine.state
        steps = " → ".join(item.title for item in items)
        index = self.state.add_activity(
            Activity(
                self.clock.time(),
                "cluster",
                "followers-first cluster scavenge",
                None,
                steps,
                outcome="running",
            )
        )
        self.run_worker(self._run_routine(routine, index), group="routine", exit_on_error=False)

    async def _run_routine(self, routine: FollowersFirst, index: int) -> None:
        state = await routine.run()
        ok = state.outcome == "completed"
        outcome = "done" if ok else "stopped" if routine.stop_reason else "failed"
        self.state.update_activity(index, outcome=outcome, body=state.outcome)
        self.notify(
            f"Followers-first cluster scavenge {state.outcome}",
            severity="information" if ok else "warning" if routine.stop_reason else "error",
            timeout=10 if ok else 20,
        )
        self.render_panels()

    def _routine_changed(self) -> None:
        self.state.jobs_version += 1
        self.render_panels()

    def _label_of(self, endpoint: str) -> str:
        return endpoint_labels(self.state).get(endpoint, (endpoint, ""))[0]

    def action_quit_dashboard(self) -> None:
        if self.cluster_dir is None:
            self.exit(None)
            return

        def done(choice: str | None) -> None:
            if choice is not None:
                self.exit(choice)

        self.push_screen(QuitDialog(self.cluster_dir), done)

    # -- sending ---------------------------------------------------------------------------------------
    def _labelled(self, calls: list[PlannedCall]) -> list[PlannedCall]:
        return [
            replace(call, node_label=self.state.nodes[call.node_url].label)
            if call.node_url in self.state.nodes and not call.node_label
            else call
            for call in calls
        ]

    def confirm(self, calls: list[PlannedCall], note: str = "") -> None:
        calls = self._labelled(calls)
        self.confirm_items(
            calls,
            note=note,
            on_send=lambda: self.run_worker(self.send_all(calls), group="calls", exit_on_error=False),
        )

    def confirm_items(
        self,
        items: Sequence[Confirmable],
        *,
        on_send: Callable[[], Any],
        note: str = "",
        title: str | None = None,
    ) -> None:
        """The confirmation (focus on Cancel); ``on_send`` runs when the operator sends."""

        def done(send: bool | None) -> None:
            if send:
                on_send()

        self.push_screen(ConfirmCall(items, self.connection.user, note, title), done)

    async def send_all(self, calls: list[PlannedCall]) -> None:
        for call in calls:
            ok = await self.send(call)
            if not ok:
                break

    async def send(self, call: PlannedCall) -> bool:
        response = await self._request(call)
        if response is None or response.status_code >= 300:
            return False
        if call.path == "/admin/reloadconfig":  # 200 whatever the outcome, as KurrentDB answers
            return await self._reload_succeeded(call)
        return True

    async def _reload_succeeded(self, call: PlannedCall) -> bool:
        """A reload answered 200 may still have failed: the node's lastReload says (tui/certificates.py).
        Its notice tells that outcome, never the bare 200."""
        from tui.certificates import reload_outcome

        assert self.client is not None
        outcome, reason = await reload_outcome(self.client, call.node_url)
        node = self.state.nodes.get(call.node_url)
        label = node.label if node else call.node_url
        if outcome != "Failed":
            said = (
                "→ reloaded (its lastReload: Success)"
                if outcome == "Success"
                else f"→ sent; outcome not known here: {reason}"
            )
            self.tell_call(label, call.request_line(), said, timeout=8)
            return True
        self.state.add_activity(
            Activity(
                self.clock.time(),
                label,
                call.request_line(),
                200,
                f"reload failed: {reason}",
                outcome="failed",
            )
        )
        self.tell_call(
            label,
            call.request_line(),
            "→ the reload failed; the node keeps its configuration",
            reason[:300],
            severity="error",
            timeout=8,
        )
        self.render_panels()
        return False

    async def _request(self, call: PlannedCall) -> httpx.Response | None:
        """Make a call: logged in the activity, told in a notice; the answer (None: no answer)."""
        assert self.client is not None
        node = self.state.nodes.get(call.node_url)
        label = node.label if node else call.node_url
        try:
            response = await self.client.send(call)
        except httpx.HTTPError as exc:
            self.state.add_activity(
                Activity(self.clock.time(), label, call.request_line(), None, str(exc) or type(exc).__name__)
            )
            self.tell_call(label, call.request_line(), f"no answer: {exc}", severity="error", timeout=8)
            self.render_panels()
            return None
        body = response.text.strip()
        self.state.add_activity(
            Activity(self.clock.time(), label, call.request_line(), response.status_code, body)
        )
        severity: SeverityLevel = "information" if response.status_code < 300 else "error"
        if call.path == "/auto-scavenge/cycle-now":
            self.state.cycle_now = (self.clock.time(), label, response.status_code, answer_text(body))
        # a reload answers 200 whatever its outcome (as KurrentDB's): send() tells the outcome instead
        if not (call.path == "/admin/reloadconfig" and response.status_code < 300):
            self.tell_call(
                label,
                call.request_line(),
                f"→ {response.status_code} {response.reason_phrase}",
                answer_text(body)[:300],
                severity=severity,
                timeout=8,
            )
        if response.status_code < 300 and node is not None:
            self._after_start(call, node, response)
        collector = self.collectors.get(call.node_url)
        if collector is not None:
            collector.full_poll_next = True
            collector.wake.set()
        self.render_panels()
        return response

    def _after_start(self, call: PlannedCall, node: NodeState, response: httpx.Response) -> None:
        """What the node's answer to a start says is shown at once (until a poll confirms it): the
        started scavenge; a started backup is watched so that its end is told."""
        if call.method != "POST":
            return
        answer = json_or_text(response)
        if call.path == "/admin/scavenge" and answer.get("scavengeId"):
            node.scavenge.starting_id = str(answer["scavengeId"])
            node.scavenge.starting_after_poll = node.polls
            node.version += 1
        elif call.path == "/admin/backup":
            self._backup_watch[node.url] = str(answer["backupId"]) if answer.get("backupId") else None


def force_needed(cache: dict[str, Any], widget_id: str, key: Any) -> bool:
    """True (and remembered) when a panel's inputs changed since it was last drawn."""
    if cache.get(widget_id, object()) == key:
        return False
    cache[widget_id] = key
    return True
