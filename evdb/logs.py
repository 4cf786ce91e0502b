"""Node logs: JSON lines in the Log folder, readable lines on the console, one logger per node.

Several nodes can run in one process (tests): each gets its own logger ``evdb.node.<name>`` with
its own handlers, and nothing touches the root logger. Level names are KurrentDB's.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
from datetime import UTC, datetime
from typing import Any, TextIO

__all__ = ["LEVELS", "configure_node_logging", "read_log_lines", "set_level"]

VERBOSE = 5
logging.addLevelName(VERBOSE, "VERBOSE")
LEVELS = {
    "Verbose": VERBOSE,
    "Debug": logging.DEBUG,
    "Information": logging.INFO,
    "Warning": logging.WARNING,
    "Error": logging.ERROR,
    "Fatal": logging.CRITICAL,
}
_SHORT = {
    VERBOSE: "VRB",
    logging.DEBUG: "DBG",
    logging.INFO: "INF",
    logging.WARNING: "WRN",
    logging.ERROR: "ERR",
    logging.CRITICAL: "FTL",
}
_KURRENT_NAMES = {v: k for k, v in LEVELS.items()}


class JsonLineFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "@t": datetime.fromtimestamp(record.created, UTC)
            .isoformat(timespec="microseconds")
            .replace("+00:00", "Z"),
            "@l": _KURRENT_NAMES.get(record.levelno, record.levelname),
            "@m": record.getMessage(),
            "ProcessId": record.process,
            "ThreadId": record.thread,
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            out.update(fields)
        if record.exc_info:
            out["@x"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


class ConsoleFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        when = datetime.fromtimestamp(record.created, UTC).strftime("%H:%M:%S.%f")[:-3]
        text = f"[{record.process:5},{record.thread % 100000:5},{when},{_SHORT.get(record.levelno, record.levelname)}] {record.getMessage()}"
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


class DailyJsonFileHandler(logging.Handler):
    """Appends JSON lines to ``<folder>/log-YYYYMMDD.json`` (a new file each UTC day)."""

    def __init__(self, folder: str) -> None:
        super().__init__()
        os.makedirs(folder, exist_ok=True)
        self.folder = folder
        self._day: str | None = None
        self._file: TextIO | None = None
        self._file_lock = threading.Lock()
        self.setFormatter(JsonLineFormatter())

    @property
    def current_path(self) -> str:
        return os.path.join(self.folder, f"log-{datetime.now(UTC).strftime('%Y%m%d')}.json")

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record)
            day = datetime.fromtimestamp(record.created, UTC).strftime("%Y%m%d")
            with self._file_lock:
                if day != self._day or self._file is None:
                    if self._file is not None:
                        self._file.close()
                    self._file = open(os.path.join(self.folder, f"log-{day}.json"), "a", encoding="utf-8")  # noqa: SIM115
                    self._day = day
                self._file.write(line + "\n")
                self._file.flush()
        except Exception:
            self.handleError(record)

    def close(self) -> None:
        with self._file_lock:
            if self._file is not None:
                self._file.close()
                self._file = None
        super().close()


def configure_node_logging(
    *,
    node_name: str,
    log_dir: str | None,
    level: str = "Information",
    console_format: str = "Plain",
    stream: TextIO | None = None,
) -> logging.Logger:
    """A logger for one node: JSON lines under ``<log_dir>/<node_name>/``, text (or JSON) on ``stream``."""
    logger = logging.getLogger(f"evdb.node.{node_name}")
    for handler in list(logger.handlers):
        handler.close()
        logger.removeHandler(handler)
    logger.propagate = False
    console = logging.StreamHandler(stream or sys.stderr)
    console.setFormatter(JsonLineFormatter() if console_format == "Json" else ConsoleFormatter())
    logger.addHandler(console)
    if log_dir:
        logger.addHandler(DailyJsonFileHandler(os.path.join(log_dir, node_name)))
    set_level(logger, level)
    return logger


def set_level(logger: logging.Logger, level: str) -> None:
    if level not in LEVELS:
        raise ValueError(f"unknown log level {level!r}; use one of {', '.join(LEVELS)}")
    logger.setLevel(LEVELS[level])


def log_files(logger: logging.Logger) -> list[str]:
    return [h.current_path for h in logger.handlers if isinstance(h, DailyJsonFileHandler)]


def read_log_lines(path: str) -> list[dict[str, Any]]:
    """The JSON objects of a log file (a torn last line, from a crash, is skipped)."""
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out
