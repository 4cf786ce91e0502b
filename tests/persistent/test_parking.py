"""A group's parked stream on its own (evdb/persistent/parking.py): parking, the figures read back from
the stream, and the one opening replay and truncation share. A real in-memory database; the store's
first call of an operation is held so that the operation stays in progress while the test asks again."""

from __future__ import annotations

import logging
import threading

from waiting import until

from evdb.clock import ManualClock
from evdb.database import Database
from evdb.persistent import DatabaseStore
from evdb.persistent.model import OutstandingMessage, ResolvedEvent
from evdb.persistent.offloop import Io
from evdb.persistent.parking import ParkedMessages
from evdb.streams import NewEvent

PARKED = "$persistentsubscription-s::g-parked"
LOG = logging.getLogger("test.persistent.parking")


class HeldStore(DatabaseStore):
    """Reading the parked stream's end waits until the test lets it go (bounded)."""

    def __init__(self, db: Database, clock: ManualClock) -> None:
        super().__init__(lambda: db, clock.ticks)
        self.go = threading.Event()
        self.go.set()

    def last_event_number(self, stream: str) -> int | None:
        assert self.go.wait(30), "the test never let the read of the parked stream's end go"
        return super().last_event_number(stream)


def _parker(store: HeldStore, clock: ManualClock, replayed: list[OutstandingMessage]) -> ParkedMessages:
    return ParkedMessages(
        "s::g",
        PARKED,
        store=store,
        io=Io(LOG),
        clock=clock,
        logger=LOG,
        read_batch_size=10,
        replayed=replayed.extend,
    )


async def _park_two(db: Database, parked: ParkedMessages) -> None:
    db.append("s", [NewEvent("E", b"{}", is_json=True), NewEvent("E", b"{}", is_json=True)])
    done: list[int] = []
    for record in db.read_stream_forward("s", 0, 2).events:
        why = "MaxRetries" if record.event_number == 0 else "ClientNak"
        parked.park(ResolvedEvent(record), "a reason", why, then=lambda: done.append(1))
    await until(lambda: len(done) == 2, "both parked")


async def test_replay_and_truncate_one_at_a_time_and_only_once_ready(clock: ManualClock) -> None:
    db = Database.open(None, clock=clock)
    replayed: list[OutstandingMessage] = []
    store = HeldStore(db, clock)
    parked = _parker(store, clock, replayed)
    await _park_two(db, parked)
    assert (parked.count, parked.due_to_max_retries, parked.due_to_client_nak) == (2, 1, 1)
    assert parked.oldest_ticks == clock.ticks()
    clock.advance(3.0)
    assert parked.oldest_age(clock.ticks()) == 3

    assert parked.replay(None, ready=False) == "NotReady"
    assert parked.truncate(None, ready=False) == "NotReady"
    store.go.clear()
    assert parked.truncate(1, ready=True) == "Started"
    assert parked.replaying
    assert parked.replay(None, ready=True) == "AlreadyInProgress"
    assert parked.truncate(None, ready=True) == "AlreadyInProgress"
    assert (parked.replays, parked.truncations) == (0, 1)  # only what started counts
    store.go.set()
    await until(lambda: not parked.replaying, "the truncation to end")
    assert parked.count == 1 and replayed == []
    assert db.stream_state(PARKED).metadata.truncate_before == 1

    assert parked.replay(None, ready=True) == "Started"
    await until(lambda: not parked.replaying, "the replay to end")
    assert [m.resolved.original.event_number for m in replayed] == [1]
    assert all(m.is_replayed for m in replayed)
    assert (parked.replays, parked.truncations, parked.count) == (1, 1, 0)
    assert db.stream_state(PARKED).metadata.truncate_before == 2
    db.close()


async def test_the_figures_are_read_back_from_the_parked_stream(clock: ManualClock) -> None:
    db = Database.open(None, clock=clock)
    store = HeldStore(db, clock)
    await _park_two(db, _parker(store, clock, []))
    again = _parker(store, clock, [])
    loaded: list[int] = []
    again.load_stats(lambda: loaded.append(again.count))
    await until(lambda: loaded == [2], "the figures of the parked stream")
    assert again.oldest_ticks is not None
    db.close()


class HeldParks(DatabaseStore):
    """The first park waits until the test lets it go; the next ``fail`` parks fail."""

    def __init__(self, db: Database, clock: ManualClock, fail: int = 0) -> None:
        super().__init__(lambda: db, clock.ticks)
        self.go = threading.Event()
        self.calls: list[list[int]] = []
        self.fail = fail

    def park(self, stream, parks):
        self.calls.append([p.subscription_event_number for p in parks])
        if len(self.calls) == 1:
            assert self.go.wait(30), "the test never let the first park go"
        if self.fail:
            self.fail -= 1
            raise OSError("the disk said no")
        return super().park(stream, parks)


async def _park_in_order(db: Database, parked: ParkedMessages, store: HeldParks, n: int) -> list[int]:
    db.append("s", [NewEvent("E", b"{}", is_json=True) for _ in range(n)])
    done: list[int] = []
    for record in db.read_stream_forward("s", 0, n).events:
        parked.park(
            ResolvedEvent(record), "a reason", "ClientNak", then=lambda r=record: done.append(r.event_number)
        )
    await until(lambda: len(store.calls) == 1, "the first park to start")
    store.go.set()
    await until(lambda: len(done) == n, "every message parked")
    return done


async def test_the_parked_stream_holds_messages_in_the_order_they_were_parked(clock: ManualClock) -> None:
    """Parks ran side by side, each its own append: a later message could land first, and a replay then
    handed them back out of order. One write at a time now, taking what was parked meanwhile."""
    db = Database.open(None, clock=clock)
    store = HeldParks(db, clock)
    parked = _parker(store, clock, [])  # type: ignore[arg-type]
    done = await _park_in_order(db, parked, store, 5)
    assert done == [0, 1, 2, 3, 4]
    assert store.calls == [[0], [1, 2, 3, 4]]
    links = db.read_stream_forward(PARKED, 0, 10).events
    assert [ln.data for ln in links] == [f"{i}@s".encode() for i in range(5)]
    assert parked.count == 5
    db.close()


async def test_a_failed_park_is_tried_again_ahead_of_the_messages_parked_since(clock: ManualClock) -> None:
    db = Database.open(None, clock=clock)
    store = HeldParks(db, clock, fail=1)
    parked = _parker(store, clock, [])  # type: ignore[arg-type]
    await _park_in_order(db, parked, store, 3)
    assert store.calls == [[0], [0, 1, 2]]
    links = db.read_stream_forward(PARKED, 0, 10).events
    assert [ln.data for ln in links] == [b"0@s", b"1@s", b"2@s"]
    db.close()
