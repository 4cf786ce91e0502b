"""The node's persistent subscriptions: KurrentDB's PersistentSubscriptionService.

Served by the leader only: the service starts (loads ``$persistentSubscriptionConfig`` and every
group's checkpoint) when its node becomes the leader, and stops (every consumer is dropped) when it
is not any more; a clock tick every second notices both, times messages out and writes checkpoints.
While stopped, every call answers :class:`~evdb.errors.PersistentSubscriptionsNotReady`.

Its ports: a :class:`~evdb.persistent.checkpoints.SubscriptionStore`, the clock, ``is_leader``, and
``follow_commits`` (wait until the log has grown past a position), which feeds committed events to
the groups of their stream and of ``$all``.

The follower of ``$all`` (``_pump``) costs nothing per commit while no group exists: it neither waits
on the commits nor reads. A group added then (created, updated, or loaded by a start) wakes it at the
lowest position an added group needs live events from (the log's end before it was made, or the start's
position), so none is missed; events a group's own history read also hands over are dropped by the
group. With groups, it reads once per wake-up whatever the number of commits since the last read.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from evdb.clock import Clock
from evdb.errors import (
    EvdbError,
    MaximumSubscribersReached,
    PersistentSubscriptionExists,
    PersistentSubscriptionFailed,
    PersistentSubscriptionNotFound,
    PersistentSubscriptionsNotReady,
)
from evdb.persistent.checkpoints import SubscriptionStore
from evdb.persistent.engine import Group, Io
from evdb.persistent.model import (
    ALL,
    STRATEGIES,
    EventSource,
    GroupSettings,
    bare_key,
    check_settings,
    checkpoint_stream,
    default_all_allows,
    group_key,
    needs_resolving,
    parked_stream,
    settings_from_entry,
)
from evdb.persistent.strategies import ConsumerSink

__all__ = ["Connection", "PersistentSubscriptionService"]

TICK_SECONDS = 1.0
NAK_ACTIONS = ("Unknown", "Park", "Retry", "Skip", "Stop")


@dataclass(frozen=True, slots=True)
class Connection:
    """A consumer's connection to a group: what the gRPC Read call acks and nacks through."""

    key: str
    correlation_id: uuid.UUID
    last_position: int
    last_event_number: int | None


