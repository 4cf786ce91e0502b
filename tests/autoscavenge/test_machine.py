"""The auto-scavenge process on its own: a ManualClock, an in-memory event store, a scripted cluster
and scripted node scavenges. Every move of the state table in docs/operations/auto-scavenge.md."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

import pytest

from evdb.autoscavenge.machine import AutoScavengeMachine, Member, StateOutdated, StoredStreams
from evdb.autoscavenge.scavenger import LastScavenge, NodeUnreachable
from evdb.autoscavenge.schedule import parse_schedule
from evdb.autoscavenge.state import CONFIGURATION_STREAM, EVENTS_STREAM
from evdb.clock import ManualClock
from evdb.errors import WrongExpectedVersion
from evdb.streams import ANY

LEADER, F1, F2, R1 = "10.0.0.1:2113", "10.0.0.2:2113", "10.0.0.3:2113", "10.0.0.4:2113"
START = 1_700_000_000.0  # 2023-11-14 22:13:20 UTC


class MemoryStore:
    def __init__(self) -> None:
        self.streams: dict[str, list[tuple[str, dict]]] = {}
        self.current_term = 0

    def term(self) -> int:
        return self.current_term

    async def load(self):
        events = self.streams.get(EVENTS_STREAM, [])
        return StoredStreams(
            self.streams.get(CONFIGURATION_STREAM, [])[-1:], list(events), len(events) - 1, self.current_term
        )

    async def append(self, stream, event_type, data, expected_version):
        events = self.streams.setdefault(stream, [])
        if expected_version != ANY and expected_version != len(events) - 1:
            raise WrongExpectedVersion(stream, expected_version, len(events) - 1)
        events.append((event_type, data))
        return len(events) - 1

    def types(self) -> list[str]:
        return [t for t, _ in self.streams.get(EVENTS_STREAM, [])]


@dataclass
class FakeCluster:
    me: str = LEADER
    size: int = 3
    states: dict[str, str] = field(
        default_factory=lambda: {LEADER: "Leader", F1: "Follower", F2: "Follower", R1: "ReadOnlyReplica"}
    )
    dead: set[str] = field(default_factory=set)
    resigned: int = 0

    @property
    def is_leader(self) -> bool:
        return self.states.get(self.me) == "Leader"

    @property
    def self_endpoint(self) -> str:
        return self.me

    @property
    def cluster_size(self) -> int:
        return self.size

    def members(self):
        return [
            Member(e, s, e not in self.dead, s == "ReadOnlyReplica", writer=100)
            for e, s in self.states.items()
        ]

    async def resign(self) -> None:
        self.resigned += 1
        self.states[self.me] = "Follower"


class FakeScavenger:
    """Node scavenges that run until the test finishes them; a record of every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.running: dict[str, str] = {}  # endpoint -> scavenge id
        self.last_result: dict[str, LastScavenge] = {}
        self.unreachable: set[str] = set()
        self.stop_gate: asyncio.Event | None = None
        self.stream_results: dict[str, str] = {}
        self._n = 0

    def _check(self, endpoint: str) -> None:
        if endpoint in self.unreachable:
            raise NodeUnreachable(f"{endpoint} is down")

    async def start(self, endpoint: str) -> str:
        self._check(endpoint)
        assert not self.running, f"two node scavenges at once: {self.running} and {endpoint}"
        self._n += 1
        sid = f"s{self._n}"
        self.running[endpoint] = sid
        self.last_result[endpoint] = LastScavenge(sid, "InProgress")
        self.calls.append(("start", endpoint))
        return sid

    async def last(self, endpoint: str) -> LastScavenge:
        self._check(endpoint)
        return self.last_result.get(endpoint, LastScavenge("", "Unknown"))

    async def stop(self, endpoint: str, scavenge_id: str | None) -> None:
        self._check(endpoint)
        self.calls.append(("stop", endpoint))
        if self.stop_gate is not None:
            await self.stop_gate.wait()
        sid = self.running.pop(endpoint, None)
        if sid:
            self.last_result[endpoint] = LastScavenge(sid, "Stopped")

    def result_from_stream(self, scavenge_id: str) -> str | None:
        return self.stream_results.get(scavenge_id)

    async def close(self) -> None:
        pass

    def finish(self, endpoint: str, result: str = "Success") -> None:
        sid = self.running.pop(endpoint)
        self.last_result[endpoint] = LastScavenge(sid, result)

    def crash(self, endpoint: str) -> None:
        """The node restarts: its scavenge was interrupted."""
        sid = self.running.pop(endpoint)
        self.last_result[endpoint] = LastScavenge(sid, "Interrupted")


