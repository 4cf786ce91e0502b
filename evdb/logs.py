"""Node logs: JSON lines in the Log folder, readable lines on the console, one logger per node.

Several nodes can run in one process (tests): each gets its own logger ``evdb.node.<name>`` with its
own handlers and ``propagate`` off, and nothing touches the root logger. Components log to the node's
logger or to a child of it (``logger.getChild("scavenge")``), which reaches the same handlers.

File: ``<log_dir>/<node_name>/log-YYYYMMDD.json`` (a new file each UTC day), one JSON object per line::

    {"@t": "2024-05-01T12:00:00.123456Z", "@l": "Information", "@m": "Scavenge Started.", ...fields}

Console (``Plain``): ``[  PID,THREAD,HH:MM:SS.fff,INF] message`` (UTC time); ``Json`` writes the file's lines.
Level names are KurrentDB's: Verbose, Debug, Information, Warning, Error, Fatal.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import sys
import threading
from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal
from typing import Any, TextIO

__all__ = [
    "LEVELS",
    "VERBOSE",
    "close_node_logging",
    "configure_node_logging",
    "log_files",
    "n0",
    "node_log_files",
    "read_log_lines",
    "set_level",
]

VERBOSE = 5  # below DEBUG, like Serilog's Verbose
logging.addLevelName(VERBOSE, "VERBOSE")

#: KurrentDB's level names and the logging levels they map to.
LEVELS = {
    "Verbose": VERBOSE,
    "Debug": logging.DEBUG,
    "Information": logging.INFO,
    "Warning": logging.WARNING,
    "Error": logging.ERROR,
    "Fatal": logging.CRITICAL,
}
_NAME_OF_LEVEL = {number: name for name, number in LEVELS.items()}
_SHORT = {
    VERBOSE: "VRB",
    logging.DEBUG: "DBG",
    logging.INFO: "INF",
    logging.WARNING: "WRN",
    logging.ERROR: "ERR",
    logging.CRITICAL: "FTL",
}
_NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")
_FILE_NAME = re.compile(r"^log-\d{8}\.json$")


def n0(value: float) -> str:
    """A number as KurrentDB's log lines write ``{value:N0}`` (.NET's N0 format, invariant culture): a
    whole number, halves rounded away from zero, thousands separated by commas (``120.0`` → ``120``,
    ``1234.5`` → ``1,235``)."""
    if not math.isfinite(value):
        return str(value)
    whole = Decimal(repr(float(value))).quantize(Decimal(1), rounding=ROUND_HALF_UP)
    return f"{int(whole):,}"


def _level_name(levelno: int) -> str:
    return _NAME_OF_LEVEL.get(levelno) or logging.getLevelName(levelno)


def _thread_id(record: logging.LogRecord) -> int:
    """The OS thread id (as ``top -H`` shows it) when the record is formatted in its own thread."""
    if record.thread == threading.get_ident():
        return threading.get_native_id()
    return record.thread or 0


class JsonLineFormatter(logging.Formatter):
    """One compact JSON object per record; ``extra={"fields": {...}}`` adds structured fields."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "@t": datetime.fromtimestamp(record.created, UTC)
            .isoformat(timespec="microseconds")
            .replace("+00:00", "Z"),
            "@l": _level_name(record.levelno),
            "@m": record.getMessage(),
        }
        if record.exc_info:
            out["@x"] = self.formatException(record.exc_info)
        out["SourceContext"] = record.name
        out["ProcessId"] = record.process
        out["ThreadId"] = _thread_id(record)
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            for key, value in fields.items():
                out.setdefault(str(key), value)  # the record's own keys win over a field of the same name
        return json.dumps(out, default=str, ensure_ascii=False)


class ConsoleFormatter(logging.Formatter):
    """``[  PID,THREAD,HH:MM:SS.fff,LVL] message``, KurrentDB's console layout (time in UTC)."""

    def format(self, record: logging.LogRecord) -> str:
        when = datetime.fromtimestamp(record.created, UTC).strftime("%H:%M:%S.%f")[:-3]
        level = _SHORT.get(record.levelno, record.levelname[:3].upper())
        text = f"[{record.process:5},{_thread_id(record):2},{when},{level}] {record.getMessage()}"
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


