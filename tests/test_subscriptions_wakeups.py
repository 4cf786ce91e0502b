"""CommitNotifier wakes its loop only when a coroutine waits, and never misses a commit: the commit
and the waiter's registration interleaved at each point, deterministically (no threads, no sleeps)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from evdb.database import Database
from evdb.streams import NewEvent
from evdb.subscriptions import CommitNotifier


class _FakeDb:
    """What CommitNotifier uses of a Database: the readable end and the commit listeners. A test hook
    runs at a chosen read of ``readable_position`` (to commit between two of the waiter's steps)."""

    def __init__(self) -> None:
        self.position = 10
        self.listeners: list[Callable[[int], None]] = []
        self.reads = 0
        self.on_read: dict[int, Callable[[], None]] = {}

    @property
    def readable_position(self) -> int:
        self.reads += 1
        hook = self.on_read.pop(self.reads, None)
        if hook is not None:
            hook()
        return self.position

    def add_commit_listener(self, callback: Callable[[int], None]) -> None:
        self.listeners.append(callback)

    def remove_commit_listener(self, callback: Callable[[int], None]) -> None:
        self.listeners.remove(callback)

    def commit(self, position: int) -> None:
        """As the writer does: the new end first, then the listeners."""
        self.position = position
        for listener in self.listeners:
            listener(position)


class _CountingLoop:
    """The running loop, counting the thread-safe wake-ups asked of it."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.wakeups = 0

    def call_soon_threadsafe(self, callback, *args):
        self.wakeups += 1
        return self._loop.call_soon_threadsafe(callback, *args)

    def create_future(self):
        return self._loop.create_future()


async def _notifier() -> tuple[_FakeDb, _CountingLoop, CommitNotifier]:
    db = _FakeDb()
    loop = _CountingLoop(asyncio.get_running_loop())
    return db, loop, CommitNotifier(db, loop)  # type: ignore[arg-type]


async def test_no_wakeup_per_commit_without_a_waiter():
    db, loop, notifier = await _notifier()
    for position in range(11, 111):
        db.commit(position)
    assert loop.wakeups == 0
    notifier.close()


async def test_a_waiter_is_woken_by_the_next_commit():
    db, loop, notifier = await _notifier()
    task = asyncio.ensure_future(notifier.wait_beyond(10))
    await asyncio.sleep(0)  # the waiter registers (one loop turn, not a wait for time)
    assert not task.done() and loop.wakeups == 0
    db.commit(11)
    assert loop.wakeups == 1
    await asyncio.wait_for(task, 5)
    db.commit(12)  # nobody waits any more: no wake-up
    assert loop.wakeups == 1
    notifier.close()


async def test_a_commit_between_the_check_and_the_registration_is_not_missed():
    """The commit lands after wait_beyond's first look at the end and before its waiter is in the list:
    the notifier skips the wake-up (nobody is registered), and the waiter's second look sees it."""
    db, loop, notifier = await _notifier()
    db.on_read[1] = lambda: None  # the first read (the loop's check) sees 10
    # the commit comes right after that read returned: at the start of the next read (the re-check),
    # which is after the registration; and a variant below commits before the registration
    db.on_read[2] = lambda: db.commit(11)
    await asyncio.wait_for(notifier.wait_beyond(10), 5)
    assert loop.wakeups == 1  # registered when the commit came: woken (harmless, the future is cancelled)
    notifier.close()


async def test_a_commit_before_the_registration_is_seen_by_the_recheck():
    db, loop, notifier = await _notifier()
    original = loop.create_future

    def create_future():  # wait_beyond makes its future after its first check, before registering
        db.commit(11)  # the writer commits now: nobody is registered, so no wake-up is asked
        return original()

    loop.create_future = create_future  # type: ignore[method-assign]
    await asyncio.wait_for(notifier.wait_beyond(10), 5)
    assert loop.wakeups == 0
    notifier.close()


async def test_real_database_waiters_see_every_commit(tmp_path):
    """Live: appends from the writer thread, a waiter per position; each returns once its commit is in."""
    db = Database.open(str(tmp_path / "db"), chunk_size=64 * 1024)
    notifier = CommitNotifier(db)
    try:
        for n in range(20):
            position = db.readable_position
            waiter = asyncio.ensure_future(notifier.wait_beyond(position))
            await asyncio.sleep(0)
            await asyncio.to_thread(db.append, "s", [NewEvent.json("E", {"n": n})])
            await asyncio.wait_for(waiter, 5)
            assert db.readable_position > position
        assert notifier._waiters == []
    finally:
        notifier.close()
        db.close()
