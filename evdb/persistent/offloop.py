"""Runs the persistent subscriptions' blocking store calls off the event loop and hands their results back
on it, as KurrentDB's IO dispatcher answers with messages."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

__all__ = ["Io"]


class Io:
    """Runs the store's blocking calls off the loop and hands their results back on it."""

    def __init__(self, logger: logging.Logger) -> None:
        self.logger = logger
        self._tasks: set[asyncio.Task] = set()

    def run(
        self,
        what: str,
        fn: Callable[..., Any],
        *args: Any,
        then: Callable[[Any], None] | None = None,
        failed: Callable[[BaseException], None] | None = None,
    ) -> None:
        async def go() -> None:
            try:
                result = await asyncio.to_thread(fn, *args)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if failed is not None:
                    failed(exc)
                else:
                    self.logger.error("Persistent subscriptions: %s failed: %s", what, exc)
                return
            if then is not None:
                then(result)

        task = asyncio.get_running_loop().create_task(go(), name=f"persistent: {what}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def cancel(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        self._tasks.clear()

    @property
    def busy(self) -> int:
        return len(self._tasks)
