"""The dashboard's jobs that are not one HTTP call: a local node's stop, start and restore (through
``evdb.cluster.launcher.LocalCluster``, only on the local cluster the dashboard launched or attached to)
and the demo load (``evdb.demo.write_demo_data``).

Each is confirmed first like a call: a :class:`PlannedJob` shows the equivalent command line. The jobs
run in a worker thread (they block); nothing here touches the screen.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tui.calls import FormError
from tui.collector import normalise_url

if TYPE_CHECKING:
    import httpx

    from evdb.backup.restore import RestoreResult
    from evdb.cluster.launcher import LocalCluster
    from evdb.demo import DemoReport

__all__ = [
    "DEMO_EVENTS",
    "LocalNode",
    "LocalNodes",
    "PlannedJob",
    "RestoreForm",
    "demo_job",
    "node_job",
    "restore_job",
    "restore_summary",
    "run_demo_load",
]

#: events a demo load writes (``evdb demo-load``'s default)
DEMO_EVENTS = 20_000  # about 100 chunks of a new local cluster (64 KiB): a scavenge worth watching
#: a password in a command line shown on screen
MASKED = "•••••"


@dataclass(frozen=True)
class PlannedJob:
    """A job the dashboard runs itself, shown in its confirmation as the equivalent ``evdb`` command."""

    node_url: str
    title: str
    command: tuple[str, ...]  # the equivalent command line, as argv
    node_label: str = ""

    def command_line(self) -> str:
        """As a shell takes it; a masked password (never shown) stays as its dots."""
        return " ".join(arg if arg == MASKED else shlex.quote(arg) for arg in self.command)

    def describe(self, user: str | None = None) -> str:
        return f"$ {self.command_line()}"

    def request_line(self) -> str:
        return self.command_line()


@dataclass(frozen=True)
class LocalNode:
    """A node of the local cluster as its ``cluster.json`` names it, and whether its process runs."""

    name: str
    url: str  # normalised, as the dashboard's NodeState.url
    pid: int | None
    running: bool


@dataclass
class LocalNodes:
    """The local cluster the dashboard runs on: its nodes by URL, whether each one's process runs, and
    its node options (``--option``). Read from the cluster's files by :meth:`refresh`, at most once a
    ``period`` unless forced: the keys ask it on every redraw."""

    cluster: LocalCluster
    period: float = 1.0
    nodes: dict[str, LocalNode] = field(default_factory=dict)
    options: dict[str, str] = field(default_factory=dict)
    error: str | None = None
    _read_at: float | None = None

    @property
    def data_dir(self) -> str:
        return str(self.cluster.data_dir)

    def refresh(self, monotonic: float, *, force: bool = False) -> bool:
        """Read the cluster's nodes and options again (once a ``period``); True when something changed."""
        from evdb.cluster.launcher import ClusterLaunchError

        if not force and self._read_at is not None and monotonic - self._read_at < self.period:
            return False
        self._read_at = monotonic
        before = (dict(self.nodes), dict(self.options), self.error)
        try:
            info = self.cluster.info()
            running = {n["name"] for n in self.cluster.running_nodes()}
        except (ClusterLaunchError, OSError, ValueError) as exc:
            self.error = f"cannot read {self.cluster.info_path}: {exc}"
            return before != (self.nodes, self.options, self.error)
        nodes = {}
        for entry in info.get("nodes", []):
            url = normalise_url(str(entry["url"]))
            alive = entry["name"] in running
            pid = int(entry["pid"]) if alive and entry.get("pid") else None
            nodes[url] = LocalNode(str(entry["name"]), url, pid, alive)
        self.nodes = nodes
        self.options = dict(info.get("options") or {})
        self.error = None
        return before != (self.nodes, self.options, self.error)

    def node(self, url: str) -> LocalNode | None:
        return self.nodes.get(url)


