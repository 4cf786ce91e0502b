from __future__ import annotations

import asyncio

import pytest

from evdb.database import Database
from evdb.errors import StreamDeleted
from evdb.streams import NewEvent
from evdb.subscriptions import (
    CaughtUp,
    CommitNotifier,
    FilterCheckpoint,
    subscribe_to_all,
    subscribe_to_stream,
)


def ev(n: int) -> NewEvent:
    return NewEvent.json("E", {"n": n})


async def take(agen, count: int, timeout: float = 5.0) -> list:
    out = []

    async def run():
        async for item in agen:
            out.append(item)
            if len(out) >= count:
                return

    await asyncio.wait_for(run(), timeout)
    return out


@pytest.fixture
async def adb(tmp_path, clock):
    db = Database.open(str(tmp_path / "db"), clock=clock, chunk_size=64 * 1024, max_memtable_entries=32)
    notifier = CommitNotifier(db)
    yield db, notifier
    notifier.close()
    db.close()


async def test_stream_subscription_catches_up_then_goes_live(adb):
    db, notifier = adb
    db.append("s", [ev(0), ev(1)])
    sub = subscribe_to_stream(db, notifier, "s")
    first = await take(sub, 3)
    assert [e.event_number for e in first[:2]] == [0, 1] and isinstance(first[2], CaughtUp)
    await asyncio.to_thread(db.append, "s", [ev(2)])
    live = await take(sub, 1)
    assert live[0].event_number == 2
    await sub.aclose()


async def test_stream_subscription_starts_after_the_given_revision(adb):
    db, notifier = adb
    db.append("s", [ev(i) for i in range(5)])
    items = await take(subscribe_to_stream(db, notifier, "s", after=2), 2)
    assert [e.event_number for e in items] == [3, 4]


async def test_stream_subscription_never_delivers_truncated_events(adb):
    db, notifier = adb
    db.append("s", [ev(i) for i in range(5)])
    db.set_stream_metadata("s", {"$tb": 3})
    items = await take(subscribe_to_stream(db, notifier, "s"), 2)
    assert [e.event_number for e in items] == [3, 4]


async def test_stream_subscription_waits_for_a_stream_that_does_not_exist_yet(adb):
    db, notifier = adb
    sub = subscribe_to_stream(db, notifier, "later")
    assert isinstance((await take(sub, 1))[0], CaughtUp)
    await asyncio.to_thread(db.append, "later", [ev(0)])
    assert (await take(sub, 1))[0].event_number == 0


async def test_stream_subscription_ends_on_tombstone(adb):
    db, notifier = adb
    db.append("s", [ev(0)])
    sub = subscribe_to_stream(db, notifier, "s")
    await take(sub, 2)
    await asyncio.to_thread(db.delete_stream, "s", -2, hard=True)
    with pytest.raises(StreamDeleted):
        await take(sub, 1)


async def test_all_subscription_from_position_is_exclusive_and_live(adb):
    db, notifier = adb
    db.append("a", [ev(0), ev(1)])
    events = db.read_all_forward(0, 10).events
    sub = subscribe_to_all(db, notifier, after=events[0].log_position)
    items = await take(sub, 2)
    assert items[0].log_position == events[1].log_position and isinstance(items[1], CaughtUp)
    await asyncio.to_thread(db.append, "b", [ev(2)])
    assert (await take(sub, 1))[0].stream == "b"


async def test_filtered_all_subscription_sends_checkpoints(adb):
    db, notifier = adb
    db.append("noise", [ev(i) for i in range(10)])
    db.append("wanted", [ev(0)])
    sub = subscribe_to_all(db, notifier, event_filter=lambda e: e.stream == "wanted", checkpoint_interval=4)
    items = await take(sub, 4)
    kinds = [type(i).__name__ for i in items]
    assert kinds[:2] == ["FilterCheckpoint", "FilterCheckpoint"]
    assert any(getattr(i, "stream", None) == "wanted" for i in items)
    assert all(isinstance(i, (FilterCheckpoint, CaughtUp)) or i.stream == "wanted" for i in items)
