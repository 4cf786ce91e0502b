"""Plain state objects the collectors fill and the panels render from.

Nothing here does I/O: a recording or a test can fill the same objects, and a panel shows exactly
what is in them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "SCAVENGE_PHASES",
    "Activity",
    "AutoScavengeState",
    "BackupState",
    "CertificateState",
    "ChunkRow",
    "DashboardState",
    "LogLine",
    "Member",
    "NodeState",
    "ProcessFigures",
    "ScavengeHistoryEntry",
    "ScavengeState",
]

#: The spec's phases, in order. evdb's progress endpoint reports these names.
SCAVENGE_PHASES = ("Beginning", "Accumulation", "Calculation", "Execution", "Cleaning")


@dataclass(frozen=True)
class Member:
    """One gossip member, as a node sees it (KurrentDB's member shape)."""

    instance_id: str
    state: str
    is_alive: bool
    host: str
    port: int
    writer_checkpoint: int = -1
    chaser_checkpoint: int = -1
    epoch_number: int = -1
    is_read_only_replica: bool = False
    version: str = ""

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"

    @classmethod
    def from_gossip(cls, body: dict[str, Any]) -> Member:
        return cls(
            instance_id=str(body.get("instanceId", "")),
            state=str(body.get("state", "Unknown")),
            is_alive=bool(body.get("isAlive", False)),
            host=str(body.get("httpEndPointIp", "")),
            port=int(body.get("httpEndPointPort") or 0),
            writer_checkpoint=int(
                body.get("writerCheckpoint", -1) if body.get("writerCheckpoint") is not None else -1
            ),
            chaser_checkpoint=int(
                body.get("chaserCheckpoint", -1) if body.get("chaserCheckpoint") is not None else -1
            ),
            epoch_number=int(body.get("epochNumber", -1) if body.get("epochNumber") is not None else -1),
            is_read_only_replica=bool(body.get("isReadOnlyReplica", False)),
            version=str(body.get("esVersion", "")),
        )


@dataclass(frozen=True)
class ChunkRow:
    """A chunk (or merged range) of a scavenge: weight, what happened to it, sizes."""

    start: int
    end: int
    weight: float | None = None
    executed: bool | None = None  # None: not reached yet
    merged: bool = False
    size_before: int | None = None
    size_after: int | None = None
    space_saved: int | None = None


@dataclass(frozen=True)
class ScavengeHistoryEntry:
    scavenge_id: str
    result: str  # Success, Stopped, Errored, Interrupted, InProgress, Unknown
    started: str = ""  # ISO time of $scavengeStarted
    time_taken: str = ""
    space_saved: int | None = None
    error: str | None = None


@dataclass
class ScavengeState:
    """One node's scavenge: the running one (if any), its figures, the last run, the history."""

    current_id: str = ""
    running: bool = False
    phase: str = ""  # "" when unknown (a node without evdb's progress endpoint)
    phase_elapsed: float = 0.0
    elapsed: float = 0.0
    threads: int | None = None
    threshold: int | None = None
    throttle_percent: int | None = None
    chunks_total: int = 0
    chunks_done: int = 0
    streams_total: int = 0
    streams_done: int = 0
    current_chunk: str | None = None
    bytes_reclaimed: int = 0
    records_removed: int = 0
    weights: dict[int, float] = field(default_factory=dict)
    chunks: list[ChunkRow] = field(default_factory=list)
    result: str | None = None  # of the run shown (the running one, else the last)
    shown_id: str = ""  # id of the run the figures belong to
    progress_available: bool | None = None  # evdb's /admin/scavenge/progress answered
    history: list[ScavengeHistoryEntry] = field(default_factory=list)

    def phase_index(self) -> int:
        return SCAVENGE_PHASES.index(self.phase) if self.phase in SCAVENGE_PHASES else -1

    def phase_fraction(self) -> float | None:
        """Progress within the current phase, 0..1, when the figures tell it."""
        if self.phase in ("Execution",) and self.chunks_total:
            return min(1.0, self.chunks_done / self.chunks_total)
        if self.phase == "Accumulation" and self.chunks_total:
            return min(1.0, self.chunks_done / self.chunks_total)
        if self.phase == "Calculation" and self.streams_total:
            return min(1.0, self.streams_done / self.streams_total)
        return None

    def remaining_seconds(self) -> float | None:
        """Estimated time left: phases left at the pace of this run so far (rough, stated as such)."""
        index = self.phase_index()
        fraction = self.phase_fraction()
        if not self.running or index < 0 or self.elapsed <= 0:
            return None
        done = index + (fraction or 0.0)
        if done <= 0:
            return None
        return self.elapsed * (len(SCAVENGE_PHASES) - done) / done


@dataclass(frozen=True)
class AutoScavengeState:
    available: bool  # False: the endpoints are not there (404) on this node
    enabled: bool | None = None
    state: str = ""
    schedule: str | None = None
    time_until_next_cycle: float | None = None  # seconds, at ``read_at``
    read_at: float = 0.0  # clock.monotonic() of the read, for the live countdown


@dataclass(frozen=True)
class BackupState:
    available: bool
    body: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CertificateState:
    subject: str = ""
    issuer: str = ""
    not_after: float | None = None  # epoch seconds
    verified: bool = False
    error: str | None = None  # the chain validation error, if any
    read_at: float = 0.0  # clock.time()


@dataclass(frozen=True)
class ProcessFigures:
    pid: int
    cpu_percent: float
    rss_bytes: int
    read_bytes_per_s: float
    write_bytes_per_s: float


@dataclass
class NodeState:
    """Everything known about one node, by its HTTP base address."""

    url: str
    name: str = ""
    reachable: bool | None = None  # None: not polled yet
    error: str = ""
    last_ok: float | None = None  # clock.time() of the last good poll
    polls: int = 0
    failures: int = 0  # consecutive
    info: dict[str, Any] = field(default_factory=dict)
    members: list[Member] = field(default_factory=list)
    role: str = ""
    is_evdb: bool = False
    scavenge: ScavengeState = field(default_factory=ScavengeState)
    auto_scavenge: AutoScavengeState | None = None
    backup: BackupState | None = None
    certificate: CertificateState | None = None
    process: ProcessFigures | None = None
    pid: int | None = None  # set for launched nodes
    log_dir: str | None = None
    version: int = 0  # bumped whenever a poll changed something

    @property
    def label(self) -> str:
        return self.name or self.url.split("://", 1)[-1]


@dataclass(frozen=True)
class LogLine:
    node: str
    time: str  # ISO, as in the file
    level: str  # KurrentDB's names
    message: str
    exception: str | None = None

    @property
    def is_certificate_error(self) -> bool:
        text = self.message.lower()
        return self.level in ("Error", "Fatal", "Warning") and "certificate" in text


@dataclass(frozen=True)
class Activity:
    """One call the operator made from the dashboard, and its answer."""

    at: float
    node: str
    request: str  # "POST https://…/admin/scavenge?…"
    status: int | None  # None: no answer (network error)
    body: str


@dataclass
class DashboardState:
    nodes: dict[str, NodeState] = field(default_factory=dict)  # by url, in discovery order
    selected: str = ""
    activity: list[Activity] = field(default_factory=list)
    readonly: bool = False

    def node(self, url: str | None = None) -> NodeState | None:
        return self.nodes.get(url or self.selected)

    def ordered(self) -> list[NodeState]:
        return list(self.nodes.values())
