"""What the dashboard's action objects (tui/sending.py, tui/actions.py, tui/job_actions.py) need of the
application: its state, clock, node port and local cluster, and a few screen services. ``DashboardApp``
is the one host; the objects never import it."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Protocol

from textual.notifications import SeverityLevel

if TYPE_CHECKING:
    from textual.screen import Screen

    from evdb.clock import Clock
    from tui.client import NodeClient
    from tui.collector import NodeCollector
    from tui.connection import Connection
    from tui.jobs import LocalNodes
    from tui.observe import BackupEnds
    from tui.state import DashboardState

__all__ = ["Host"]


class Host(Protocol):
    state: DashboardState
    clock: Clock
    connection: Connection
    client: NodeClient | None
    collectors: dict[str, NodeCollector]
    local: LocalNodes | None
    backups: BackupEnds
    interval: float
    routine_leader_wait: float
    cluster_dir: str | None

    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: SeverityLevel = "information",
        timeout: float | None = None,
        markup: bool = True,
    ) -> None: ...

    def tell_call(self, label: str, request: str, outcome: str, detail: str = "", **kwargs: Any) -> None:
        """The notice of a call sent: its request and outcome (one line in a narrow terminal)."""
        ...

    def render_panels(self, force: bool = False) -> None: ...

    def spawn(self, work: Coroutine[Any, Any, None], group: str) -> None:
        """Run ``work`` in the background (a failure is the work's own to tell)."""
        ...

    def ask(self, screen: Screen[Any], then: Callable[[Any], None]) -> None:
        """Show a dialog; ``then`` gets its answer."""
        ...

    def refresh_local(self, force: bool = False) -> None:
        """Read the local cluster's processes and options again."""
        ...