@pytest.fixture
def world():
    clock = ManualClock(START)
    store = MemoryStore()
    cluster = FakeCluster()
    scavenger = FakeScavenger()
    machine = AutoScavengeMachine(
        clock=clock,
        store=store,
        scavenger=scavenger,
        cluster=cluster,
        logger=logging.getLogger("test.autoscavenge"),
        node_timeout=60,
    )
    return clock, store, cluster, scavenger, machine


async def _loaded(machine):
    await machine.load()
    return machine


async def test_not_configured_until_a_schedule_is_set(world):
    clock, _store, _cluster, scavenger, machine = world
    await _loaded(machine)
    assert machine.status() == {"state": "NotConfigured", "schedule": None, "timeUntilNextCycle": None}
    await machine.assess()
    assert scavenger.calls == []
    await machine.configure(parse_schedule("0 6 * * 6"))
    # 2023-11-14 22:13:20 (a Tuesday) -> Saturday 2023-11-18 06:00:00
    assert machine.status() == {
        "state": "Waiting",
        "schedule": "0 6 * * 6",
        "timeUntilNextCycle": "3.07:46:40",
    }
    clock.advance(0.5)
    assert machine.status()["timeUntilNextCycle"] == "3.07:46:39.5000000"


async def test_a_full_cycle_followers_one_at_a_time_then_resign_then_the_old_leader(world, caplog):
    clock, store, cluster, scavenger, machine = world
    caplog.set_level(logging.INFO, "test.autoscavenge")
    await _loaded(machine)
    await machine.configure(parse_schedule("*/5 * * * *"))
    await machine.assess()
    assert machine.status()["state"] == "Waiting"
    clock.advance(300)
    await machine.assess()
    assert machine.status() == {
        "state": "InProgress",
        "schedule": "0,5,10,15,20,25,30,35,40,45,50,55 * * * *",  # KurrentDB's (NCrontab's) form
        "timeUntilNextCycle": "00:00:00",
    }
    order = []
    for _ in range(3):
        assert len(scavenger.running) == 1
        (endpoint,) = scavenger.running
        assert endpoint != LEADER
        order.append(endpoint)
        await machine.assess()  # still in progress: nothing new starts
        assert list(scavenger.running) == [endpoint]
        scavenger.finish(endpoint)
        await machine.assess()
    assert sorted(order) == sorted([F1, F2, R1])
    # every non-leader is done: the leader resigned instead of scavenging itself
    assert cluster.resigned == 1 and not scavenger.running
    assert "resigning from leadership" in caplog.text
    # the next leader (F1) reads the streams and scavenges the old leader, now a follower
    cluster.states.update({LEADER: "Follower", F1: "Leader"})
    cluster.me = F1
    successor = AutoScavengeMachine(
        clock=clock, store=store, scavenger=scavenger, cluster=cluster, logger=machine.logger, node_timeout=60
    )
    await successor.load()
    assert successor.status()["state"] == "InProgress"
    await successor.assess()
    assert list(scavenger.running) == [LEADER]
    scavenger.finish(LEADER)
    await successor.assess()
    assert successor.status()["state"] == "Waiting"
    assert [e for kind, e in scavenger.calls if kind == "start"] == [*order, LEADER]
    assert (
        store.types()[0] == "$cluster-scavenge-started" and store.types()[-1] == "$cluster-scavenge-completed"
    )
    assert store.types().count("$node-scavenge-completed") == 4
    assert "Cluster scavenge" in caplog.text and "completed" in caplog.text


