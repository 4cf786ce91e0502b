"""What every phase of one scavenge run shares: the database, the state, the point, the options,
the stop flag, the throttle, progress figures, and the log."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from evdb.clock import Clock
from evdb.database import Database
from evdb.scavenge.point import ScavengePoint
from evdb.scavenge.state import ScavengeState

__all__ = ["ChunkReport", "FusedMerge", "Progress", "RunContext", "ScavengeStopped", "Throttle"]


class ScavengeStopped(Exception):
    """Raised inside a phase when a stop was requested; the run ends as Stopped."""


@dataclass
class ChunkReport:
    start_number: int
    end_number: int
    weight: float
    executed: bool
    size_before: int
    size_after: int
    merged: bool = False


@dataclass(frozen=True)
class FusedMerge:
    """A merge made (and switched in) by chunk execution, reported in the merging phase."""

    start_number: int
    end_number: int
    file_name: str
    size_before: int  # the scavenged copies' files together
    size_after: int
    elapsed: float


@dataclass
class Progress:
    """Live figures of a run, for the HTTP progress endpoint and the dashboard (read without locks:
    every field is replaced whole)."""

    scavenge_id: str = ""
    phase: str = "Beginning"
    phase_started: float = 0.0
    started: float = 0.0
    threads: int = 1
    threshold: int = 0
    throttle_percent: int = 100
    point: dict[str, Any] | None = None
    chunks_total: int = 0
    chunks_done: int = 0
    current_chunk: str | None = None
    current_weight: float | None = None
    weights: dict[int, float] = field(default_factory=dict)
    chunks: list[ChunkReport] = field(default_factory=list)
    streams_total: int = 0
    streams_done: int = 0
    bytes_reclaimed: int = 0
    records_removed: int = 0
    index_entries_removed: int = 0
    hash_cache_misses: int = 0
    hash_collisions: int = 0
    #: the seconds each phase this run has finished took, in the order they ran (a resumed run's list
    #: starts at the phase it resumed in)
    phase_seconds: dict[str, float] = field(default_factory=dict)
    #: the last chunk number a stopped run this one resumes had executed (-1: none)
    executed_through: int = -1
    result: str | None = None
    error: str | None = None
    finished: float | None = None  # wall-clock time of the result: a finished run's elapsed stops there

    def finish(self, result: str, now: float, error: str | None = None) -> None:
        self.result, self.error, self.finished = result, error, now

    def to_json(self, now: float) -> dict[str, Any]:
        if self.finished is not None:
            now = self.finished
        return {
            "scavengeId": self.scavenge_id,
            "phase": self.phase,
            "phaseElapsedSeconds": round(max(0.0, now - self.phase_started), 3) if self.phase_started else 0,
            "elapsedSeconds": round(max(0.0, now - self.started), 3) if self.started else 0,
            "threads": self.threads,
            "threshold": self.threshold,
            "throttlePercent": self.throttle_percent,
            "scavengePoint": self.point,
            "chunksTotal": self.chunks_total,
            "chunksDone": self.chunks_done,
            "currentChunk": self.current_chunk,
            "currentChunkWeight": self.current_weight,
            "chunkWeights": {str(k): v for k, v in sorted(self.weights.items())},
            "chunks": [
                {
                    "chunkStartNumber": c.start_number,
                    "chunkEndNumber": c.end_number,
                    "weight": c.weight,
                    "executed": c.executed,
                    "merged": c.merged,
                    "sizeBefore": c.size_before,
                    "sizeAfter": c.size_after,
                }
                for c in self.chunks
            ],
            "streamsTotal": self.streams_total,
            "streamsDone": self.streams_done,
            "bytesReclaimed": self.bytes_reclaimed,
            "recordsRemoved": self.records_removed,
            "indexEntriesRemoved": self.index_entries_removed,
            "hashCacheMisses": self.hash_cache_misses,
            "hashCollisions": self.hash_collisions,
            "phaseSeconds": [{"phase": k, "seconds": round(v, 3)} for k, v in self.phase_seconds.items()],
            "executedThrough": self.executed_through,
            "result": self.result,
            "error": self.error,
        }


class Throttle:
    """Rests after work so that active time / total time ≈ percent / 100.

    ``rest_after(seconds)`` rests for work measured by the caller; ``rest_after_work()`` for the work
    done since the last rest ended (or since :meth:`mark`): what a pipeline whose items overlap must
    use, since an item's own start-to-end time also holds the rests taken for the items before it."""

    def __init__(
        self, percent: int, stop: threading.Event, now: Callable[[], float] = time.perf_counter
    ) -> None:
        self.percent = percent
        self._stop = stop
        self._now = now
        self.rested = 0.0
        self._mark = now()

    @property
    def active(self) -> bool:
        return self.percent < 100

    def mark(self) -> None:
        """Work starts now (a phase begins)."""
        self._mark = self._now()

    def rest_after(self, worked_seconds: float) -> None:
        if self.percent >= 100 or worked_seconds <= 0:
            self._mark = self._now()
            return
        pause = worked_seconds * (100.0 / self.percent - 1.0)
        self.rested += pause
        if self._stop.wait(pause):
            raise ScavengeStopped()
        self._mark = self._now()

    def rest_after_work(self) -> None:
        self.rest_after(self._now() - self._mark)


