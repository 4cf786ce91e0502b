"""What the writer answers and what it is asked: the answers to writes (a concurrent future, or an
event loop's future settled with one wake-up per commit group) and the write requests."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from evdb.errors import EvdbError
from evdb.streams import ANY, NewEvent


class Answer(Protocol):
    """Where the writer puts a request's result: a concurrent future (sync callers and the
    ``*_async`` methods), or a :class:`LoopAnswer` (the ``*_on_loop`` methods)."""

    def done(self) -> bool: ...

    def set_result(self, result: Any) -> None: ...

    def set_exception(self, exception: BaseException) -> None: ...


#: (asyncio future, result, exception) settled together on their event loop
_Settlement = tuple["asyncio.Future[Any]", Any, BaseException | None]
_answer_batches = threading.local()


class LoopAnswer:
    """The answer to a write awaited on an event loop. The writer answers a group's requests with
    one ``call_soon_threadsafe`` per event loop (:func:`answers_batched`), not one wake-up per
    request as ``asyncio.wrap_future`` costs; answered on the loop's own thread (the replication
    gate), it is settled at once, with no wake-up at all."""

    __slots__ = ("_settled", "future", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.future: asyncio.Future[Any] = loop.create_future()
        self._settled = False

    def done(self) -> bool:
        return self._settled

    def set_result(self, result: Any) -> None:
        self._settle(result, None)

    def set_exception(self, exception: BaseException) -> None:
        self._settle(None, exception)

    def _settle(self, result: Any, exception: BaseException | None) -> None:
        if self._settled:
            return
        self._settled = True
        batch: dict[asyncio.AbstractEventLoop, list[_Settlement]] | None = getattr(
            _answer_batches, "batch", None
        )
        if batch is not None:
            batch.setdefault(self.loop, []).append((self.future, result, exception))
        else:
            _deliver(self.loop, [(self.future, result, exception)])


def _settle_all(settlements: list[_Settlement]) -> None:
    """On the event loop: settle each future its waiter has not given up on (cancelled)."""
    for future, result, exception in settlements:
        if future.done():
            continue
        if exception is not None:
            future.set_exception(exception)
        else:
            future.set_result(result)


def _deliver(loop: asyncio.AbstractEventLoop, settlements: list[_Settlement]) -> None:
    if asyncio._get_running_loop() is loop:
        _settle_all(settlements)
        return
    # a closed loop has no waiter left to answer
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(_settle_all, settlements)


@contextlib.contextmanager
def answers_batched() -> Iterator[None]:
    """Collect the loop answers settled inside (a commit group's), then wake each loop once."""
    if getattr(_answer_batches, "batch", None) is not None:  # nested: the outer one delivers
        yield
        return
    batch: dict[asyncio.AbstractEventLoop, list[_Settlement]] = {}
    _answer_batches.batch = batch
    try:
        yield
    finally:
        _answer_batches.batch = None
        for loop, settlements in batch.items():
            _deliver(loop, settlements)


# -- write requests ----------------------------------------------------------------------------------
@dataclass
class Request:
    future: Answer = field(default_factory=concurrent.futures.Future)


@dataclass
class Append(Request):
    stream: str = ""
    events: Sequence[NewEvent] = ()
    expected_version: int = ANY
    event_types: list[bytes] | None = None  # encoded, from validation
    payload_size: int = 0  # bytes of event types, data and metadata


@dataclass
class Delete(Request):
    stream: str = ""
    expected_version: int = ANY
    hard: bool = False


STOP = object()


def concurrent_answer(answer: Answer) -> concurrent.futures.Future:
    """The concurrent future of a request made through a sync or ``*_async`` method."""
    assert isinstance(answer, concurrent.futures.Future)
    return answer


def group_failure(exc: BaseException) -> BaseException:
    """What each append of a failed group is told: the same kind of error as the write that failed (a
    full disk stays a full disk, so HTTP answers 507 to every one of them), each its own instance."""
    if isinstance(exc, OSError) and exc.errno is not None:
        return OSError(exc.errno, exc.strerror or str(exc), exc.filename)
    return EvdbError(f"The write failed: {exc}")