async def test_a_single_node_cluster_scavenges_its_leader_without_resigning(world):
    clock, _store, cluster, scavenger, machine = world
    cluster.states = {LEADER: "Leader"}
    cluster.size = 1
    await _loaded(machine)
    await machine.configure(parse_schedule("* * * * *"))
    clock.advance(60)
    await machine.assess()
    assert list(scavenger.running) == [LEADER] and cluster.resigned == 0
    scavenger.finish(LEADER)
    await machine.assess()
    assert machine.status()["state"] == "Waiting"


async def test_pause_while_a_node_scavenge_runs_is_202_then_paused_and_resume_restarts_it(world):
    clock, store, _cluster, scavenger, machine = world
    await _loaded(machine)
    await machine.configure(parse_schedule("* * * * *"))
    clock.advance(60)
    await machine.assess()
    (endpoint,) = scavenger.running
    scavenger.stop_gate = asyncio.Event()
    async with machine.lock:
        assert await machine.pause() == 202
    assert machine.status()["state"] == "Pausing"
    assert await machine.pause() == 202  # still pausing
    assert await machine.resume() == "Auto scavenge process is currently pausing"
    await machine.assess()  # no further node scavenge while pausing
    assert [k for k, _ in scavenger.calls].count("start") == 1
    scavenger.stop_gate.set()
    for _ in range(50):
        if machine.status()["state"] == "Paused":
            break
        await asyncio.sleep(0.01)
    assert machine.status() == {"state": "Paused", "schedule": "* * * * *", "timeUntilNextCycle": "00:00:00"}
    assert await machine.pause() == 200  # already paused
    await machine.assess()
    assert not scavenger.running
    assert await machine.resume() is None
    assert machine.status()["state"] == "InProgress"
    await machine.assess()
    # the same node is started again (its scavenge resumes where it stopped), then the cycle goes on
    assert list(scavenger.running) == [endpoint]
    assert store.types()[-4:] == ["$pause-requested", "$paused", "$resumed", "$node-scavenge-started"]


async def test_pause_when_no_node_scavenge_runs_is_200_and_resume_goes_back(world):
    clock, _store, _cluster, scavenger, machine = world
    await _loaded(machine)
    assert await machine.pause() == 200  # NotConfigured accepts a pause
    assert machine.status()["state"] == "Paused"
    await machine.configure(parse_schedule("0 * * * *"))
    assert machine.status()["state"] == "Paused"
    clock.advance(7200)  # a due time passes while paused: nothing starts
    await machine.assess()
    assert scavenger.calls == []
    # while paused and idle, the time shown is until the next due time if resumed now
    assert machine.status()["timeUntilNextCycle"] == "00:46:40"
    assert await machine.resume() is None
    assert machine.status() == {"state": "Waiting", "schedule": "0 * * * *", "timeUntilNextCycle": "00:46:40"}
    assert await machine.resume() is None  # not paused: nothing to do, 200
    assert await machine.pause() == 200 and machine.status()["state"] == "Paused"


async def test_a_node_that_restarts_during_its_scavenge_is_restarted(world, caplog):
    clock, _store, _cluster, scavenger, machine = world
    caplog.set_level(logging.INFO, "test.autoscavenge")
    await _loaded(machine)
    await machine.configure(parse_schedule("* * * * *"))
    clock.advance(60)
    await machine.assess()
    (endpoint,) = scavenger.running
    scavenger.unreachable.add(endpoint)
    await machine.assess()
    assert "is not answering during its scavenge" in caplog.text
    assert machine.status()["state"] == "InProgress"
    scavenger.unreachable.discard(endpoint)
    scavenger.crash(endpoint)
    clock.advance(10)
    await machine.assess()
    assert "Restarting it" in caplog.text
    assert list(scavenger.running) == [endpoint]
    assert [e for k, e in scavenger.calls if k == "start"] == [endpoint, endpoint]


async def test_a_node_lost_for_longer_than_the_timeout_is_cancelled_and_the_cycle_goes_on(world, caplog):
    clock, _store, cluster, scavenger, machine = world
    caplog.set_level(logging.INFO, "test.autoscavenge")
    await _loaded(machine)
    await machine.configure(parse_schedule("* * * * *"))
    clock.advance(60)
    await machine.assess()
    (endpoint,) = scavenger.running
    scavenger.unreachable.add(endpoint)
    cluster.dead.add(endpoint)
    await machine.assess()
    scavenger.running.clear()  # the lost node's scavenge is gone with it
    clock.advance(61)
    await machine.assess()
    assert "cancelled" in caplog.text and "AutoScavengeNodeTimeoutSec" in caplog.text
    assert machine.progress()["done"][endpoint] == "Cancelled"
    assert "cancelled" in machine.progress()["lastProblem"]
    # the cycle went on at once with the next node
    (nxt,) = scavenger.running
    assert nxt not in (endpoint, LEADER)