@dataclass
class RunContext:
    db: Database
    state: ScavengeState
    point: ScavengePoint
    scavenge_id: str
    logger: logging.Logger
    stop: threading.Event
    throttle: Throttle
    progress: Progress
    #: the node's clock: its wall time dates the phases
    clock: Clock
    threads: int = 1
    merging: bool = True
    unsafe_ignore_hard_delete: bool = False
    hash_users_cache_capacity: int = 100_000
    emit: Any = None  # ScavengeEvents
    workers: Any = None  # ChunkWorkers: where per-chunk work runs
    #: the completed chunks whose checksum this run has verified (accumulation read them whole), by
    #: id: execution does not read them for that a second time
    verified: dict[int, Any] = field(default_factory=dict)
    #: the folder of this run's hand-offs from accumulation to execution (evdb/scavenge/handoff.py;
    #: None: none are written), and the hand-off written of each chunk accumulation read, by id (valid
    #: while ``verified`` holds that chunk)
    handoff_dir: str | None = None
    handoffs: dict[int, str] = field(default_factory=dict)
    #: merges chunk execution made as it switched copies in, for the merging phase to report
    fused_merges: list[FusedMerge] = field(default_factory=list)
    #: the archive (its store and the node's read cache: evdb/archive/reads.py) whose chunks this run
    #: rewrites too (evdb/scavenge/archived.py); None when the node has no archive
    archive: Any = None
    #: the node's endpoint, naming it in the archive's rewrite lease
    node: str = ""

    def check_stop(self) -> None:
        if self.stop.is_set():
            raise ScavengeStopped()

    def enter_phase(self, name: str) -> float:
        now = self.clock.time()
        if self.progress.phase == "Beginning" and self.progress.started:
            self.progress.phase_seconds = {"Beginning": max(0.0, now - self.progress.started)}
        self.progress.phase = name
        self.progress.phase_started = now
        self.logger.info("SCAVENGING: Scavenge %s Phase Started.", name)
        return time.perf_counter()

    def leave_phase(self, name: str, started: float) -> None:
        took = time.perf_counter() - started
        self.progress.phase_seconds = {**self.progress.phase_seconds, name: took}
        self.logger.info("SCAVENGING: Scavenge %s Phase Completed. Took %s.", name, timespan(took))


def timespan(seconds: float) -> str:
    """A .NET TimeSpan string, as KurrentDB writes durations: ``[d.]hh:mm:ss.fffffff``."""
    seconds = max(0.0, seconds)
    ticks = round(seconds * 10_000_000)
    days, rest = divmod(ticks, 864_000_000_000)
    hours, rest = divmod(rest, 36_000_000_000)
    minutes, rest = divmod(rest, 600_000_000)
    secs, frac = divmod(rest, 10_000_000)
    body = f"{hours:02d}:{minutes:02d}:{secs:02d}.{frac:07d}"
    return f"{days}.{body}" if days else body