def node_job(kind: str, local: LocalNodes, node: LocalNode, label: str) -> PlannedJob:
    """Stop (``stop``) or start (``start``) one node of the local cluster."""
    verb, title = {"stop": ("stop-node", "Stop the node"), "start": ("start-node", "Start the node")}[kind]
    return PlannedJob(
        node.url,
        title,
        ("evdb", "cluster", verb, node.name, "--data", local.data_dir),
        node_label=label,
    )


@dataclass(frozen=True)
class RestoreForm:
    """The restore dialog's fields, as typed: a backup folder on this machine (the local cluster's)."""

    folder: str = ""
    start: bool = True  # start the node after the restore and wait until it follows again

    def check(self, local: LocalNodes, node: LocalNode) -> str:
        """The folder, made absolute, once every check before a restore passes: the node is stopped, the
        folder exists and holds a finished evdb backup (the rules of evdb/backup/layout.py, which the
        restore applies again). FormError naming the field otherwise; nothing is touched."""
        from evdb.backup.errors import InvalidBackupFolder
        from evdb.backup.layout import COMPLETE_MARKER, MANIFEST, check_folder, is_complete

        text = self.folder.strip()
        try:
            check_folder(text)
        except InvalidBackupFolder as exc:
            raise FormError("backup_folder", str(exc)) from None
        folder = os.path.abspath(os.path.expanduser(text))
        if local.cluster.is_running(node.name):
            raise FormError(
                "backup_folder",
                f"{node.name} is running: stop it first (key o); a restore replaces the files of a stopped "
                "node only. Nothing was changed.",
            )
        if not os.path.isdir(folder):
            raise FormError("backup_folder", f"There is no folder {folder}.")
        if not os.path.exists(os.path.join(folder, MANIFEST)):
            raise FormError("backup_folder", f"{folder} is not an evdb backup (it has no {MANIFEST}).")
        if not is_complete(folder):
            raise FormError(
                "backup_folder",
                f"{folder} is not a finished backup (no {COMPLETE_MARKER}): back the node up again first.",
            )
        return folder


def restore_job(local: LocalNodes, node: LocalNode, label: str, folder: str, start: bool) -> PlannedJob:
    command = ("evdb", "cluster", "restore-node", node.name, "--from", folder, "--data", local.data_dir)
    return PlannedJob(
        node.url,
        "Restore the node from a backup",
        (*command, *(() if start else ("--no-start",))),
        node_label=label,
    )


def demo_job(
    node_url: str,
    label: str,
    *,
    events: int = DEMO_EVENTS,
    local: LocalNodes | None = None,
    ca_file: str | None = None,
    user: str | None = None,
) -> PlannedJob:
    """Write demo data through a node: the command ``evdb demo-load`` (credentials masked)."""
    command: tuple[str, ...] = ("evdb", "demo-load", "--url", node_url, "--events", str(events))
    if local is not None:
        command += ("--data", local.data_dir)  # the command finds the cluster's CA and credentials there
    else:
        if ca_file:
            command += ("--ca", ca_file)
        if user:
            command += ("--user", user, "--password", MASKED)
    return PlannedJob(node_url, "Write demo data", command, node_label=label)


def run_demo_load(
    client: httpx.Client, events: int, progress: Callable[[int, int], None] | None = None
) -> DemoReport:
    """The demo load (blocking: run it in a worker thread)."""
    from evdb.clock import SystemClock
    from evdb.demo import write_demo_data

    return write_demo_data(client, events=events, progress=progress, clock=SystemClock())


def restore_summary(result: RestoreResult) -> str:
    """What a restore did, and what the restore procedure reminds the operator of (spec rule 6: the
    node's next backup is a full one, into a new folder)."""
    text = (
        f"{result.files_copied:,} files copied, {result.bytes_copied:,} bytes; the node cuts its log at "
        f"{result.truncate_to:,} and catches up from the leader"
    )
    return f"{text}. {result.reminder}" if result.reminder else text
