"""The auto-scavenge coordination state, rebuilt from its events.

Two system streams hold it, written only by the leader and replicated like any other stream:

- ``$auto-scavenge-configuration``: ``$configuration-updated`` {schedule, updatedAt}; the newest wins.
- ``$auto-scavenges``: the cluster scavenges, node by node, and pause/resume:
  ``$cluster-scavenge-started`` {clusterScavengeId, members, startedAt},
  ``$node-designated`` {nodeId, designatedAt},
  ``$node-scavenge-started`` {nodeId, scavengeId, startedAt},
  ``$node-scavenge-completed`` {nodeId, completedAt, result, reason},
  ``$cluster-scavenge-completed`` {clusterScavengeId, members, completedAt},
  ``$pause-requested`` {requestedAt}, ``$paused`` {pausedAt}, ``$resumed`` {resumedAt}.

A node id is ``{"address": host, "port": http port}``. Times are ISO 8601 UTC. ``$initialized``
{initializedAt} is applied in memory by a leader that has just read the streams (it is not written).
"""

from __future__ import annotations

import dataclasses
import datetime
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from evdb.autoscavenge.schedule import Schedule, parse_schedule

__all__ = [
    "CONFIGURATION_STREAM",
    "EVENTS_STREAM",
    "AutoScavengeState",
    "InternalStatus",
    "PublicState",
    "from_iso",
    "node_id",
    "parse_node_id",
    "to_iso",
]

EVENTS_STREAM = "$auto-scavenges"
CONFIGURATION_STREAM = "$auto-scavenge-configuration"

CONFIGURATION_UPDATED = "$configuration-updated"
CLUSTER_SCAVENGE_STARTED = "$cluster-scavenge-started"
CLUSTER_SCAVENGE_COMPLETED = "$cluster-scavenge-completed"
NODE_DESIGNATED = "$node-designated"
NODE_SCAVENGE_STARTED = "$node-scavenge-started"
NODE_SCAVENGE_COMPLETED = "$node-scavenge-completed"
PAUSE_REQUESTED = "$pause-requested"
PAUSED = "$paused"
RESUMED = "$resumed"
INITIALIZED = "$initialized"


class PublicState(StrEnum):
    """The ``state`` of ``GET /auto-scavenge/status``."""

    NOT_CONFIGURED = "NotConfigured"
    WAITING = "Waiting"
    IN_PROGRESS = "InProgress"
    PAUSING = "Pausing"
    PAUSED = "Paused"


class InternalStatus(StrEnum):
    NOT_CONFIGURED = "NotConfigured"
    WAITING = "Waiting"
    CONTINUING = "ContinuingClusterScavenge"  # a cycle runs, no node designated: pick the next one
    STARTING = "StartingNodeScavenge"  # a node is designated, its scavenge is not started yet
    MONITORING = "MonitoringNodeScavenge"  # the designated node's scavenge runs
    PAUSING = "Pausing"
    PAUSED_IDLE = "PausedWhileIdle"
    PAUSED_IN_CYCLE = "PausedWhileScavengingCluster"

    @property
    def public(self) -> PublicState:
        return {
            InternalStatus.NOT_CONFIGURED: PublicState.NOT_CONFIGURED,
            InternalStatus.WAITING: PublicState.WAITING,
            InternalStatus.CONTINUING: PublicState.IN_PROGRESS,
            InternalStatus.STARTING: PublicState.IN_PROGRESS,
            InternalStatus.MONITORING: PublicState.IN_PROGRESS,
            InternalStatus.PAUSING: PublicState.PAUSING,
            InternalStatus.PAUSED_IDLE: PublicState.PAUSED,
            InternalStatus.PAUSED_IN_CYCLE: PublicState.PAUSED,
        }[self]


def to_iso(when: float) -> str:
    return datetime.datetime.fromtimestamp(when, datetime.UTC).isoformat().replace("+00:00", "Z")


def from_iso(text: str) -> float:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def node_id(endpoint: str) -> dict[str, Any]:
    host, _, port = endpoint.rpartition(":")
    return {"address": host.strip("[]"), "port": int(port)}


def parse_node_id(value: dict[str, Any]) -> str:
    host = str(value["address"])
    host = f"[{host}]" if ":" in host else host
    return f"{host}:{int(value['port'])}"


