"""``evdb mirror``: copy every event of a primary's ``$all`` to a secondary, in order, durably.

The mirror subscribes to ``$all`` on the primary over evdb's HTTP API (the server-sent-event
subscription ``/subscriptions/streams/$all?after=P&embed=raw``, which carries each event's exact
data and metadata bytes) and appends each event to the same stream on the secondary with
``Kurrent-ExpectedVersion`` = its event number - 1. That keeps stream names, event numbers, event
ids, types, data, metadata and the order of ``$all``, and makes every append idempotent: the
secondary answers a repeated event (same id at the same number) ``201`` without writing it twice,
so a mirror restarted from an older checkpoint copies nothing twice.

What is copied (see docs/operations/recovery.md):

- events of user streams, in runs: consecutive events of one stream go in one append;
- metadata events (``$$stream``), which carry ``$maxAge``/``$maxCount``/``$acl``/``$tb``: a soft
  delete is a metadata event with ``$tb`` = max, so it is followed by copying that event;
- tombstones (hard deletes) become ``DELETE /streams/{stream}`` with ``Kurrent-HardDelete: true``.

What is skipped: every stream whose name (without the ``$$`` of a metastream) starts with ``$``:
the primary's own system streams (``$users``, ``$user-*``, ``$epochs``, ``$stats-*``,
``$scavenges*``, ``$scavengePoints``...). The secondary keeps its own.

How: one connection reads the subscription (a reader task parses it into a queue while the
appends run), and the mirror takes what has arrived, up to ``batch_events`` events, as one batch.
With ``parallel`` = 1 (the default) its steps run one at a time, in ``$all`` order. With
``parallel`` = N > 1 (``--parallel N``) a batch is cut at its barriers (tombstones and metadata
events, which change how the secondary treats a stream's appends: each runs alone, after everything
before it), and between two barriers each user stream's events go in one append, N streams at a time
over keep-alive connections: each stream's order is kept, ``$all``'s order across streams within a
segment is not. The position moves only once a whole segment is done, so a crash replays at most the
segments since the checkpoint, and replays are idempotent as above.

The checkpoint (the ``$all`` position of the last event handled) is saved atomically at least every
second and every 1000 events while copying, and when the mirror stops.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import json
import logging
import os
import threading
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import aiohttp

from evdb.clock import Clock, SystemClock
from evdb.mirror.metrics import start_metrics
from evdb.mirror.plan import Action, is_barrier, is_primary_own_stream, plan_actions, plan_segments
from evdb.mirror.secondary import SecondaryWriter
from evdb.mirror.sides import (
    CONNECTION_ERRORS,
    Endpoint,
    MirrorError,
    MirrorSettings,
    Reply,
    Side,
    Transient,
)
from evdb.mirror.state import Checkpoint, CheckpointError, MirrorLock, utc_now, write_status
from evdb.streams import is_metastream

__all__ = [
    "Action",
    "Endpoint",
    "Mirror",
    "MirrorError",
    "MirrorSettings",
    "Reply",
    "Side",
    "is_primary_own_stream",
    "plan_actions",
    "plan_segments",
]

_log = logging.getLogger("evdb.mirror")


def _event_time(event: dict[str, Any]) -> float | None:
    try:
        return datetime.fromisoformat(event["updated"]).timestamp()
    except (KeyError, ValueError, TypeError):
        return None


@dataclass
class _Segment:
    """A segment of a batch whose appends run (--parallel): once they are all done, the position
    moves to ``end`` (plan_segments' marker step)."""

    end: Action
    appends: int
    events: int
    tasks: list[asyncio.Task]


class Mirror:
    """One mirror process: subscription, appends, checkpoint, status file, metrics endpoint."""

    def __init__(
        self, settings: MirrorSettings, logger: logging.Logger | None = None, *, clock: Clock | None = None
    ) -> None:
        """``clock``: what paces checkpoints, status lines and retries (the real one unless given)."""
        self.settings = settings
        self.logger = logger or _log
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.paths = settings.paths
        self.lock = MirrorLock(self.paths.lock)
        self.checkpoint: Checkpoint | None = None
        self.position = -1
        self.last_event_time: float | None = None
        self.events_copied = 0
        self.events_skipped = 0
        self.tombstones = 0
        self.metadata_events = 0
        self.appends = 0
        self.state = "starting"
        self.caught_up = False
        self.last_error: str | None = None
        self.primary_head: int | None = None
        self.primary_head_time: float | None = None
        self.metrics_url: str | None = None
        self._rate_samples: collections.deque[tuple[float, int]] = collections.deque(maxlen=64)
        # --parallel: the segments whose appends are under way, oldest first, and each stream's last task
        self._segments: collections.deque[_Segment] = collections.deque()
        self._tails: dict[str, asyncio.Task] = {}
        self._in_flight = 0  # events of those segments
        self._progress = asyncio.Event()  # set when one of their appends ends
        self._gate = asyncio.Semaphore(settings.parallel) if settings.parallel > 1 else None
        self._carry: list[dict[str, Any]] = []  # events read, held back for the next batch (_take)
        self._saved_position = -1
        self._saving: asyncio.Future | None = None  # the checkpoint save under way in a worker thread
        self._file_lock = threading.Lock()
        self._written_position = -1
        self._saved_at = self.clock.monotonic()
        self._saved_events = 0
        self._start_events = 0
        self._started = self.clock.monotonic()
        self.secondary = SecondaryWriter(
            settings, self.logger, self.clock, self._replaying, self._note_problem
        )

    def _note_problem(self, problem: str) -> None:
        self.last_error = problem

    # -- status ----------------------------------------------------------------------------------------
    @property
    def lag_bytes(self) -> int | None:
        if self.primary_head is None:
            return None
        return max(0, self.primary_head - self.position)

    @property
    def lag_seconds(self) -> float | None:
        lag = self.lag_bytes
        if lag is None:
            return None
        if lag == 0:
            return 0.0
        if self.primary_head_time is None:
            return None
        if self.last_event_time is None:
            return None
        return max(0.0, self.primary_head_time - self.last_event_time)

    def events_per_second(self) -> float:
        now = self.clock.monotonic()
        samples = [s for s in self._rate_samples if now - s[0] <= 10.0]
        if not samples:
            return 0.0
        first_time, first_count = samples[0]
        if now - first_time < 0.5:
            return 0.0
        return (self.events_copied - first_count) / (now - first_time)

    def status(self) -> dict[str, Any]:
        """The shape of the status file and of ``GET /status`` (docs/operations/recovery.md)."""
        return {
            "kind": "evdb-mirror",
            "version": 1,
            "state": self.state,
            "pid": os.getpid(),
            "from": self.settings.source.url,
            "to": self.settings.target.url,
            "writingTo": self.secondary.writing_to,
            "position": self.position,
            "checkpointPosition": self._saved_position,
            "primaryHead": self.primary_head,
            "lagBytes": self.lag_bytes,
            "lagSeconds": None if self.lag_seconds is None else round(self.lag_seconds, 3),
            "caughtUp": self.caught_up and self.lag_bytes == 0,
            "eventsCopied": self.events_copied,
            "eventsSkipped": self.events_skipped,
            "metadataEvents": self.metadata_events,
            "tombstones": self.tombstones,
            "appends": self.appends,
            "eventsPerSecond": round(self.events_per_second(), 1),
            "uptimeSeconds": round(self.clock.monotonic() - self._started, 1),
            "lastError": self.last_error,
            "metricsUrl": self.metrics_url,
            "checkpoint": str(self.paths.checkpoint),
            "updated": utc_now(),
        }

    def status_line(self) -> str:
        lag_b, lag_s = self.lag_bytes, self.lag_seconds
        lag = (
            "unknown" if lag_b is None else f"{lag_b} bytes" + ("" if lag_s is None else f" / {lag_s:.2f} s")
        )
        return (
            f"Mirror {self.state}: position {self.position}, primary head {self.primary_head}, lag {lag}, "
            f"{self.events_copied} events copied ({self.events_per_second():.0f} events/s), "
            f"{self.events_skipped} skipped, {self.tombstones} tombstones"
        )

    def _write_status(self) -> None:
        try:
            write_status(self.paths.status, self.status())
        except OSError as exc:
            self.logger.warning("Cannot write the mirror status file %s: %s", self.paths.status, exc)

    # -- checkpoint ------------------------------------------------------------------------------------
    async def _load_checkpoint(self) -> None:
        source, target = self.settings.source.url, self.settings.target.url
        checkpoint = Checkpoint.load(self.paths.checkpoint)
        if checkpoint is None:
            checkpoint = Checkpoint(source=source, target=target)
            if self.settings.start_from is not None:
                checkpoint.position = await self._event_before(self.settings.start_from)
            checkpoint.save(self.paths.checkpoint)
        if checkpoint.failover:
            raise CheckpointError(
                f"this mirror was failed over at {checkpoint.failover.get('at')} (position "
                f"{checkpoint.failover.get('position')}): {target} is the primary now. "
                "Start a new mirror with another checkpoint file to copy in any direction again."
            )
        if (checkpoint.source, checkpoint.target) != (source, target):
            raise CheckpointError(
                f"{self.paths.checkpoint} belongs to the mirror {checkpoint.source} -> {checkpoint.target}, "
                f"not {source} -> {target}; give another --checkpoint file"
            )
        self.checkpoint = checkpoint
        self.position = self._saved_position = checkpoint.position
        self.events_copied = self._saved_events = self._start_events = checkpoint.events_copied

    async def _event_before(self, position: int) -> int:
        """The position of the primary's last event before ``position`` (-1: none), where a mirror
        that must copy the events from ``position`` on starts (the subscription starts after it)."""
        async with self.settings.source.side() as source:
            try:
                response = await source.request(
                    "GET", f"/streams/$all/{position}/backward/1", headers={"Accept": "application/json"}
                )
            except CONNECTION_ERRORS as exc:
                raise MirrorError(f"Cannot read the primary to find position {position}: {exc}") from None
        if response.status != 200:
            raise MirrorError(
                f"The primary refused to read $all before position {position}: {response.text[:200]}"
            )
        entries = response.json().get("entries") or []
        return int(entries[0]["position"]) if entries else -1

    def _snapshot(self) -> Checkpoint:
        """The checkpoint to save now (a copy: a save in a worker thread writes it while copying goes on)."""
        assert self.checkpoint is not None
        self.checkpoint = dataclasses.replace(
            self.checkpoint, position=self.position, events_copied=self.events_copied
        )
        self._saved_position = self.position
        self._saved_events = self.events_copied
        self._saved_at = self.clock.monotonic()
        return self.checkpoint

    def _write_checkpoint(self, checkpoint: Checkpoint) -> None:
        with self._file_lock:  # one save at a time, and never back to an older position
            if checkpoint.position >= self._written_position:
                checkpoint.save(self.paths.checkpoint)
                self._written_position = checkpoint.position

    def _save_checkpoint(self) -> None:
        """Save now, on the calling thread (at start and stop)."""
        self._write_checkpoint(self._snapshot())

    async def _maybe_save_checkpoint(self) -> None:
        """Save when ``checkpoint_events`` events or ``checkpoint_seconds`` passed since the last save
        (called after each batch, and every second by the status loop: an idle mirror's checkpoint is
        current within about a second). Not after every live event, and in a worker thread: each
        save is an fsync, which must not hold up the copying. A save due by count waits for the
        previous one; an error of the previous one is raised here."""
        if self.position == self._saved_position:
            return
        s = self.settings
        by_count = self.events_copied - self._saved_events >= s.checkpoint_events
        if not (by_count or self.clock.monotonic() - self._saved_at >= s.checkpoint_seconds):
            return
        if self._saving is not None:
            if not self._saving.done() and not by_count:
                return
            await self._saving
            if not self._saving.done():  # another caller started the next one meanwhile
                return
        self._saving = asyncio.ensure_future(asyncio.to_thread(self._write_checkpoint, self._snapshot()))

    # -- running ---------------------------------------------------------------------------------------
    async def run(self, stop: asyncio.Event) -> None:
        """Copy until ``stop`` is set (or a :class:`MirrorError`); always saves the checkpoint."""
        self.lock.acquire()
        runner = None
        status_task = None
        try:
            await self._load_checkpoint()
            if self.settings.metrics_port is not None:
                runner, self.metrics_url = await start_metrics(
                    self.status, self.settings.metrics_host, self.settings.metrics_port, self.logger
                )
            self.logger.info(
                "Mirroring %s -> %s from position %d (checkpoint %s; %s)",
                self.settings.source.url,
                self.settings.target.url,
                self.position,
                self.paths.checkpoint,
                "in $all order"
                if self.settings.parallel <= 1
                else f"{self.settings.parallel} streams at a time",
            )
            status_task = asyncio.create_task(self._status_loop(stop))
            await self._copy_until(stop)
            self.state = "stopped"
        except MirrorError as exc:
            self.state = "failed"
            self.last_error = str(exc)
            self.logger.error("The mirror stopped: %s", exc)
            raise
        finally:
            if status_task is not None:
                status_task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await status_task
            if self.checkpoint is not None:
                self._save_checkpoint()
                self._write_status()
                self.logger.info(
                    "Mirror stopped at position %d after copying %d events", self.position, self.events_copied
                )
            if runner is not None:
                await runner.cleanup()
            self.lock.release()

    async def _copy_until(self, stop: asyncio.Event) -> None:
        backoff = 0.2
        async with (
            self.settings.source.side(read_timeout=None) as source,
            self.settings.target.side(connections=self.settings.parallel) as target,
        ):
            while not stop.is_set():
                copied_before = self.events_copied + self.events_skipped
                try:
                    await self._session(source, target, stop)
                    return
                except Transient as exc:
                    self.last_error = str(exc)
                    self.state = "reconnecting"
                    self.caught_up = False
                    if self.events_copied + self.events_skipped > copied_before:
                        backoff = 0.2
                    self.logger.warning("Mirror connection problem, retrying in %.1f s: %s", backoff, exc)
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), timeout=backoff)
                    backoff = min(self.settings.max_backoff, backoff * 2)

    async def _session(self, source: Side, target: Side, stop: asyncio.Event) -> None:
        # One signed-in request first: the secondary then knows the credentials, and the parallel
        # appends' new connections do not each hash the password (a scrypt per connection).
        await self.secondary.request(target, "GET", "/info")
        await self.secondary.learn_members(target)
        queue: asyncio.Queue = asyncio.Queue(maxsize=4 * self.settings.batch_events)
        reader = asyncio.create_task(self._read(source, queue))
        stopping = asyncio.create_task(stop.wait())
        getter: asyncio.Task | None = None
        self._carry = []  # a run held back by the session before (not copied: read again)
        self.state = "catching-up"
        try:
            while True:
                # while --parallel appends are all busy, events wait in the queue: the next batch
                # is bigger, and so are its appends (one per stream)
                full = self._running() >= self.settings.parallel > 1
                if getter is None and not full:
                    getter = asyncio.create_task(queue.get())
                waiting = {stopping} if getter is None else {getter, stopping}
                progress = asyncio.create_task(self._progress.wait()) if self._segments else None
                if progress is not None:
                    waiting.add(progress)
                done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                if progress is not None and progress not in done:
                    progress.cancel()
                if stopping in done and (getter is None or getter not in done):
                    await self._drain()  # the appends under way end; the position follows them
                    return
                self._progress.clear()
                await self._settle()
                if getter is not None and getter in done:
                    items = [getter.result()]
                    getter = None
                    while len(items) < self.settings.batch_events:
                        try:
                            items.append(queue.get_nowait())
                        except asyncio.QueueEmpty:
                            break
                    await self._take(target, items, stop)
                    if stop.is_set():
                        await self._drain()
                        return
                await self._maybe_save_checkpoint()
        finally:
            if getter is not None:
                getter.cancel()
            stopping.cancel()
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader
            await self._abort()  # nothing still running once the session is over (no-op after a drain)

    async def _take(self, target: Side, items: list, stop: asyncio.Event) -> None:
        """Apply what the reader queued: events, a caught-up mark, or the error that ended it.

        While catching up, a batch's trailing run of one stream waits for the next batch: its next
        events may be in the reader's next chunk, and a run split in two appends is not what the
        primary wrote (a soft-deleted stream recreated by the first half would get the secondary's
        own ``$$`` event in another place, and a crash between the halves leaves half a run)."""
        events: list[dict] = self._carry
        self._carry = []
        for item in items:
            if isinstance(item, BaseException):
                await self._apply(target, events, stop)
                raise item
            if isinstance(item, int):  # caught up at this committed position
                await self._apply(target, events, stop)
                await self._drain()
                events = []
                self.caught_up = True
                self.state = "live"
                self.logger.info("Mirror caught up with the primary (position %d)", self.position)
                continue
            events.append(item)
        if not self.caught_up and events:
            stream = events[-1]["streamId"]
            first = len(events)
            while first > 0 and events[first - 1]["streamId"] == stream:
                first -= 1
            if first > 0 and not is_primary_own_stream(stream):
                events, self._carry = events[:first], events[first:]
        await self._apply(target, events, stop)

    async def _read(self, source: Side, queue: asyncio.Queue) -> None:
        """Parse the primary's server-sent events into the queue (an exception ends it)."""
        try:
            params = {"embed": "raw"}
            if self.position >= 0:
                params["after"] = str(self.position)
            async with source.stream(
                "/subscriptions/streams/$all", params=params, headers={"Accept": "text/event-stream"}
            ) as response:
                if response.status in (401, 403):
                    raise MirrorError(
                        f"The primary {self.settings.source.url} refused the credentials "
                        f"({response.status}): reading $all needs an admin user"
                    )
                if response.status != 200:
                    text = (await response.read()).decode(errors="replace")
                    raise Transient(
                        f"The primary answered {response.status} to the $all subscription: {text[:200]}"
                    )
                kind: str | None = None
                data: list[str] = []
                async for raw in _lines(response.content):
                    line = raw.decode().rstrip("\r")
                    if line:
                        if line.startswith("event:"):
                            kind = line[6:].strip()
                        elif line.startswith("data:"):
                            data.append(line[5:].removeprefix(" "))
                        continue
                    if kind and data:
                        body = json.loads("\n".join(data))
                        if kind == "event":
                            await queue.put(body)
                        elif kind == "caught-up":
                            await queue.put(int(body["position"]))
                        elif kind == "error":
                            raise Transient(f"The primary ended the subscription: {body.get('error')}")
                    kind, data = None, []
            raise Transient("The primary closed the $all subscription")
        except (MirrorError, Transient) as exc:
            await queue.put(exc)
        except CONNECTION_ERRORS as exc:
            await queue.put(Transient(f"Reading from the primary failed: {type(exc).__name__}: {exc}"))
        except ValueError as exc:
            await queue.put(Transient(f"The primary sent a message that is not JSON: {exc}"))

    # -- applying events to the secondary --------------------------------------------------------------
    async def _apply(self, target: Side, events: list[dict], stop: asyncio.Event) -> None:
        """Apply the steps in order; once ``stop`` is set, none more (not even of a later call: the
        position must never pass a step that was not done). With ``parallel`` > 1 the appends between
        two barriers are started here and go on after it returns (:meth:`_settle` moves the
        position as they end, :meth:`_drain` waits for them)."""
        actions = plan_actions(events, self.settings.batch_bytes)
        if self.settings.parallel > 1:
            for segment in plan_segments(actions, self.settings.batch_bytes):
                if stop.is_set():
                    return
                if is_barrier(segment[0]):
                    await self._drain()
                    if stop.is_set():
                        return
                    await self._do(target, segment[0])
                    self._advance(segment[0], segment[0].skipped)
                    continue
                self._start_segment(target, segment)
                while self._in_flight > 2 * self.settings.batch_events:
                    await self._wait_oldest()
            await self._settle()  # segments with nothing to append (skipped events) end at once
            return
        for action in actions:
            if stop.is_set():
                return
            await self._do(target, action)
            self._advance(action, action.skipped)

    async def _do(self, target: Side, action: Action) -> None:
        if action.kind == "append":
            await self.secondary.append(target, action.stream, action.events)
            self.appends += 1
            self.events_copied += len(action.events)
            if is_metastream(action.stream):
                self.metadata_events += len(action.events)
        elif action.kind == "tombstone":
            await self.secondary.tombstone(target, action.stream)
            self.tombstones += 1
            self.events_copied += 1

    def _start_segment(self, target: Side, segment: list[Action]) -> None:
        """Start the appends of a segment (plan_segments): one task per stream, each after the same
        stream's task of the segments before (its order kept), ``parallel`` appends at a time."""
        assert self._gate is not None
        gate = self._gate
        runs: dict[str, list[Action]] = {}
        for action in segment[:-1]:
            runs.setdefault(action.stream, []).append(action)

        async def copy(before: asyncio.Task | None, stream_runs: list[Action]) -> None:
            if before is not None:
                await before  # its failure is this one's too
            for run in stream_runs:
                async with gate:
                    await self.secondary.append(target, run.stream, run.events)

        tasks = []
        for stream, stream_runs in runs.items():
            task = asyncio.create_task(copy(self._tails.get(stream), stream_runs))
            task.add_done_callback(lambda _: self._progress.set())
            self._tails[stream] = task
            tasks.append(task)
        events = sum(len(run.events) for run in segment[:-1])
        self._segments.append(_Segment(segment[-1], len(segment) - 1, events, tasks))
        self._in_flight += events

    async def _settle(self) -> None:
        """Move the position past the oldest segments whose appends are all done; raise the error of
        a failed one (after stopping every append under way: the next try starts from the position)."""
        while self._segments:
            segment = self._segments[0]
            if not all(task.done() for task in segment.tasks):
                return
            errors = [e for t in segment.tasks if not t.cancelled() and (e := t.exception()) is not None]
            if errors:
                await self._abort()
                raise next((e for e in errors if isinstance(e, MirrorError)), errors[0])
            self._segments.popleft()
            self._in_flight -= segment.events
            self.appends += segment.appends
            self.events_copied += segment.events
            self._advance(segment.end, segment.end.skipped)
        self._tails = {stream: task for stream, task in self._tails.items() if not task.done()}

    def _running(self) -> int:
        return sum(not task.done() for segment in self._segments for task in segment.tasks)

    async def _wait_oldest(self) -> None:
        """Wait for the oldest segment's appends, then settle (which may raise their error)."""
        running = [task for task in self._segments[0].tasks if not task.done()]
        if running:
            await asyncio.wait(running)
        await self._settle()

    async def _drain(self) -> None:
        """Wait for every append under way and move the position past them (or raise)."""
        while self._segments:
            await self._wait_oldest()

    async def _abort(self) -> None:
        tasks = [task for segment in self._segments for task in segment.tasks]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._segments.clear()
        self._tails.clear()
        self._in_flight = 0

    def _advance(self, done: Action, skipped: int) -> None:
        """Every step up to ``done`` is done: the position moves to its last event."""
        self.events_skipped += skipped
        self.position = done.last["position"]
        self.last_event_time = _event_time(done.last) or self.last_event_time
        self._rate_samples.append((self.clock.monotonic(), self.events_copied))

    def _replaying(self) -> bool:
        """Whether the events now copied may have been copied by an earlier run: a save starts at
        least every ``checkpoint_events`` events, checked after each batch, and waits for the one
        before (so the file lags by two at most); with ``parallel`` > 1 up to 3 batches may be under
        way and 3 more settle between two checks."""
        s = self.settings
        return self.events_copied - self._start_events < 2 * (
            s.checkpoint_events + s.batch_events * (6 if s.parallel > 1 else 1)
        )

    # -- status loop and metrics endpoint --------------------------------------------------------------
    async def _status_loop(self, stop: asyncio.Event) -> None:
        s = self.settings
        last_line = self.clock.monotonic()
        async with s.source.side(read_timeout=5.0) as source:
            while True:
                await self._poll_primary_head(source)
                if self.checkpoint is not None:
                    await self._maybe_save_checkpoint()
                self._write_status()
                if s.status_line_seconds and self.clock.monotonic() - last_line >= s.status_line_seconds:
                    last_line = self.clock.monotonic()
                    self.logger.info("%s", self.status_line())
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=s.status_seconds)
                if stop.is_set():
                    return

    async def _poll_primary_head(self, source: Side) -> None:
        try:
            response = await source.request(
                "GET", "/streams/$all/head/backward/1", headers={"Accept": "application/json"}
            )
            if response.status != 200:
                return
            entries = response.json().get("entries") or []
        except (*CONNECTION_ERRORS, ValueError):
            return
        if entries:
            self.primary_head = int(entries[0]["position"])
            self.primary_head_time = _event_time(entries[0])
        else:
            self.primary_head = -1


async def _lines(content: aiohttp.StreamReader):
    """Lines of a body of any length (``async for`` over aiohttp's reader refuses lines over 128 KiB,
    and an event's data may be up to MaxAppendSize)."""
    pending = bytearray()
    async for chunk in content.iter_any():
        pending += chunk  # in place: a long line costs no repeated copies
        if b"\n" not in chunk:
            continue
        *lines, rest = pending.split(b"\n")
        pending = bytearray(rest)
        for line in lines:
            yield bytes(line)
    if pending:
        yield bytes(pending)
