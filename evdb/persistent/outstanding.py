"""The messages a group handed out and has no answer for yet, each with the time it times out
(KurrentDB's OutstandingMessageCache)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from evdb.persistent.model import OutstandingMessage

__all__ = ["OutstandingMessages", "lowest_sequence"]


class OutstandingMessages:
    """Handed-out messages by event id; a message answered (ack, nack), retried or parked leaves."""

    def __init__(self) -> None:
        self._messages: dict[bytes, tuple[float, OutstandingMessage]] = {}

    def __len__(self) -> int:
        return len(self._messages)

    def __iter__(self) -> Iterator[OutstandingMessage]:
        return (message for _, message in self._messages.values())

    def add(self, message: OutstandingMessage, expires: float) -> bool:
        """Hold ``message`` until ``expires`` (the clock's monotonic seconds); False, and nothing
        changes, when a message with its event id is already held."""
        if message.event_id in self._messages:
            return False
        self._messages[message.event_id] = (expires, message)
        return True

    def get(self, event_id: bytes) -> OutstandingMessage | None:
        entry = self._messages.get(event_id)
        return entry[1] if entry is not None else None

    def remove(self, event_id: bytes) -> None:
        self._messages.pop(event_id, None)

    def expire(self, now: float) -> list[OutstandingMessage]:
        """Take out the messages whose time is up at ``now``, the earliest to expire first."""
        expired = sorted(
            ((expires, message) for expires, message in self._messages.values() if expires <= now),
            key=lambda item: item[0],
        )
        for _, message in expired:
            del self._messages[message.event_id]
        return [message for _, message in expired]


def lowest_sequence(messages: Iterable[OutstandingMessage]) -> OutstandingMessage | None:
    """The message with the lowest sequence number (the first of equals; replayed parked messages have
    none and do not count)."""
    lowest: OutstandingMessage | None = None
    lowest_number = 0
    for message in messages:
        if message.is_replayed or message.sequence is None:
            continue
        if lowest is None or message.sequence < lowest_number:
            lowest, lowest_number = message, message.sequence
    return lowest
