"""The node's scavenge service: one scavenge at a time, started, stopped and watched over HTTP."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import uuid
from collections.abc import Callable

from evdb.clock import Clock
from evdb.database import Database
from evdb.errors import ScavengeAlreadyRunning, ScavengeNotFound, StreamNotFound
from evdb.scavenge.events import SCAVENGES_STREAM, ScavengeEvents, scavenge_stream
from evdb.scavenge.params import ScavengeRequest
from evdb.scavenge.point import latest_point
from evdb.scavenge.scavenger import RetentionStep, ScavengeOptions, Scavenger, ScavengeResult
from evdb.scavenge.state import ScavengeState
from evdb.scavenge.workers import WorkerPool

__all__ = ["MAX_THREADS", "POINT_ORIGINS", "ScavengeRequest", "ScavengeService"]

#: KurrentDB clamps the thread count to 4.
MAX_THREADS = 4

#: ``origin`` of a run's ``scavengePoint`` in its progress: the point was written by this run, was
#: there before it (an earlier scavenge here, or another node's, replicated), or is the point of the
#: stopped (or interrupted) run this one resumes
POINT_ORIGINS = ("new", "reused", "resumed")


class ScavengeService:
    def __init__(
        self,
        db: Database,
        *,
        state_path: str | None,
        logger: logging.Logger,
        node_endpoint: str = "",
        merging: bool = True,
        unsafe_ignore_hard_delete: bool = False,
        hash_users_cache_capacity: int = 100_000,
        history_max_age_days: int = 30,
        page_size_kib: int = 16,
        cache_size_bytes: int = 64 * 1024 * 1024,
        set_status: Callable[[str], None] = lambda status: None,
        clock: Clock,
        workers: WorkerPool | None = None,
        auto_pacing: bool = True,
        retention: RetentionStep | None = None,
    ) -> None:
        self.db = db
        #: the archive's retention policy (Archive: Enabled): applied as each successful run ends
        self.retention = retention
        self.logger = logger
        #: the scavenge worker processes, kept from one run to the next (a pool given here is the
        #: caller's to close; one made here is closed by close())
        self.workers = workers if workers is not None else WorkerPool(logger)
        self._own_workers = workers is None
        self.node_endpoint = node_endpoint
        self.defaults = ScavengeOptions(
            merging=merging,
            unsafe_ignore_hard_delete=unsafe_ignore_hard_delete,
            hash_users_cache_capacity=hash_users_cache_capacity,
            history_max_age_days=history_max_age_days,
            auto_pacing=auto_pacing,
        )
        self.state = ScavengeState(state_path, page_size_kib=page_size_kib, cache_size_bytes=cache_size_bytes)
        if state_path is not None and self.state.journal_mode != "delete":
            logger.warning(
                "SCAVENGING: The scavenge database %s stays in %s mode (another process has it open): "
                "its -wal file holds part of its content until a scavenge ends.",
                state_path,
                self.state.journal_mode,
            )
        self.set_status = set_status
        self.clock = clock
        self._lock = threading.Lock()
        self._current: Scavenger | None = None
        self._thread: threading.Thread | None = None
        self._done = threading.Event()
        self._done.set()
        self._last: tuple[str, str] | None = None
        self._last_scavenger: Scavenger | None = None
        #: what the running scavenge found at its start: a stopped run to resume, the newest point number
        self._found_at_start: tuple[bool, int] = (False, -1)
        #: totals over every run of this process, for the metrics endpoint
        self.totals = {
            "chunks_executed": 0,
            "chunks_skipped": 0,
            "chunks_merged": 0,
            "bytes_reclaimed": 0,
            "records_removed": 0,
            "index_entries_removed": 0,
            "hash_cache_misses": 0,
            "runs": 0,
        }
        #: passed to each run: called as each stage starts (a test seam)
        self.stage_hook: Callable[[str], None] = lambda stage: None
        #: passed to each run: off, chunk execution reads every chunk again, as a run that did not
        #: accumulate it does (a test seam: the copies are the same either way)
        self.handoffs = True
        self.set_status("Idle")

    @classmethod
    def state_path_for(cls, index_dir: str | None) -> str | None:
        return os.path.join(index_dir, "scavenging", "scavenging.db") if index_dir else None

    # -- start-up --------------------------------------------------------------------------------------
    def mark_interrupted(self) -> str | None:
        """A scavenge cut short by a crash is recorded as Interrupted; it resumes at the next start."""
        running = self.state.checkpoint().get("running")
        if not running:
            return None
        self.logger.warning(
            "SCAVENGING: Scavenge %s was interrupted (the node stopped while it ran).", running
        )
        events = ScavengeEvents(
            self.db, running, self.node_endpoint, self.defaults.history_max_age_days, self.logger
        )
        events.completed(
            str(ScavengeResult.INTERRUPTED), "The node stopped while the scavenge ran.", 0.0, 0, -1
        )
        with self.state.running(self.logger):  # (as a run writes: see state.py)
            self.state.update_checkpoint(running=None)
        self._last = (running, str(ScavengeResult.INTERRUPTED))
        return running

    # -- operations ------------------------------------------------------------------------------------
    def start(self, request: ScavengeRequest) -> str:
        request.validate()
        threads = min(request.threads, MAX_THREADS)
        with self._lock:
            if self._current is not None:
                raise ScavengeAlreadyRunning()
            scavenge_id = str(uuid.uuid4())
            options = ScavengeOptions(
                threads=threads,
                threshold=request.threshold,
                throttle_percent=request.throttle_percent,
                sync_only=request.sync_only,
                merging=self.defaults.merging,
                unsafe_ignore_hard_delete=self.defaults.unsafe_ignore_hard_delete,
                hash_users_cache_capacity=self.defaults.hash_users_cache_capacity,
                history_max_age_days=self.defaults.history_max_age_days,
                auto_pacing=self.defaults.auto_pacing,
            )
            scavenger = Scavenger(
                self.db,
                self.state,
                options,
                scavenge_id,
                logger=self.logger,
                node_endpoint=self.node_endpoint,
                set_status=self.set_status,
                clock=self.clock,
                workers=self.workers,
                handoffs=self.handoffs,
                retention=self.retention,
            )
            checkpoint_stage = self.state.checkpoint().get("stage")
            newest = latest_point(self.db)
            self._found_at_start = (
                bool(checkpoint_stage and checkpoint_stage != "Done"),
                newest.number if newest is not None else -1,
            )
            hook = self.stage_hook

            def stage_started(stage: str) -> None:
                self._note_point_origin(scavenger)  # the point is known from the first stage on
                hook(stage)

            scavenger.stage_hook = stage_started
            self._current = scavenger
            self._done.clear()
            self._thread = threading.Thread(
                target=self._run, args=(scavenger,), name="evdb-scavenge", daemon=True
            )
            self._thread.start()
            return scavenge_id

    def _run(self, scavenger: Scavenger) -> None:
        try:
            result = scavenger.run()
        except BaseException as exc:  # never leave the service thinking a scavenge runs
            self.logger.exception("SCAVENGING: the scavenge thread failed")
            result = ScavengeResult.ERRORED
            scavenger.progress.error = str(exc)
        self._note_point_origin(scavenger)
        p = scavenger.progress
        self.totals["chunks_executed"] += sum(1 for c in p.chunks if c.executed and not c.merged)
        self.totals["chunks_skipped"] += sum(1 for c in p.chunks if not c.executed)
        self.totals["chunks_merged"] += sum(1 for c in p.chunks if c.merged)
        self.totals["bytes_reclaimed"] += p.bytes_reclaimed
        self.totals["records_removed"] += p.records_removed
        self.totals["index_entries_removed"] += p.index_entries_removed
        self.totals["hash_cache_misses"] += p.hash_cache_misses
        self.totals["runs"] += 1
        with self._lock:
            self._last = (scavenger.scavenge_id, str(result))
            self._last_scavenger = scavenger
            self._current = None
            self._done.set()

    def _note_point_origin(self, scavenger: Scavenger) -> None:
        """Add ``origin`` (one of POINT_ORIGINS) to the run's scavenge point, once it is known."""
        point = scavenger.progress.point
        if point is None or "origin" in point:
            return
        resuming, newest_before = self._found_at_start
        origin = "resumed" if resuming else "reused" if point["number"] <= newest_before else "new"
        scavenger.progress.point = {**point, "origin": origin}  # replaced whole: read without locks

    def current_id(self) -> str | None:
        current = self._current
        return current.scavenge_id if current else None

    def stop(self, scavenge_id: str, timeout: float | None = None) -> str:
        """Stop the running scavenge (``current`` or its id) and wait until it has stopped."""
        with self._lock:
            current = self._current
            if current is None or (scavenge_id != "current" and scavenge_id != current.scavenge_id):
                raise ScavengeNotFound()
            current.stop()
        self._done.wait(timeout)
        return current.scavenge_id

    async def stop_async(self, scavenge_id: str) -> str:
        return await asyncio.to_thread(self.stop, scavenge_id)

    def wait(self, timeout: float | None = None) -> bool:
        return self._done.wait(timeout)

    def last(self) -> tuple[str, str] | None:
        """(id, result) of the most recent scavenge: this process's, else the newest in ``$scavenges``."""
        if self._current is not None:
            return self._current.scavenge_id, "InProgress"
        if self._last is not None:
            return self._last
        return self._last_from_streams()

    def _last_from_streams(self, max_links: int = 1000) -> tuple[str, str] | None:
        """This node's newest scavenge in ``$scavenges`` (which lists every node's, replicated): the
        newest link whose scavenge events name this node's endpoint, among the newest ``max_links``."""
        before: int | None = None
        seen = 0
        while seen < max_links:
            try:
                page = self.db.read_stream_backward(SCAVENGES_STREAM, before, min(100, max_links - seen))
            except StreamNotFound:
                return None
            for link in page.events:
                stream = link.data.decode().partition("@")[2]
                scavenge_id = stream.removeprefix(f"{SCAVENGES_STREAM}-")
                try:
                    events = self.db.read_stream_backward(scavenge_stream(scavenge_id), None, 4096).events
                except StreamNotFound:
                    continue
                if not events or not self._ours(events[-1].data):
                    continue  # another node's scavenge (or one whose events have aged out)
                last = events[0]
                if last.event_type == "$scavengeCompleted":
                    return scavenge_id, json.loads(last.data).get("result", "Unknown")
                return scavenge_id, "Unknown"
            seen += len(page.events)
            if page.is_end_of_stream or not page.events:
                return None
            before = page.next_event_number
        return None

    def _ours(self, data: bytes) -> bool:
        try:
            body = json.loads(data)
        except ValueError:
            return False
        endpoint = body.get("nodeEndpoint") if isinstance(body, dict) else None
        return not self.node_endpoint or endpoint == self.node_endpoint

    def progress(self) -> dict | None:
        current = self._current
        if current is None:
            return None
        self._note_point_origin(current)
        return current.progress.to_json(self.clock.time())

    def last_progress(self):
        """The progress figures of the most recent run in this process (tests, the dashboard)."""
        scavenger = self._current or self._last_scavenger
        return scavenger.progress if scavenger else None

    def close(self) -> None:
        current = self._current
        if current is not None:
            current.stop()
            self._done.wait()
        if self._own_workers:
            self.workers.close()
        self.state.close()
