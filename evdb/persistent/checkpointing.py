"""A group's message numbering and its checkpoint (KurrentDB's sequence numbers, TryMarkCheckpoint and
PersistentSubscriptionCheckpointWriter).

Every new message handed out (or skipped by its consumer, or left out by a filter) takes the next
sequence number and remembers the position before it. The checkpoint is the position of the last
message before the oldest one still unanswered (in flight or waiting for a retry), or of the last
known message when none is; it is written after ``min_checkpoint_count`` messages and
``checkpoint_after`` milliseconds (at a clock tick), or at once after ``max_checkpoint_count``. One
write at a time: a checkpoint due while one is being written is left for the next.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from evdb.clock import Clock
from evdb.persistent.checkpoints import SubscriptionStore
from evdb.persistent.model import EventSource, GroupSettings, OutstandingMessage
from evdb.persistent.offloop import Io

__all__ = ["Checkpointer"]


class Checkpointer:
    """Numbers a group's messages and writes its checkpoint to ``stream`` when one is due."""

    def __init__(
        self,
        key: str,
        stream: str,
        source: EventSource,
        settings: GroupSettings,
        *,
        store: SubscriptionStore,
        io: Io,
        clock: Clock,
        logger: logging.Logger,
    ) -> None:
        self.key = key
        self.stream = stream
        self.source = source
        self.settings = settings
        self._store = store
        self._io = io
        self._clock = clock
        self.logger = logger
        self._next_sequence = 0
        self._checkpointed_sequence = -1
        self._known_sequence = -1
        self._known_position: int | None = None
        self._checkpoint_time: float | None = None
        self._writing = False
        #: the position last checkpointed (or loaded), None before the first
        self.last_checkpointed: int | None = None

    def loaded(self, position: int) -> None:
        """The group starts from a checkpoint at ``position``: it is message 0, already checkpointed."""
        self._next_sequence = 1
        self._checkpointed_sequence = 0
        self._known_sequence = 0
        self._known_position = position
        self.last_checkpointed = position

    # -- numbering -------------------------------------------------------------------------------------
    def numbered(self, message: OutstandingMessage) -> tuple[OutstandingMessage, bool]:
        """``message`` with the next sequence number and the position before it, and True; a replayed
        parked message or one numbered already comes back as it is, with False."""
        if message.is_replayed or message.sequence is not None:
            return message, False
        return replace(message, sequence=self._next_sequence, previous_position=self._known_position), True

    def taken(self, message: OutstandingMessage) -> None:
        """A message :meth:`numbered` numbered went out (or its consumer skipped it): its number is used."""
        self._known_sequence = self._next_sequence
        self._next_sequence += 1
        self._known_position = message.position

    def skipped(self, position: int, count: int) -> None:
        """``count`` events up to ``position`` a filter left out: they take numbers as if handed out."""
        self._known_position = position
        self._next_sequence += count
        self._known_sequence = self._next_sequence - 1

    # -- the checkpoint --------------------------------------------------------------------------------
    def try_mark(self, oldest_unanswered: OutstandingMessage | None, is_time_check: bool) -> None:
        """Write the checkpoint if one is due (``is_time_check``: at a clock tick)."""
        if oldest_unanswered is not None:
            assert oldest_unanswered.sequence is not None
            sequence = oldest_unanswered.sequence - 1
            position = oldest_unanswered.previous_position
            if position is None:
                return  # the first message is out and not acknowledged, and there was no checkpoint
        else:
            sequence = self._known_sequence
            position = self._known_position
        if sequence == -1 or position is None:
            return
        settings = self.settings
        difference = sequence - self._checkpointed_sequence
        now = self._clock.monotonic()
        after = settings.checkpoint_after_ms
        elapsed_enough = self._checkpoint_time is None or (
            after > 0 and now - self._checkpoint_time >= after / 1000
        )
        if not elapsed_enough and difference < settings.max_checkpoint_count:
            return
        if (difference >= settings.min_checkpoint_count and is_time_check) or (
            difference >= settings.max_checkpoint_count
        ):
            self._checkpoint_time = now
            self._checkpointed_sequence = sequence
            self._write(position)
            self.last_checkpointed = position

    def _write(self, position: int) -> None:
        if self._writing:
            return
        self._writing = True
        text = self.source.format(position)
        assert text is not None

        def written(_: Any) -> None:
            self._writing = False

        def failed(exc: BaseException) -> None:
            self._writing = False
            self.logger.warning("Error writing checkpoint for %s to %s: %s", self.key, self.stream, exc)

        self._io.run(
            f"writing the checkpoint of {self.key}",
            self._store.write_checkpoint,
            self.stream,
            text,
            then=written,
            failed=failed,
        )
