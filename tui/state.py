"""Plain state objects the collectors fill and the panels render from.

Nothing here does I/O: a recording or a test can fill the same objects, and a panel shows exactly
what is in them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from evdb.archive.figures import ArchiveFigures

__all__ = [
    "SCAVENGE_PHASES",
    "Activity",
    "ArchiveState",
    "AutoScavengeCycle",
    "AutoScavengeState",
    "AutoScavengeTransition",
    "BackupState",
    "CertificateState",
    "ChunkRow",
    "CycleNode",
    "DashboardState",
    "FinishedCycle",
    "LogLine",
    "Member",
    "MirrorState",
    "NodeCertificates",
    "NodeState",
    "ProcessFigures",
    "RoutineState",
    "RoutineStep",
    "ScavengeHistoryEntry",
    "ScavengeState",
    "SourceError",
    "SubscriptionConnection",
    "SubscriptionGroup",
    "SubscriptionsState",
]

#: The phases a node reports, in order: the spec's Beginning, then the node's stages (evdb's
#: ``/admin/scavenge/progress`` names them as evdb/scavenge/scavenger.py STAGES does, and KurrentDB's
#: ``Scavenge`` status gauge as "<phase> Phase"); the spec's Execution is the three in the middle.
SCAVENGE_PHASES = (
    "Beginning",
    "Accumulation",
    "Calculation",
    "Chunk execution",
    "Chunk merging",
    "Index execution",
    "Cleaning",
)
#: the phases that work chunk by chunk on the chunks of the database
_CHUNK_PHASES = ("Chunk execution", "Chunk merging", "Index execution", "Cleaning")


@dataclass(frozen=True)
class SourceError:
    """A read of one of a node's sources (``/gossip``, the scavenge, auto-scavenge, backup, …) that
    failed: what the node answered (status and body) or why there was no answer, and since when. The
    last good figures stay on screen, marked stale."""

    detail: str
    since: float  # clock.time() of the first failure of this run of failures
    last_ok: float | None = None  # clock.time() of the last good read: the age of what is shown

    def age(self, now: float) -> float:
        return now - (self.last_ok if self.last_ok is not None else self.since)


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
    node: str = ""  # nodeEndpoint (host:port) of the node that ran it; "" when the events do not say


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
    #: the run's scavenge point as the node reports it (evdb: number, position, threshold, origin)
    point: dict[str, Any] | None = None
    #: the seconds each phase the run finished took, as the node reports them (evdb's ``phaseSeconds``)
    phase_seconds: dict[str, float] = field(default_factory=dict)
    #: the last chunk number a stopped run this one resumes had executed (evdb's ``executedThrough``;
    #: -1 none, None not reported): those chunks are done, not pending
    executed_through: int | None = None
    #: a scavenge the dashboard just started: its id from the POST's answer, shown at once until a poll
    #: begun after the answer confirms it (or shows it finished)
    starting_id: str = ""
    starting_after_poll: int = 0  # the node's poll count when the answer came

    def phase_index(self) -> int:
        return SCAVENGE_PHASES.index(self.phase) if self.phase in SCAVENGE_PHASES else -1

    def chunks_worked(self) -> int:
        """Chunks executed or skipped by this run so far (merged ranges are not chunks of the count)."""
        return sum(1 for c in self.chunks if not c.merged)

    def phase_count(self) -> tuple[str, int, int] | None:
        """(what is counted, done, total) of the current phase, in the node's own units: chunks
        accumulated, streams calculated, chunks executed or skipped (of the database's chunks)."""
        if self.phase == "Accumulation" and self.chunks_total:
            return "chunks accumulated", min(self.chunks_done, self.chunks_total), self.chunks_total
        if self.phase == "Calculation" and self.streams_total:
            return "streams calculated", min(self.streams_done, self.streams_total), self.streams_total
        if self.phase in _CHUNK_PHASES and (self.chunks_total or self.chunks):
            # the chunks this run reported, plus what the node says is left (a resumed run's chunks
            # executed before its stop are neither)
            worked = self.chunks_worked()
            left = max(0, self.chunks_total - self.chunks_done) if self.phase == "Chunk execution" else 0
            return "chunks executed or skipped", worked, worked + left
        return None

    def overall(self) -> tuple[int, int]:
        """(the current phase's number, of how many): the run's place in the whole scavenge, which
        never goes back (a phase's own fraction starts again at 0 in the next phase)."""
        return self.phase_index() + 1, len(SCAVENGE_PHASES)

    def done_before(self, chunk: int) -> bool:
        """A chunk the stopped run this one resumes had executed (it is done, not pending)."""
        return self.executed_through is not None and 0 <= chunk <= self.executed_through

    def phase_fraction(self) -> float | None:
        """Progress within the current phase, 0..1, when the figures tell it."""
        if self.phase not in ("Accumulation", "Calculation", "Chunk execution"):
            return None
        count = self.phase_count()
        if count is None or count[2] <= 0:
            return None
        return min(1.0, count[1] / count[2])

    def remaining_seconds(self) -> float | None:
        """Time left in the current phase at its rate so far; None until there is a rate (something
        done in the phase), and for a run that is not running."""
        fraction = self.phase_fraction()
        if not self.running or fraction is None or fraction <= 0 or self.phase_elapsed <= 0:
            return None
        return self.phase_elapsed * (1.0 - fraction) / fraction


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
class FinishedCycle:
    """The last cluster scavenge that ended: what ``/auto-scavenge/progress`` said of it while it ran
    (as the dashboard last saw it) and when it completed (``lastCompletedAt``)."""

    completed_at: float  # epoch seconds
    cycle: AutoScavengeCycle | None = None  # None: it ended before the dashboard saw it run


@dataclass(frozen=True)
class AutoScavengeState:
    available: bool  # False: the endpoints are not there (404) on this node
    enabled: bool | None = None
    state: str = ""
    schedule: str | None = None  # as ``/auto-scavenge/status`` spells it (KurrentDB's normal form)
    #: the schedule as the operator typed it (evdb's ``/auto-scavenge/progress`` ``scheduleAsGiven``,
    #: read beside this ``schedule``): ``*/2 * * * * *`` where the normal form lists thirty seconds
    schedule_as_given: str | None = None
    time_until_next_cycle: float | None = None  # seconds, at ``read_at``
    read_at: float = 0.0  # clock.monotonic() of the read, for the live countdown
    #: the cycle node by node; read only while a cycle can be under way (InProgress, Pausing, Paused)
    cycle: AutoScavengeCycle | None = None
    #: evdb's ``/auto-scavenge/progress``: None not asked, False not on this node (404)
    cycle_available: bool | None = None
    cycle_error: str | None = None  # the progress endpoint answered something else (401, 500, …)
    #: the cycle the dashboard last saw under way (kept to summarise it once it has ended)
    last_seen_cycle: AutoScavengeCycle | None = None
    #: the last cluster scavenge that ended (from ``lastCompletedAt``)
    finished: FinishedCycle | None = None
    #: the transitions, newest first: from the node's ``$auto-scavenges`` events where it has them
    #: (each with the node's own time, so a Pausing of half a second is seen), else as the dashboard
    #: saw the state change between its polls
    transitions: tuple[AutoScavengeTransition, ...] = ()
    transitions_from_events: bool = False


@dataclass(frozen=True)
class AutoScavengeTransition:
    """One step of the auto-scavenge: the state it went to (or what happened), when, and details."""

    at: float | None  # epoch seconds
    state: str  # InProgress, Pausing, Paused, Waiting; or "" for a step that is no state change
    detail: str = ""
    node: str = ""  # host:port of the node the step is about (a designated or scavenged node)


@dataclass(frozen=True)
class BackupState:
    available: bool
    body: dict[str, Any] = field(default_factory=dict)
    #: for a backup that has ended without a duration of its own (a failed one): its figures as the
    #: dashboard first saw them ended (the node's elapsed time and speed run on after the end)
    ended_elapsed: float | None = None
    #: a running backup seen by this dashboard (its end is announced)
    seen_running: bool = False


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
class SubscriptionConnection:
    """A consumer connected to a persistent subscription group (``connections`` of its ``/info``)."""

    source: str  # KurrentDB's ``from``: the consumer's address
    username: str = ""
    connection_name: str = ""
    in_flight: int = 0
    available_slots: int = 0
    items_per_second: float = 0.0
    total_items: int = 0


@dataclass(frozen=True)
class SubscriptionGroup:
    """One persistent subscription group as the node reports it: ``GET /subscriptions`` (the summary)
    and its ``/info`` (strategy, consumers, parked messages)."""

    stream: str  # ``$all`` for a group to $all
    group: str
    status: str = ""
    connection_count: int = 0
    in_flight: int = 0
    #: positions as the node writes them: an event number (``"5"``) or for $all ``"C:120/P:120"``;
    #: None: none yet (nothing checkpointed)
    last_known: str | None = None
    last_checkpointed: str | None = None
    items_per_second: float = 0.0
    total_items: int = 0
    #: from ``/info``; None where it was not read (``detail_error`` says why)
    strategy: str | None = None
    parked: int | None = None
    outstanding: int | None = None
    connections: tuple[SubscriptionConnection, ...] = ()
    detail_error: str | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.stream, self.group)

    def lag(self) -> tuple[int, str] | None:
        """How far the checkpoint is behind the last event the group knows: (amount, unit), events
        for a stream, bytes of the log for $all; None when either is not known."""
        known, checkpointed = (
            _subscription_position(self.last_known),
            _subscription_position(self.last_checkpointed),
        )
        if known is None or checkpointed is None:
            return None
        unit = "bytes" if (self.last_known or "").startswith("C:") else "events"
        return max(0, known - checkpointed), unit


