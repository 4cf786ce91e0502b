"""One node scavenge, phase by phase, to one scavenge point."""

from __future__ import annotations

import enum
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from evdb.clock import Clock
from evdb.database import Database
from evdb.errors import ScavengeError
from evdb.scavenge.accumulator import accumulate
from evdb.scavenge.archived import ArchiveAccess, execute_archived
from evdb.scavenge.calculator import calculate
from evdb.scavenge.decisions import Decider
from evdb.scavenge.events import ScavengeEvents
from evdb.scavenge.executor import execute_chunks
from evdb.scavenge.handoff import clear_folder
from evdb.scavenge.index_executor import execute_index
from evdb.scavenge.merger import merge_chunks
from evdb.scavenge.pace import FlushTap, Pacer
from evdb.scavenge.point import ScavengePoint, latest_point, write_point
from evdb.scavenge.run import Progress, RunContext, ScavengeStopped, Throttle, timespan
from evdb.scavenge.state import ScavengeState
from evdb.scavenge.workers import ChunkWorkers, WorkerPool
from evdb.storage.log import TransactionLog

__all__ = ["STAGES", "RetentionStep", "ScavengeOptions", "ScavengeResult", "Scavenger"]

#: Stages in order, with the phase name KurrentDB logs and reports for each.
STAGES = (
    ("Accumulating", "Accumulation"),
    ("Calculating", "Calculation"),
    ("ExecutingChunks", "Chunk execution"),
    ("MergingChunks", "Chunk merging"),
    ("ExecutingIndex", "Index execution"),
    ("Cleaning", "Cleaning"),
)


class RetentionStep(Protocol):
    """The archive's retention policy as a scavenge applies it (evdb/archive/retention.py); its
    ``reads`` (the archive's store and the node's read cache) are where the scavenge rewrites archived
    chunks too (evdb/scavenge/archived.py)."""

    @property
    def reads(self) -> ArchiveAccess: ...

    def apply(self, log: TransactionLog) -> list[str]:
        """Delete the local chunk files the policy lets go; their paths."""
        ...


class ScavengeResult(enum.StrEnum):
    SUCCESS = "Success"
    STOPPED = "Stopped"
    ERRORED = "Errored"
    INTERRUPTED = "Interrupted"


@dataclass(frozen=True)
class ScavengeOptions:
    threads: int = 1
    threshold: int = 0
    throttle_percent: int = 100
    sync_only: bool = False
    merging: bool = True
    unsafe_ignore_hard_delete: bool = False
    hash_users_cache_capacity: int = 100_000
    history_max_age_days: int = 30
    #: automatic pacing (evdb/scavenge/pace.py) when throttle_percent is 100; off with the option
    #: DisableScavengeAutoPacing
    auto_pacing: bool = True