@dataclass
class AutoScavengeState:
    """What the events say; :attr:`status` is derived from it."""

    allow_seconds: bool = False
    schedule: Schedule | None = None
    configured_at: float | None = None
    last_completed_at: float | None = None
    idle_resumed_at: float | None = None
    cycle_id: str | None = None
    members: list[str] = field(default_factory=list)
    cycle_started_at: float | None = None
    done: dict[str, str] = field(default_factory=dict)  # node endpoint -> result
    designated: str | None = None
    designated_at: float | None = None
    scavenge_id: str | None = None
    node_started_at: float | None = None
    paused: bool = False
    pause_requested: bool = False
    initialized_at: float | None = None
    cycles_completed: int = 0

    # -- derived -----------------------------------------------------------------------------------
    @property
    def in_cycle(self) -> bool:
        return self.cycle_id is not None

    @property
    def status(self) -> InternalStatus:
        if self.paused:
            return InternalStatus.PAUSED_IN_CYCLE if self.in_cycle else InternalStatus.PAUSED_IDLE
        if self.pause_requested:
            return InternalStatus.PAUSING
        if self.in_cycle:
            if self.designated is None:
                return InternalStatus.CONTINUING
            return InternalStatus.STARTING if self.scavenge_id is None else InternalStatus.MONITORING
        return InternalStatus.WAITING if self.schedule is not None else InternalStatus.NOT_CONFIGURED

    @property
    def remaining(self) -> list[str]:
        return [m for m in self.members if m not in self.done]

    @property
    def next_due(self) -> float | None:
        """When the next cluster scavenge is due (None: no schedule)."""
        if self.schedule is None:
            return None
        bases = [
            t for t in (self.configured_at, self.last_completed_at, self.idle_resumed_at) if t is not None
        ]
        return self.schedule.next_after(max(bases) if bases else 0.0)

    # -- events ------------------------------------------------------------------------------------
    def apply(self, event_type: str, data: dict[str, Any]) -> None:
        if event_type == CONFIGURATION_UPDATED:
            schedule = parse_schedule(data["schedule"], allow_seconds=True, must_fire=False)
            given = data.get("given")
            # the operator's text where the event keeps it (evdb); else the normal form is all there is
            self.schedule = dataclasses.replace(schedule, given=given if isinstance(given, str) else "")
            self.configured_at = from_iso(data["updatedAt"])
        elif event_type == CLUSTER_SCAVENGE_STARTED:
            self.cycle_id = str(data["clusterScavengeId"])
            self.members = [parse_node_id(m) for m in data.get("members", [])]
            self.cycle_started_at = from_iso(data["startedAt"])
            self.done = {}
            self.designated = self.scavenge_id = None
        elif event_type == NODE_DESIGNATED:
            self.designated = parse_node_id(data["nodeId"])
            self.designated_at = from_iso(data["designatedAt"])
            self.scavenge_id = None
        elif event_type == NODE_SCAVENGE_STARTED:
            self.designated = parse_node_id(data["nodeId"])
            self.scavenge_id = str(data["scavengeId"])
            self.node_started_at = from_iso(data["startedAt"])
        elif event_type == NODE_SCAVENGE_COMPLETED:
            self.done[parse_node_id(data["nodeId"])] = str(data.get("result", "Unknown"))
            self.designated = self.scavenge_id = None
        elif event_type == CLUSTER_SCAVENGE_COMPLETED:
            self.cycle_id = None
            self.designated = self.scavenge_id = None
            self.last_completed_at = from_iso(data["completedAt"])
            self.cycles_completed += 1
        elif event_type == PAUSE_REQUESTED:
            self.pause_requested = True
        elif event_type == PAUSED:
            self.paused = True
            self.pause_requested = False
            # the node scavenge was stopped: on resume it is started again (and resumes where it stopped)
            self.scavenge_id = None
        elif event_type == RESUMED:
            self.paused = False
            self.pause_requested = False
            if not self.in_cycle:
                # cycles that fell due while paused are skipped: the next one is after the resume
                self.idle_resumed_at = from_iso(data["resumedAt"])
        elif event_type == INITIALIZED:
            self.initialized_at = from_iso(data["initializedAt"])
        # unknown types (written by a newer version) are ignored

    def describe(self) -> dict[str, Any]:
        """The evdb extension ``GET /auto-scavenge/progress``."""
        return {
            "status": str(self.status),
            "schedule": str(self.schedule) if self.schedule else None,
            "scheduleAsGiven": self.schedule.as_given if self.schedule else None,
            "nextDue": to_iso(self.next_due) if self.next_due not in (None, float("inf")) else None,
            "clusterScavengeId": self.cycle_id,
            "startedAt": to_iso(self.cycle_started_at) if self.in_cycle and self.cycle_started_at else None,
            "members": list(self.members) if self.in_cycle else [],
            "done": dict(self.done) if self.in_cycle else {},
            "designatedNode": self.designated,
            "nodeScavengeId": self.scavenge_id,
            "paused": self.paused,
            "pauseRequested": self.pause_requested,
            "lastCompletedAt": to_iso(self.last_completed_at) if self.last_completed_at else None,
        }
