"""What a poll's new state tells beyond the panels: the role each node of a cluster scavenge had when it
was designated, and the end of a backup (told once). Plain state in, plain state or words out."""

from __future__ import annotations

from dataclasses import dataclass, field

from tui.calls import explain_backup_error
from tui.panels import backup_seconds, short_duration, size
from tui.state import DashboardState, NodeState

__all__ = ["BackupEnd", "BackupEnds", "note_cycle_roles"]

_BACKUP_ENDED = ("completed", "failed", "stopped")


def note_cycle_roles(state: DashboardState, node: NodeState) -> None:
    """The role of the node a cluster scavenge works on, as first seen while designated: the summary
    names the role each node was scavenged in, not the one it has by then."""
    auto = node.auto_scavenge
    cycle = auto.cycle if auto is not None else None
    if cycle is None or not cycle.cycle_id or cycle.designated is None:
        return
    key = (cycle.cycle_id, cycle.designated)
    if key in state.cycle_roles:
        return
    for other in state.ordered():
        if cycle.designated in other.endpoints() and other.reachable and other.role:
            state.cycle_roles[key] = other.role
            return


@dataclass(frozen=True)
class BackupEnd:
    """How a backup ended, in words for a notice."""

    message: str
    failed: bool


@dataclass
class BackupEnds:
    """The backups whose end is told: those this dashboard started (by node: the id the node answered)
    and those it saw running; each end once."""

    watched: dict[str, str | None] = field(default_factory=dict)
    told: set[tuple] = field(default_factory=set)

    def watch(self, node_url: str, backup_id: str | None) -> None:
        self.watched[node_url] = backup_id

    def ended(self, node: NodeState) -> BackupEnd | None:
        """The end of the node's backup, the first time it is seen ended (else None)."""
        backup = node.backup
        if backup is None or not backup.available or backup.body.get("state") not in _BACKUP_ENDED:
            return None
        body = backup.body
        key = (node.url, body.get("backupId"), body.get("startedAt"), body.get("destination"))
        if key in self.told:
            return None
        watched = node.url in self.watched
        if watched and self.watched[node.url] not in (None, body.get("backupId")) and body.get("backupId"):
            return None  # still the answer of an earlier backup
        if not watched and not backup.seen_running:
            return None
        self.told.add(key)
        self.watched.pop(node.url, None)
        state = str(body.get("state"))
        seconds = backup_seconds(backup)
        took = f", took {short_duration(seconds)}" if seconds is not None else ""
        if state == "completed":
            return BackupEnd(
                f"{body.get('kind') or body.get('operation', '')} backup completed into "
                f"{body.get('destination', '?')}: {body.get('filesCopied', 0)} files, "
                f"{size(body.get('bytesCopied'))}{took}",
                failed=False,
            )
        error = explain_backup_error(str(body.get("error") or "no reason given"))
        return BackupEnd(f"The backup {state}{took}: {error}", failed=True)