class DailyJsonFileHandler(logging.Handler):
    """Appends JSON lines to ``<folder>/log-YYYYMMDD.json``, one file per UTC day of the record."""

    def __init__(self, folder: str) -> None:
        super().__init__()
        os.makedirs(folder, exist_ok=True)
        self.folder = folder
        self._day: str | None = None
        self._file: TextIO | None = None
        self.setFormatter(JsonLineFormatter())

    def path_for(self, day: str) -> str:
        return os.path.join(self.folder, f"log-{day}.json")

    @property
    def current_path(self) -> str:
        """The file of today (UTC); it exists once something was logged today."""
        return self.path_for(datetime.now(UTC).strftime("%Y%m%d"))

    def emit(self, record: logging.LogRecord) -> None:  # called with self.lock held
        try:
            line = self.format(record)
            day = datetime.fromtimestamp(record.created, UTC).strftime("%Y%m%d")
            if day != self._day or self._file is None:
                if self._file is not None:
                    self._file.close()
                self._file = open(self.path_for(day), "a", encoding="utf-8")  # noqa: SIM115
                self._day = day
            self._file.write(line + "\n")
            self._file.flush()
        except Exception:
            self.handleError(record)

    def close(self) -> None:
        with self.lock:  # type: ignore[union-attr]
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
    """Set up and return the logger of one node; configuring the same name again replaces its handlers.

    ``log_dir=None`` writes no files (MemDb tests, tools). ``stream`` defaults to ``sys.stderr`` at the
    time of the call. ``console_format`` is ``Plain`` or ``Json``.
    """
    if not _NODE_NAME.match(node_name):
        raise ValueError(
            f"invalid node name {node_name!r}: use letters, digits, '-' and '_' (it names a logger and a folder)"
        )
    if console_format not in ("Plain", "Json"):
        raise ValueError(f"unknown console log format {console_format!r}; use Plain or Json")
    levelno = _level_number(level)
    logger = logging.getLogger(f"evdb.node.{node_name}")
    close_node_logging(logger)
    logger.propagate = False
    console = logging.StreamHandler(stream if stream is not None else sys.stderr)
    console.setFormatter(JsonLineFormatter() if console_format == "Json" else ConsoleFormatter())
    logger.addHandler(console)
    if log_dir:
        logger.addHandler(DailyJsonFileHandler(os.path.join(log_dir, node_name)))
    logger.setLevel(levelno)
    return logger


def close_node_logging(logger: logging.Logger) -> None:
    """Remove and close the logger's handlers (its files); call when the node stops."""
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
        handler.close()


def _level_number(level: str) -> int:
    for name, number in LEVELS.items():
        if level.lower() == name.lower():
            return number
    raise ValueError(f"unknown log level {level!r}; use one of {', '.join(LEVELS)}")


def set_level(logger: logging.Logger, level: str) -> None:
    """Change the lowest level logged, at run time (``LogLevel`` is reloadable). Names are KurrentDB's."""
    logger.setLevel(_level_number(level))


def log_files(logger: logging.Logger) -> list[str]:
    """Today's JSON log file of each file handler of a node's logger."""
    return [h.current_path for h in logger.handlers if isinstance(h, DailyJsonFileHandler)]


def node_log_files(log_dir: str, node_name: str) -> list[str]:
    """All JSON log files of a node, oldest first."""
    folder = os.path.join(log_dir, node_name)
    try:
        names = sorted(n for n in os.listdir(folder) if _FILE_NAME.match(n))
    except FileNotFoundError:
        return []
    return [os.path.join(folder, n) for n in names]


def read_log_lines(path: str) -> list[dict[str, Any]]:
    """The JSON objects of a log file, in order. Lines that are not JSON objects (a torn last line
    after a crash, a line still being written) are skipped."""
    out = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                out.append(value)
    return out
