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
    "AutoScavengeCycle",
    "AutoScavengeState",
    "BackupState",
    "CertificateState",
    "ChunkRow",
    "CycleNode",
    "DashboardState",
    "LogLine",
    "Member",
    "MirrorState",
    "NodeCertificates",
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
class CycleNode:
    """One member of a cluster scavenge, as the leader's ``/auto-scavenge/progress`` tells it."""

    endpoint: str  # host:port, as gossip's httpEndPoint (``[::1]:2113`` for IPv6)
    status: str  # done, running, starting, stopping, paused, waiting
    result: str | None = None  # of a done node: Success, Stopped, Errored, Cancelled, …


@dataclass(frozen=True)
class AutoScavengeCycle:
    """The cluster scavenge in progress (evdb's ``GET /auto-scavenge/progress``)."""

    cycle_id: str | None = None  # None: no cycle runs (paused while idle)
    status: str = ""  # the leader's internal status, e.g. MonitoringNodeScavenge
    members: tuple[str, ...] = ()  # every node of the cycle (sorted by address, as the leader keeps them)
    done: tuple[tuple[str, str], ...] = ()  # (endpoint, result), in the order they finished
    designated: str | None = None  # the node being scavenged now
    node_scavenge_id: str | None = None  # its scavenge, once started
    paused: bool = False
    pause_requested: bool = False
    started_at: float | None = None  # epoch seconds
    last_problem: str | None = None

    def nodes(self) -> list[CycleNode]:
        """Node by node: the done ones in the order they finished, the running one, then the waiting."""
        done = dict(self.done)
        out = [CycleNode(endpoint, "done", result) for endpoint, result in self.done]
        if self.designated is not None and self.designated not in done:
            if self.pause_requested:
                status = "stopping"
            elif self.paused:
                status = "paused"
            elif self.node_scavenge_id is None:
                status = "starting"
            else:
                status = "running"
            out.append(CycleNode(self.designated, status))
        out.extend(CycleNode(m, "waiting") for m in self.members if m not in done and m != self.designated)
        return out


@dataclass(frozen=True)
class AutoScavengeState:
    available: bool  # False: the endpoints are not there (404) on this node
    enabled: bool | None = None
    state: str = ""
    schedule: str | None = None
    time_until_next_cycle: float | None = None  # seconds, at ``read_at``
    read_at: float = 0.0  # clock.monotonic() of the read, for the live countdown
    #: the cycle node by node; read only while a cycle can be under way (InProgress, Pausing, Paused)
    cycle: AutoScavengeCycle | None = None
    #: evdb's ``/auto-scavenge/progress``: None not asked, False not on this node (404)
    cycle_available: bool | None = None
    cycle_error: str | None = None  # the progress endpoint answered something else (401, 500, …)


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
class PeerFailure:
    """A call from a node to another that fails now (``peerErrors`` of ``/admin/certificates``)."""

    peer: str  # host:port called
    reason: str
    certificate: bool  # refused on a certificate
    since: float | None = None  # epoch seconds of the first failure of this run
    failures: int = 1


@dataclass(frozen=True)
class NodeCertificates:
    """evdb's ``GET /admin/certificates``: the CA in use and the last configuration reload."""

    available: bool  # False: no such endpoint (404: KurrentDB, or an older evdb)
    error: str | None = None  # e.g. 401 without an admin or ops user
    secure: bool = False
    subject: str = ""
    dns_names: tuple[str, ...] = ()
    ip_addresses: tuple[str, ...] = ()
    ca_subject: str | None = None
    ca_fingerprint: str | None = None  # SHA-256, hex
    loaded_at: float | None = None  # epoch seconds: when the certificate in use was loaded
    reload_at: float | None = None  # epoch seconds of the last reload; None: none since the start
    reload_trigger: str = ""  # "/admin/reloadconfig" or "SIGHUP"
    reload_result: str = ""  # Success or Failed
    reload_error: str | None = None
    certificate_changed: bool = False
    peer_failures: tuple[PeerFailure, ...] = ()  # the node's calls to other nodes failing now


@dataclass(frozen=True)
class MirrorState:
    """One ``evdb mirror``, from its ``GET /status`` or its ``<checkpoint>.status.json``."""

    source: str  # what the operator gave: a URL or a file
    error: str | None = None  # could not read it (no answer, no file yet, not JSON)
    state: str = ""  # starting, catching-up, live, reconnecting, stopped, failed, failed-over
    from_url: str = ""
    to_url: str = ""
    position: int | None = None
    primary_head: int | None = None
    lag_bytes: int | None = None
    lag_seconds: float | None = None
    caught_up: bool = False
    events_copied: int = 0
    events_per_second: float | None = None
    last_error: str | None = None
    updated: float | None = None  # epoch seconds the mirror wrote this status


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
    certificates: NodeCertificates | None = None  # evdb's /admin/certificates
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
    mirrors: dict[str, MirrorState] = field(default_factory=dict)  # by source, in the order given
    mirrors_version: int = 0  # bumped whenever a mirror's status changed

    def node(self, url: str | None = None) -> NodeState | None:
        return self.nodes.get(url or self.selected)

    def ordered(self) -> list[NodeState]:
        return list(self.nodes.values())
