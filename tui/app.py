"""The dashboard application: collectors fill state, panels render it, keys issue confirmed calls."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine, Iterable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from textual import events
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Header, Static, TabbedContent, TabPane

from evdb.clock import Clock, SystemClock
from tui.actions import NodeActions
from tui.calls import PlannedCall
from tui.client import HttpNodeClient, NodeClient
from tui.collector import MirrorCollector, NodeCollector, member_url, normalise_url
from tui.connection import Connection, NodeSpec
from tui.dialogs import (
    FilterDialog,
    HelpScreen,
    QuitDialog,
)
from tui.event_browser import EventBrowser, EventSource
from tui.frames import FrameCache, frames
from tui.gating import CHANGING_ACTIONS, GATED_ACTIONS, LOCAL_JOBS, Situation, why_not
from tui.job_actions import JobActions
from tui.jobs import (
    LocalNodes,
)
from tui.logtail import LogBook, LogFilter, LogTail
from tui.observe import BackupEnds, note_cycle_roles
from tui.routine import (
    LEADER_WAIT_SECONDS,
    FollowersFirst,
)
from tui.sending import CallSender
from tui.state import DashboardState, NodeState
from tui.subscriptions import SubscriptionsScreen
from tui.widgets import KeyBar

if TYPE_CHECKING:
    from evdb.cluster.launcher import LocalCluster

__all__ = ["CHANGING_ACTIONS", "LOCAL_JOBS", "DashboardApp", "NodeSpec"]

TABS = ("scavenge", "chunks", "auto", "backup", "certs", "logs", "activity", "archive")
#: the tabs' labels, and shorter ones where the terminal is narrow (below 100 columns)
TAB_LABELS = ("Scavenge", "Chunks", "Auto-scavenge", "Backup", "Certificates", "Logs", "Activity", "Archive")
SHORT_TAB_LABELS = ("Scavenge", "Chunks", "Auto", "Backup", "Certs", "Logs", "Activity", "Archive")
_BACKUP_ENDED = ("completed", "failed", "stopped")


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
        self._rendered = FrameCache()
        self._gates: tuple = ()
        self._seen_versions: dict[str, int] = {}
        self._first_frame_at: float | None = None
        self._started_at = self.clock.monotonic()
        #: backups whose end is told: those this dashboard started, and those it saw running
        self.backups = BackupEnds()
        #: ``evdb dashboard --record``: an ``evdb.scenario.Recorder`` that sees every key and click
        self.recorder: Any = None
        #: the local cluster the dashboard launched or was given: the node jobs (o, u, B) act on it
        self.local = LocalNodes(local_cluster) if local_cluster is not None else None
        #: the keys' actions: the confirmed calls, the calls on the selected node, the jobs
        self.sender = CallSender(self)
        self.actions = NodeActions(self, self.sender)
        self.jobs = JobActions(self, self.sender, self.actions)
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
            with TabPane("8 Archive", id="archive"), VerticalScroll():
                yield Static(id="archive-panel")
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
        self.refresh_local(force=True)
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
        note_cycle_roles(self.state, node)
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

    def _tell_backup_end(self, node: NodeState) -> None:
        """A backup that ended (one this dashboard started, or one it saw running) is told once."""
        end = self.backups.ended(node)
        if end is not None and end.failed:
            self.notify(end.message, title=node.label, severity="error", timeout=20)
        elif end is not None:
            self.notify(end.message, title=node.label, timeout=10)

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
        self.refresh_local()
        self.render_panels()

    def refresh_local(self, force: bool = False) -> None:
        """The local cluster's processes and node options (read at most once a second)."""
        if self.local is None or not self.local.refresh(self.clock.monotonic(), force=force):
            return
        self.state.node_options = dict(self.local.options)
        for node in self.state.ordered():
            local = self.local.node(node.url)
            if local is not None and local.pid != node.pid and local.running:
                node.pid = local.pid  # a restarted node: its new process's figures
        self.state.jobs_version += 1

    def render_panels(self, force: bool = False) -> None:
        """Redraw what changed (tui/frames.py says what each part is drawn from)."""
        if not self.screen_stack:
            return
        try:
            tabs = self.query_one(TabbedContent)
            self.query_one("#cluster", Static)  # gone first while the app shuts down; a tick may still fire
        except Exception:
            return
        if force:
            self._rendered.clear()
        shown = frames(
            self.state,
            tabs.active,
            now=self.clock.time(),
            mono=self.clock.monotonic(),
            width=self._panel_width(),
            interval=self.interval,
            logbook=self.logbook,
            log_filter=self.log_filter,
        )
        for frame in shown:
            if self._rendered.changed(frame):
                self.query_one(f"#{frame.widget_id}", Static).update(frame.draw())
                if frame.widget_id == "logs-panel":
                    scroller = self.query_one("#logs-scroll", VerticalScroll)
                    self.call_after_refresh(scroller.scroll_end, animate=False)
        if self._first_frame_at is None and all(n.reachable is not None for n in self.state.ordered()):
            self._first_frame_at = self.clock.monotonic() - self._started_at
        gates = tuple(self.why_not(a) for a in sorted(GATED_ACTIONS))
        if gates != self._gates:  # the footer only needs redrawing when a key's state changed
            self._gates = gates
            self.refresh_bindings()

    @property
    def first_frame_seconds(self) -> float | None:
        """Seconds from start until every node had answered (or failed) once and was drawn."""
        return self._first_frame_at

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        active = self.query_one(TabbedContent).active
        shown = active == "archive"
        for collector in self.collectors.values():  # the archive's figures: every poll while shown
            collector.archive_wanted, opened = shown, shown and not collector.archive_wanted
            if active == "certs":  # certificates are read at a slow pace: the tab opened shows them as now
                collector.read_certificates_now()
                opened = True
            if opened:
                collector.wake.set()
        self.render_panels()

    # -- what can act now ------------------------------------------------------------------------------
    def why_not(self, action: str) -> str | None:
        """None when the action can act now, else the reason, naming the node (shown in help, and as a
        notice when its key is pressed): ``tui.gating.why_not`` of what the dashboard knows now."""
        routine = self.jobs.routine
        routine_running = routine is not None and routine.state.running
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
        self.refresh_local(force=True)
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

    # the keys that send calls or run jobs: their own objects (tui/actions.py, tui/job_actions.py)
    def action_start_scavenge(self) -> None:
        self.actions.start_scavenge()

    def action_stop_scavenge(self) -> None:
        self.actions.stop_scavenge()

    def action_start_backup(self) -> None:
        self.actions.start_backup()

    def action_resign(self) -> None:
        self.actions.resign()

    def action_reload(self) -> None:
        self.actions.reload()

    def action_reload_all(self) -> None:
        self.actions.reload_all()

    def action_pause_resume_auto(self) -> None:
        self.actions.pause_resume_auto()

    def action_configure_auto(self) -> None:
        self.actions.configure_auto()

    def action_cycle_now(self) -> None:
        self.actions.cycle_now()

    def action_stop_node(self) -> None:
        self.jobs.stop_node()

    def action_start_node(self) -> None:
        self.jobs.start_node()

    def action_restore_node(self) -> None:
        self.jobs.restore_node()

    def action_demo_load(self) -> None:
        self.jobs.demo_load()

    def action_followers_first(self) -> None:
        self.jobs.followers_first()

    @property
    def _routine(self) -> FollowersFirst | None:
        return self.jobs.routine

    def _restored(self, node: NodeState) -> None:
        self.jobs._restored(node)

    # -- what the action objects ask of the app (tui/host.py) -------------------------------------------
    def confirm(self, calls: list[PlannedCall], note: str = "") -> None:
        """Confirm the calls, then send them one after the other (tui/sending.py)."""
        self.sender.confirm(calls, note)

    def spawn(self, work: Coroutine[Any, Any, None], group: str) -> None:
        self.run_worker(work, group=group, exit_on_error=False)

    def ask(self, screen: Screen[Any], then: Callable[[Any], None]) -> None:
        self.push_screen(screen, then)

    def action_quit_dashboard(self) -> None:
        if self.cluster_dir is None:
            self.exit(None)
            return

        def done(choice: str | None) -> None:
            if choice is not None:
                self.exit(choice)

        self.push_screen(QuitDialog(self.cluster_dir), done)
