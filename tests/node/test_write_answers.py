"""The writer's answers to appends awaited on an event loop (Database.append_on_loop): one wake-up of
the loop per commit group, the same results and errors as the sync path, and the replication gate's
hold on a leader's answers kept (issue 24, "HTTP appends: one wake-up per group")."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from waiting import wait_until

from evdb.database import Database
from evdb.errors import DatabaseClosed, NotLeader, WrongExpectedVersion
from evdb.streams import AppendResult, NewEvent


def event(kind: str = "Happened") -> NewEvent:
    return NewEvent(kind, b"{}", b"", uuid.uuid4(), True)


@pytest.fixture
def db() -> Iterator[Database]:
    with Database.open(None) as database:
        yield database


class WakeUps:
    """Counts the running loop's call_soon_threadsafe calls (each one a wake-up of the loop)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.count = 0
        self._loop = loop
        self._original = loop.call_soon_threadsafe

    def __enter__(self) -> WakeUps:
        def counted(*args: Any, **kwargs: Any) -> Any:
            self.count += 1
            return self._original(*args, **kwargs)

        self._loop.call_soon_threadsafe = counted  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        del self._loop.call_soon_threadsafe  # the class's method again


class HeldWriter:
    """Keeps the writer busy (a call in it that waits), so the appends queued meanwhile form one group."""

    def __init__(self, db: Database) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self._thread = threading.Thread(target=db.call_in_writer, args=(self._hold,), daemon=True)

    def _hold(self, ctx: object) -> None:
        self.entered.set()
        assert self.release.wait(30), "the test never released the writer"

    def __enter__(self) -> HeldWriter:
        self._thread.start()
        assert self.entered.wait(30), "the writer never ran the holding call"
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self._thread.join(30)


async def test_a_group_of_appends_is_answered_with_one_wake_up(db: Database) -> None:
    loop = asyncio.get_running_loop()
    with HeldWriter(db) as held:
        futures = [db.append_on_loop(f"s-{i}", [event()]) for i in range(50)]
        await asyncio.sleep(0)  # nothing is answered while the writer is held
        assert not any(f.done() for f in futures)
        with WakeUps(loop) as wake_ups:
            held.release.set()
            results = await asyncio.gather(*futures)
    assert wake_ups.count == 1
    assert [r.first_event_number for r in results] == [0] * 50
    positions = [r.position for r in results]
    assert positions == sorted(positions) and len(set(positions)) == 50
    for i, result in enumerate(results):  # the same records the sync reader sees
        assert db.read_event(f"s-{i}", 0).log_position == result.position


async def test_errors_and_results_of_one_group_reach_their_own_waiters(db: Database) -> None:
    db.append("taken", [event()])
    retried_id = uuid.uuid4()
    original = db.append("same", [NewEvent("E", b"", b"", retried_id)], -1)
    with HeldWriter(db):
        good = db.append_on_loop("fresh", [event()], -1)
        conflict = db.append_on_loop("taken", [event()], -1)  # the stream exists: no "no stream"
        retry = db.append_on_loop("same", [NewEvent("E", b"", b"", retried_id)], -1)
    assert (await good).next_expected_version == 0
    with pytest.raises(WrongExpectedVersion):
        await conflict
    again = await retry
    assert again.duplicate and again.position == original.position
    assert db.stream_state("taken").last_event_number == 0  # the refused append wrote nothing


async def test_sync_and_loop_appends_share_groups(db: Database) -> None:
    with HeldWriter(db):
        pool = concurrent.futures.ThreadPoolExecutor(4)
        sync = [pool.submit(db.append, "shared", [event()]) for _ in range(10)]
        on_loop = [db.append_on_loop("shared", [event()]) for _ in range(10)]
    answers = [f.result(30) for f in sync] + list(await asyncio.gather(*on_loop))
    pool.shutdown()
    assert sorted(a.first_event_number for a in answers) == list(range(20))


async def test_a_waiter_that_gave_up_leaves_the_write_and_the_others_intact(db: Database) -> None:
    with HeldWriter(db):
        dropped = db.append_on_loop("s", [event()])
        kept = db.append_on_loop("s", [event()])
        dropped.cancel()  # a client that disconnected: its handler's await is cancelled
    assert (await kept).first_event_number == 1
    assert db.stream_state("s").last_event_number == 1  # the cancelled waiter's append is written


async def test_deletes_are_answered_on_the_loop(db: Database) -> None:
    db.append("gone", [event()])
    result = await db.delete_stream_on_loop("gone", 0)
    assert isinstance(result, AppendResult)
    assert db.stream_state("gone").soft_deleted


async def test_a_closed_database_refuses_before_queueing() -> None:
    database = Database.open(None)
    database.close()
    with pytest.raises(DatabaseClosed):
        database.append_on_loop("s", [event()])


async def test_a_followers_writes_still_go_to_its_leader(db: Database) -> None:
    sent: list[Any] = []

    def remote_writer(request: Any) -> concurrent.futures.Future:
        sent.append(request)
        future: concurrent.futures.Future = concurrent.futures.Future()
        future.set_result(AppendResult(0, 1234, 0, False))
        return future

    db.remote_writer = remote_writer
    result = await db.append_on_loop("s", [event()])
    assert result.position == 1234 and sent[0].stream == "s"
    assert db.stream_state("s").last_event_number == -1  # nothing written here


class Gate:
    """A leader's replication gate (as evdb.cluster.service's): answers held until "a majority"
    confirms, then released from the event loop's thread; or refused as a node that stepped down."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.leading = True
        self.held: list[tuple[int, list]] = []
        self.positions: list[int] = []

    def __call__(self, position: int, answers: list) -> None:
        self.positions.append(position)
        if self.leading:
            self.held.append((position, answers))
            return
        for future, _ in answers:
            if not future.done():
                future.set_exception(NotLeader())

    def release(self) -> None:  # on the loop
        held, self.held = self.held, []
        for _, answers in held:
            for future, result in answers:
                if not future.done():
                    future.set_result(result)


async def test_a_leaders_answers_wait_for_the_gate(db: Database) -> None:
    loop = asyncio.get_running_loop()
    gate = Gate(loop)
    db.replication_gate = gate
    futures = [db.append_on_loop("gated", [event()]) for _ in range(5)]
    # durable, but no majority yet (the writer does not need the loop: waiting here blocks nothing)
    wait_until(lambda: sum(len(answers) for _, answers in gate.held) == 5, 10, "the writer to commit")
    await asyncio.sleep(0)
    assert not any(f.done() for f in futures)
    with WakeUps(loop) as wake_ups:
        gate.release()
    assert all(f.done() for f in futures) and wake_ups.count == 0  # settled on the loop, no wake-up
    assert [f.result().first_event_number for f in futures] == list(range(5))


async def test_a_node_that_stepped_down_refuses_what_was_in_the_pipeline(db: Database) -> None:
    gate = Gate(asyncio.get_running_loop())
    gate.leading = False
    db.replication_gate = gate
    with pytest.raises(NotLeader):
        await db.append_on_loop("s", [event()])
