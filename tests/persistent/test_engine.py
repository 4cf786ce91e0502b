"""The persistent subscriptions engine in-process: a real (in-memory) database, the clock moved by the
test. Message timeouts, retries, parking, checkpoints, restarts and the consumer strategies."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest
from waiting import until

from evdb.clock import ManualClock
from evdb.database import Database
from evdb.errors import (
    MaximumSubscribersReached,
    PersistentSubscriptionExists,
    PersistentSubscriptionFailed,
    PersistentSubscriptionNotFound,
    PersistentSubscriptionsNotReady,
)
from evdb.persistent import ALL, DatabaseStore, EventFilterSpec, EventSource, GroupSettings
from evdb.persistent.engine import REPLAYING_PARKED
from evdb.persistent.model import CONFIG_EVENT_TYPE, CONFIG_STREAM, LIVE, ResolvedEvent
from evdb.persistent.service import PersistentSubscriptionService
from evdb.streams import NewEvent
from evdb.subscriptions import CommitNotifier


class Sink:
    def __init__(self) -> None:
        self.items: list[tuple[ResolvedEvent, int]] = []
        self.dropped_count = 0

    def deliver(self, resolved: ResolvedEvent, retry_count: int) -> None:
        self.items.append((resolved, retry_count))

    def dropped(self) -> None:
        self.dropped_count += 1

    def numbers(self) -> list[int]:
        return [r.original.event_number for r, _ in self.items]


class Harness:
    def __init__(self, db: Database, clock: ManualClock) -> None:
        self.db = db
        self.clock = clock
        self.leader = True
        self.notifier = CommitNotifier(db)
        self.service = self.new_service()

    def new_service(self) -> PersistentSubscriptionService:
        return PersistentSubscriptionService(
            store=DatabaseStore(lambda: self.db, self.clock.ticks),
            clock=self.clock,
            is_leader=lambda: self.leader,
            follow_commits=self.notifier.wait_beyond,
            logger=logging.getLogger("test.persistent"),
        )

    def append(self, stream: str, count: int, **metadata: Any) -> None:
        for n in range(count):
            meta = json.dumps(metadata).encode() if metadata else b""
            self.db.append(stream, [NewEvent("E", json.dumps({"n": n}).encode(), meta, is_json=True)])

    async def tick(self) -> None:
        """One clock tick of the service (it sleeps one second between ticks)."""
        sleepers = self.clock.sleepers
        self.clock.advance(1.0)
        await until(lambda: self.clock.sleepers >= sleepers, "the next tick to be waiting")
        await asyncio.sleep(0.01)


@pytest.fixture
async def h(clock: ManualClock):
    db = Database.open(None, clock=clock)
    harness = Harness(db, clock)
    harness.service.run()
    await until(lambda: harness.service.started, "the service to start")
    yield harness
    await harness.service.close()
    harness.notifier.close()
    db.close()


def settings(**overrides: Any) -> GroupSettings:
    values: dict[str, Any] = {"read_batch_size": 20, "history_buffer_size": 500}
    values.update(overrides)
    return GroupSettings(**values)


async def test_history_then_live_in_order_and_acks_checkpoint(h: Harness) -> None:
    h.append("orders", 5)
    await h.service.create(EventSource.of("orders"), "g", settings(min_checkpoint_count=1), "admin")
    sink = Sink()
    conn = await h.service.connect(
        "orders", "g", sink, buffer_size=10, connection_name="c", user="admin", from_="x"
    )
    assert conn.key == "orders::g" and conn.last_event_number == 4
    await until(lambda: len(sink.items) == 5, "the history")
    h.append("orders", 2)
    await until(lambda: len(sink.items) == 7, "the live events")
    assert sink.numbers() == list(range(7))
    h.service.ack(conn.key, [r.event_id for r, _ in sink.items])
    await h.tick()
    await h.tick()
    info = h.service.info("orders", "g")
    assert info["status"] == "Live"
    assert info["lastKnownEventPosition"] == "6"
    await until(
        lambda: h.service.info("orders", "g")["lastCheckpointedEventPosition"] == "6", "the checkpoint"
    )
    page = h.db.read_stream_backward("$persistentsubscription-orders::g-checkpoint", None, 1)
    assert page.events[0].event_type == "$SubscriptionCheckpoint"
    assert json.loads(page.events[0].data) == "6"


async def test_timeout_retries_then_parks_and_replay_delivers_again(h: Harness) -> None:
    h.append("s", 1)
    await h.service.create(
        EventSource.of("s"), "g", settings(message_timeout_ms=1500, max_retry_count=1), None
    )
    sink = Sink()
    conn = await h.service.connect("s", "g", sink, buffer_size=10, connection_name="c", user="u", from_="x")
    await until(lambda: len(sink.items) == 1, "the first delivery")
    await h.tick()  # 1 s: not yet
    assert len(sink.items) == 1
    await h.tick()  # 2 s: timed out, retried once
    await until(lambda: len(sink.items) == 2, "the retry")
    assert sink.items[1][1] == 1
    await h.tick()
    await h.tick()  # timed out again, past max_retry_count: parked
    await until(lambda: h.service.info("s", "g")["parkedMessageCount"] == 1, "the message to be parked")
    parked = h.db.read_stream_forward("$persistentsubscription-s::g-parked", 0, 10).events
    assert parked[0].event_type == "$>" and parked[0].data == b"0@s"
    assert json.loads(parked[0].metadata)["reason"] == "Reached retry count of 1"
    assert h.service.info("s", "g")["parkedDueToMaxRetries"] == 1
    h.service.replay_parked("s", "g", None, "admin")
    await until(lambda: len(sink.items) == 3, "the replayed message")
    replayed, retries = sink.items[2]
    assert replayed.event is not None and replayed.event.event_number == 0 and replayed.link is not None
    assert retries == 0
    h.service.ack(conn.key, [replayed.event_id])
    await until(lambda: h.service.info("s", "g")["parkedMessageCount"] == 0, "the parked stream to be cut")
    assert h.db.stream_state("$persistentsubscription-s::g-parked").metadata.truncate_before == 1


async def test_nack_actions(h: Harness) -> None:
    h.append("s", 3)
    await h.service.create(EventSource.of("s"), "g", settings(), None)
    sink = Sink()
    conn = await h.service.connect("s", "g", sink, buffer_size=10, connection_name="c", user="u", from_="x")
    await until(lambda: len(sink.items) == 3, "the events")
    ids = [r.event_id for r, _ in sink.items]
    h.service.nack(conn.key, [ids[0]], "Retry", "again")
    await until(lambda: len(sink.items) == 4, "the retried event")
    assert sink.items[3][0].event_id == ids[0] and sink.items[3][1] == 1
    h.service.nack(conn.key, [ids[1]], "Park", "bad")
    h.service.nack(conn.key, [ids[2]], "Skip", "")
    await until(lambda: h.service.info("s", "g")["parkedMessageCount"] == 1, "the parked event")
    info = h.service.info("s", "g")
    assert info["parkedDueToClientNak"] == 1
    assert info["outstandingMessagesCount"] == 1  # the retried one
    with pytest.raises(ValueError):
        h.service.nack(conn.key, [ids[0]], "Explode", "")


async def test_checkpoint_survives_a_restart_of_the_service(h: Harness) -> None:
    h.append("s", 4)
    await h.service.create(
        EventSource.of("s"), "g", settings(min_checkpoint_count=1, checkpoint_after_ms=500), None
    )
    sink = Sink()
    conn = await h.service.connect("s", "g", sink, buffer_size=10, connection_name="c", user="u", from_="x")
    await until(lambda: len(sink.items) == 4, "the events")
    h.service.ack(conn.key, [r.event_id for r, _ in sink.items[:2]])  # 0 and 1 done
    await h.tick()
    await until(lambda: h.service.info("s", "g")["lastCheckpointedEventPosition"] == "1", "the checkpoint")
    await h.service.restart()
    assert sink.dropped_count == 1
    again = Sink()
    await h.service.connect("s", "g", again, buffer_size=10, connection_name="c", user="u", from_="x")
    await until(lambda: len(again.items) == 2, "the unacknowledged events")
    assert again.numbers() == [2, 3]


async def test_not_leader_refuses_and_stops(h: Harness) -> None:
    await h.service.create(EventSource.of("s"), "g", settings(), None)
    sink = Sink()
    await h.service.connect("s", "g", sink, buffer_size=10, connection_name="c", user="u", from_="x")
    h.leader = False
    await h.tick()
    assert not h.service.started and sink.dropped_count == 1
    with pytest.raises(PersistentSubscriptionsNotReady):
        h.service.info("s", "g")
    h.leader = True
    await h.tick()
    await until(lambda: h.service.started, "the service to start again")
    assert h.service.info("s", "g")["groupName"] == "g"  # the configuration came back from the log


async def test_management_errors(h: Harness) -> None:
    source = EventSource.of("s")
    await h.service.create(source, "g", settings(max_subscriber_count=1), None)
    with pytest.raises(PersistentSubscriptionExists, match=r"Subscription group g on stream s exists\."):
        await h.service.create(source, "g", settings(), None)
    with pytest.raises(PersistentSubscriptionFailed, match="ReadBatchSize may not be greater"):
        await h.service.create(source, "h", settings(read_batch_size=600), None)
    with pytest.raises(PersistentSubscriptionFailed, match=r"Consumer strategy Nope does not exist\."):
        await h.service.create(source, "h", settings(consumer_strategy="Nope"), None)
    with pytest.raises(PersistentSubscriptionFailed, match="commit position must be less than"):
        await h.service.create(EventSource.of(ALL), "h", settings(start_from=10**12), None)
    with pytest.raises(PersistentSubscriptionNotFound, match="does not exist"):
        await h.service.update(source, "nope", settings(), None)
    await h.service.connect("s", "g", Sink(), buffer_size=1, connection_name="c", user="u", from_="x")
    with pytest.raises(MaximumSubscribersReached):
        await h.service.connect("s", "g", Sink(), buffer_size=1, connection_name="c", user="u", from_="x")
    await h.service.delete("s", "g", None)
    with pytest.raises(PersistentSubscriptionNotFound):
        h.service.info("s", "g")
    assert h.service.list() == []


async def test_round_robin_and_dispatch_to_single(h: Harness) -> None:
    h.append("rr", 4)
    h.append("ds", 4)
    await h.service.create(EventSource.of("rr"), "g", settings(consumer_strategy="RoundRobin"), None)
    await h.service.create(EventSource.of("ds"), "g", settings(consumer_strategy="DispatchToSingle"), None)
    await until(lambda: h.service.info("rr", "g")["readBufferCount"] == 4, "rr to be read")
    await until(lambda: h.service.info("ds", "g")["readBufferCount"] == 4, "ds to be read")
    a, b = Sink(), Sink()
    await h.service.connect("rr", "g", a, buffer_size=10, connection_name="a", user="u", from_="x")
    await h.service.connect("rr", "g", b, buffer_size=10, connection_name="b", user="u", from_="x")
    h.append("rr", 4)
    await until(lambda: len(a.items) + len(b.items) == 8, "rr deliveries")
    assert len(b.items) >= 2  # the second consumer takes turns once it is there
    c, d = Sink(), Sink()
    await h.service.connect("ds", "g", c, buffer_size=3, connection_name="c", user="u", from_="x")
    await h.service.connect("ds", "g", d, buffer_size=3, connection_name="d", user="u", from_="x")
    await until(lambda: len(c.items) + len(d.items) == 4, "ds deliveries")
    assert len(c.items) == 3 and len(d.items) == 1  # the first until it is full


@pytest.mark.parametrize("strategy", ["Pinned", "PinnedByCorrelation"])
async def test_pinned_strategies_keep_a_source_on_one_consumer(h: Harness, strategy: str) -> None:
    await h.service.create(
        EventSource.of(ALL), "g", settings(consumer_strategy=strategy, start_from=-1), None
    )
    consumers = [Sink(), Sink()]
    for n, sink in enumerate(consumers):
        await h.service.connect(ALL, "g", sink, buffer_size=50, connection_name=f"c{n}", user="u", from_="x")
    await until(lambda: h.service.info(ALL, "g")["status"] == "Live", "the group to be live")
    for stream in ("a-1", "a-2", "a-3", "a-4", "a-5", "a-6"):
        h.append(stream, 3, **({"$correlationId": "same"} if strategy == "PinnedByCorrelation" else {}))

    def appended(sink: Sink) -> list[ResolvedEvent]:  # not the group's own $PersistentConfig
        return [r for r, _ in sink.items if r.original.stream.startswith("a-")]

    await until(lambda: sum(len(appended(s)) for s in consumers) == 18, "every event")
    owners: dict[str, set[int]] = {}
    for n, sink in enumerate(consumers):
        for resolved in appended(sink):
            owners.setdefault(resolved.original.stream, set()).add(n)
    assert all(len(o) == 1 for o in owners.values())
    if strategy == "PinnedByCorrelation":  # one correlation id: one consumer takes everything
        assert sorted(len(appended(s)) for s in consumers) == [0, 18]


async def test_filtered_all_group_and_its_own_streams_are_left_out(h: Harness) -> None:
    h.append("keep-1", 2)
    h.append("drop-1", 2)
    spec = EventFilterSpec.create("streamid", "prefix", ["keep-"])
    await h.service.create(EventSource.of(ALL, spec), "g", settings(), None)
    sink = Sink()
    await h.service.connect(ALL, "g", sink, buffer_size=10, connection_name="c", user="u", from_="x")
    await until(lambda: len(sink.items) == 2, "the history")
    h.append("keep-2", 1)
    h.append("drop-2", 1)
    await until(lambda: len(sink.items) == 3, "the live event")
    assert {r.original.stream for r, _ in sink.items} == {"keep-1", "keep-2"}
    entry = h.db.read_stream_backward("$persistentSubscriptionConfig", None, 1).events[0]
    stored = json.loads(entry.data)["entries"][0]
    assert stored["filter"] == {"context": "streamid", "type": "prefix", "data": "keep-", "isAllStream": True}
    assert stored["startPosition"] == "C:0/P:0"


async def test_a_group_from_the_end_takes_an_event_appended_as_soon_as_create_answers(h: Harness) -> None:
    # KurrentDB loads a new group's checkpoint while its configuration is written: once Create has
    # answered, the group takes live events (an event appended then was lost while it loaded)
    h.append("before", 1)
    for source in (EventSource.of(ALL), EventSource.of("orders")):
        await h.service.create(source, "end", settings(start_from=-1), None)
        assert h.service.info(source.stream, "end")["status"] != "NotReady"
    h.append("orders", 1)
    for stream in (ALL, "orders"):
        sink = Sink()
        await h.service.connect(stream, "end", sink, buffer_size=10, connection_name="c", user="u", from_="x")
        await until(lambda s=sink: "orders" in _streams(s), f"the event through {stream}")  # type: ignore[misc]
        assert "before" not in _streams(sink)  # committed before the group was made from the end


def _streams(sink: Sink) -> list[str]:
    return [r.original.stream for r, _ in sink.items]


async def _park_three(h: Harness) -> tuple[Sink, Any]:
    h.append("s", 3)
    await h.service.create(EventSource.of("s"), "g", settings(min_checkpoint_count=1), None)
    sink = Sink()
    conn = await h.service.connect("s", "g", sink, buffer_size=10, connection_name="c", user="u", from_="x")
    await until(lambda: len(sink.items) == 3, "the events")
    h.service.nack(conn.key, [r.event_id for r, _ in sink.items], "Park", "bad")
    await until(lambda: h.service.info("s", "g")["parkedMessageCount"] == 3, "three parked events")
    await h.tick()
    await until(lambda: h.service.info("s", "g")["lastCheckpointedEventPosition"] == "2", "the checkpoint")
    return sink, conn


async def test_truncate_parked_drops_them_unreplayed_and_counts_stay_true_after_restart(h: Harness) -> None:
    sink, _ = await _park_three(h)
    parked = "$persistentsubscription-s::g-parked"
    with pytest.raises(PersistentSubscriptionFailed, match="negative version"):
        h.service.truncate_parked("s", "g", -1, "admin")
    with pytest.raises(PersistentSubscriptionNotFound):
        h.service.truncate_parked("s", "nope", None, "admin")
    h.service.truncate_parked("s", "g", 1, "admin")  # the first parked message only
    await until(lambda: h.service.info("s", "g")["parkedMessageCount"] == 2, "one truncated")
    assert h.db.stream_state(parked).metadata.truncate_before == 1
    assert h.service.info("s", "g")["parkedMessageTruncations"] == 1
    await h.service.restart()  # the count is read again from the parked stream and its $tb
    await until(lambda: h.service.started, "the restart")
    await until(lambda: h.service.info("s", "g")["parkedMessageCount"] == 2, "the count after the restart")
    h.service.truncate_parked("s", "g", 1, "admin")  # $tb only moves on: nothing changes
    await until(lambda: not h.service._groups["s::g"].state & REPLAYING_PARKED, "the truncate to end")
    assert h.db.stream_state(parked).metadata.truncate_before == 1
    again = Sink()
    conn = await h.service.connect("s", "g", again, buffer_size=10, connection_name="c", user="u", from_="x")
    h.service.replay_parked("s", "g", None, "admin")  # the two left are replayed, then cut
    await until(lambda: len(again.items) == 2, "the two parked messages left")
    assert sorted(r.event.event_number for r, _ in again.items if r.event is not None) == [1, 2]
    h.service.ack(conn.key, [r.event_id for r, _ in again.items])
    await until(lambda: h.service.info("s", "g")["parkedMessageCount"] == 0, "the replayed ones cut")
    assert h.db.stream_state(parked).metadata.truncate_before == 3
    await h.service.restart()
    await until(lambda: h.service.started, "the restart")
    await until(lambda: "s::g" in h.service._groups, "the group")
    assert h.service.info("s", "g")["parkedMessageCount"] == 0
    assert len(sink.items) == 3  # the first consumer was dropped by the restart, never sent them again


async def test_extra_statistics_measure_the_time_to_an_ack(h: Harness) -> None:
    h.append("s", 3)
    await h.service.create(EventSource.of("s"), "g", settings(extra_statistics=True), None)
    await h.service.create(EventSource.of("s"), "plain", settings(), None)
    sink, plain = Sink(), Sink()
    conn = await h.service.connect("s", "g", sink, buffer_size=10, connection_name="c", user="u", from_="x")
    await h.service.connect("s", "plain", plain, buffer_size=10, connection_name="c", user="u", from_="x")
    await until(lambda: len(sink.items) == 3 and len(plain.items) == 3, "the events")
    ids = [r.event_id for r, _ in sink.items]
    h.clock.advance(0.25)
    h.service.ack(conn.key, ids[:1])
    h.clock.advance(0.5)
    h.service.ack(conn.key, ids[1:])
    measured = h.service.info("s", "g")["connections"][0]["observedMeasurements"]
    assert [(m["key"], m["value"]) for m in measured] == [
        ("Mean", 583), ("Median", 750), ("Fastest", 250),
        ("Quintile 1", 250), ("Quintile 2", 250), ("Quintile 3", 750), ("Quintile 4", 750), ("Quintile 5", 750),
        ("90%", 750), ("95%", 750), ("99%", 750), ("99.5%", 750), ("99.9%", 750), ("Highest", 750),
    ]  # fmt: skip
    assert h.service.info("s", "plain")["connections"][0]["observedMeasurements"] == []


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def errors(self) -> list[str]:
        return [r.getMessage() for r in self.records if r.levelno >= logging.ERROR]


@pytest.fixture
def lines():
    handler = _Lines()
    logger = logging.getLogger("test.persistent")
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


async def test_a_group_on_a_hard_deleted_stream_logs_its_fault_once_not_every_second(
    h: Harness, lines: _Lines
) -> None:
    """Issue 33's follow-up: the group logged "A non-recoverable error" at error level at every tick
    for as long as it existed. As KurrentDB's, it now reads no more once its stream is gone: one line,
    and a consumer connecting later is dropped (one line for that consumer)."""
    h.append("gone", 3)
    h.db.delete_stream("gone", hard=True)
    await h.service.create(EventSource.of("gone"), "g", settings(), "admin")
    await until(lambda: len(lines.errors()) == 1, "the fault to be logged")
    for _ in range(5):
        await h.tick()
    assert len(lines.errors()) == 1, lines.errors()
    assert "A non-recoverable error has occurred in persistent subscription gone::g" in lines.errors()[0]
    sink = Sink()
    await h.service.connect("gone", "g", sink, buffer_size=10, connection_name="c", user="admin", from_="x")
    await until(lambda: sink.dropped_count == 1, "the consumer to be dropped")
    for _ in range(3):
        await h.tick()
    assert len(lines.errors()) == 2 and "since the subscription has faulted" in lines.errors()[1]


async def test_a_transient_read_error_is_logged_once_and_its_end_once(
    h: Harness, lines: _Lines, monkeypatch
) -> None:
    """Another read error is read again at each tick, but logged only when it begins (or changes) and
    when reads succeed again; then consumers are served again."""
    h.append("flaky", 2)
    failures = [0]
    real = DatabaseStore.read_stream

    def read_stream(self, stream, start, count, resolve_links):
        if stream == "flaky" and failures[0] < 4:
            failures[0] += 1
            raise OSError(5, "Input/output error")
        return real(self, stream, start, count, resolve_links)

    monkeypatch.setattr(DatabaseStore, "read_stream", read_stream)
    await h.service.create(EventSource.of("flaky"), "g", settings(), "admin")
    for _ in range(6):
        await h.tick()
    assert failures[0] == 4
    assert len(lines.errors()) == 1, lines.errors()
    recovered = [r.getMessage() for r in lines.records if "reads flaky again" in r.getMessage()]
    assert len(recovered) == 1, [r.getMessage() for r in lines.records]
    sink = Sink()
    await h.service.connect("flaky", "g", sink, buffer_size=10, connection_name="c", user="admin", from_="x")
    await until(lambda: len(sink.items) == 2, "the events, once the reads succeed")
    assert sink.dropped_count == 0


async def test_a_retry_goes_out_before_newer_events_when_answers_come_together(h: Harness) -> None:
    """The Node.js client's nack tests: 20 events skipped, 20 retried once, then a finishing event,
    with a window of 10, the consumer answering each delivery in order. Answers read together from
    the call (here: one, then ten at once, as a loaded node read them) are each followed by their
    push, as KurrentDB queues a push after each ack or nack it handles: the finishing event comes
    after all 60 other deliveries. Pushing once after the ten put the retries of the nacked events
    before the event the ack had made room for, and that event's own retry then came after the end."""
    h.append("s", 41)
    await h.service.create(EventSource.of("s"), "g", settings(), None)
    await until(lambda: h.service.info("s", "g")["readBufferCount"] == 41, "the history to be read")
    sink = Sink()
    conn = await h.service.connect("s", "g", sink, buffer_size=10, connection_name="c", user="u", from_="x")
    bursts = iter([1] * 24 + [10] + [1] * 5 + [10])
    answered = 0
    seen: set[int] = set()
    while 40 not in sink.numbers():
        await until(lambda done=answered: len(sink.items) > done, "more deliveries")
        burst = sink.items[answered : answered + next(bursts, 1)]
        answered += len(burst)
        for resolved, _ in burst:
            number = resolved.original.event_number
            if number in seen:
                h.service.ack(conn.key, [resolved.event_id])
            else:
                seen.add(number)
                h.service.nack(conn.key, [resolved.event_id], "Skip" if number < 20 else "Retry", "")
        await asyncio.sleep(0)  # the node reads the call again: what the answers scheduled runs first
    delivered = [f"{r.original.event_number}{'r' if retries else ''}" for r, retries in sink.items]
    assert delivered.index("40") == 60, delivered


async def test_a_group_of_all_from_the_end_is_handed_its_own_configuration_event(h: Harness) -> None:
    """KurrentDB makes the group before it writes ``$PersistentConfig``: a group of ``$all`` from the end
    is handed that event (the Node.js client's "after the fact" test counts more than its own 6)."""
    h.append("before", 2)
    await h.service.create(EventSource.of(ALL), "g", settings(start_from=LIVE), None)
    sink = Sink()
    await h.service.connect(ALL, "g", sink, buffer_size=10, connection_name="c", user="u", from_="x")
    h.append("after", 1)

    def delivered() -> list[tuple[str, str]]:
        return [(r.original.stream, r.original.event_type) for r, _ in sink.items]

    await until(lambda: ("after", "E") in delivered(), "the new event")
    # the configuration stream's first write also sets its metadata (maxCount), as KurrentDB's
    assert delivered()[-2:] == [(CONFIG_STREAM, CONFIG_EVENT_TYPE), ("after", "E")], delivered()
