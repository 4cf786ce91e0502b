"""The system projections' runners wait for commits on futures: no task per commit (three per running
projection before: the commit wait, the stop wait and the checkpoint sleep); the checkpoint sleep is one
per checkpoint period, and a stop still wakes a waiting runner at once."""

from __future__ import annotations

import asyncio
import logging

from waiting import until

from evdb.clock import ManualClock
from evdb.database import Database
from evdb.projections import SystemProjections
from evdb.projections.service import CHECKPOINT_AFTER_SECONDS, checkpoint_stream
from evdb.streams import NewEvent
from evdb.subscriptions import CommitNotifier

LOG = logging.getLogger("tests.projection_waits")


async def test_no_task_per_commit_and_one_checkpoint_sleep_per_period():
    clock = ManualClock()
    db = Database.open(None, chunk_size=65536)
    notifier = CommitNotifier(db)
    service = SystemProjections(
        database=lambda: db,
        notifier=lambda: notifier,
        is_leader=lambda: True,
        clock=clock,
        logger=LOG,
        start_standard=True,
    )
    loop = asyncio.get_running_loop()
    created: list[str] = []
    factory = loop.get_task_factory()

    def counting(loop_, coro, **kwargs):
        created.append(getattr(coro, "__qualname__", repr(coro)))
        task = asyncio.Task(coro, loop=loop_, **kwargs) if factory is None else factory(loop_, coro, **kwargs)
        return task

    try:
        await service.start()
        await until(lambda: service.active, "the projections to load", 20.0)
        runtimes = [service._runtimes[name] for name in service.names()]
        running = [rt for rt in runtimes if rt.task is not None]
        assert running, "the standard projections run"

        def caught_up() -> bool:
            end = db.readable_position
            return all(rt.next_position >= end for rt in running)

        db.append("order-0", [NewEvent.json("OrderPlaced", {"n": 0})])
        await until(caught_up, "the first event to be projected", 20.0)
        loop.set_task_factory(counting)
        try:
            for n in range(1, 31):  # 30 commits, each projected before the next
                db.append(f"order-{n}", [NewEvent.json("OrderPlaced", {"n": n})])
                await until(caught_up, f"commit {n} to be projected", 20.0)
        finally:
            loop.set_task_factory(factory)
        # before: 2-3 tasks per running projection per commit (90+ here); now only the checkpoint
        # sleeps, one per projection for this checkpoint period at most
        sleeps = [name for name in created if "sleep" in name]
        assert len(created) == len(sleeps) <= len(running), created
        assert all(rt.timer is not None and not rt.timer.done() for rt in running if rt.unchecked)

        # the period ends: each projection with handled events writes its checkpoint
        written = {rt.name: rt.checkpoint for rt in running}
        clock.advance(CHECKPOINT_AFTER_SECONDS + 0.1)
        await until(
            lambda: all(rt.unchecked == 0 for rt in running),
            "the suggested checkpoints after the period",
            20.0,
        )
        assert any(rt.checkpoint != written[rt.name] for rt in running)
        assert any(db.read_stream_forward(checkpoint_stream(rt.name), 0, 10).events for rt in running)
    finally:
        await asyncio.wait_for(service.stop(), 10)  # a stop wakes the runners waiting for commits
        assert all(rt.task is None for rt in service._runtimes.values())
        assert all(rt.timer is None for rt in service._runtimes.values())
        notifier.close()
        db.close()