class PersistentSubscriptionService:
    def __init__(
        self,
        *,
        store: SubscriptionStore,
        clock: Clock,
        is_leader: Callable[[], bool],
        follow_commits: Callable[[int], Awaitable[None]],
        logger: logging.Logger,
    ) -> None:
        self._store = store
        self._clock = clock
        self._is_leader = is_leader
        self._follow_commits = follow_commits
        self._io = Io(logger)
        self.logger = logger
        self.started = False
        self._starting = False
        self._groups: dict[str, Group] = {}
        self._config: dict[str, Any] = {"version": "2", "entries": []}
        self._tick_task: asyncio.Task | None = None
        self._pump_task: asyncio.Task | None = None
        # set while the follower of $all is idle (no group): a group's addition wakes it at _resume_at
        self._idle_wake: asyncio.Future[None] | None = None
        self._resume_at: int | None = None
        self._lock = asyncio.Lock()  # create/update/delete/restart, one at a time

    @property
    def logger(self) -> logging.Logger:
        return self._io.logger

    @logger.setter
    def logger(self, logger: logging.Logger) -> None:  # the node's own, once it has configured logging
        self._io.logger = logger

    # -- lifecycle -------------------------------------------------------------------------------------
    def run(self) -> None:
        """Start the clock tick (which starts the subscriptions once this node leads)."""
        if self._tick_task is None:
            self._tick_task = asyncio.get_running_loop().create_task(self._ticks(), name="persistent-ticks")

    async def close(self) -> None:
        for task in (self._tick_task, self._pump_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        self._tick_task = None
        self._pump_task = None
        self._stop_subscriptions()
        self._io.cancel()

    async def _ticks(self) -> None:
        while True:
            try:
                await self.leadership_changed()
                if self.started:
                    for group in list(self._groups.values()):
                        group.tick()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the tick must go on
                self.logger.error("Persistent subscriptions: clock tick failed: %s", exc)
            await self._clock.sleep(TICK_SECONDS)

    async def leadership_changed(self) -> None:
        """Start on becoming the leader, stop on losing it (called at each tick and by the node)."""
        leader = self._is_leader()
        if leader and not self.started and not self._starting:
            await self._start_subscriptions()
        elif not leader and self.started:
            self.logger.info("Persistent subscriptions: this node is not the leader; stopping them")
            self._stop_subscriptions()

    async def _start_subscriptions(self) -> None:
        self._starting = True
        try:
            config = await asyncio.to_thread(self._store.load_config)
            position = await asyncio.to_thread(self._store.last_position)
        except EvdbError as exc:
            self.logger.error(
                "Persistent subscriptions could not load their configuration ($persistentSubscriptionConfig): %s",
                exc,
            )
            return
        except ValueError as exc:
            self.logger.error(
                "There was an error loading configuration from storage ($persistentSubscriptionConfig): %s",
                exc,
            )
            return
        finally:
            self._starting = False
        if not self._is_leader():
            return
        self._groups = {}
        self._config = config if config is not None else {"version": "2", "entries": []}
        entries = self._config.get("entries") or []
        loaded: dict[str, tuple[EventSource, str, GroupSettings]] = {}
        for entry in entries if isinstance(entries, list) else []:
            try:
                source, group, settings = settings_from_entry(entry if isinstance(entry, dict) else {})
            except (ValueError, KeyError, TypeError) as exc:
                self.logger.error(
                    "A persistent subscription in $persistentSubscriptionConfig cannot be loaded (%s). Ignoring it.",
                    exc,
                )
                continue
            if settings.consumer_strategy not in STRATEGIES:
                self.logger.error(
                    "A persistent subscription exists with an invalid consumer strategy '%s'. Ignoring it.",
                    settings.consumer_strategy,
                )
                continue
            key = group_key(source.stream, group)
            if key in self._groups or key in loaded:
                self.logger.warning(
                    "A duplicate persistent subscription: %s was found in the configuration. Ignoring it.",
                    key,
                )
                continue
            loaded[key] = (source, group, settings)
        await self._move_bare_named_streams(loaded)
        for source, group, settings in loaded.values():
            self._add_group(source, group, settings, follow_from=position)
        self.started = True
        self._pump_task = asyncio.get_running_loop().create_task(self._pump(position), name="persistent-live")
        self._pump_task.add_done_callback(self._pump_ended)
        self.logger.info("Persistent subscriptions have been started (%d groups).", len(self._groups))

    async def _move_bare_named_streams(
        self, groups: dict[str, tuple[EventSource, str, GroupSettings]]
    ) -> None:
        """Groups of a stream with ``%`` or ``:`` made before group keys were escaped keep their
        checkpoint and parked messages in streams named with the bare key (:func:`bare_key`): carry
        them to the escaped names. Not when two groups share the bare key (which of them wrote there
        cannot be told): the streams stay where they are (the name of the group whose stream has no
        ``:``), and the error names them."""
        bare: dict[str, list[str]] = {}
        for key, (source, group, _) in groups.items():
            bare.setdefault(bare_key(source.stream, group), []).append(key)
        moves: list[tuple[str, str]] = []
        for name, keys in bare.items():
            source, group, _ = groups[keys[0]]
            if len(keys) == 1 and name == keys[0]:
                continue  # a stream without % or : : the names did not change
            old = (f"$persistentsubscription-{name}-checkpoint", f"$persistentsubscription-{name}-parked")
            if len(keys) > 1:
                self.logger.error(
                    "The persistent subscriptions %s shared the streams %s and %s in an earlier version "
                    "(which of them wrote there cannot be told): they are not moved",
                    ", ".join(sorted(keys)),
                    *old,
                )
                continue
            moves += [
                (old[0], checkpoint_stream(source.stream, group)),
                (old[1], parked_stream(source.stream, group)),
            ]
        if not moves:
            return
        try:
            await asyncio.to_thread(self._store.move_group_streams, moves)
        except EvdbError as exc:
            self.logger.error(
                "The checkpoints and parked messages of %s could not be moved to their new streams: %s",
                ", ".join(old for old, _ in moves),
                exc,
            )

    def _stop_subscriptions(self) -> None:
        if self._pump_task is not None:
            self._pump_task.cancel()
            self._pump_task = None
        self._idle_wake = None
        self._resume_at = None
        for group in self._groups.values():
            group.shutdown()
        self._groups = {}
        if self.started:
            self.logger.info("Persistent subscriptions have been stopped.")
        self.started = False

    async def restart(self) -> None:
        """KurrentDB's RestartPersistentSubscriptions: stop every group, load them again."""
        if not self.started:
            raise PersistentSubscriptionsNotReady()
        async with self._lock:
            self.logger.info("Persistent Subscriptions are being restarted")
            self._stop_subscriptions()
            self._io.cancel()
            await self._start_subscriptions()

    async def _add_group_loaded(
        self, source: EventSource, group: str, settings: GroupSettings, live_from: int
    ) -> None:
        """A new or updated group, answered once it takes live events: KurrentDB loads the checkpoint
        while the configuration is written, so an event appended after the answer reaches the group
        (and, from the end, none committed before ``live_from``, the log's end before it was made)."""
        loaded: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def tell() -> None:
            if not loaded.done():
                loaded.set_result(None)

        self._add_group(source, group, settings, follow_from=live_from, loaded=tell, live_from=live_from)
        await loaded

    def _add_group(
        self,
        source: EventSource,
        group: str,
        settings: GroupSettings,
        *,
        follow_from: int,
        loaded: Callable[[], object] | None = None,
        live_from: int = -1,
    ) -> Group:
        """Add a group; ``follow_from``: a log position at or before every event the group must be
        handed live (the log's end before it was made, or the start's position)."""
        instance = Group(
            source,
            group,
            settings,
            store=self._store,
            io=self._io,
            clock=self._clock,
            schedule=lambda fn: asyncio.get_running_loop().call_soon(fn),
            logger=self.logger,
        )
        self._groups[instance.key] = instance
        self._wanted_from(follow_from)
        instance.start(loaded, live_from)
        return instance

    def _ready(self) -> None:
        if not self.started:
            raise PersistentSubscriptionsNotReady()

    # -- live events -----------------------------------------------------------------------------------
    async def _pump(self, position: int) -> None:
        """Committed events after ``position``, to the groups of their stream and of ``$all``; with no
        group, nothing (see the module's docstring)."""
        while True:
            if not self._groups:
                position = await self._idle(position)
                continue
            await self._follow_commits(position)
            if not self._groups:  # the last one went while waiting: nothing to read for nobody
                continue
            try:
                page = await asyncio.to_thread(self._store.read_all, position, 500, None, 500, False)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.logger.error("Persistent subscriptions: reading new events in $all failed: %s", exc)
                await self._clock.sleep(TICK_SECONDS)
                continue
            for resolved in page.events:
                record = resolved.original
                for group in self._groups_for(record.stream):
                    if group.source.is_all and not default_all_allows(record.stream):
                        continue
                    try:
                        item = resolved
                        if needs_resolving(record, group.settings.resolve_links):
                            item = await asyncio.to_thread(self._store.resolve, record, True)
                        group.notify_live(item)
                    except asyncio.CancelledError:
                        raise
                    except Exception:  # one group's fault must not stop every group's live events
                        self.logger.exception(
                            "Persistent subscription %s failed to take the live event %s@%s (position %d)",
                            group.key,
                            record.event_number,
                            record.stream,
                            record.log_position,
                        )
            if page.next_position > position:
                position = page.next_position

    async def _idle(self, position: int) -> int:
        """Wait, reading nothing and waiting on no commit, until a group is added; then the position
        to follow from: the lowest an added group needs (``position`` if none said)."""
        wake: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._idle_wake = wake
        self._resume_at = None
        try:
            await wake
        finally:
            if self._idle_wake is wake:
                self._idle_wake = None
        resume, self._resume_at = self._resume_at, None
        return position if resume is None else resume

    def _wanted_from(self, position: int) -> None:
        """A group was added that needs the live events from ``position`` on: an idle follower wakes
        there (an active one is at or before the log's end already and hands it every later event)."""
        wake = self._idle_wake
        if wake is None:
            return
        self._resume_at = position if self._resume_at is None else min(self._resume_at, position)
        if not wake.done():
            wake.set_result(None)

    def _pump_ended(self, task: asyncio.Task) -> None:
        if not task.cancelled() and task.exception() is not None:
            self.logger.error(
                "Persistent subscriptions stopped following $all: %s",
                task.exception(),
                exc_info=task.exception(),
            )

    def _groups_for(self, stream: str) -> list[Group]:
        return [g for g in self._groups.values() if g.source.stream in (stream, ALL)]

    # -- management ------------------------------------------------------------------------------------
    def _save_entry(
        self, user: str | None, key: tuple[str, str], entry: dict[str, Any] | None
    ) -> dict[str, Any]:
        config = dict(self._config)
        entries = [
            e
            for e in (config.get("entries") or [])
            if not (e.get("stream") == key[0] and e.get("group") == key[1])
        ]
        if entry is not None:
            old = [
                i
                for i, e in enumerate(config.get("entries") or [])
                if e.get("stream") == key[0] and e.get("group") == key[1]
            ]
            if old:
                entries.insert(min(old[-1], len(entries)), entry)
            else:
                entries.append(entry)
        config["version"] = "2"
        config["updated"] = datetime.fromtimestamp(self._clock.time(), UTC).isoformat()
        if user:
            config["updatedBy"] = user
        config["entries"] = entries
        return config

    async def create(
        self, source: EventSource, group: str, settings: GroupSettings, user: str | None
    ) -> None:
        async with self._lock:
            self._ready()
            self.logger.info("Creating persistent subscription %s", group_key(source.stream, group))
            end = await asyncio.to_thread(self._store.last_position)
            check_settings(source, group, settings, end)
            if group_key(source.stream, group) in self._groups:
                raise PersistentSubscriptionExists(source.stream, group)
            config = self._save_entry(user, (source.stream, group), settings.to_entry(source, group))
            await self._make_then_save(source, group, settings, end, config)

    async def _make_then_save(
        self, source: EventSource, group: str, settings: GroupSettings, end: int, config: Any
    ) -> None:
        """As KurrentDB's Create: the group is made (and takes live events) before the configuration
        is written, so a group of ``$all`` from the end is handed its own ``$PersistentConfig`` event
        as KurrentDB's is. A configuration that cannot be written takes the group away again (the
        caller gets the error; nothing changed)."""
        await self._add_group_loaded(source, group, settings, end)
        try:
            await asyncio.to_thread(self._store.save_config, config)
        except BaseException:
            instance = self._groups.pop(group_key(source.stream, group), None)
            if instance is not None:
                instance.shutdown()
            raise
        self._config = config

    async def update(
        self, source: EventSource, group: str, settings: GroupSettings, user: str | None
    ) -> None:
        async with self._lock:
            self._ready()
            key = group_key(source.stream, group)
            self.logger.info("Updating persistent subscription %s", key)
            old = self._groups.get(key)
            if old is None:
                raise PersistentSubscriptionNotFound(source.stream, group)
            if source.is_all:  # an update keeps the group's filter (KurrentDB's UpdateToAll)
                source = old.source
            end = await asyncio.to_thread(self._store.last_position)
            check_settings(source, group, settings, end)
            config = self._save_entry(user, (source.stream, group), settings.to_entry(source, group))
            await asyncio.to_thread(self._store.save_config, config)
            self._config = config
            old.shutdown()
            del self._groups[key]
            await self._add_group_loaded(source, group, settings, end)

    async def delete(self, stream: str, group: str, user: str | None) -> None:
        async with self._lock:
            self._ready()
            key = group_key(stream, group)
            self.logger.info("Deleting persistent subscription %s", key)
            instance = self._groups.get(key)
            if instance is None:
                raise PersistentSubscriptionNotFound(stream, group)
            config = self._save_entry(user, (stream, group), None)
            await asyncio.to_thread(self._store.save_config, config)
            self._config = config
            instance.shutdown()
            del self._groups[key]
            for name in (instance.checkpoint_stream, instance.parked_stream):
                self._io.run(f"deleting {name}", self._store.delete_stream, name)

    # -- consumers -------------------------------------------------------------------------------------
    async def connect(
        self,
        stream: str,
        group: str,
        sink: ConsumerSink,
        *,
        buffer_size: int,
        connection_name: str,
        user: str | None,
        from_: str,
    ) -> Connection:
        self._ready()
        key = group_key(stream, group)
        instance = self._groups.get(key)
        if instance is None:
            raise PersistentSubscriptionNotFound(stream, group)
        if instance.has_reached_max_clients:
            raise MaximumSubscribersReached(stream, group)
        last_number = None
        if stream != ALL:
            last_number = await asyncio.to_thread(self._store.last_event_number, stream)
        last_position = await asyncio.to_thread(self._store.last_position)
        if self._groups.get(key) is not instance:  # deleted or updated meanwhile
            raise PersistentSubscriptionNotFound(stream, group)
        correlation_id = uuid.uuid4()
        self.logger.info("New connection to persistent subscription %s by %s", key, connection_name)
        instance.add_client(correlation_id, connection_name, sink, buffer_size, user or "anonymous", from_)
        return Connection(key, correlation_id, last_position, last_number)

    def disconnect(self, connection: Connection) -> None:
        instance = self._groups.get(connection.key)
        if instance is not None:
            instance.remove_client(connection.correlation_id, notify=False)

    def ack(self, key: str, event_ids: list[bytes]) -> None:
        instance = self._groups.get(key) if self.started else None
        if instance is not None:
            instance.ack(event_ids)

    def nack(self, key: str, event_ids: list[bytes], action: str, reason: str) -> None:
        if action not in NAK_ACTIONS:
            raise ValueError(f"unknown nack action {action!r}")
        instance = self._groups.get(key) if self.started else None
        if instance is not None:
            instance.nack(event_ids, action, reason)

    async def read_next(self, stream: str, group: str, count: int) -> list[tuple[Any, int]]:
        """KurrentDB's ReadNextNPersistentMessages (the HTTP competing-consumer read): up to ``count``
        messages handed out as in flight, each with its retry count."""
        self._ready()
        instance = self._groups.get(group_key(stream, group))
        if instance is None:
            raise PersistentSubscriptionNotFound(stream, group)
        return instance.take_next(count)

    def replay_parked(self, stream: str, group: str, stop_at: int | None, user: str | None) -> None:
        self._parked_action(stream, group, stop_at, user, "replay")

    def truncate_parked(self, stream: str, group: str, stop_at: int | None, user: str | None) -> None:
        """KurrentDB's TruncateParkedMessages: the parked messages (all, or those before ``stop_at``)
        are dropped without being replayed."""
        self._parked_action(stream, group, stop_at, user, "truncate")

    def _parked_action(
        self, stream: str, group: str, stop_at: int | None, user: str | None, action: str
    ) -> None:
        """Replay or truncate a group's parked messages: the same checks and answers for both."""
        self._ready()
        key = group_key(stream, group)
        log = self.logger.info if action == "replay" else self.logger.debug
        log(
            "%s parked messages for persistent subscription %s %s. Requested by %s",
            "Replaying" if action == "replay" else "Truncating",
            key,
            f"(To: '{stop_at}')" if stop_at is not None else "(All)",
            user,
        )
        if stop_at is not None and stop_at < 0:
            reason = (
                "Cannot stop replaying parked message at a negative version."
                if action == "replay"
                else "Cannot truncate parked messages at a negative version."
            )
            raise PersistentSubscriptionFailed(stream, group, reason)
        instance = self._groups.get(key)
        if instance is None:
            raise PersistentSubscriptionNotFound(stream, group)
        result = instance.replay_parked(stop_at) if action == "replay" else instance.truncate_parked(stop_at)
        if result == "NotReady":
            raise PersistentSubscriptionsNotReady()
        if result == "AlreadyInProgress":
            raise PersistentSubscriptionFailed(stream, group, "A replay or truncate is already in progress.")

    # -- statistics ------------------------------------------------------------------------------------
    def info(self, stream: str, group: str) -> dict[str, Any]:
        self._ready()
        instance = self._groups.get(group_key(stream, group))
        if instance is None:
            raise PersistentSubscriptionNotFound(stream, group)
        return instance.statistics()

    def list(self, stream: str | None = None) -> list[dict[str, Any]]:
        """Every group's statistics (by stream name, as KurrentDB's sorted topics), or one stream's;
        PersistentSubscriptionNotFound when that stream has none."""
        self._ready()
        groups = sorted(self._groups.values(), key=lambda g: g.source.stream)
        if stream is not None:
            groups = [g for g in groups if g.source.stream == stream]
            if not groups:
                raise PersistentSubscriptionNotFound(stream, "")
        return [g.statistics() for g in groups]

    def groups(self) -> tuple[Any, ...]:
        """The groups served now (evdb.persistent.engine instances; read by the node's metrics)."""
        return tuple(self._groups.values())

    def topic_count(self) -> int:
        return len({g.source.stream for g in self._groups.values()})
