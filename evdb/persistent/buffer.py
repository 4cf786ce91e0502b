"""A group's buffer of messages waiting to go out (KurrentDB's StreamBuffer): retries first, then what
history reading or the live feed handed over."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

from evdb.persistent.model import OutstandingMessage

__all__ = ["StreamBuffer"]


class StreamBuffer:
    """KurrentDB's StreamBuffer: retries first, then the read (or live) messages; a bounded live
    queue holds live events while history is still being read."""

    def __init__(self, max_size: int, max_live: int, initial: int | None, start_in_history: bool) -> None:
        self.max_size = max_size
        self.initial = initial
        self.live = not start_in_history
        self.retry: deque[OutstandingMessage] = deque()
        self.buffer: deque[OutstandingMessage] = deque()
        self.live_buffer: deque[OutstandingMessage] = deque(maxlen=max_live)

    def can_accept(self, count: int) -> bool:
        return self.max_size - (len(self.retry) + len(self.buffer)) > count

    def _switch_to_live(self) -> None:
        self.buffer.extend(self.live_buffer)
        self.live_buffer.clear()
        self.live = True

    def add_retry_to_end(self, message: OutstandingMessage) -> None:
        self.retry.append(message)

    def add_retry(self, message: OutstandingMessage) -> None:
        if message.is_replayed:
            self.retry.append(message)
            return
        assert message.position is not None
        for index, other in enumerate(self.retry):
            if other.position is not None and message.position < other.position:
                self.retry.insert(index, message)
                return
        self.retry.append(message)

    def add_live(self, message: OutstandingMessage) -> None:
        if self.live:
            if len(self.buffer) < self.max_size:
                self.buffer.append(message)
            else:
                self.live = False
        self.live_buffer.append(message)

    def add_read(self, message: OutstandingMessage) -> None:
        if self.live:
            return
        assert message.position is not None
        if self.initial is not None and message.position <= self.initial:
            return
        head = self.live_buffer[0].position if self.live_buffer else None
        if head is None or message.position < head:
            self.buffer.append(message)
        elif head < message.position:
            while self.live_buffer and (self.live_buffer[0].position or 0) < message.position:
                self.live_buffer.popleft()
            self._switch_to_live()
        else:
            self._switch_to_live()

    def try_move_to_live(self) -> bool:
        if not self.live_buffer:
            self.live = True
            return True
        return False

    def scan(self) -> Iterator[tuple[OutstandingMessage, bool]]:
        """(message, is_retry) in the order they go out; the caller removes what it sends."""
        for message in list(self.retry):
            yield message, True
        for message in list(self.buffer):
            yield message, False

    def remove(self, message: OutstandingMessage, is_retry: bool) -> None:
        (self.retry if is_retry else self.buffer).remove(message)
