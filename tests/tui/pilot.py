"""What the dashboard's pilot tests share: reading a panel's text and the notices, waiting for a
condition (bounded), polling until the first frame is complete, submitting a dialog, and a dashboard
attached to fake nodes."""

from __future__ import annotations

import io
import time
from collections.abc import Callable

from rich.console import Console
from textual.widgets import Input, Static

from tests.tui.fake_node import FakeCluster, FakeNode
from tui.app import Connection, DashboardApp, NodeSpec


def text_of(app: DashboardApp, widget_id: str, width: int = 160) -> str:
    """The text of the Static ``#widget_id`` as a terminal of ``width`` columns shows it."""
    console = Console(width=width, record=True, color_system=None, file=io.StringIO())
    console.print(app.query_one(f"#{widget_id}", Static).content)
    return console.export_text()


def notices(app: DashboardApp) -> str:
    """Every notification on screen, ``title: message``, one per line."""
    return "\n".join(f"{n.title}: {n.message}" for n in app._notifications)


async def until(
    pilot, condition: Callable[[], object], what: str, timeout: float = 10.0, step: float = 0.02
) -> None:
    """Let the app run until ``condition()`` holds; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        await pilot.pause(step)


async def ready(app: DashboardApp, pilot) -> None:
    """Two polls of every node (the second sees what gossip discovered), then one frame."""
    await app.poll_all()
    await app.poll_all()
    await pilot.pause()


async def submit(app: DashboardApp, pilot) -> None:
    """Enter in the dialog's first field submits the form."""
    app.screen.query(Input).first().focus()
    await pilot.press("enter")
    await pilot.pause()


def cluster_app(*nodes: FakeNode, **kwargs) -> tuple[DashboardApp, FakeCluster]:
    """Attached to fake nodes named node1, node2, … (discovery off), polls on demand."""
    cluster = FakeCluster(*nodes)
    kwargs.setdefault("interval", 0.05)
    app = DashboardApp(
        [NodeSpec(n.url, f"node{i}") for i, n in enumerate(nodes, 1)],
        connection=Connection("admin", "changeit", transport=cluster.transport()),
        start_collectors=False,
        discover=False,
        **kwargs,
    )
    return app, cluster
