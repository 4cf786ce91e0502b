"""Follow the JSON log files of launched nodes and merge their lines (see evdb/logs.py for the format).

Only what was appended since the last read is read; a torn last line waits for its newline.
"""

from __future__ import annotations

import json
import os
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from tui.state import LogLine

__all__ = ["LOG_LEVELS", "LogBook", "LogFilter", "LogTail"]

LOG_LEVELS = ("Verbose", "Debug", "Information", "Warning", "Error", "Fatal")


class LogTail:
    """The newest ``log-*.json`` file under a node's log folder, followed from where it was read to."""

    def __init__(self, node: str, folder: str, backlog_bytes: int = 64 * 1024) -> None:
        self.node = node
        self.folder = Path(folder)
        self.backlog_bytes = backlog_bytes
        self._path: Path | None = None
        self._offset = 0
        self._partial = b""

    def _newest(self) -> Path | None:
        try:
            # a restarted node logs into a new node-<id>/ folder under a same-day file name: the
            # newest is the last written, not the one whose folder name sorts last
            files = sorted(self.folder.rglob("log-*.json"), key=lambda p: (p.name, p.stat().st_mtime))
        except OSError:
            return None
        return files[-1] if files else None

    def read_new(self) -> list[LogLine]:
        newest = self._newest()
        if newest is None:
            return []
        if newest != self._path:
            first = self._path is None
            self._path = newest
            self._partial = b""
            size = newest.stat().st_size
            self._offset = max(0, size - self.backlog_bytes) if first else 0
        try:
            with open(self._path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size < self._offset:  # replaced or truncated
                    self._offset = 0
                f.seek(self._offset)
                data = f.read(max(0, size - self._offset))
        except OSError:
            return []
        self._offset += len(data)
        data = self._partial + data
        lines = data.split(b"\n")
        self._partial = lines.pop()
        out = []
        for raw in lines:
            try:
                value = json.loads(raw)
            except ValueError:
                continue  # the cut first line of the backlog, or a torn line
            if isinstance(value, dict):
                out.append(
                    LogLine(
                        node=self.node,
                        time=str(value.get("@t", "")),
                        level=str(value.get("@l", "Information")),
                        message=str(value.get("@m", "")),
                        exception=value.get("@x"),
                    )
                )
        return out


@dataclass(frozen=True)
class LogFilter:
    """``node:NAME``, ``level:Warning`` (that level and above) and free words, in any order."""

    node: str = ""
    level: str = ""
    text: str = ""

    @classmethod
    def parse(cls, query: str) -> LogFilter:
        node = level = ""
        words = []
        for word in query.split():
            key, sep, value = word.partition(":")
            if sep and key.lower() == "node":
                node = value
            elif sep and key.lower() == "level":
                matches = [name for name in LOG_LEVELS if name.lower().startswith(value.lower())]
                if not matches or not value:
                    raise ValueError(f"unknown level {value!r}; use one of {', '.join(LOG_LEVELS)}")
                level = matches[0]
            else:
                words.append(word)
        return cls(node, level, " ".join(words))

    def matches(self, line: LogLine) -> bool:
        if self.node and self.node.lower() != line.node.lower():
            return False
        if self.level:
            rank = LOG_LEVELS.index(line.level) if line.level in LOG_LEVELS else len(LOG_LEVELS)
            if rank < LOG_LEVELS.index(self.level):
                return False
        return not self.text or self.text.lower() in line.message.lower()

    def describe(self) -> str:
        parts = [f"node:{self.node}"] if self.node else []
        if self.level:
            parts.append(f"level:{self.level}")
        if self.text:
            parts.append(self.text)
        return " ".join(parts)


class LogBook:
    """The merged lines of all followed nodes (the newest ``capacity``), in time order."""

    def __init__(self, capacity: int = 5000) -> None:
        self.tails: list[LogTail] = []
        self.lines: deque[LogLine] = deque(maxlen=capacity)
        self.version = 0

    def follow(self, tail: LogTail) -> None:
        self.tails.append(tail)

    def add(self, lines: list[LogLine]) -> None:
        if not lines:
            return
        lines = sorted(lines, key=lambda line: line.time)
        if self.lines and lines[0].time < self.lines[-1].time:
            merged = sorted([*self.lines, *lines], key=lambda line: line.time)
            self.lines.clear()
            self.lines.extend(merged)
        else:
            self.lines.extend(lines)
        self.version += 1

    def poll(self) -> int:
        new: list[LogLine] = []
        for tail in self.tails:
            new.extend(tail.read_new())
        self.add(new)
        return len(new)

    def filtered(self, flt: LogFilter, limit: int | None = None) -> list[LogLine]:
        out = [line for line in self.lines if flt.matches(line)]
        return out[-limit:] if limit else out