def _subscription_position(text: str | None) -> int | None:
    """``"5"`` → 5; ``"C:120/P:120"`` → 120 (the commit position); anything else None."""
    if not text:
        return None
    value = text.partition("/")[0].removeprefix("C:") if text.startswith("C:") else text
    try:
        return int(value)
    except ValueError:
        return None


@dataclass(frozen=True)
class SubscriptionsState:
    """A node's persistent subscriptions (``GET /subscriptions`` and each group's ``/info``)."""

    available: bool  # False: the node has no /subscriptions endpoint (404)
    groups: tuple[SubscriptionGroup, ...] = ()
    #: the node answered that it does not serve them (evdb's followers: 503 "Server Is Not Ready"; the
    #: leader serves them): its answer, as it sent it
    not_served: str | None = None
    #: groups beyond those whose details were read (a node with very many groups)
    details_left_out: int = 0


@dataclass(frozen=True)
class ArchiveState:
    """A node's archive figures, from its ``GET /stats`` (``es.archive``): None when the node reports
    none (its archive is off, or it is not evdb)."""

    figures: ArchiveFigures | None
    read_at: float  # clock.time() of the read


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
    #: reads that fail now, by source (gossip, scavenge, history, auto-scavenge, backup, certificates,
    #: info): what was read before stays, marked stale
    errors: dict[str, SourceError] = field(default_factory=dict)
    last_role: str = ""  # the role the node last reported (kept while it is unreachable)
    own_endpoint: str = ""  # host:port of its own entry in its gossip (IPv6 in brackets)
    #: a job of the dashboard on this node now (a local node's stop, start or restore, a demo load)
    job: str = ""
    #: persistent subscriptions (read while the subscriptions screen is open); None: not read
    subscriptions: SubscriptionsState | None = None
    #: the archive's figures (``/stats``' ``es.archive``); None: not read yet
    archive: ArchiveState | None = None
    #: evdb's ``GET /info/options`` rows (``name``, ``value``, ``configured``, ``restartPending``, …);
    #: None: not read yet, or the node has no such endpoint (``options_available`` False: a 404)
    options: tuple[dict[str, Any], ...] | None = None
    options_available: bool | None = None
    #: the highest writer position this node reported in each chunk (by chunk number, the last few):
    #: where a chunk's data ended when the writer moved on to the next chunk's start
    writer_marks: dict[int, int] = field(default_factory=dict)
    #: the last time the writer moved into another chunk: (from position, to position, clock.time())
    writer_jump: tuple[int, int, float] | None = None

    def option(self, name: str) -> dict[str, Any] | None:
        """The node's ``/info/options`` row of an option, by its KurrentDB name."""
        return next((row for row in self.options or () if row.get("name") == name), None)

    @property
    def chunk_size(self) -> int | None:
        row = self.option("ChunkSize")
        value = row.get("value") if row else None
        return value if isinstance(value, int) and value > 0 else None

    @property
    def label(self) -> str:
        return self.name or self.url.split("://", 1)[-1]

    @property
    def address(self) -> str:
        """host:port of its URL."""
        return self.url.split("://", 1)[-1]

    def endpoints(self) -> set[str]:
        """Every host:port the node is known by: its URL's, and its own gossip entry's."""
        return {self.address, self.own_endpoint} - {""}


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
    """One call the operator made from the dashboard, and its answer; or a job the dashboard ran (a
    local node's stop, start or restore, a demo load, a step of a routine): its equivalent command in
    ``request``, how it went in ``outcome`` (running, done, failed, stopped) and its progress or result
    in ``body``."""

    at: float
    node: str
    request: str  # "POST https://…/admin/scavenge?…", or "evdb cluster stop-node node2 --data …"
    status: int | None  # None: no answer (network error), or a job
    body: str
    outcome: str = ""  # a job's: running, done, failed, stopped ("": an HTTP call, see status)


