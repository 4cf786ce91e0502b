"""The auto-scavenge process on the leader: commands (configure, pause, resume, cycle now, status) and
the periodic assessment that starts cluster scavenges and drives them node by node.

Every decision is first written as an event (see :mod:`evdb.autoscavenge.state`) and only then
applied, so a leader elected later (after the resign, or after a crash) reads the streams and
carries on from the same place. Commands and assessments run one at a time under :attr:`lock`;
stopping a node scavenge for a pause runs outside it (it can take a while) and takes the lock to
record the outcome.

The state in memory is the streams' as one leader read them, in one leadership term, and is only
ever written on with the expected version it was read at:

- a leader reads the streams only once it can read its whole log (:class:`TakingOffice` until then:
  a node that has just taken office sees the previous leader's last records once a majority holds
  its own epoch record);
- a leader that finds itself in another term than the one it read them in (it stepped down and was
  elected again between two rounds) reads them again;
- an event refused on its expected version means the streams moved on without this state: it is
  dropped and the streams are read again (:class:`StateOutdated`); an event is never written through
  a node that does not lead (the store refuses it: NotLeader).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from evdb.autoscavenge import state as ev
from evdb.autoscavenge.scavenger import NodeScavenger, NodeUnreachable
from evdb.autoscavenge.schedule import Schedule, format_timespan
from evdb.autoscavenge.state import AutoScavengeState, InternalStatus, node_id, to_iso
from evdb.clock import Clock
from evdb.errors import EvdbError, NotLeader, WrongExpectedVersion
from evdb.streams import ANY

__all__ = [
    "AutoScavengeMachine",
    "ClusterView",
    "CycleNowRefused",
    "CycleStarted",
    "EventStore",
    "Member",
    "StateOutdated",
    "StoredStreams",
    "TakingOffice",
]

#: node states in which a node can be scavenged (a leader resigns first)
READY_STATES = ("Follower", "ReadOnlyReplica")
FINAL_RESULTS = ("Success", "Stopped", "Errored")
CANCELLED = "Cancelled"


class TakingOffice(NotLeader):
    """This node leads, but cannot read the auto-scavenge streams whole yet: it has just taken office
    and its readers see the previous leader's last records once a majority holds its epoch record.
    Nothing is read or written until then (a command is answered as by a node that does not lead)."""

    def __init__(self, detail: str) -> None:
        super().__init__()
        self.args = (f"This node is taking office as the leader: {detail}",)


class StateOutdated(NotLeader):
    """``$auto-scavenges`` moved on without this leader's state in memory (an event was refused on its
    expected version): the state was dropped, nothing was written, and the streams are read again."""

    def __init__(self, detail: str) -> None:
        super().__init__()
        self.args = (detail,)


class CycleNowRefused(EvdbError):
    """ "Cycle now" cannot start a cluster scavenge at this moment; the message says why and what to do
    (HTTP: 400 with the message as a JSON string, as KurrentDB refuses a resume while pausing)."""


@dataclass(frozen=True)
class CycleStarted:
    """A cluster scavenge that "cycle now" started: its id and the members it scavenges."""

    cluster_scavenge_id: str
    members: list[str]


@dataclass(frozen=True)
class Member:
    endpoint: str  # host:http-port, the node id of the events
    state: str
    alive: bool
    read_only: bool
    writer: int = -1


class ClusterView(Protocol):
    @property
    def is_leader(self) -> bool: ...

    @property
    def self_endpoint(self) -> str: ...

    @property
    def cluster_size(self) -> int: ...

    def members(self) -> list[Member]: ...

    async def resign(self) -> None: ...


@dataclass(frozen=True)
class StoredStreams:
    """The two streams as a leader read them."""

    configuration: list[tuple[str, dict]]  # the newest ``$configuration-updated`` (or none)
    events: list[tuple[str, dict]]  # ``$auto-scavenges``, oldest first
    version: int  # the last event number of ``$auto-scavenges`` (-1: none)
    term: int  # the leadership term (epoch number) of the log they were read from


class EventStore(Protocol):
    def term(self) -> int:
        """The leadership term (epoch number) of the node's log now; -1 when it has none."""

    async def load(self) -> StoredStreams:
        """Both streams, whole. TakingOffice when the node cannot read all its log yet."""

    async def append(self, stream: str, event_type: str, data: dict, expected_version: int) -> int:
        """Append one event; the stream's new last event number. NotLeader when this node does not
        lead (never sent on to another node); WrongExpectedVersion when the stream moved on."""


