"""A test reclaimer (evdb/storage/disk.py ``Reclaimer``) that shows what it did. ``from reclaiming
import RecordingReclaimer`` works in every test folder (pytest puts ``tests/`` on the path)."""

from __future__ import annotations

import os

from evdb.storage import disk

__all__ = ["RecordingReclaimer"]


class RecordingReclaimer(disk.Reclaimer):
    """A reclaimer of 4 KiB steps that does not pause: it records the file's size at each pause."""

    def __init__(self) -> None:
        super().__init__(step=4096, sleep=self._paused)
        self.sizes: dict[str, list[int]] = {}
        self.done: list[str] = []
        self._current: tuple[int, str] | None = None

    def _paused(self, seconds: float) -> None:
        assert self._current is not None
        fd, path = self._current
        self.sizes.setdefault(path, []).append(os.fstat(fd).st_size)

    def shrink(self, fd: int, path: str) -> None:
        self._current = (fd, path)
        super().shrink(fd, path)
        self.done.append(path)
