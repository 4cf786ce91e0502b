"""The followers-first cluster scavenge (the spec: "scavenge followers first and then resign the leader
and scavenge it"), run by the dashboard one step at a time:

1. each follower, then each read-only replica: start a scavenge, wait until the node says it ended;
2. resign the leader; wait until another node leads and the old leader follows it;
3. scavenge the old leader the same way.

The first failure ends it, naming the node and what went wrong; the operator can stop it at any time.
Every call goes through the dashboard's ``send`` (confirmed as a whole beforehand, logged in the
activity); waits read the nodes' own answers (``GET /admin/scavenge/last``, ``GET /gossip``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx

from evdb.clock import Clock
from tui.calls import PlannedCall, ScavengeForm, resign_leader
from tui.client import NodeClient
from tui.state import NodeState, RoutineState, RoutineStep

__all__ = [
    "LEADER_WAIT_SECONDS",
    "FollowersFirst",
    "RoutineItem",
    "plan_followers_first",
    "why_not_followers_first",
]

#: seconds to wait for another node to lead after the resign
LEADER_WAIT_SECONDS = 60.0
#: seconds a node may fail to answer while its scavenge is awaited, before the routine gives up
NO_ANSWER_SECONDS = 60.0
_SCAVENGING_ROLES = ("Follower", "ReadOnlyReplica")


@dataclass(frozen=True)
class RoutineItem:
    """One step as its confirmation shows it: the exact request, and what the routine then waits for."""

    node_url: str
    node_label: str
    title: str
    call: PlannedCall | None
    wait: str

    def describe(self, user: str | None = None) -> str:
        """The request line (the headers, the same for every step, are named once by the caller)."""
        lines = [self.call.request_line()] if self.call is not None else []
        if self.wait:
            lines.append(f"then: {self.wait}")
        return "\n".join(lines)

    def request_line(self) -> str:
        return self.call.request_line() if self.call is not None else self.wait


def why_not_followers_first(nodes: list[NodeState]) -> str | None:
    """Why the routine cannot start now (None: it can): every node must answer, one of them lead, none
    be scavenging, and no cluster scavenge (auto-scavenge) be under way."""
    down = [n.label for n in nodes if not n.reachable]
    if down:
        return f"{', '.join(down)} not reachable: every node takes part"
    leaders = [n for n in nodes if n.role == "Leader"]
    if not leaders:
        return "no leader: the cluster is electing one"
    busy = [n.label for n in nodes if n.scavenge.current_id or n.scavenge.starting_id]
    if busy:
        return f"a scavenge is running on {', '.join(busy)}"
    for node in nodes:
        auto = node.auto_scavenge
        if auto is not None and auto.state in ("InProgress", "Pausing"):
            return f"a cluster scavenge (auto-scavenge) is {auto.state} (as {node.label} says)"
    if len(nodes) < 2:
        return "a single node: scavenge it with s"
    return None


def _ordered(nodes: list[NodeState]) -> tuple[list[NodeState], NodeState]:
    leader = next(n for n in nodes if n.role == "Leader")
    followers = [n for n in nodes if n.role == "Follower"]
    replicas = [n for n in nodes if n.role == "ReadOnlyReplica"]
    return [*followers, *replicas], leader


def plan_followers_first(nodes: list[NodeState], form: ScavengeForm) -> list[RoutineItem]:
    """The steps in order, each with its exact request (``form``: the scavenge parameters)."""
    others, leader = _ordered(nodes)
    items = []
    for node in [*others, leader]:
        call = form.call(node.url)
        wait = f"GET {node.url}/admin/scavenge/last until it says that scavenge ended (Success goes on)"
        if node is leader:
            items.append(
                RoutineItem(leader.url, leader.label, "Resign the leader", resign_leader(leader.url), "")
            )
            items.append(
                RoutineItem(
                    leader.url,
                    leader.label,
                    "Wait for a new leader",
                    None,
                    f"GET {leader.url}/gossip until another node leads and {leader.label} follows it "
                    f"(at most {LEADER_WAIT_SECONDS:.0f} s)",
                )
            )
        items.append(RoutineItem(node.url, node.label, f"Scavenge {node.label}", call, wait))
    return items


class FollowersFirst:
    """Runs the planned steps: ``send`` makes a call as the dashboard does (activity, notices) and
    returns the answer (None: no answer); ``client`` reads the nodes; ``label_of`` names a host:port."""

    def __init__(
        self,
        items: list[RoutineItem],
        *,
        send: Callable[[PlannedCall], Awaitable[httpx.Response | None]],
        client: NodeClient,
        clock: Clock,
        interval: float,
        on_change: Callable[[], None],
        label_of: Callable[[str], str],
        leader_wait: float = LEADER_WAIT_SECONDS,
        no_answer: float = NO_ANSWER_SECONDS,
    ) -> None:
        self.items = items
        self.send = send
        self.client = client
        self.clock = clock
        self.interval = interval
        self.on_change = on_change
        self.label_of = label_of
        self.leader_wait = leader_wait
        self.no_answer = no_answer
        self.state = RoutineState(
            [RoutineStep(item.title, item.node_label) for item in items], started_at=clock.time()
        )
        self.stop_reason: str | None = None
        #: the scavenge the routine waits for now: (node url, scavenge id)
        self.current_scavenge: tuple[str, str] | None = None

    def stop(self, reason: str = "stopped by the operator") -> None:
        self.stop_reason = reason

    async def run(self) -> RoutineState:
        try:
            for item, step in zip(self.items, self.state.steps, strict=True):
                if self.stop_reason:
                    break
                step.status = "running"
                self.on_change()
                problem = await self._run_step(item, step)
                if problem is not None:
                    step.status = "stopped" if self.stop_reason else "failed"
                    step.detail = problem
                    verb = "stopped" if self.stop_reason else "failed"
                    self._end(f"{verb} at step {self.state.steps.index(step) + 1} ({step.what}): {problem}")
                    return self.state
                step.status = "done"
                self.on_change()
            if self.stop_reason:
                self._end(f"stopped: {self.stop_reason}")
            else:
                self._end("completed")
        except Exception as exc:  # a bug must not leave the routine shown as running
            self._end(f"failed: {type(exc).__name__}: {exc}")
            raise
        return self.state

    def _end(self, outcome: str) -> None:
        for step in self.state.steps:
            if step.status in ("waiting", "running"):
                step.status = "stopped" if self.stop_reason else "not run"
        self.state.outcome = outcome
        self.state.ended_at = self.clock.time()
        self.current_scavenge = None
        self.on_change()

    async def _run_step(self, item: RoutineItem, step: RoutineStep) -> str | None:
        if item.call is None:
            return await self._wait_for_new_leader(item, step)
        response = await self.send(item.call)
        if response is None:
            return f"{item.node_label} did not answer {item.call.request_line()}"
        if response.status_code >= 300:
            return f"{item.node_label} answered {response.status_code}: {response.text.strip()[:200]}"
        if item.call.path != "/admin/scavenge":
            step.detail = f"{response.status_code} {response.reason_phrase}"
            return None
        scavenge_id = _json(response).get("scavengeId")
        if not scavenge_id:
            return f"{item.node_label} started a scavenge without naming it: {response.text[:200]}"
        step.detail = f"scavenge {scavenge_id} running"
        self.current_scavenge = (item.node_url, str(scavenge_id))
        self.on_change()
        result = await self._wait_for_scavenge(item, str(scavenge_id))
        self.current_scavenge = None
        if result is None:
            return self.stop_reason
        if result.startswith("!"):
            return result[1:]
        step.detail = f"scavenge {scavenge_id}: {result}"
        if result != "Success":
            return f"the scavenge {scavenge_id} on {item.node_label} ended {result}"
        return None

    async def _wait_for_scavenge(self, item: RoutineItem, scavenge_id: str) -> str | None:
        """The scavenge's result; None when the routine was stopped; "!why" when the node stopped
        answering for too long."""
        failing_since: float | None = None
        while not self.stop_reason:
            problem = ""
            try:
                response = await self.client.scavenge_last(item.node_url)
                body = _json(response)
                if response.status_code == 200 and body.get("scavengeId") == scavenge_id:
                    result = str(body.get("scavengeResult") or "")
                    if result and result != "InProgress":
                        return result
                elif response.status_code != 200:
                    problem = f"HTTP {response.status_code}: {response.text.strip()[:200]}"
            except httpx.HTTPError as exc:
                problem = str(exc) or type(exc).__name__
            now = self.clock.monotonic()
            if problem:
                failing_since = now if failing_since is None else failing_since
                if now - failing_since >= self.no_answer:
                    return f"!{item.node_label} did not say how its scavenge {scavenge_id} went for {self.no_answer:.0f} s: {problem}"
            else:
                failing_since = None
            await self.clock.sleep(self.interval)
        return None

    async def _wait_for_new_leader(self, item: RoutineItem, step: RoutineStep) -> str | None:
        deadline = self.clock.monotonic() + self.leader_wait
        seen = "no answer yet"
        own_address = item.node_url.split("://", 1)[-1]
        while not self.stop_reason:
            try:
                response = await self.client.gossip(item.node_url)
                members = _json(response).get("members") or []
                own = next((m for m in members if _endpoint(m) == own_address), members[0] if members else {})
                leaders = [
                    m for m in members if m.get("state") == "Leader" and m.get("isAlive") and m is not own
                ]
                seen = f"{item.node_label} is {own.get('state', '?')}" + (
                    f", {self.label_of(_endpoint(leaders[0]))} leads" if leaders else ", no other leader"
                )
                if leaders and own.get("state") == "Follower":
                    step.detail = f"{self.label_of(_endpoint(leaders[0]))} leads"
                    return None
            except (httpx.HTTPError, ValueError) as exc:
                seen = f"{item.node_label} did not answer: {exc or type(exc).__name__}"
            if self.clock.monotonic() >= deadline:
                return (
                    f"no new leader within {self.leader_wait:.0f} s after {item.node_label} resigned ({seen})"
                )
            step.detail = seen
            await self.clock.sleep(self.interval)
        return self.stop_reason


def _json(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _endpoint(member: dict[str, Any]) -> str:
    host = str(member.get("httpEndPointIp", ""))
    port = member.get("httpEndPointPort")
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
