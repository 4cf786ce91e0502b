"""Progress of a backup or restore: steps, files and bytes done of total, speed.

Every report goes to listeners: the command line prints them as JSON lines (``--progress-json``),
the node keeps the latest for ``GET /admin/backup/current``. Log lines carry plain words
(``BACKUP step 2 of 4 started``) so that a log search finds them.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any

from evdb.clock import Clock, SystemClock

__all__ = ["Progress", "Step", "json_lines_listener"]

Listener = Callable[[dict[str, Any]], None]


@dataclass
class Step:
    number: int  # 0 for evdb's own steps (prepare, finish), else the spec's step number
    part: str  # "index", "log", "full", "restore", "backup"
    name: str
    files_total: int = 0
    bytes_total: int = 0
    files_done: int = 0
    bytes_done: int = 0
    files_skipped: int = 0


@dataclass
class Progress:
    """Reports of one run. ``report_every`` bounds how often a large file's copy reports."""

    operation: str  # "full", "differential", "restore", "verify"
    logger: logging.Logger
    clock: Clock = field(default_factory=SystemClock)
    listeners: list[Listener] = field(default_factory=list)
    report_every: float = 0.5
    step: Step | None = None
    files_copied: int = 0
    files_skipped: int = 0
    bytes_copied: int = 0  # bytes written into the backup (or the node's folders): data, not holes
    #: bytes of data a differential found already in the backup (checked, not written)
    bytes_unchanged: int = 0
    files_removed: int = 0
    copied: list[str] = field(default_factory=list)  # relative paths, in the order they were copied
    state: str = "running"
    error: str | None = None

    def __post_init__(self) -> None:
        self._started = self.clock.monotonic()
        self._ended: float | None = None  # monotonic time of finish(): the figures stop moving then
        self.finished_at: float | None = None  # wall-clock time of finish()
        self._last_report = -1e9
        self._lock = threading.Lock()

    # -- reports ---------------------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        now = self._ended if self._ended is not None else self.clock.monotonic()
        elapsed = max(1e-9, now - self._started)
        body: dict[str, Any] = {
            "operation": self.operation,
            "state": self.state,
            "elapsedSeconds": round(elapsed, 3),
            "filesCopied": self.files_copied,
            "filesSkipped": self.files_skipped,
            "filesRemoved": self.files_removed,
            "bytesCopied": self.bytes_copied,
            "bytesUnchanged": self.bytes_unchanged,
            "bytesPerSecond": round(self.bytes_copied / elapsed),
        }
        if self.step is not None:
            s = self.step
            body.update(
                {
                    "part": s.part,
                    "step": s.number,
                    "stepName": s.name,
                    "filesDone": s.files_done,
                    "filesTotal": s.files_total,
                    "bytesDone": s.bytes_done,
                    "bytesTotal": s.bytes_total,
                }
            )
        if self.error:
            body["error"] = self.error
        if self.finished_at is not None:
            body["finishedAt"] = self.finished_at
        return body

    @property
    def _prefix(self) -> str:
        return (
            self.operation.upper() if self.operation in ("restore", "verify") else f"BACKUP {self.operation}"
        )

    def _label(self) -> str:
        s = self.step
        if s is None:
            return "step"
        if not s.number:
            return "step"
        return f"step {s.number} ({s.part} part)" if s.part in ("index", "log") else f"step {s.number}"

    def _emit(self) -> None:
        self._last_report = self.clock.monotonic()
        body = self.snapshot()
        for listener in list(self.listeners):
            listener(body)

    # -- events ----------------------------------------------------------------------------------------
    def begin_step(self, part: str, number: int, name: str, files: int = 0, size: int = 0) -> None:
        with self._lock:
            self.step = Step(number, part, name, files, size)
        self.logger.info(
            "%s %s started: %s (%d files, %d bytes)", self._prefix, self._label(), name, files, size
        )
        self._emit()

    def add_to_step(self, files: int, size: int) -> None:
        """More work found inside a step (the differential index loop lists files as it goes)."""
        assert self.step is not None
        self.step.files_total += files
        self.step.bytes_total += size

    def bytes_moved(self, count: int) -> None:
        self.bytes_copied += count
        if self.step is not None:
            self.step.bytes_done += count
        if self.clock.monotonic() - self._last_report >= self.report_every:
            self._emit()

    def bytes_kept(self, count: int) -> None:
        """Bytes of data a differential found already in the backup: the step's work, not copied."""
        self.bytes_unchanged += count
        if self.step is not None:
            self.step.bytes_done += count
        if self.clock.monotonic() - self._last_report >= self.report_every:
            self._emit()

    def bytes_passed(self, count: int) -> None:
        """Holes and blocks of zeros not written (the copy reads zeros there): the step's work only."""
        if self.step is not None:
            self.step.bytes_done += count
        if self.clock.monotonic() - self._last_report >= self.report_every:
            self._emit()

    def file_copied(self, relative: str, size: int) -> None:
        self.files_copied += 1
        self.copied.append(relative)
        if self.step is not None:
            self.step.files_done += 1
        self.logger.debug("copied %s (%d bytes)", relative, size)
        self._emit()

    def file_skipped(self, relative: str) -> None:
        self.files_skipped += 1
        if self.step is not None:
            self.step.files_done += 1
            self.step.files_skipped += 1

    def file_removed(self, relative: str) -> None:
        self.files_removed += 1
        self.logger.info("%s removed %s", self._prefix, relative)

    def end_step(self) -> None:
        s = self.step
        if s is not None:
            self.logger.info(
                "%s %s finished: %s (%d files copied, %d skipped, %d bytes)",
                self._prefix,
                self._label(),
                s.name,
                s.files_done - s.files_skipped,
                s.files_skipped,
                s.bytes_done,
            )
        self._emit()

    def finish(self, state: str, error: str | None = None) -> None:
        """The run ended (``state``): its duration and speed are final from now on."""
        self.state = state
        self.error = error
        self._ended = self.clock.monotonic()
        self.finished_at = self.clock.time()
        self._emit()


def json_lines_listener(stream: IO[str]) -> Listener:
    def listen(body: dict[str, Any]) -> None:
        stream.write(json.dumps(body, separators=(",", ":")) + "\n")
        stream.flush()

    return listen