async def test_a_designated_node_that_never_becomes_ready_is_cancelled(world):
    clock, store, cluster, scavenger, machine = world
    await _loaded(machine)
    await machine.configure(parse_schedule("* * * * *"))
    clock.advance(60)
    await machine.assess()
    for _ in range(2):
        (endpoint,) = scavenger.running
        scavenger.finish(endpoint)
        await machine.assess()
    (last_other,) = scavenger.running
    scavenger.finish(last_other)
    await machine.assess()
    assert cluster.resigned == 1
    # the successor finds the old leader gone for good
    cluster.states.update({LEADER: "Unknown", F1: "Leader"})
    cluster.dead.add(LEADER)
    cluster.me = F1
    successor = AutoScavengeMachine(
        clock=clock, store=store, scavenger=scavenger, cluster=cluster, logger=machine.logger, node_timeout=60
    )
    await successor.load()
    await successor.assess()
    assert successor.status()["state"] == "InProgress"
    clock.advance(61)
    await successor.assess()
    assert successor.status()["state"] == "Waiting"
    assert successor.state.last_completed_at is not None


async def test_a_cycle_waits_for_a_healthy_cluster(world, caplog):
    clock, _store, cluster, scavenger, machine = world
    caplog.set_level(logging.INFO, "test.autoscavenge")
    cluster.dead.add(F2)
    await _loaded(machine)
    await machine.configure(parse_schedule("* * * * *"))
    clock.advance(60)
    await machine.assess()
    assert scavenger.calls == [] and machine.status()["state"] == "Waiting"
    assert "waiting for a healthy cluster (2 of 3 cluster members alive)" in caplog.text
    cluster.dead.clear()
    await machine.assess()
    assert len(scavenger.running) == 1


async def test_a_node_scavenge_that_ended_while_the_node_restarted_is_read_from_its_stream(world):
    clock, _store, _cluster, scavenger, machine = world
    await _loaded(machine)
    await machine.configure(parse_schedule("* * * * *"))
    clock.advance(60)
    await machine.assess()
    (endpoint,) = scavenger.running
    sid = scavenger.running.pop(endpoint)
    scavenger.last_result[endpoint] = LastScavenge("", "Unknown")  # restarted, no scavenge since
    scavenger.stream_results[sid] = "Success"
    await machine.assess()
    assert machine.progress()["done"] == {endpoint: "Success"}


async def test_configure_during_a_cycle_does_not_change_it(world):
    clock, _store, _cluster, _scavenger, machine = world
    await _loaded(machine)
    await machine.configure(parse_schedule("* * * * *"))
    clock.advance(60)
    await machine.assess()
    members = list(machine.state.members)
    await machine.configure(parse_schedule("0 0 1 1 *"))
    assert machine.status()["state"] == "InProgress" and machine.state.members == members
    assert machine.status()["schedule"] == "0 0 1 1 *"


async def test_a_stale_leader_cannot_write_over_a_newer_one(world):
    clock, store, cluster, scavenger, machine = world
    await _loaded(machine)
    other = AutoScavengeMachine(
        clock=clock, store=store, scavenger=scavenger, cluster=cluster, logger=machine.logger, node_timeout=60
    )
    await other.load()
    assert await other.pause() == 200
    with pytest.raises(StateOutdated, match="moved on without this leader's state") as raised:
        await machine.pause()
    assert isinstance(raised.value.__cause__, WrongExpectedVersion)
    assert store.types() == ["$paused"]  # nothing written over it
    # the stale state is dropped: the streams are read again, with the other leader's pause in them
    assert not machine.loaded
    await machine.ensure_loaded()
    assert machine.status()["state"] == "Paused" and machine.version == 0