@dataclass
class RoutineStep:
    """One step of the followers-first cluster scavenge: what it does, on which node, and how it went."""

    what: str  # "scavenge node2", "resign node1", "wait for a new leader", …
    node: str  # the node's label
    status: str = "waiting"  # waiting, running, done, failed, stopped
    detail: str = ""  # the scavenge id and its result, the new leader, the failure


@dataclass
class RoutineState:
    """The followers-first cluster scavenge (followers and read-only replicas one at a time, then the
    leader resigns and is scavenged once another node leads): its steps and how it ended."""

    steps: list[RoutineStep]
    started_at: float  # clock.time()
    ended_at: float | None = None
    outcome: str = ""  # "": running; "completed", "failed: …", "stopped: …"

    @property
    def running(self) -> bool:
        return self.ended_at is None

    def current(self) -> int | None:
        """The index of the step running now."""
        return next((i for i, s in enumerate(self.steps) if s.status == "running"), None)


@dataclass
class DashboardState:
    nodes: dict[str, NodeState] = field(default_factory=dict)  # by url, in discovery order
    selected: str = ""
    activity: list[Activity] = field(default_factory=list)
    readonly: bool = False
    mirrors: dict[str, MirrorState] = field(default_factory=dict)  # by source, in the order given
    mirrors_version: int = 0  # bumped whenever a mirror's status changed
    all_history: bool = False  # the scavenge history of every node (a node column), not the selected's
    #: bumped whenever the activity, a job, the routine or a note below changed
    jobs_version: int = 0
    #: the followers-first cluster scavenge, running or the last one
    routine: RoutineState | None = None
    #: the last demo load's summary (DemoReport.summary()), and the node it went through
    demo: tuple[str, list[str]] | None = None
    #: the last "cycle now" answer: (clock.time(), node label, HTTP status or None, what it said)
    cycle_now: tuple[float, str, int | None, str] | None = None
    #: the local cluster's node options (``--option``), when the dashboard runs on one
    node_options: dict[str, str] | None = None
    #: seconds between a node's polls: a row not refreshed within two of them is marked stale
    interval: float = 1.0
    #: each cluster scavenge's nodes' roles when the dashboard first saw them designated (the role they
    #: were scavenged in), by (cycle id, endpoint)
    cycle_roles: dict[tuple[str, str], str] = field(default_factory=dict)

    def add_activity(self, entry: Activity) -> int:
        """Append an entry; its index (a job's entry is updated in place as it goes)."""
        self.activity.append(entry)
        self.jobs_version += 1
        return len(self.activity) - 1

    def update_activity(self, index: int, **changes: Any) -> None:
        from dataclasses import replace

        self.activity[index] = replace(self.activity[index], **changes)
        self.jobs_version += 1

    def node(self, url: str | None = None) -> NodeState | None:
        return self.nodes.get(url or self.selected)

    def ordered(self) -> list[NodeState]:
        return list(self.nodes.values())
