"""The metrics configuration, in the shape of KurrentDB's ``metricsconfig.json``.

The node reads ``metricsconfig.json`` from the directory of its configuration file (``--config``) at
start; without that file it uses KurrentDB's shipped defaults (below). Keys are matched without regard
to case (as .NET's configuration binder does), ``//`` comments are allowed (KurrentDB's file has them),
and a key the file leaves out keeps its default. docs/metrics.md describes each key.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from evdb.errors import InvalidOption

__all__ = ["FILE_NAME", "MetricsConfig", "MetricsConfigError", "load_metrics_config"]

FILE_NAME = "metricsconfig.json"

_CORE_METERS = ("kurrentdb.core", "eventstore.core")
_PROJECTION_METERS = ("kurrentdb.projections.core", "eventstore.projections.core")

#: KurrentDB's shipped defaults, per section (the sections evdb has a figure for)
_DEFAULTS: dict[str, Any] = {
    "ExpectedScrapeIntervalSeconds": 15,
    "Meters": ["KurrentDB.Core", "KurrentDB.Projections.Core"],
    "Statuses": {"Index": True, "Node": True, "Scavenge": True},
    "ElectionsCount": True,
    "PersistentSubscriptionStats": True,
    "ProjectionStats": True,
    "Checkpoints": {"Writer": True, "Index": True, "Replication": True, "Chaser": True, "Epoch": True},
    "Events": {"Read": True, "Written": True},
    "IncomingGrpcCalls": {
        "Current": True,
        "Total": True,
        "Failed": True,
        "Unimplemented": True,
        "DeadlineExceeded": True,
    },
    "Writer": {"FlushSize": True, "FlushDuration": True},
    "CacheHitsMisses": {"StreamInfo": True, "Chunk": False},
    "CacheResources": True,
    "System": {
        "Cpu": True,
        "LoadAverage1m": True,
        "LoadAverage5m": True,
        "LoadAverage15m": True,
        "FreeMem": True,
        "TotalMem": True,
        "DriveTotalBytes": True,
        "DriveUsedBytes": True,
    },
    "Process": {
        "UpTime": True,
        "Cpu": True,
        "MemWorkingSet": True,
        "MemPagedBytes": False,
        "MemVirtualBytes": False,
        "ThreadCount": True,
        "ThreadPoolPendingWorkItemCount": True,
        "LockContentionCount": True,
        "ExceptionCount": True,
        "Gen0CollectionCount": True,
        "Gen1CollectionCount": True,
        "Gen2CollectionCount": True,
        "Gen0Size": True,
        "Gen1Size": True,
        "Gen2Size": True,
        "LohSize": True,
        "TimeInGc": True,
        "GcPauseDuration": True,
        "HeapSize": True,
        "HeapFragmentation": True,
        "TotalAllocatedBytes": True,
        "DiskReadBytes": True,
        "DiskReadOps": True,
        "DiskWrittenBytes": True,
        "DiskWrittenOps": True,
    },
    # KurrentDB ships Processing off (a histogram per queue and message type there); evdb has one
    # processing queue (the writer's group commits), observed once per group: on by default
    "Queues": {"Length": True, "Processing": True},
}


class MetricsConfigError(InvalidOption):
    """The metrics configuration file cannot be used (the message names the file)."""


@dataclass(frozen=True)
class MetricsConfig:
    expected_scrape_interval_seconds: int = 15
    core: bool = True  # the KurrentDB.Core meter: every kurrentdb_* series but the projections'
    projections: bool = True  # the KurrentDB.Projections.Core meter: kurrentdb_projection_*
    sections: dict[str, Any] = field(default_factory=lambda: _lowered(_DEFAULTS))
    path: str | None = None  # the file read, None for the defaults

    def on(self, section: str, key: str | None = None) -> bool:
        """Whether ``section`` (a flag) or ``section``'s ``key`` is enabled (and the core meter is)."""
        if not self.core:
            return False
        value = self.sections.get(section.lower())
        if key is not None:
            value = value.get(key.lower()) if isinstance(value, dict) else None
        return value is True

    @property
    def projection_stats(self) -> bool:
        return self.projections and self.sections.get("projectionstats") is True

    @property
    def checkpoints(self) -> list[str]:
        """The checkpoint names to export, lowercase as KurrentDB labels them."""
        chosen = self.sections.get("checkpoints", {})
        return [name for name, value in chosen.items() if value is True] if self.core else []

    @property
    def statuses(self) -> set[str]:
        chosen = self.sections.get("statuses", {})
        return {name for name, value in chosen.items() if value is True} if self.core else set()


def _lowered(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k).lower(): _lowered(v) for k, v in value.items()}
    return value


def _strip_comments(text: str) -> str:
    """``text`` without ``//`` comments outside strings."""
    out: list[str] = []
    i, n, in_string = 0, len(text), False
    while i < n:
        c = text[i]
        if in_string:
            out.append(c)
            if c == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 1
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
            out.append(c)
        elif text.startswith("//", i):
            while i < n and text[i] != "\n":
                i += 1
            continue
        else:
            out.append(c)
        i += 1
    return "".join(out)


def check_scrape_interval(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise MetricsConfigError(
            f"{where}: ExpectedScrapeIntervalSeconds must be a whole number, not {value!r}"
        )
    if value not in (0, 1, 5, 10) and value % 15 != 0:
        raise MetricsConfigError(
            f"{where}: ExpectedScrapeIntervalSeconds must be 0, 1, 5, 10 or a multiple of 15, but was {value}"
        )
    return value


def parse_metrics_config(text: str, where: str) -> MetricsConfig:
    """The configuration a ``metricsconfig.json`` text gives (keys it leaves out keep the defaults)."""
    try:
        given = json.loads(_strip_comments(text))
    except json.JSONDecodeError as exc:
        raise MetricsConfigError(f"{where}: not valid JSON: {exc}") from None
    if not isinstance(given, dict):
        raise MetricsConfigError(f"{where}: the top level must be a JSON object")
    sections = _lowered(_DEFAULTS)
    for key, value in _lowered(given).items():
        default = sections.get(key)
        if isinstance(default, dict) and isinstance(value, dict):
            sections[key] = {**default, **value}
        else:
            sections[key] = value
    interval = check_scrape_interval(sections["expectedscrapeintervalseconds"], where)
    meters = sections.get("meters")
    if not isinstance(meters, list):
        raise MetricsConfigError(f"{where}: Meters must be a list of meter names")
    names = {str(m).lower() for m in meters}
    return MetricsConfig(
        expected_scrape_interval_seconds=interval,
        core=bool(names & set(_CORE_METERS)),
        projections=bool(names & set(_PROJECTION_METERS)),
        sections=sections,
        path=where,
    )


def load_metrics_config(config_file: str | None) -> MetricsConfig:
    """``metricsconfig.json`` beside the node's configuration file, or the defaults without one."""
    if config_file is None:
        return MetricsConfig()
    path = os.path.join(os.path.dirname(os.path.abspath(config_file)), FILE_NAME)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return MetricsConfig()
    except OSError as exc:
        raise MetricsConfigError(f"{path}: cannot be read: {exc}") from None
    return parse_metrics_config(text, path)
