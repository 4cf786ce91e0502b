"""Catch-up and live subscriptions, for asyncio code (the HTTP and gRPC servers).

A subscription first reads history in batches (off the event loop), then waits for the writer to
commit more and reads again. Stream subscriptions go through the same read path as stream reads,
so they never deliver a deleted, truncated or expired event.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from evdb.database import Database
from evdb.errors import StreamNotFound
from evdb.storage.records import EventRecord

__all__ = ["CaughtUp", "CommitNotifier", "FilterCheckpoint", "subscribe_to_all", "subscribe_to_stream"]

BATCH = 512


@dataclass(frozen=True, slots=True)
class CaughtUp:
    """History has been delivered; what follows is live."""

    position: int


@dataclass(frozen=True, slots=True)
class FilterCheckpoint:
    """A filtered ``$all`` subscription has looked at everything before ``position``."""

    position: int


class CommitNotifier:
    """Wakes coroutines of one event loop when the database commits past a position."""

    def __init__(self, db: Database, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._db = db
        self._loop = loop or asyncio.get_running_loop()
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        db.add_commit_listener(self._on_commit)

    def close(self) -> None:
        self._db.remove_commit_listener(self._on_commit)
        for _, fut in self._waiters:
            if not fut.done():
                fut.cancel()
        self._waiters.clear()

    def _on_commit(self, position: int) -> None:  # writer thread
        # Nobody waits: no wake-up of the loop (a call_soon_threadsafe per commit is an eventfd write
        # and a loop turn). No commit is missed: the writer moves readable_position before it calls its
        # listeners, and wait_beyond registers its waiter before it looks at readable_position again, so
        # a waiter this check does not see yet finds the new position itself.
        if not self._waiters:
            return
        try:
            self._loop.call_soon_threadsafe(self._wake, position)
        except RuntimeError:  # loop closed
            pass

    def _wake(self, position: int) -> None:
        keep = []
        for after, fut in self._waiters:
            if position > after:
                if not fut.done():
                    fut.set_result(None)
            elif not fut.done():
                keep.append((after, fut))
        self._waiters = keep

    def future_beyond(self, position: int) -> asyncio.Future[None]:
        """A future done once the committed end is beyond ``position`` (at once if it is): to wait on
        with others (``asyncio.wait``) without a task per wait. Cancel it when it is not wanted."""
        fut = self._loop.create_future()
        if self._db.readable_position <= position:
            self._waiters.append((position, fut))
            if self._db.readable_position <= position:  # else committed between the check and the append
                return fut
        fut.set_result(None)  # _wake passes over a done future
        return fut

    async def wait_beyond(self, position: int) -> None:
        """Return once the committed end is beyond ``position``."""
        while self._db.readable_position <= position:
            fut = self._loop.create_future()
            self._waiters.append((position, fut))
            if self._db.readable_position > position:  # committed between the check and the append
                fut.cancel()
                return
            await fut


async def subscribe_to_all(
    db: Database,
    notifier: CommitNotifier,
    *,
    after: int | None = None,
    from_end: bool = False,
    event_filter: Callable[[EventRecord], bool] | None = None,
    checkpoint_interval: int | None = None,
    before_wait: Callable[[], Awaitable[None]] | None = None,
) -> AsyncIterator[EventRecord | CaughtUp | FilterCheckpoint]:
    """Events of ``$all`` after log position ``after`` (None: from the start), then live ones.

    With ``checkpoint_interval`` a :class:`FilterCheckpoint` is yielded each time that many events
    were looked at, so a filtered subscriber can save progress while nothing matches.
    ``before_wait`` is awaited each time the subscription is about to wait (for a read of the next
    batch or for new commits): a subscriber that holds what it was given (to write a batch at once)
    sends it then.
    """
    position = db.readable_position if from_end else 0
    skip_at = -1
    if after is not None and not from_end:
        position, skip_at = after, after
    caught_up = False
    scanned_since_checkpoint = 0
    while True:
        end = db.readable_position
        if position >= end:
            if not caught_up:
                caught_up = True
                yield CaughtUp(position)
            if before_wait is not None:
                await before_wait()
            await notifier.wait_beyond(position)
            continue
        if before_wait is not None:
            await before_wait()
        chunk = await asyncio.to_thread(db.read_all_forward, position, BATCH, None)
        for record in chunk.events:
            if record.log_position == skip_at:
                continue
            scanned_since_checkpoint += 1
            if event_filter is None or event_filter(record):
                yield record
            if checkpoint_interval and scanned_since_checkpoint >= checkpoint_interval:
                scanned_since_checkpoint = 0
                yield FilterCheckpoint(record.next_position)
        position = chunk.next_position


async def subscribe_to_stream(
    db: Database,
    notifier: CommitNotifier,
    stream: str,
    *,
    after: int | None = None,
    from_end: bool = False,
    before_wait: Callable[[], Awaitable[None]] | None = None,
) -> AsyncIterator[EventRecord | CaughtUp]:
    """Events of ``stream`` after event number ``after`` (None: from the start), then live ones.

    Raises :class:`evdb.errors.StreamDeleted` if the stream is tombstoned. ``before_wait``: as for
    :func:`subscribe_to_all`.
    """
    next_number = 0 if after is None else after + 1
    if from_end:
        try:
            next_number = (await asyncio.to_thread(db.stream_state, stream)).last_event_number + 1
        except StreamNotFound:
            next_number = 0
    caught_up = False
    while True:
        seen_end = db.readable_position
        if before_wait is not None:
            await before_wait()
        try:
            chunk = await asyncio.to_thread(db.read_stream_forward, stream, next_number, BATCH)
            events, next_number, is_end = (
                chunk.events,
                max(next_number, chunk.next_event_number),
                chunk.is_end_of_stream,
            )
        except StreamNotFound:
            events, is_end = [], True
        for record in events:
            yield record
        if is_end:
            if not caught_up:
                caught_up = True
                yield CaughtUp(seen_end)
            if before_wait is not None:
                await before_wait()
            await notifier.wait_beyond(seen_end)
