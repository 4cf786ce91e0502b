"""The system projections at run time: KurrentDB's ``RunProjections=System`` on the leader.

What is kept in the log, as KurrentDB keeps it:

- ``$projections-$all``: ``$ProjectionsInitialized`` (event 0), then one ``$ProjectionCreated`` per
  projection (its data the name); a projection's id is the number of that event.
- ``$projections-<name>``: ``$ProjectionUpdated`` events, the persisted state (enabled, epoch, ...); a
  projection's *version* is the number of the last one, its *epoch* the version of its last reset.
- ``$projections-<name>-checkpoint``: ``$ProjectionCheckpoint`` events whose metadata is the checkpoint
  tag ``{"$v": "<id>:<epoch>:<version>:4", "$c": <pos>, "$p": <pos>}`` (the last event processed).
- Every event a projection writes carries the tag of the event that caused it, plus the handler's
  own keys and ``$causedBy`` / ``$correlationId``. That tag makes a resume idempotent: before a
  projection first writes to a stream it reads the stream's last event, and writes only what
  comes after that event's ``$c`` (KurrentDB's recovery of emitted streams). So a node killed between
  writing links and writing its checkpoint neither loses nor duplicates a link.

Each batch (links, the new streams' metadata, and the checkpoint when due) is written by one
``Database.call_in_writer`` call: one group commit. Only a leader writes: the call checks the
database's write permit first (a follower's own appends would otherwise be forwarded to the leader).
The projections run while this node is the leader; a supervisor starts and stops them as the
cluster's leadership moves, reloading their state and checkpoints from the log each time.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections.abc import Callable
from functools import partial
from typing import Any

from evdb.clock import Clock
from evdb.database import Database, WriterContext
from evdb.errors import (
    DatabaseClosed,
    InvalidInput,
    NotLeader,
    ProjectionNotFound,
    ProjectionOperationFailed,
    ProjectionsNotReady,
    StreamDeleted,
    StreamNotFound,
)
from evdb.projections.config import DEFAULT_CONFIG, ProjectionConfig
from evdb.projections.model import (
    REGISTRATION_STREAM,
    SUBSYSTEM_VERSION,
    Planned,
    ProjectionFaulted,
    Runtime,
    Target,
    checkpoint_deleted_reason,
    checkpoint_stream,
    json_bytes,
    parse_tag,
    projection_statistics,
    state_stream,
    tag_positions,
)
from evdb.projections.standard import (
    PARTITION_CHECKPOINT_TYPE,
    STANDARD_PROJECTIONS,
    Emitted,
    by_name,
)
from evdb.projections.store import ProjectionStore
from evdb.projections.waits import through_archive
from evdb.storage.records import EventRecord
from evdb.streams import ANY, NewEvent, check_stream_name, metastream_of
from evdb.subscriptions import CommitNotifier

__all__ = [
    "REGISTRATION_STREAM",
    "SystemProjections",
    "checkpoint_stream",
    "parse_tag",
    "state_stream",
]

BATCH = 1000  # events of $all read per step
CHECKPOINT_HANDLED_THRESHOLD = DEFAULT_CONFIG.checkpoint_handled_threshold  # KurrentDB's ProjectionConsts
CHECKPOINT_AFTER_SECONDS = 2.0  # evdb: when caught up, a checkpoint of handled events waits at most this
EMIT_NOT_ALLOWED = "'emit' is not allowed by the projection/configuration/mode"  # KurrentDB's reason
LEADERSHIP_POLL_SECONDS = 1.0
STREAM_CACHE_SIZE = 100_000  # emitted streams whose last written source position is remembered
_EMITTED_ACL = {"$r": "$all", "$mr": "$all"}  # KurrentDB's ACL of a $-stream a projection writes
_CHECKPOINT_METADATA = {
    "$maxCount": 2,
    "$acl": {"$r": "$admins", "$w": "$admins", "$d": "$admins", "$mr": "$all", "$mw": "$admins"},
}


class SystemProjections:
    """The system projections of one node (KurrentDB's projections subsystem in ``System`` mode)."""

    def __init__(
        self,
        *,
        database: Callable[[], Database],
        notifier: Callable[[], CommitNotifier],
        is_leader: Callable[[], bool],
        clock: Clock,
        logger: logging.Logger,
        start_standard: bool,
    ) -> None:
        self._database = database
        self._notifier = notifier
        self._is_leader = is_leader
        self._clock = clock
        self._log = logger
        self._store = ProjectionStore(clock=clock, logger=logger, start_standard=start_standard)
        self._runtimes: dict[str, Runtime] = {}
        self._active = False
        self._lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self._supervisor: asyncio.Task[None] | None = None
        self._start_failure: str | None = None  # the last failure to load, logged when it changes

    @property
    def registration_fault(self) -> str | None:
        """Why the projections' registration stream could not be used at the last load (None: it could)."""
        return self._store.registration_fault

    @property
    def start_standard(self) -> bool:
        return self._store.start_standard

    # -- lifecycle ---------------------------------------------------------------------------------------
    async def start(self) -> None:
        self._supervisor = asyncio.create_task(self._supervise(), name="system-projections")

    async def stop(self) -> None:
        if self._supervisor is not None:
            self._supervisor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._supervisor
            self._supervisor = None
        await self._deactivate()

    def wake(self) -> None:
        """Leadership changed: look now rather than at the next poll."""
        self._wake.set()

    @property
    def active(self) -> bool:
        """True while this node runs the projections (it is the leader and has loaded them)."""
        return self._active

    async def _supervise(self) -> None:
        while True:
            self._wake.clear()
            try:
                async with self._lock:
                    if self._is_leader():
                        if not self._active:
                            await self._activate()
                        self._restart_stopped_runners()
                    elif self._active:
                        await self._deactivate()
            except asyncio.CancelledError:
                raise
            except (DatabaseClosed, NotLeader):
                await self._deactivate()
            except Exception as exc:
                failure = f"{type(exc).__name__}: {exc}"
                if failure != self._start_failure:  # tried again every poll: logged when it changes
                    self._start_failure = failure
                    self._log.warning(
                        "The system projections could not start on this leader (stream %s): %s; "
                        "trying again every %g s",
                        REGISTRATION_STREAM,
                        exc,
                        LEADERSHIP_POLL_SECONDS,
                    )
                await self._deactivate()
            await self._sleep_or_wake(LEADERSHIP_POLL_SECONDS)

    async def _sleep_or_wake(self, seconds: float) -> None:
        waits = [asyncio.ensure_future(self._wake.wait()), asyncio.ensure_future(self._clock.sleep(seconds))]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()

    async def _activate(self) -> None:
        runtimes = await asyncio.to_thread(self._store.load, self._database())
        self._runtimes = runtimes
        self._active = True
        self._start_failure = None
        enabled = [rt.name for rt in runtimes.values() if rt.persisted.enabled]
        self._log.info("System projections loaded on this leader; running: %s", ", ".join(enabled) or "none")

    def _restart_stopped_runners(self) -> None:
        for rt in self._runtimes.values():
            if rt.persisted.enabled and rt.task is None and rt.status != "Faulted":
                self._start_runner(rt)

    async def _deactivate(self) -> None:
        self._active = False
        runtimes, self._runtimes = self._runtimes, {}
        for rt in runtimes.values():
            if rt.task is not None:
                rt.task.cancel()
        for rt in runtimes.values():
            if rt.task is not None:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await rt.task
                rt.task = None

    def _write_state(
        self,
        db: Database,
        rt: Runtime,
        *,
        enabled: bool,
        reset: bool,
        config: ProjectionConfig | None = None,
        checkpoints_disabled: bool | None = None,
    ) -> None:
        self._store.append_state(
            db,
            rt.definition,
            rt.persisted,
            enabled=enabled,
            reset=reset,
            config=config,
            checkpoints_disabled=checkpoints_disabled,
        )

    # -- running ------------------------------------------------------------------------------------------
    def _start_runner(self, rt: Runtime) -> None:
        rt.stopping = False
        rt.write_checkpoint_on_stop = True
        rt.wakeup = asyncio.get_running_loop().create_future()
        rt.status = "Running"
        rt.reason = ""
        rt.task = asyncio.create_task(self._run(rt), name=f"projection {rt.name}")

    async def _run(self, rt: Runtime) -> None:
        try:
            # reads of archived positions wait while the archive is unavailable (evdb/projections/waits.py)
            await through_archive(rt, partial(self._started, self._database(), rt), self._clock, self._log)
            while not rt.stopping:
                db = self._database()
                caught_up = await through_archive(rt, partial(self._step, db, rt), self._clock, self._log)
                if not caught_up:  # None: stopped while it waited for the archive
                    continue
                timer = None
                if rt.unchecked:
                    wait = max(CHECKPOINT_AFTER_SECONDS, rt.persisted.config.checkpoint_after_ms / 1000)
                    timeout = wait - (self._clock.monotonic() - rt.checkpoint_at)
                    if timeout <= 0:
                        checkpoint = partial(self._suggested_checkpoint, db, rt, rt.position)
                        await through_archive(rt, checkpoint, self._clock, self._log)
                        continue
                    timer = self._checkpoint_timer(rt, rt.checkpoint_at + wait, timeout)
                await self._wait(rt, rt.next_position, timer)
            if rt.write_checkpoint_on_stop and rt.unchecked:
                await asyncio.to_thread(self._commit, self._database(), rt, [], {}, rt.position)
            rt.status = "Stopped"
        except asyncio.CancelledError:
            rt.status = "Stopped"
            raise
        except (DatabaseClosed, NotLeader) as exc:  # the supervisor restarts or stops it
            self._log.info("Projection %s stopped: %s", rt.name, exc)
            rt.status = "Stopped"
        except Exception as exc:
            rt.status = "Faulted"
            rt.reason = str(exc)
            self._log.error(
                "Projection %s faulted at position %d (checkpoint stream %s): %s",
                rt.name,
                rt.position,
                checkpoint_stream(rt.name),
                exc,
            )
        finally:
            if rt.timer is not None:
                rt.timer.cancel()
                rt.timer = None
            rt.targets.clear()
            if rt.status != "Faulted" and not rt.stopping:
                rt.task = None  # a stop by the leader's loss or a closing database: restartable

    def _checkpoint_timer(self, rt: Runtime, deadline: float, timeout: float) -> asyncio.Task[None]:
        """The sleep until the next suggested checkpoint (``deadline`` on the clock, ``timeout`` from
        now): the one already running when it ends then, else a new one."""
        timer = rt.timer
        if timer is None or timer.done() or rt.timer_deadline != deadline:
            if timer is not None:
                timer.cancel()
            timer = rt.timer = asyncio.ensure_future(self._clock.sleep(timeout))
            rt.timer_deadline = deadline
        return timer

    async def _wait(self, rt: Runtime, position: int, timer: asyncio.Task[None] | None) -> None:
        """Until a commit past ``position``, a stop (the runtime's wakeup) or ``timer`` ends: futures, no
        task per wait (the timer is kept for the next wait)."""
        wakeup = rt.wakeup
        assert wakeup is not None  # made as the runner starts
        commit = self._notifier().future_beyond(position)
        waits: list[asyncio.Future[Any]] = [commit, wakeup] if timer is None else [commit, wakeup, timer]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            commit.cancel()

    def _started(self, db: Database, rt: Runtime) -> None:
        """KurrentDB's ``NewCheckpointStarted`` as a projection starts: ``$by_event_type`` writes a
        ``$Checkpoint`` at the position it starts from to ``$et``."""
        planned = self._checkpoint_events(rt, rt.position)
        if planned:
            writes, metadata = self._plan(db, rt, planned)
            if writes or metadata:
                self._commit(db, rt, writes, metadata, None)

    def _checkpoint_events(self, rt: Runtime, position: int) -> list[Planned]:
        """What a projection writes as a checkpoint is suggested at ``position`` (KurrentDB's
        ``IProjectionCheckpointHandler``): ``{"$c": .., "$p": ..}`` to its index checkpoint stream."""
        stream = rt.definition.index_checkpoint_stream
        if stream is None:
            return []
        commit, prepare = tag_positions(position)
        data = json_bytes({"$c": commit, "$p": prepare})
        emitted = Emitted(stream, PARTITION_CHECKPOINT_TYPE, data, is_json=True)
        return [Planned(position, None, emitted, repeatable=True)]

    def _suggested_checkpoint(self, db: Database, rt: Runtime, position: int) -> None:
        writes, metadata = self._plan(db, rt, self._checkpoint_events(rt, position))
        self._commit(db, rt, writes, metadata, position)

    def _checkpoint_due(self, rt: Runtime, handled: int, position: int) -> bool:
        """KurrentDB's ``ReaderSubscriptionBase``: a checkpoint is suggested after
        ``checkpointHandledThreshold`` events handled, or ``checkpointUnhandledBytesThreshold`` bytes of
        ``$all`` passed with none handled, no sooner than ``checkpointAfterMs`` after the last one."""
        config = rt.persisted.config
        if (self._clock.monotonic() - rt.checkpoint_at) * 1000 < config.checkpoint_after_ms:
            return False
        if (
            config.checkpoint_handled_threshold > 0
            and rt.unchecked + handled >= config.checkpoint_handled_threshold
        ):
            return True
        unhandled = config.checkpoint_unhandled_bytes_threshold
        return unhandled > 0 and rt.last_passed >= 0 and position - rt.last_passed > unhandled

    def _step(self, db: Database, rt: Runtime) -> bool:
        """Process one batch of ``$all`` (a worker thread); True when it reached the end."""
        started = self._clock.monotonic()
        page = db.read_all_forward(rt.next_position, BATCH)
        position = rt.position
        planned: list[Planned] = []
        handled = 0
        last_passed = rt.last_passed
        definition = rt.definition
        for record in page.events:
            if record.log_position <= position:  # the checkpoint's own event is read again
                continue
            position = record.log_position
            if last_passed < 0:
                last_passed = position  # the unhandled bytes count from the first event read
            if not definition.passes(record):
                continue
            handled += 1
            last_passed = position
            planned.extend(Planned(position, record, e) for e in definition.emit(record))
        rt.last_passed = last_passed
        due = self._checkpoint_due(rt, handled, position)
        if due:
            planned.extend(self._checkpoint_events(rt, position))
        writes, metadata = self._plan(db, rt, planned)
        if writes or metadata or due:
            self._commit(db, rt, writes, metadata, position if due else None)
        rt.position = position
        rt.next_position = page.next_position
        rt.processed += handled
        if not due:
            rt.unchecked += handled
        rt.processing_seconds += self._clock.monotonic() - started
        return page.is_end

    def _target(self, db: Database, rt: Runtime, stream: str) -> Target:
        known = rt.targets.get(stream)
        if known is not None:
            rt.targets.move_to_end(stream)
            return known
        target = self._read_target(db, rt, stream)
        rt.targets[stream] = target
        if len(rt.targets) > STREAM_CACHE_SIZE:
            rt.targets.popitem(last=False)
        return target

    def _read_target(self, db: Database, rt: Runtime, stream: str) -> Target:
        """What ``stream`` holds of this projection's output (KurrentDB's emitted stream recovery)."""
        try:
            check_stream_name(stream)
        except InvalidInput as exc:
            self._log.warning("Projection %s does not write to stream %r: %s", rt.name, stream[:200], exc)
            return Target(-1, -1, None, skip=True)
        state = db.stream_state(stream)
        if state.tombstoned:  # KurrentDB's EmittedStream: the projection faults with this reason
            raise ProjectionFaulted(f"Stream : {stream} is deleted. Cannot emit events to it")
        last = state.last_event_number
        fresh: dict[str, Any] = {"$acl": _EMITTED_ACL}
        if last < 0 or state.soft_deleted:
            return Target(last, -1, fresh)
        try:
            record: EventRecord | None = db.read_event(stream, last)
        except (StreamNotFound, StreamDeleted):
            record = None  # truncated or expired: a new logical stream after it
        if record is None:
            return Target(last, -1, {"$tb": last + 1, **fresh})
        tag = parse_tag(record.metadata)
        if tag is None:
            raise ProjectionFaulted(
                f"The '{stream}' stream managed by projection {rt.name} has been written to from the outside."
            )
        if tag.projection_id != rt.projection_id:
            raise ProjectionFaulted(
                f"Multiple projections emitting to the same stream detected.  Stream: '{stream}'. "
                f"Last event projection: '{tag.projection_id}'.  Emitting projection: '{rt.projection_id}'"
            )
        if tag.version < rt.persisted.epoch:  # written before the last reset: a new logical stream
            return Target(last, -1, {"$tb": last + 1, **fresh})
        return Target(last, tag.position, None)

    def _metadata(self, rt: Runtime, item: Planned) -> bytes:
        """The emitted event's metadata: the checkpoint tag of its source, the handler's keys, then
        ``$causedBy`` and ``$correlationId`` (KurrentDB's ``EmittedStream`` order; a checkpoint's own
        event has neither)."""
        persisted = rt.persisted
        commit, prepare = tag_positions(item.position)
        body: dict[str, Any] = {
            "$v": f"{rt.projection_id}:{persisted.epoch}:{persisted.version}:{SUBSYSTEM_VERSION}",
            "$c": commit,
            "$p": prepare,
        }
        for key, value in item.emitted.extra:
            if key != "$causedBy":
                body[key] = value
        source = item.source
        if source is None:
            return json_bytes(body)
        body["$causedBy"] = str(source.id)
        if "$correlationId" not in body and source.is_json and source.metadata:
            correlation = _source_correlation_id(source.metadata)
            if correlation is not None:
                body["$correlationId"] = correlation
        return json_bytes(body)

    def _plan(
        self, db: Database, rt: Runtime, planned: list[Planned]
    ) -> tuple[list[tuple[str, list[NewEvent]]], dict[str, bytes]]:
        """The appends for a batch's output, per stream in order, skipping what a stream already has
        (a checkpoint's event is written again at the tag the stream ends with, as KurrentDB does when
        a projection starts from that checkpoint)."""
        if planned and not rt.persisted.config.emit_enabled:
            raise ProjectionFaulted(EMIT_NOT_ALLOWED)
        per_stream: dict[str, list[NewEvent]] = {}
        metadata: dict[str, bytes] = {}
        for item in planned:
            e = item.emitted
            target = self._target(db, rt, e.stream)
            if target.skip:
                continue
            if item.position < target.last_source or (
                item.position == target.last_source and not item.repeatable
            ):
                continue
            if target.metadata is not None and e.stream not in metadata:
                metadata[e.stream] = json_bytes(target.metadata)
            event = NewEvent(e.event_type, e.data, self._metadata(rt, item), uuid.uuid4(), e.is_json)
            per_stream.setdefault(e.stream, []).append(event)
            target.last_source = item.position
        return list(per_stream.items()), metadata

    def _commit(
        self,
        db: Database,
        rt: Runtime,
        writes: list[tuple[str, list[NewEvent]]],
        metadata: dict[str, bytes],
        checkpoint: int | None,
    ) -> None:
        """Write a batch's output (and the checkpoint) in one writer call, on the leader only."""
        budget = max(4096, db.config.chunk_size // 4)  # each append must fit well inside a chunk
        most = max(1, rt.persisted.config.max_write_batch_length)
        checkpoint_event = None
        if checkpoint is not None:
            tag = {
                "$v": f"{rt.projection_id}:{rt.persisted.epoch}:{rt.persisted.version}:{SUBSYSTEM_VERSION}",
                "$c": checkpoint,
                "$p": checkpoint,
            }
            # the data is the root partition's state: none for a system projection, "[]" (PartitionState)
            checkpoint_event = NewEvent("$ProjectionCheckpoint", b"[]", json_bytes(tag), uuid.uuid4(), True)

        def write(ctx: WriterContext) -> None:
            permit = db.write_permit
            if permit is not None and not permit():
                raise NotLeader()
            for stream, data in metadata.items():
                ctx.append(metastream_of(stream), [NewEvent("$metadata", data, b"", uuid.uuid4(), True)])
            for stream, events in writes:
                for part in _parts(stream, events, budget, most):
                    ctx.append(stream, part)
            if checkpoint_event is not None and not rt.checkpoint_deleted:
                name = checkpoint_stream(rt.name)
                if not rt.checkpoint_metadata_written:
                    meta = NewEvent("$metadata", json_bytes(_CHECKPOINT_METADATA), b"", uuid.uuid4(), True)
                    ctx.append(metastream_of(name), [meta])
                ctx.append(name, [checkpoint_event], ANY)

        try:
            db.call_in_writer(write)
        except StreamDeleted as exc:
            rt.targets.clear()
            name = checkpoint_stream(rt.name)
            if exc.stream not in (name, metastream_of(name)):
                raise
            rt.checkpoint_deleted = True  # deleted while running: this projection faults, a reset runs it
            raise ProjectionFaulted(checkpoint_deleted_reason(rt.name)) from None
        except BaseException:
            rt.targets.clear()  # what was written is read back from the streams at the next step
            raise
        for stream in metadata:
            target = rt.targets.get(stream)
            if target is not None:
                target.metadata = None
        if checkpoint is not None:
            rt.checkpoint_metadata_written = True
            rt.checkpoint = checkpoint
            rt.unchecked = 0
            rt.last_passed = checkpoint
            rt.checkpoint_at = self._clock.monotonic()

    # -- management -----------------------------------------------------------------------------------------
    def _runtime(self, name: str) -> Runtime:
        if by_name(name) is None:
            raise ProjectionNotFound(name)
        self._require_active()
        rt = self._runtimes.get(name)
        if rt is None:
            raise NotLeader()
        return rt

    def _require_active(self) -> None:
        """Projections are managed on the leader once it has loaded them: a follower redirects
        (NotLeader), a leader that is still loading them asks for a moment (ProjectionsNotReady)."""
        if self._active:
            return
        if self._is_leader():
            raise ProjectionsNotReady()
        raise NotLeader()

    def names(self) -> list[str]:
        return [p.name for p in STANDARD_PROJECTIONS]

    def statistics(self, name: str | None = None) -> list[dict[str, Any]]:
        """KurrentDB's ``ProjectionStatistics`` of one projection (or all), as the gRPC Details fields."""
        if name is not None:
            return [self._statistics(self._runtime(name))]
        self._require_active()
        return [self._statistics(self._runtimes[p.name]) for p in STANDARD_PROJECTIONS]

    def _statistics(self, rt: Runtime) -> dict[str, Any]:
        try:
            end = self._database().readable_position
        except DatabaseClosed:
            end = 0
        return projection_statistics(rt, end, self.registration_fault)

    async def _stop_runner(self, rt: Runtime, *, write_checkpoint: bool) -> None:
        task = rt.task
        if task is None:
            return
        rt.stopping = True
        rt.write_checkpoint_on_stop = write_checkpoint
        if rt.wakeup is not None and not rt.wakeup.done():
            rt.wakeup.set_result(None)
        with contextlib.suppress(asyncio.CancelledError):
            await task
        rt.task = None

    async def enable(self, name: str) -> None:
        async with self._lock:
            rt = self._runtime(name)
            if not rt.persisted.enabled:
                await asyncio.to_thread(self._write_state, self._database(), rt, enabled=True, reset=False)
            if rt.task is None or rt.status == "Faulted":
                await self._stop_runner(rt, write_checkpoint=False)
                self._start_runner(rt)
            self._log.info("Projection %s enabled", name)

    async def disable(self, name: str, *, write_checkpoint: bool = True) -> None:
        """KurrentDB's Disable (a checkpoint is written) or, without ``write_checkpoint``, Abort."""
        async with self._lock:
            rt = self._runtime(name)
            await self._stop_runner(rt, write_checkpoint=write_checkpoint)
            if rt.persisted.enabled:
                await asyncio.to_thread(self._write_state, self._database(), rt, enabled=False, reset=False)
            rt.status = "Stopped"
            self._log.info("Projection %s %s", name, "disabled" if write_checkpoint else "aborted")

    async def reset(self, name: str) -> None:
        """Start over from the beginning of ``$all`` in a new epoch: each stream it writes to begins a
        new logical stream (its earlier events are truncated away when it is next written to)."""
        async with self._lock:
            rt = self._runtime(name)
            await self._stop_runner(rt, write_checkpoint=False)
            await asyncio.to_thread(
                self._write_state,
                self._database(),
                rt,
                enabled=rt.persisted.enabled,
                reset=True,
                # its checkpoint stream deleted: from now on its checkpoints are kept in memory only
                checkpoints_disabled=rt.checkpoint_deleted,
            )
            rt.start_at(-1)
            rt.processed = 0
            rt.status = "Stopped"
            if rt.persisted.enabled:
                self._start_runner(rt)
            self._log.info("Projection %s reset (epoch %d)", name, rt.persisted.epoch)

    async def restart(self) -> None:
        """KurrentDB's RestartSubsystem: stop every projection and load them again from the log."""
        async with self._lock:
            if not self._active:
                raise ProjectionOperationFailed(
                    "", "Projection Subsystem cannot be restarted as it is in the wrong state: Stopped"
                )
            await self._deactivate()
        self._log.info("The projections subsystem is restarting")
        self.wake()

    def config(self, name: str) -> ProjectionConfig:
        """KurrentDB's ``GetConfig``: the projection's configuration as kept in its persisted state."""
        return self._runtime(name).persisted.config

    async def update_config(self, name: str, config: ProjectionConfig) -> None:
        """KurrentDB's ``UpdateConfig``: only a stopped or faulted projection's (else OperationFailed);
        a new ``$ProjectionUpdated`` is written (a new version) and the next start uses it."""
        async with self._lock:
            rt = self._runtime(name)
            if rt.task is not None and rt.status != "Faulted":
                raise ProjectionOperationFailed(
                    name, "Cannot update the config of a projection that hasn't been stopped or faulted."
                )
            await asyncio.to_thread(
                self._write_state,
                self._database(),
                rt,
                enabled=rt.persisted.enabled,
                reset=False,
                config=config,
            )
            self._log.info("Projection %s configuration updated (stream %s)", name, state_stream(name))

    def delete(self, name: str) -> None:
        """KurrentDB refuses to delete a system projection; no other projection exists here."""
        if by_name(name) is None:
            raise ProjectionNotFound(name)
        raise ProjectionOperationFailed(
            name, "We currently don't allow for the deletion of System Projections."
        )

    def state(self, name: str) -> str:
        """A system projection's state and result: none (KurrentDB answers an empty one)."""
        self._runtime(name)
        return ""


def _source_correlation_id(metadata: bytes) -> str | None:
    try:
        parsed = json.loads(metadata)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    value = parsed.get("$correlationId") if isinstance(parsed, dict) else None
    return value if isinstance(value, str) else None


def _parts(stream: str, events: list[NewEvent], budget: int, most: int) -> list[list[NewEvent]]:
    """``events`` in appends of at most ``most`` events and ``budget`` bytes (about: names, data,
    metadata, headers)."""
    parts: list[list[NewEvent]] = []
    current: list[NewEvent] = []
    size = 0
    overhead = len(stream.encode()) + 128
    for event in events:
        cost = overhead + len(event.event_type) + len(event.data) + len(event.metadata)
        if current and (size + cost > budget or len(current) >= most):
            parts.append(current)
            current, size = [], 0
        current.append(event)
        size += cost
    if current:
        parts.append(current)
    return parts