class AutoScavengeMachine:
    def __init__(
        self,
        *,
        clock: Clock,
        store: EventStore,
        scavenger: NodeScavenger,
        cluster: ClusterView,
        logger: logging.Logger,
        node_timeout: float = 300.0,
        prepare: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.clock = clock
        self.store = store
        self.scavenger = scavenger
        self.cluster = cluster
        self.logger = logger
        self.node_timeout = node_timeout
        self.state = AutoScavengeState()
        self.loaded = False
        self.version = -1
        self.term: int | None = None  # the leadership term the state was read in
        self._prepare = prepare  # run once the streams can be read, before the state is made from them
        self.lock = asyncio.Lock()
        self.last_problem: str | None = None
        self._emitted = 0
        self._unreachable_since: dict[str, float] = {}
        self._said: dict[str, str] = {}
        self._pause_task: asyncio.Task | None = None

    # -- loading -----------------------------------------------------------------------------------
    async def ensure_loaded(self) -> None:
        """Read the streams unless the state in memory was read in this leadership term (under
        :attr:`lock`). TakingOffice (logged once) while this node cannot read its whole log yet."""
        if self.loaded:
            term = self.store.term()
            if term == self.term:
                return
            self.logger.info(
                "This node leads in term %d, not in term %s in which it read %s: reading it again",
                term,
                self.term,
                ev.EVENTS_STREAM,
            )
            self.unload()
        try:
            await self.load()
        except TakingOffice as exc:
            self._say_once(
                "office",
                logging.INFO,
                "Auto-scavenge waits before reading %s: %s",
                ev.EVENTS_STREAM,
                exc,
            )
            raise

    async def load(self) -> None:
        """Rebuild the state from the streams (a node that has just become the leader)."""
        streams = await self.store.load()
        if self._prepare is not None:
            await self._prepare()
        state = AutoScavengeState()
        for event_type, data in [*streams.configuration, *streams.events]:
            state.apply(event_type, data)
        state.apply(ev.INITIALIZED, {"initializedAt": to_iso(self.clock.time())})
        self.state, self.version, self.term, self.loaded = state, streams.version, streams.term, True
        self._unreachable_since.clear()
        self._said.clear()
        self.last_problem = None  # what an earlier term (or the wait to read the streams) saw
        where = ""
        if state.in_cycle:
            where = (
                f"; cluster scavenge {state.cycle_id} is in progress ({len(state.done)} of "
                f"{len(state.members)} nodes done, current node {state.designated or 'none'})"
            )
        self.logger.info(
            "Loaded the auto-scavenge state from %s: %s, schedule %s%s (%d events, read in term %d)",
            ev.EVENTS_STREAM,
            state.status.public,
            f"'{state.schedule}'" if state.schedule else "not set",
            where,
            streams.version + 1,
            streams.term,
        )

    def unload(self) -> None:
        """This node is no longer the leader: forget the state (the next leader reads the streams)."""
        task, self._pause_task = self._pause_task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
        self.loaded = False
        self.state = AutoScavengeState()
        self.version = -1
        self.term = None

    async def _emit(self, event_type: str, data: dict[str, Any]) -> None:
        try:
            self.version = await self.store.append(ev.EVENTS_STREAM, event_type, data, self.version)
        except WrongExpectedVersion as exc:
            expected = self.version
            self.unload()
            detail = (
                f"{ev.EVENTS_STREAM} moved on without this leader's state: {event_type} was refused at "
                f"expected version {expected} ({exc}). The state is dropped and the streams are read "
                "again; nothing was written"
            )
            self.logger.warning("%s", detail)
            raise StateOutdated(detail) from exc
        except NotLeader:
            if self.loaded:
                self.unload()
                self.logger.info(
                    "This node no longer leads: %s was not written; auto-scavenge hands over to the next "
                    "leader, which carries on from %s",
                    event_type,
                    ev.EVENTS_STREAM,
                )
            raise
        self.state.apply(event_type, data)
        self._emitted += 1

    def _say_once(self, key: str, level: int, message: str, *args: Any) -> None:
        """Log a waiting condition once (not at every assessment) until it changes."""
        text = message % args if args else message
        if self._said.get(key) != text:
            self._said[key] = text
            self.logger.log(level, "%s", text)
        self.last_problem = text

    # -- commands ----------------------------------------------------------------------------------
    async def configure(self, schedule: Schedule) -> None:
        now = self.clock.time()
        data = {"schedule": schedule.expression, "updatedAt": to_iso(now)}
        if schedule.given and schedule.given != schedule.expression:
            data["given"] = schedule.given  # evdb: the operator's own text, shown by the progress
        await self.store.append(ev.CONFIGURATION_STREAM, ev.CONFIGURATION_UPDATED, data, ANY)
        self.state.apply(ev.CONFIGURATION_UPDATED, data)
        due = self.state.next_due
        self.logger.info(
            "Auto-scavenge schedule set to '%s'%s; the next cluster scavenge is due at %s",
            schedule.expression,
            f" (given as '{schedule.given}')" if schedule.given != schedule.expression else "",
            to_iso(due) if due is not None and math.isfinite(due) else "never (the expression never matches)",
        )

    async def pause(self) -> int:
        """200: paused (no node scavenge runs); 202: a node scavenge is being stopped."""
        status = self.state.status
        if status in (InternalStatus.PAUSED_IDLE, InternalStatus.PAUSED_IN_CYCLE):
            return 200
        if status is InternalStatus.PAUSING:
            return 202
        now = to_iso(self.clock.time())
        if status is InternalStatus.MONITORING:
            await self._emit(ev.PAUSE_REQUESTED, {"requestedAt": now})
            self.logger.info(
                "Auto-scavenge is pausing: stopping the node scavenge %s on %s; no further node "
                "scavenges start until it is resumed",
                self.state.scavenge_id,
                self.state.designated,
            )
            self._start_pause_task()
            return 202
        await self._emit(ev.PAUSED, {"pausedAt": now})
        self.logger.info(
            "Auto-scavenge paused%s",
            f" during cluster scavenge {self.state.cycle_id} (no node scavenge was running)"
            if self.state.in_cycle
            else "",
        )
        return 200

    async def resume(self) -> str | None:
        """None when done (or nothing to resume); else the rejection reason."""
        status = self.state.status
        if status is InternalStatus.PAUSING:
            return "Auto scavenge process is currently pausing"
        if status not in (InternalStatus.PAUSED_IDLE, InternalStatus.PAUSED_IN_CYCLE):
            return None
        await self._emit(ev.RESUMED, {"resumedAt": to_iso(self.clock.time())})
        if self.state.in_cycle:
            self.logger.info(
                "Auto-scavenge resumed: cluster scavenge %s continues (%d of %d nodes done%s)",
                self.state.cycle_id,
                len(self.state.done),
                len(self.state.members),
                f"; node {self.state.designated} is scavenged again from where it stopped"
                if self.state.designated
                else "",
            )
        else:
            due = self.state.next_due
            self.logger.info(
                "Auto-scavenge resumed: %s",
                f"the next cluster scavenge is due at {to_iso(due)}"
                if due is not None and math.isfinite(due)
                else "no schedule is set",
            )
        return None

    async def cycle_now(self, requested_by: str) -> CycleStarted:
        """evdb extension: start a cluster scavenge at once, as if the schedule fired now (also with no
        schedule set). It then runs as a scheduled one does (followers first, the leader resigns and is
        scavenged last) and the next due time follows its completion. Raises CycleNowRefused, and
        writes nothing, while a cluster scavenge is in progress (also paused in one), while pausing or
        paused, and while not every cluster member is alive."""
        s = self.state
        status = s.status
        if status is InternalStatus.PAUSING:
            raise CycleNowRefused("Auto scavenge process is currently pausing")
        if status is InternalStatus.PAUSED_IN_CYCLE:
            raise CycleNowRefused(
                f"Cluster scavenge {s.cycle_id} is paused: resume it (POST /auto-scavenge/resume) to let "
                "it finish"
            )
        if status is InternalStatus.PAUSED_IDLE:
            raise CycleNowRefused("Auto-scavenge is paused: resume it first (POST /auto-scavenge/resume)")
        if s.in_cycle:
            raise CycleNowRefused(
                f"Cluster scavenge {s.cycle_id} is already in progress ({len(s.done)} of {len(s.members)} "
                "nodes done)"
            )
        members, alive = self._healthy_members()
        if members is None:
            raise CycleNowRefused(
                f"The cluster is not healthy: {alive} of {self.cluster.cluster_size} cluster members are "
                "alive; a cluster scavenge starts when all of them are"
            )
        cycle_id = await self._start_cycle(members, f"started now at the request of {requested_by}")
        return CycleStarted(cycle_id, members)

    def status(self) -> dict[str, Any]:
        """The body of ``GET /auto-scavenge/status`` (KurrentDB's shape)."""
        s = self.state
        now = self.clock.time()
        schedule = s.schedule
        left: float | None
        if s.in_cycle:
            left = 0.0
        elif schedule is None:
            left = None
        elif s.status is InternalStatus.PAUSED_IDLE:
            left = schedule.next_after(now) - now
        else:
            due = s.next_due
            left = None if due is None else due - now
        if left is not None and not math.isfinite(left):
            left = None
        return {
            "state": str(s.status.public),
            "schedule": schedule.expression if schedule else None,
            "timeUntilNextCycle": None if left is None else format_timespan(max(0.0, left)),
        }

    def progress(self) -> dict[str, Any]:
        """evdb extension: where the cycle stands, node by node, and the last problem seen."""
        return {**self.state.describe(), "lastProblem": self.last_problem}

    # -- pausing -----------------------------------------------------------------------------------
    def _start_pause_task(self) -> None:
        if self._pause_task is None or self._pause_task.done():
            self._pause_task = asyncio.create_task(self._stop_for_pause(), name="auto-scavenge-pause")

    async def _stop_for_pause(self) -> None:
        with contextlib.suppress(NotLeader):  # the state was dropped (logged): the next leader carries on
            await self._stop_and_record()

    async def _stop_and_record(self) -> None:
        endpoint, scavenge_id = self.state.designated, self.state.scavenge_id
        if endpoint is None:
            async with self.lock:
                if self.loaded and self.state.status is InternalStatus.PAUSING:
                    await self._emit(ev.PAUSED, {"pausedAt": to_iso(self.clock.time())})
            return
        note = ""
        finished: str | None = None
        try:
            await self.scavenger.stop(endpoint, scavenge_id)
            self._unreachable_since.pop(f"pause:{endpoint}", None)
            with contextlib.suppress(NodeUnreachable):
                last = await self.scavenger.last(endpoint)
                if last.scavenge_id == scavenge_id and last.result in ("Success", "Errored"):
                    finished = last.result  # it ended on its own before the stop reached it
        except NodeUnreachable as exc:
            since = self._unreachable_since.setdefault(f"pause:{endpoint}", self.clock.time())
            if self.clock.time() - since < self.node_timeout:
                self._say_once(
                    "pause",
                    logging.WARNING,
                    "Auto-scavenge could not stop the node scavenge %s on %s yet (%s); retrying",
                    scavenge_id,
                    endpoint,
                    exc,
                )
                return
            note = f" (the node has not answered for {self.node_timeout:.0f} s: treated as stopped)"
        async with self.lock:
            if self.loaded and self.state.status is InternalStatus.PAUSING:
                if finished is not None and scavenge_id is not None:
                    await self._completed(endpoint, scavenge_id, finished)
                    note = f" (it had already finished: {finished}; the next node is picked on resume)"
                await self._emit(ev.PAUSED, {"pausedAt": to_iso(self.clock.time())})
                self.logger.info(
                    "Auto-scavenge paused: the node scavenge %s on %s has stopped%s",
                    scavenge_id,
                    endpoint,
                    note,
                )

    # -- assessment --------------------------------------------------------------------------------
    async def assess(self) -> None:
        """One look at the schedule and the cycle; repeated while it makes progress."""
        for _ in range(16):
            before = self._emitted
            await self._step()
            if self._emitted == before or not self.cluster.is_leader:
                return

    async def _step(self) -> None:
        status = self.state.status
        if status is InternalStatus.PAUSING:
            self._start_pause_task()
        elif status is InternalStatus.WAITING:
            await self._check_schedule()
        elif status is InternalStatus.CONTINUING:
            await self._pick_next_node()
        elif status is InternalStatus.STARTING:
            await self._start_node_scavenge()
        elif status is InternalStatus.MONITORING:
            await self._check_node_scavenge()

    def _view(self) -> dict[str, Member]:
        return {m.endpoint: m for m in self.cluster.members()}

    def _healthy_members(self) -> tuple[list[str] | None, int]:
        """(the endpoints of the alive members, replicas included, or None when fewer than
        ``cluster_size`` voting members are alive; how many voting members are alive)."""
        members = self.cluster.members()
        voting = [m for m in members if m.alive and not m.read_only]
        if len(voting) < self.cluster.cluster_size:
            return None, len(voting)
        return sorted(m.endpoint for m in members if m.alive), len(voting)

    async def _check_schedule(self) -> None:
        due = self.state.next_due
        now = self.clock.time()
        if due is None or now < due:
            return
        chosen, alive = self._healthy_members()
        if chosen is None:
            self._say_once(
                "due",
                logging.INFO,
                "Auto-scavenge is due; waiting for a healthy cluster (%d of %d cluster members alive)",
                alive,
                self.cluster.cluster_size,
            )
            return
        await self._start_cycle(chosen, f"due at {to_iso(due)}")

    async def _start_cycle(self, chosen: list[str], why: str) -> str:
        cycle_id = str(uuid.uuid4())
        await self._emit(
            ev.CLUSTER_SCAVENGE_STARTED,
            {
                "clusterScavengeId": cycle_id,
                "members": [node_id(e) for e in chosen],
                "startedAt": to_iso(self.clock.time()),
            },
        )
        self.last_problem = None
        self.logger.info(
            "Cluster scavenge %s started (%s): %d nodes, scavenged one at a time, the leader last: %s",
            cycle_id,
            why,
            len(chosen),
            ", ".join(chosen),
        )
        return cycle_id

    async def _pick_next_node(self) -> None:
        s = self.state
        remaining = s.remaining
        if not remaining:
            results = ", ".join(f"{e} {r}" for e, r in s.done.items())
            cycle_id = s.cycle_id
            await self._emit(
                ev.CLUSTER_SCAVENGE_COMPLETED,
                {
                    "clusterScavengeId": cycle_id,
                    "members": [node_id(e) for e in s.members],
                    "completedAt": to_iso(self.clock.time()),
                },
            )
            due = s.next_due
            self.logger.info(
                "Cluster scavenge %s completed: %s. Next cluster scavenge due at %s",
                cycle_id,
                results or "no nodes",
                to_iso(due) if due is not None and math.isfinite(due) else "never",
            )
            return
        me = self.cluster.self_endpoint
        view = self._view()
        others = [e for e in remaining if e != me]
        if others:
            ready = [e for e in others if e in view and view[e].alive and view[e].state in READY_STATES]
            pool = ready or others
            # the node farthest behind first (as KurrentDB), then by address for a stable order
            candidate = min(pool, key=lambda e: (view[e].writer if e in view else -1, e))
        else:
            candidate = me
        await self._emit(
            ev.NODE_DESIGNATED, {"nodeId": node_id(candidate), "designatedAt": to_iso(self.clock.time())}
        )
        self.logger.info(
            "Node %s is the next node to scavenge in cluster scavenge %s (%d of %d)",
            candidate,
            s.cycle_id,
            len(s.done) + 1,
            len(s.members),
        )

    async def _cancel(self, endpoint: str, reason: str) -> None:
        await self._emit(
            ev.NODE_SCAVENGE_COMPLETED,
            {
                "nodeId": node_id(endpoint),
                "completedAt": to_iso(self.clock.time()),
                "result": CANCELLED,
                "reason": reason,
            },
        )
        self.last_problem = f"Node scavenge on {endpoint} cancelled: {reason}"
        self.logger.warning(
            "Node scavenge on %s cancelled: %s; the cluster scavenge %s continues with the next node "
            "(AutoScavengeNodeTimeoutSec = %.0f)",
            endpoint,
            reason,
            self.state.cycle_id,
            self.node_timeout,
        )

    async def _start_node_scavenge(self) -> None:
        s = self.state
        endpoint = s.designated
        assert endpoint is not None
        me = self.cluster.self_endpoint
        if endpoint == me and self.cluster.cluster_size > 1:
            self.logger.info(
                "The leader %s is the last node to scavenge in cluster scavenge %s: resigning from "
                "leadership so that it is scavenged as a follower",
                me,
                s.cycle_id,
            )
            await self.cluster.resign()
            return
        waited = self.clock.time() - (s.designated_at or self.clock.time())
        member = self._view().get(endpoint)
        if endpoint != me and (member is None or not member.alive or member.state not in READY_STATES):
            what = "not alive" if member is None or not member.alive else f"in state {member.state}"
            if waited >= self.node_timeout:
                await self._cancel(endpoint, f"the node was {what} for {self.node_timeout:.0f} s")
                return
            self._say_once(
                f"wait:{endpoint}",
                logging.INFO,
                "Waiting for node %s to be a follower before scavenging it (it is %s); the node "
                "scavenge is cancelled after %.0f s",
                endpoint,
                what,
                self.node_timeout,
            )
            return
        try:
            scavenge_id = await self.scavenger.start(endpoint)
        except NodeUnreachable as exc:
            if waited >= self.node_timeout:
                await self._cancel(
                    endpoint, f"its scavenge could not be started for {self.node_timeout:.0f} s ({exc})"
                )
                return
            self._say_once(
                f"start:{endpoint}",
                logging.WARNING,
                "Could not start the node scavenge on %s (%s); retrying until %.0f s after it was designated",
                endpoint,
                exc,
                self.node_timeout,
            )
            return
        await self._emit(
            ev.NODE_SCAVENGE_STARTED,
            {"nodeId": node_id(endpoint), "scavengeId": scavenge_id, "startedAt": to_iso(self.clock.time())},
        )
        self.logger.info(
            "Node scavenge %s started on %s (cluster scavenge %s, %d of %d)",
            scavenge_id,
            endpoint,
            s.cycle_id,
            len(s.done) + 1,
            len(s.members),
        )

    async def _check_node_scavenge(self) -> None:
        s = self.state
        endpoint, scavenge_id = s.designated, s.scavenge_id
        assert endpoint is not None and scavenge_id is not None
        now = self.clock.time()
        try:
            last = await self.scavenger.last(endpoint)
        except NodeUnreachable as exc:
            since = self._unreachable_since.setdefault(scavenge_id, now)
            if now - since >= self.node_timeout:
                await self._cancel(
                    endpoint, f"the node has not answered for {self.node_timeout:.0f} s during its scavenge"
                )
                return
            self._say_once(
                f"lost:{scavenge_id}",
                logging.WARNING,
                "Node %s is not answering during its scavenge %s (%s); its scavenge is restarted when "
                "it returns, or cancelled after %.0f s",
                endpoint,
                scavenge_id,
                exc,
                self.node_timeout,
            )
            return
        self._unreachable_since.pop(scavenge_id, None)
        if last.scavenge_id == scavenge_id or (last.result == "InProgress" and last.scavenge_id):
            if last.scavenge_id != scavenge_id:
                self._say_once(
                    f"other:{endpoint}",
                    logging.WARNING,
                    "Node %s runs scavenge %s, not %s that auto-scavenge started; following it",
                    endpoint,
                    last.scavenge_id,
                    scavenge_id,
                )
            if last.result == "InProgress":
                return
            if last.result in FINAL_RESULTS:
                await self._completed(endpoint, scavenge_id, last.result)
                return
            result = last.result
        else:
            found = await asyncio.to_thread(self.scavenger.result_from_stream, scavenge_id)
            result = found or "no result"
            if result in FINAL_RESULTS:
                await self._completed(endpoint, scavenge_id, result)
                return
        # Interrupted, Unknown: the node restarted while its scavenge ran
        await self._emit(ev.NODE_DESIGNATED, {"nodeId": node_id(endpoint), "designatedAt": to_iso(now)})
        self.logger.warning(
            "Node scavenge %s on %s is not running any more (%s: the node restarted). Restarting it; "
            "it resumes where it stopped",
            scavenge_id,
            endpoint,
            result,
        )

    async def _completed(self, endpoint: str, scavenge_id: str, result: str) -> None:
        await self._emit(
            ev.NODE_SCAVENGE_COMPLETED,
            {
                "nodeId": node_id(endpoint),
                "completedAt": to_iso(self.clock.time()),
                "result": result,
                "reason": "",
            },
        )
        self.logger.log(
            logging.INFO if result == "Success" else logging.WARNING,
            "Node scavenge %s on %s completed with result %s (%d of %d nodes done)",
            scavenge_id,
            endpoint,
            result,
            len(self.state.done),
            len(self.state.members),
        )

    async def close(self) -> None:
        task, self._pause_task = self._pause_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
