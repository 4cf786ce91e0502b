"""The persistent subscriptions' follower of ``$all`` costs nothing per commit while no group exists,
and a group added while it is idle (created, updated, loaded on a new leader) still gets every event:
many seeded interleavings of a create (or a start) with appends, the consumer's events checked one by one.
In-process: a real in-memory database, the clock moved by the test (never, here: no message times out).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import threading
from collections.abc import AsyncIterator
from typing import Any

import pytest
from waiting import until

from evdb.clock import ManualClock
from evdb.database import Database
from evdb.errors import StreamNotFound
from evdb.persistent import ALL, DatabaseStore, EventSource, GroupSettings
from evdb.persistent.checkpoints import ReadResult
from evdb.persistent.model import LIVE, ResolvedEvent, default_all_allows
from evdb.persistent.service import PersistentSubscriptionService
from evdb.streams import NewEvent
from evdb.subscriptions import CommitNotifier

SEEDS = range(24)


class Sink:
    def __init__(self) -> None:
        self.items: list[ResolvedEvent] = []
        self.was_dropped = False

    def deliver(self, resolved: ResolvedEvent, retry_count: int) -> None:
        assert retry_count == 0, "no message may time out here: the clock does not move"
        self.items.append(resolved)

    def dropped(self) -> None:
        self.was_dropped = True

    def keys(self) -> list[tuple[str, int]]:
        return [(r.original.stream, r.original.event_number) for r in self.items]


class CountingStore(DatabaseStore):
    """The node's store, counting the reads of ``$all`` (only the follower reads ``$all`` here: the
    groups of these tests read their stream, or ``$all`` only where said)."""

    def __init__(self, db: Database, clock: ManualClock) -> None:
        super().__init__(lambda: db, clock.ticks)
        self.all_reads = 0

    def read_all(self, *args: Any) -> ReadResult:  # DatabaseStore.read_all's arguments
        self.all_reads += 1
        self.before_read_all()
        return super().read_all(*args)

    def before_read_all(self) -> None:
        """A subclass's hold on the follower's reads."""


class Harness:
    def __init__(
        self, db: Database, clock: ManualClock, *, leader: bool = True, store: CountingStore | None = None
    ) -> None:
        self.db = db
        self.leader = leader
        self.notifier = CommitNotifier(db)
        self.store = store if store is not None else CountingStore(db, clock)
        self.waits = 0
        self.service = PersistentSubscriptionService(
            store=self.store,
            clock=clock,
            is_leader=lambda: self.leader,
            follow_commits=self._follow,
            logger=logging.getLogger("test.persistent.pump"),
        )

    async def _follow(self, position: int) -> None:
        self.waits += 1
        await self.notifier.wait_beyond(position)

    def append(self, stream: str, count: int = 1) -> None:
        for _ in range(count):
            self.db.append(stream, [NewEvent("E", json.dumps({}).encode(), b"", is_json=True)])

    def stream_keys(self, stream: str) -> list[tuple[str, int]]:
        try:
            page = self.db.read_stream_forward(stream, 0, 100_000)
        except StreamNotFound:
            return []
        return [(r.stream, r.event_number) for r in page.events]

    def all_keys(self) -> list[tuple[str, int]]:
        page = self.db.read_all_forward(0, 100_000)
        return [(r.stream, r.event_number) for r in page.events if default_all_allows(r.stream)]

    async def close(self) -> None:
        await self.service.close()
        self.notifier.close()


async def settle(h: Harness) -> None:
    """Let everything the last appends woke run: the loop turns a few times and worker threads end."""
    for _ in range(5):
        await asyncio.sleep(0.005)


@contextlib.asynccontextmanager
async def started(clock: ManualClock, *, leader: bool = True) -> AsyncIterator[Harness]:
    """An in-memory database and a running service on it (started, when ``leader``), closed after."""
    db = Database.open(None, clock=clock)
    h = Harness(db, clock, leader=leader)
    try:
        h.service.run()
        if leader:
            await until(lambda: h.service.started, "the service to start")
        yield h
    finally:
        await h.close()
        db.close()


def settings(**overrides: Any) -> GroupSettings:
    values: dict[str, Any] = {"read_batch_size": 20, "history_buffer_size": 500}
    values.update(overrides)
    return GroupSettings(**values)


async def connect(h: Harness, stream: str, group: str) -> Sink:
    sink = Sink()
    await h.service.connect(
        stream, group, sink, buffer_size=100_000, connection_name="c", user="admin", from_="test"
    )
    return sink


async def test_no_group_no_read_and_no_wait_per_commit(clock: ManualClock) -> None:
    async with started(clock) as h:
        await settle(h)
        waits = h.waits
        for _ in range(30):
            h.append("orders")
            await asyncio.sleep(0)
        await settle(h)
        assert h.store.all_reads == 0
        assert h.waits == waits  # not even waiting on the commits
        await h.service.create(EventSource.of("orders"), "g", settings(), "admin")
        sink = await connect(h, "orders", "g")
        h.append("orders", 5)
        await until(lambda: len(sink.items) == 35, "history and live events")
        assert sink.keys() == h.stream_keys("orders")
        assert h.store.all_reads > 0 and not sink.was_dropped
        # the last group gone: the follower reads nothing more, and waits on no commit after the next
        await h.service.delete("orders", "g", "admin")
        await settle(h)
        h.append("orders")
        await settle(h)
        reads, waits = h.store.all_reads, h.waits
        for _ in range(20):
            h.append("orders")
            await asyncio.sleep(0)
        await settle(h)
        assert (h.store.all_reads, h.waits) == (reads, waits)


async def test_one_read_for_many_commits(clock: ManualClock) -> None:
    async with started(clock) as h:
        await h.service.create(EventSource.of("orders"), "g", settings(), "admin")
        sink = await connect(h, "orders", "g")
        h.append("orders")
        await until(lambda: len(sink.items) == 1, "the first event")
        await settle(h)
        reads = h.store.all_reads
        h.append("orders", 40)  # 40 commits while the loop is busy here
        await until(lambda: len(sink.items) == 41, "the live events")
        assert h.store.all_reads == reads + 1
        assert sink.keys() == h.stream_keys("orders") and not sink.was_dropped


async def test_links_are_resolved_off_the_loop_only_when_there_are_links(clock: ManualClock) -> None:
    async with started(clock) as h:
        h.append("orders", 2)
        await h.service.create(EventSource.of("copies"), "g", settings(resolve_links=True), "admin")
        sink = await connect(h, "copies", "g")
        h.db.append("copies", [NewEvent("$>", b"1@orders", b"", is_json=False)])
        h.db.append("copies", [NewEvent("E", b"{}", b"", is_json=True)])
        await until(lambda: len(sink.items) == 2, "the live events")
        first, second = sink.items
        assert first.event is not None and first.link is not None
        assert (first.event.stream, first.event.event_number) == ("orders", 1)
        assert second.link is None and second.original.event_type == "E"


async def _interleave(h: Harness, rng: random.Random, task: asyncio.Task, streams: list[str]) -> None:
    """Appends and loop turns in a seeded order until ``task`` is done, then a few more appends."""
    while not task.done():
        action = rng.random()
        if action < 0.45:
            h.append(rng.choice(streams), rng.randint(1, 3))
        elif action < 0.85:
            for _ in range(rng.randint(1, 6)):
                await asyncio.sleep(0)
        else:
            await asyncio.sleep(rng.choice((0.0005, 0.001, 0.002)))  # let a worker thread finish
    await task
    for _ in range(rng.randint(1, 5)):
        h.append(rng.choice(streams), rng.randint(1, 3))
        await asyncio.sleep(0)


@pytest.mark.parametrize("seed", SEEDS)
async def test_group_created_while_idle_gets_every_event(clock: ManualClock, seed: int) -> None:
    rng = random.Random(seed)
    async with started(clock) as h:
        h.append("orders", rng.randint(0, 5))
        if rng.random() < 0.5:  # a group made and deleted first: the follower was active, then idle
            await h.service.create(EventSource.of("other"), "old", settings(), "admin")
            h.append("other", rng.randint(0, 3))
            await h.service.delete("other", "old", "admin")
        for _ in range(rng.randint(0, 4)):
            await asyncio.sleep(0)
        kind = rng.choice(("stream", "all", "end"))
        source = EventSource.of(ALL if kind == "all" else "orders")
        start = LIVE if kind == "end" else 0
        task = asyncio.ensure_future(h.service.create(source, "g", settings(start_from=start), "admin"))
        await _interleave(h, rng, task, ["orders", "other"])
        appended_after = len(h.stream_keys("orders"))
        sink = await connect(h, source.stream, "g")
        h.append("orders", 2)
        h.append("other", 1)
        if kind == "end":
            everything = h.stream_keys("orders")
            await until(lambda: sink.keys()[-2:] == everything[-2:], "the live events")
            await settle(h)
            got = sink.keys()
            # a contiguous run of the stream, in order, ending at its end, holding every event appended
            # after the group was made
            assert got == everything[len(everything) - len(got) :], got
            assert len(got) >= len(everything) - appended_after
        else:
            expected = h.all_keys() if kind == "all" else h.stream_keys("orders")
            await until(lambda: len(sink.items) >= len(expected), f"every event ({kind})")
            await settle(h)
            assert sink.keys() == expected
        assert not sink.was_dropped


@pytest.mark.parametrize("seed", SEEDS)
async def test_groups_loaded_on_a_new_leader_get_every_event(clock: ManualClock, seed: int) -> None:
    rng = random.Random(seed)
    db = Database.open(None, clock=clock)
    first = Harness(db, clock)
    first.service.run()
    await until(lambda: first.service.started, "the first leader's service")
    first.append("orders", rng.randint(0, 5))
    await first.service.create(EventSource.of("orders"), "g", settings(), "admin")
    await first.service.create(EventSource.of(ALL), "a", settings(), "admin")
    await first.close()
    h = Harness(db, clock, leader=False)
    try:
        h.service.run()
        h.append("orders", rng.randint(0, 5))
        h.leader = True
        task = asyncio.ensure_future(h.service.leadership_changed())
        await _interleave(h, rng, task, ["orders", "other"])
        await until(lambda: h.service.started, "the new leader's service")
        stream_sink = await connect(h, "orders", "g")
        all_sink = await connect(h, ALL, "a")
        h.append("orders", 2)
        expected_stream, expected_all = h.stream_keys("orders"), h.all_keys()
        await until(lambda: len(stream_sink.items) >= len(expected_stream), "the stream group's events")
        await until(lambda: len(all_sink.items) >= len(expected_all), "the $all group's events")
        await settle(h)
        assert stream_sink.keys() == expected_stream
        assert all_sink.keys() == expected_all
        assert not stream_sink.was_dropped and not all_sink.was_dropped
    finally:
        await h.close()
        db.close()


class Gate:
    """Holds a blocking store call (in its worker thread) while armed, until released."""

    def __init__(self) -> None:
        self.armed = False
        self.entered = threading.Event()
        self._open = threading.Event()

    def pass_through(self) -> None:
        if self.armed:
            self.entered.set()
            assert self._open.wait(10), "the gate was never opened"

    def release(self) -> None:
        self.armed = False
        self._open.set()


class GatedStore(CountingStore):
    def __init__(self, db: Database, clock: ManualClock) -> None:
        super().__init__(db, clock)
        self.history = Gate()
        self.follower = Gate()

    def read_stream(self, stream: str, start: int, count: int, resolve_links: bool) -> ReadResult:
        self.history.pass_through()
        return super().read_stream(stream, start, count, resolve_links)

    def before_read_all(self) -> None:
        self.follower.pass_through()


async def test_a_history_page_past_the_live_queue_loses_nothing(clock: ManualClock) -> None:
    """The follower of $all is behind the group's history read: the page crosses the live queue's head
    and goes on past its tail; the events after the tail come from the follower later, and are kept."""
    db = Database.open(None, clock=clock)
    store = GatedStore(db, clock)
    h = Harness(db, clock, store=store)
    h.service.run()
    try:
        await until(lambda: h.service.started, "the service to start")
        h.append("s", 3)  # 0, 1, 2
        store.history.armed = True
        await h.service.create(EventSource.of("s"), "g", settings(), "admin")
        sink = await connect(h, "s", "g")
        await until(store.history.entered.is_set, "the history read to start")
        waits = h.waits
        h.append("s", 2)  # 3, 4: to the live queue
        await until(lambda: h.waits > waits, "the follower to hand over 3 and 4")
        store.follower.armed = True
        h.append("s", 2)  # 5, 6: the follower is held before handing them over
        await until(store.follower.entered.is_set, "the follower to read 5 and 6")
        store.history.release()  # the history page: 0..6
        await until(lambda: len(sink.items) == 5, "0..4")
        store.follower.release()
        await until(lambda: len(sink.items) == 7, "5 and 6 from the follower")
        await settle(h)
        assert sink.keys() == [("s", n) for n in range(7)]
    finally:
        store.history.release()
        store.follower.release()
        await h.close()
        db.close()
