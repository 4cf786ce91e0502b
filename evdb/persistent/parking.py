"""A group's parked messages (KurrentDB's PersistentSubscriptionMessageParker and the parked-message
operations of its PersistentSubscription).

A message that reached its retry limit, or that a consumer nacked with Park, is written to the group's
parked stream. A replay reads that stream back (all of it, or the messages before a stop number) and
hands each message to the group as a retry; a truncation drops them unreplayed. Either way the parked
stream's ``$tb`` moves on to what was handled, so the parked count is ``last - truncate_before + 1``.

The store's calls run off the loop through :class:`~evdb.persistent.offloop.Io`; their results come back as
callbacks on the loop.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any

from evdb.clock import Clock
from evdb.persistent.checkpoints import ParkedStats, Parking, ReadResult, SubscriptionStore
from evdb.persistent.model import OutstandingMessage, ResolvedEvent
from evdb.persistent.offloop import Io

__all__ = ["ParkedMessages"]

PARK_ATTEMPTS = 5  # a failed park is tried again this many times before the message is given up


class ParkedMessages:
    """The parked stream of one group: parking, its figures, and the replay and truncation of what it
    holds (one at a time: :attr:`replaying` is the group's ReplayingParkedMessages state)."""

    def __init__(
        self,
        key: str,
        stream: str,
        *,
        store: SubscriptionStore,
        io: Io,
        clock: Clock,
        logger: logging.Logger,
        read_batch_size: int,
        replayed: Callable[[list[OutstandingMessage]], None],
    ) -> None:
        """``key``: the group's (for the logs); ``stream``: its parked stream; ``replayed``: hands the
        messages a replay read back to the group's retry buffer."""
        self.key = key
        self.stream = stream
        self._store = store
        self._io = io
        self._clock = clock
        self.logger = logger
        self._read_batch_size = read_batch_size
        self._replayed = replayed
        self.replaying = False
        self.due_to_client_nak = 0
        self.due_to_max_retries = 0
        self.replays = 0
        self.truncations = 0
        self._truncate_before = 0
        self._last = -1
        #: the oldest parked message's time (100 ns ticks), None while none is parked
        self.oldest_ticks: int | None = None
        #: messages parked while a write runs, in order, each with its ``then``
        self._waiting: list[tuple[Parking, Callable[[], None]]] = []
        #: the write in flight (None: none)
        self._writing: list[tuple[Parking, Callable[[], None]]] | None = None

    @property
    def count(self) -> int:
        if self._last == -1:
            return 0
        return self._last - self._truncate_before + 1

    def oldest_age(self, now_ticks: int) -> int:
        """The oldest parked message's age in whole seconds (0 while none is parked)."""
        if self.oldest_ticks is None:
            return 0
        return max(0, (now_ticks - self.oldest_ticks) // 10_000_000)

    def oldest_age_seconds(self) -> float:
        """The oldest parked message's age now, in seconds (0.0 while none is parked): the metrics'."""
        if self.oldest_ticks is None:
            return 0.0
        return max(0, self._clock.ticks() - self.oldest_ticks) / 10_000_000

    # -- parking ---------------------------------------------------------------------------------------
    def park(self, resolved: ResolvedEvent, reason: str, why: str, then: Callable[[], None]) -> None:
        """Write ``resolved`` to the parked stream (``why``: MaxRetries or ClientNak); ``then`` once it
        is written, or given up after :data:`PARK_ATTEMPTS` failed tries. Messages land in the parked
        stream in the order they were parked: one write at a time, each taking every message parked
        while the one before it ran (one append, so a replay hands them back in that order)."""
        if why == "MaxRetries":
            self.due_to_max_retries += 1
        else:
            self.due_to_client_nak += 1
        self._waiting.append((Parking(resolved, reason, resolved.original.event_number), then))
        self._write_next()

    def _write_next(self, attempt: int = 0) -> None:
        if self._writing is not None or not self._waiting:
            return
        batch, self._waiting = self._waiting, []
        self._writing = batch

        def written(number: int) -> None:
            self._writing = None
            self._last = max(self._last, number)
            if self.oldest_ticks is None:
                self.oldest_ticks = self._clock.ticks()
            for _, then in batch:
                then()
            self._write_next()

        def failed(exc: BaseException) -> None:
            self._writing = None
            first = batch[0][0].resolved.original
            what = f"{first.stream}/{first.event_number}" + (
                f" and {len(batch) - 1} more" if len(batch) > 1 else ""
            )
            if attempt < PARK_ATTEMPTS:
                self.logger.info("Unable to park message %s in %s (%s): retrying", what, self.stream, exc)
                self._waiting[:0] = batch  # ahead of those parked since: the order stays
                self._write_next(attempt + 1)
                return
            self.logger.error(
                "Unable to park message %s in %s after retries (%s). Possible message loss",
                what,
                self.stream,
                exc,
            )
            for _, then in batch:
                then()
            self._write_next()

        self._io.run(
            f"parking {len(batch)} message(s) of {self.key} in {self.stream}",
            self._store.park,
            self.stream,
            [parking for parking, _ in batch],
            then=written,
            failed=failed,
        )

    def load_stats(self, then: Callable[[], None]) -> None:
        """Read the parked stream's figures (count, oldest); ``then`` once read, or once that failed."""

        def loaded(stats: ParkedStats) -> None:
            self._truncate_before = stats.truncate_before
            self._last = stats.last_number
            self.oldest_ticks = stats.oldest_ticks
            then()

        def failed(exc: BaseException) -> None:
            self.logger.error(
                "Could not read the parked message stats of %s from %s: %s", self.key, self.stream, exc
            )
            then()

        self._io.run(
            f"reading the parked messages of {self.key}",
            self._store.parked_stats,
            self.stream,
            then=loaded,
            failed=failed,
        )

    # -- replay and truncation -------------------------------------------------------------------------
    def replay(self, stop_at: int | None, ready: bool) -> str:
        """Start replaying parked messages (all, or those before ``stop_at``): ``Started``,
        ``NotReady`` or ``AlreadyInProgress`` (KurrentDB's ParkedMessageOperationResult)."""
        started = self._begin(ready, lambda stop: self._read(0, stop), stop_at)
        if started == "Started":
            self.replays += 1
        return started

    def truncate(self, stop_at: int | None, ready: bool) -> str:
        """Drop the parked messages (all, or those before ``stop_at``) without replaying them: the
        parked stream's ``$tb`` moves on (KurrentDB's TruncateParkedMessages). ``Started``,
        ``NotReady`` or ``AlreadyInProgress``, as :meth:`replay`."""
        started = self._begin(ready, self._mark_reprocessed, stop_at)
        if started == "Started":
            self.truncations += 1
        return started

    def _begin(self, ready: bool, until_known: Callable[[int], None], stop_at: int | None) -> str:
        """The opening both operations share: one at a time, and only on a loaded group; then the
        parked stream's end is read and ``until_known`` is called with the number to stop before."""
        if not ready:
            return "NotReady"
        if self.replaying:
            return "AlreadyInProgress"
        self.replaying = True

        def end_known(end: int | None) -> None:
            if end is None:
                self.replaying = False
                return
            until_known(min(stop_at, end + 1) if stop_at is not None else end + 1)

        self._io.run(
            f"reading the end of {self.stream}",
            self._store.last_event_number,
            self.stream,
            then=end_known,
            failed=self._replay_failed,
        )
        return "Started"

    def _replay_failed(self, exc: BaseException) -> None:
        self.logger.error(
            "Error reading parked messages from %s for persistent subscription %s: %s",
            self.stream,
            self.key,
            exc,
        )
        self.replaying = False

    def _read(self, position: int, stop_at: int) -> None:
        if not self.replaying:
            return
        if stop_at - position <= 0:
            self._mark_reprocessed(stop_at)
            return
        count = min(stop_at + 1 - position, self._read_batch_size)
        self._io.run(
            f"reading {self.stream}",
            self._store.read_stream,
            self.stream,
            position,
            count,
            True,
            then=lambda result: self._on_read(result, stop_at),
            failed=self._replay_failed,
        )

    def _on_read(self, result: ReadResult, stop_at: int) -> None:
        if not self.replaying:
            return
        messages: list[OutstandingMessage] = []
        for resolved in result.events:
            if resolved.original.event_number == stop_at:
                break
            if resolved.event is None:
                continue
            self.logger.debug(
                "Replaying parked message: %s %s/%s on subscription %s",
                uuid.UUID(bytes=resolved.original.event_id),
                resolved.original.stream,
                resolved.original.event_number,
                self.key,
            )
            messages.append(OutstandingMessage(resolved, is_replayed=True))
        self._replayed(messages)
        next_number = result.next_position
        if result.is_end or stop_at <= next_number:
            self._mark_reprocessed(stop_at if next_number == -1 else min(stop_at, next_number))
        else:
            self._read(next_number, stop_at)

    def _mark_reprocessed(self, sequence: int) -> None:
        before = max(self._truncate_before, sequence)

        def done() -> None:
            self.replaying = False

        if before == self._truncate_before:
            done()
            return

        def written(_: Any) -> None:
            self.load_stats(done)

        def failed(exc: BaseException) -> None:
            self.logger.error(
                "An error occured truncating the parked message stream %s: %s", self.stream, exc
            )
            self.load_stats(done)

        self._io.run(
            f"truncating {self.stream}",
            self._store.truncate_parked,
            self.stream,
            before,
            then=written,
            failed=failed,
        )