class Scavenger:
    """Runs one scavenge in the calling thread (the service runs it on a thread of its own)."""

    def __init__(
        self,
        db: Database,
        state: ScavengeState,
        options: ScavengeOptions,
        scavenge_id: str,
        *,
        logger: logging.Logger,
        node_endpoint: str = "",
        set_status: Callable[[str], None] = lambda status: None,
        clock: Clock,
        workers: WorkerPool | None = None,
        handoffs: bool = True,
        retention: RetentionStep | None = None,
    ) -> None:
        self.db = db
        self.retention = retention
        #: whether accumulation hands what execution needs on (evdb/scavenge/handoff.py), in a
        #: folder beside the state file: on-disk state only
        self.handoff_dir = (
            os.path.join(os.path.dirname(state.path), "handoff") if handoffs and state.path else None
        )
        #: where per-chunk work runs: the service's pool (kept between runs), else one for this run
        self.workers = workers
        self.state = state
        self.options = options
        self.scavenge_id = scavenge_id
        self.logger = logger
        self.node_endpoint = node_endpoint
        self.set_status = set_status
        self.clock = clock
        self.stop_event = threading.Event()
        self.progress = Progress(
            scavenge_id=scavenge_id,
            threads=options.threads,
            threshold=options.threshold,
            throttle_percent=options.throttle_percent,
            started=clock.time(),
        )
        self.result: ScavengeResult | None = None
        self.nothing_to_do = False
        #: called with the stage name as each stage starts (tests stop a run at a chosen stage)
        self.stage_hook: Callable[[str], None] = lambda stage: None

    def stop(self) -> None:
        self.stop_event.set()

    # -- beginning -------------------------------------------------------------------------------------
    def _begin(self) -> ScavengePoint | None:
        """Resume a stopped run; else go to an unreached point; else write one (unless syncOnly)."""
        checkpoint = self.state.checkpoint()
        stage = checkpoint.get("stage")
        if stage and stage != "Done":
            point = ScavengePoint.from_json(checkpoint["point"])
            # the chunks the stopped run executed are done: the progress says so (not "pending")
            self.progress.executed_through = int(checkpoint.get("executedThrough", -1))
            self.logger.info(
                "SCAVENGING: Resuming the scavenge to %s from stage %s (Position: %d, Threshold: %d).",
                point.name,
                stage,
                point.position,
                point.threshold,
            )
            return point
        latest = latest_point(self.db)
        last_done = checkpoint.get("lastPoint", -1)
        if latest is not None and latest.number > last_done:
            point = latest
            self.logger.info(
                "SCAVENGING: Latest scavenge point found is %s. Position: %d, EffectiveNow: %s, Threshold: %d.",
                point.name,
                point.position,
                point.effective_now,
                point.threshold,
            )
        elif self.options.sync_only:
            self.logger.info("SCAVENGING: No existing scavenge point to sync with, nothing to do.")
            return None
        else:
            number = latest.number + 1 if latest is not None else 0
            self.logger.info(
                "SCAVENGING: Adding new scavenge point #%d with threshold %d...",
                number,
                self.options.threshold,
            )
            point = write_point(self.db, self.options.threshold)
        self.state.set_checkpoint(
            {
                "stage": STAGES[0][0],
                "point": point.to_json(),
                "accumulatedTo": checkpoint.get("accumulatedTo", 0),
                "lastPoint": last_done,
                "running": self.scavenge_id,
            }
        )
        return point

    # -- the run ---------------------------------------------------------------------------------------
    def run(self) -> ScavengeResult:
        # every write of the run, its beginning and end too, goes through the WAL, folded into the
        # one file as it ends (see state.py): a kill at any moment leaves a database readers opening
        # it read-only can read (a hot rollback journal needs a writer to roll it back first)
        with self.state.running(self.logger):
            return self._run()

    def _run(self) -> ScavengeResult:
        started = time.perf_counter()
        events = ScavengeEvents(
            self.db, self.scavenge_id, self.node_endpoint, self.options.history_max_age_days, self.logger
        )
        self.set_status("Beginning")
        try:
            point = self._begin()
        except Exception as exc:
            self.logger.exception("SCAVENGING: Scavenge failed while beginning")
            self.result = ScavengeResult.ERRORED
            self.progress.finish(str(self.result), self.clock.time(), str(exc))
            self.set_status("Idle")
            return self.result
        if point is None:
            self.nothing_to_do = True
            self._apply_retention()
            self.result = ScavengeResult.SUCCESS
            self.progress.finish(str(self.result), self.clock.time())
            self.set_status("Idle")
            return self.result
        self.state.update_checkpoint(running=self.scavenge_id)
        self.progress.point = point.to_json()
        self.progress.threshold = point.threshold
        self.logger.info("SCAVENGING: Scavenge Started.")
        events.started()
        ctx = RunContext(
            db=self.db,
            state=self.state,
            point=point,
            scavenge_id=self.scavenge_id,
            logger=self.logger,
            stop=self.stop_event,
            throttle=Throttle(self.options.throttle_percent, self.stop_event),
            progress=self.progress,
            threads=self.options.threads,
            merging=self.options.merging,
            unsafe_ignore_hard_delete=self.options.unsafe_ignore_hard_delete,
            hash_users_cache_capacity=self.options.hash_users_cache_capacity,
            emit=events,
            clock=self.clock,
            archive=self.retention.reads if self.retention is not None else None,
            node=self.node_endpoint,
        )
        error: str | None = None
        ctx.workers = ChunkWorkers(self.options.threads, self.stop_event, self.logger, self.workers)
        ctx.handoff_dir = self._clear_handoffs()  # (a killed run's are never read)
        pace = ctx.workers.pool.pace
        pacer: Pacer | None = None
        tap: FlushTap | None = None
        if self.options.auto_pacing and self.options.throttle_percent >= 100:
            pacer = Pacer(pace, own_thread=threading.get_ident())
            tap = FlushTap.install(self.db, pacer)
        else:
            pace.begin(auto=False)
        try:
            self._run_stages(ctx)
            self._apply_retention()
            result = ScavengeResult.SUCCESS
        except ScavengeStopped:
            result = ScavengeResult.STOPPED
        except Exception as exc:
            self.logger.exception("SCAVENGING: Scavenge failed")
            error = str(exc)
            result = ScavengeResult.ERRORED
        finally:
            if tap is not None:
                tap.remove(self.db)
            rested = pacer.rested if pacer is not None else 0.0
            pace.begin(auto=False)  # (the pool's processes copy for nobody now)
            ctx.workers.close()
            ctx.handoffs.clear()
            self._clear_handoffs(keep=False)
        took = time.perf_counter() - started
        if pacer is not None:
            self.logger.info(
                "SCAVENGING: Automatic pacing: %d client flushes, %d of them slowed (rest ratio %.2f at the end); "
                "the copies rested %.3f s.",
                pacer.client_flushes,
                pacer.slow_flushes,
                pacer.rest_ratio,
                rested,
            )
        saved = self.progress.bytes_reclaimed
        max_chunk = max((c.end_number for c in self.progress.chunks if c.executed), default=-1)
        self.state.update_checkpoint(running=None)
        if result is ScavengeResult.SUCCESS:
            self.logger.info(
                "SCAVENGING: Scavenge Completed. Total time taken: %s. Total space saved: %d.",
                timespan(took),
                saved,
            )
        elif result is ScavengeResult.STOPPED:
            self.logger.info(
                "SCAVENGING: Scavenge Stopped. Total time taken: %s. Total space saved: %d.",
                timespan(took),
                saved,
            )
        else:
            self.logger.error(
                "SCAVENGING: Scavenge Errored. Total time taken: %s. Error: %s", timespan(took), error
            )
        try:
            events.completed(str(result), error, took, saved, max_chunk)
        except Exception:
            self.logger.exception("SCAVENGING: could not write the $scavengeCompleted event")
        self.progress.finish(str(result), self.clock.time(), error)
        self.result = result
        self.set_status("Idle")
        return result

    def _apply_retention(self) -> None:
        """Let the local chunk files outside the archive's retention policy go (evdb/archive/retention.py):
        after the run's work, so the files it leaves are the ones deleted; a failure there is logged
        and does not change the run's result."""
        if self.retention is None:
            return
        self.set_status("Retention")
        try:
            deleted = self.retention.apply(self.db.log)
        except Exception:
            self.logger.exception("SCAVENGING: The retention policy's deletions failed")
            return
        if deleted:
            self.logger.info(
                "SCAVENGING: %d chunk files left the disk for the archive (RetainAtLeast).", len(deleted)
            )

    def _clear_handoffs(self, *, keep: bool = True) -> str | None:
        """Empty the hand-off folder (``keep`` false: and remove it, as the run ends); its path, or
        None when there is none (or it cannot be used: a warning names it, and no hand-off is
        written, so execution reads every chunk again)."""
        if self.handoff_dir is None:
            return None
        try:
            clear_folder(self.handoff_dir, keep=keep)
        except OSError as exc:
            self.logger.warning(
                "SCAVENGING: Could not empty the hand-off folder %s (%s); none of its files is used.",
                self.handoff_dir,
                exc,
            )
            return None
        return self.handoff_dir

    def _run_stages(self, ctx: RunContext) -> None:
        decider: Decider | None = None
        stage_names = [s for s, _ in STAGES]
        phases = dict(STAGES)
        while True:
            ctx.check_stop()
            stage = self.state.checkpoint().get("stage")
            if stage == "Done":
                return
            if stage not in phases:  # _begin wrote one: the state file was changed under the run
                raise ScavengeError(
                    f"The scavenge state {self.state.path or '(in memory)'} names no known stage: {stage!r}"
                )
            phase = phases[stage]
            self.stage_hook(stage)
            ctx.check_stop()
            self.set_status(f"{phase} Phase")
            started = ctx.enter_phase(phase)
            if stage == "Accumulating":
                accumulate(ctx)
            elif stage == "Calculating":
                calculate(ctx)
            else:
                if decider is None:
                    decider = Decider(self.state.all_rows(), ctx.point, ctx.unsafe_ignore_hard_delete)
                if stage == "ExecutingChunks":
                    # the archive's copies first, with the same weights (local execution resets them);
                    # then those left behind by the local files this execution scavenged
                    execute_archived(ctx, decider)
                    execute_chunks(ctx, decider)
                    execute_archived(ctx, decider)
                elif stage == "MergingChunks":
                    if ctx.merging:
                        merge_chunks(ctx)
                    else:
                        self.logger.info("SCAVENGING: Chunk merging is off (DisableScavengeMerging).")
                elif stage == "ExecutingIndex":
                    execute_index(ctx, decider)
                elif stage == "Cleaning":
                    # (a chunk's other weight stays until it is executed: see ScavengeState.add_weights)
                    self.state.clear_age_weights()
            ctx.leave_phase(phase, started)
            following = stage_names.index(stage) + 1
            if following < len(stage_names):
                self.state.update_checkpoint(stage=stage_names[following])
            else:
                self.state.update_checkpoint(
                    stage="Done", lastPoint=ctx.point.number, calculatedAfter=None, executedThrough=-1
                )
