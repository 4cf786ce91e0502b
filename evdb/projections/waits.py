"""A projection's reads while the archive cannot be reached: it waits and reads again (issue 37).

A projection reads ``$all`` from its checkpoint, and the last event of each stream it writes to; on a
node whose oldest chunks are in the archive only (docs/operations/archive.md) those reads go to the
archive, and while it cannot be reached, is too slow or answers 5xx they raise
:class:`~evdb.errors.ArchiveUnavailable`. That is no fault of the projection's: as KurrentDB's
projection readers send a read again after a time-out, the runner waits (:data:`FIRST_WAIT_SECONDS`,
doubling up to :data:`LONGEST_WAIT_SECONDS`), says so in its status reason (``stateReason``) and in
one warning per attempt naming the archive, and reads again; it goes on from where it was when the
archive answers (``Projection ... resumed``). A stop ends the wait at once. Every other error still
faults the projection.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TypeVar

from evdb.clock import Clock
from evdb.errors import ArchiveUnavailable
from evdb.projections.model import Runtime

__all__ = ["FIRST_WAIT_SECONDS", "LONGEST_WAIT_SECONDS", "through_archive"]

FIRST_WAIT_SECONDS = 1.0
LONGEST_WAIT_SECONDS = 30.0

T = TypeVar("T")


async def through_archive(rt: Runtime, call: Callable[[], T], clock: Clock, log: logging.Logger) -> T | None:
    """``call()`` on a worker thread, called again after a wait while it raises ArchiveUnavailable (see
    the module); None when the projection is stopped while it waits."""
    attempt = 0
    while True:
        try:
            result = await asyncio.to_thread(call)
        except ArchiveUnavailable as exc:
            if rt.stopping:
                return None
            attempt += 1
            wait = min(FIRST_WAIT_SECONDS * 2 ** (attempt - 1), LONGEST_WAIT_SECONDS)
            rt.reason = f"Waiting for the archive (attempt {attempt}, next in {wait:g} s): {exc}"
            log.warning(
                "Projection %s waits for the archive at position %d (attempt %d, next in %g s): %s",
                rt.name,
                rt.position,
                attempt,
                wait,
                exc,
            )
            if not await _sleep_unless_stopped(rt, clock, wait):
                return None
            continue
        if attempt:
            rt.reason = ""
            log.info("Projection %s resumed at position %d: the archive answers again", rt.name, rt.position)
        return result


async def _sleep_unless_stopped(rt: Runtime, clock: Clock, seconds: float) -> bool:
    """Sleep ``seconds`` on ``clock``; False when the runner is told to stop meanwhile."""
    assert rt.wakeup is not None  # made as the runner starts
    sleep = asyncio.ensure_future(clock.sleep(seconds))
    try:
        await asyncio.wait([sleep, rt.wakeup], return_when=asyncio.FIRST_COMPLETED)
    finally:
        sleep.cancel()
    return not rt.stopping
