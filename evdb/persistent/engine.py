"""One persistent subscription group, as KurrentDB's PersistentSubscription runs it.

A group reads its source in batches into a bounded buffer (history), follows live events once it has
caught up (a bounded live buffer bridges the switch), hands messages to its consumers through the
consumer strategy, and takes them back on ack, nack and timeout: a message is retried up to
``max_retry_count`` times and then parked.

:class:`Group` runs that flow and composes the pieces that keep its state: the
:class:`~evdb.persistent.buffer.StreamBuffer` of messages waiting to go out, the
:class:`~evdb.persistent.outstanding.OutstandingMessages` handed out and their timeouts, the
:class:`~evdb.persistent.checkpointing.Checkpointer` (message numbers, the checkpoint and when it is due),
the :class:`~evdb.persistent.parking.ParkedMessages` (park, replay, truncate) and the
:class:`~evdb.persistent.info.Throughput` its figures are measured by.

Everything here runs on the node's event loop; reads and writes of the log go through the
:class:`~evdb.persistent.checkpoints.SubscriptionStore` off the loop (:class:`~evdb.persistent.offloop.Io`),
and their results come back as callbacks, as KurrentDB's messages do. Time is the injected clock's:
message timeouts, checkpoint intervals and the rates in the statistics.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import replace
from itertools import chain
from typing import Any

from evdb.clock import Clock
from evdb.errors import StreamDeleted
from evdb.persistent.buffer import StreamBuffer
from evdb.persistent.checkpointing import Checkpointer
from evdb.persistent.checkpoints import ReadResult, SubscriptionStore
from evdb.persistent.info import GroupInfo, Throughput, group_info
from evdb.persistent.model import (
    LIVE,
    EventSource,
    GroupSettings,
    OutstandingMessage,
    ResolvedEvent,
    checkpoint_stream,
    group_key,
    parked_stream,
)
from evdb.persistent.offloop import Io
from evdb.persistent.outstanding import OutstandingMessages, lowest_sequence
from evdb.persistent.parking import ParkedMessages
from evdb.persistent.strategies import Client, ConsumerSink, PushResult, RequestStatistics, make_strategy

__all__ = ["Group", "Io", "OutstandingMessage", "StreamBuffer"]

# KurrentDB's PersistentSubscriptionState flags, in the order its ToString lists them
NOT_READY, BEHIND, OUTSTANDING_PAGE_REQUEST, REPLAYING_PARKED, LIVE_STATE = 0, 1, 2, 4, 8
_STATE_NAMES = (
    (BEHIND, "Behind"),
    (OUTSTANDING_PAGE_REQUEST, "OutstandingPageRequest"),
    (REPLAYING_PARKED, "ReplayingParkedMessages"),
    (LIVE_STATE, "Live"),
)
MAX_PULL_BATCH = 100  # KurrentDB's PersistentSubscriptionStreamReader(ioDispatcher, 100)


def state_name(state: int) -> str:
    if state == NOT_READY:
        return "NotReady"
    return ", ".join(name for flag, name in _STATE_NAMES if state & flag)


class Group:
    """One persistent subscription group (KurrentDB's PersistentSubscription)."""

    def __init__(
        self,
        source: EventSource,
        group: str,
        settings: GroupSettings,
        *,
        store: SubscriptionStore,
        io: Io,
        clock: Clock,
        schedule: Callable[[Callable[[], None]], object],
        logger: logging.Logger,
    ) -> None:
        self.source = source
        self.group = group
        self.settings = settings
        self.key = group_key(source.stream, group)
        self.checkpoint_stream = checkpoint_stream(source.stream, group)
        self.parked_stream = parked_stream(source.stream, group)
        self._store = store
        self._io = io
        self._clock = clock
        self._schedule = schedule
        self.logger = logger
        self.clients: dict[uuid.UUID, Client] = {}
        self._strategy = make_strategy(settings.consumer_strategy)
        self._state = NOT_READY
        self._buffer: StreamBuffer | None = None
        self._outstanding = OutstandingMessages()
        self._next_pull = 0
        self._skip_first: int | None = None  # the checkpointed position: not delivered again
        self._history_seen = -2  # the last position history reading handed over (live duplicates)
        self._faulted = False
        #: what the last read failed with (logged when it changes), None while reads succeed
        self._read_fault: str | None = None
        self._push_scheduled = False
        self._closed = False
        self._loaded: Callable[[], object] | None = None
        self._live_from = -1
        self.last_known: int | None = None  # the highest position of the source seen
        # the pieces that keep the group's state (see the module's docstring)
        self.throughput = Throughput(clock.monotonic())
        self.checkpoints = Checkpointer(
            self.key,
            self.checkpoint_stream,
            source,
            settings,
            store=store,
            io=io,
            clock=clock,
            logger=logger,
        )
        self.parked = ParkedMessages(
            self.key,
            self.parked_stream,
            store=store,
            io=io,
            clock=clock,
            logger=logger,
            read_batch_size=settings.read_batch_size,
            replayed=self._take_replayed,
        )

    @property
    def state(self) -> int:
        """KurrentDB's PersistentSubscriptionState flags (ReplayingParkedMessages is the parked stream's)."""
        return self._state | (REPLAYING_PARKED if self.parked.replaying else 0)

    # -- lifecycle -------------------------------------------------------------------------------------
    def start(self, loaded: Callable[[], object] | None = None, live_from: int = -1) -> None:
        """Load the checkpoint, then start reading (KurrentDB's InitAsNew). ``loaded`` is called once
        the group takes live events (its checkpoint is loaded), or once loading failed. ``live_from``:
        the log's end when the group was created; a group from the end with no checkpoint takes no
        live event committed before it (the live feed may hand such an event over late)."""
        self._loaded = loaded
        self._live_from = live_from
        self._io.run(
            f"loading the checkpoint of {self.key} from {self.checkpoint_stream}",
            self._store.load_checkpoint,
            self.checkpoint_stream,
            then=self._on_checkpoint_loaded,
            failed=self._on_start_failed,
        )

    def _on_start_failed(self, exc: BaseException) -> None:
        self.logger.error(
            "Persistent subscription %s could not load its checkpoint from %s: %s",
            self.key,
            self.checkpoint_stream,
            exc,
        )
        self._faulted = True
        self._tell_loaded()

    def _tell_loaded(self) -> None:
        loaded, self._loaded = self._loaded, None
        if loaded is not None:
            loaded()

    def _on_checkpoint_loaded(self, checkpoint: str | None) -> None:
        if self._closed:
            self._tell_loaded()
            return
        settings = self.settings
        self._state = BEHIND
        if checkpoint is None:
            live = settings.start_from == LIVE
            self._next_pull = 0 if live else settings.start_from
            self._buffer = StreamBuffer(
                settings.history_buffer_size, settings.live_buffer_size, None, not live
            )
            self._tell_loaded()
            self.parked.load_stats(self.try_reading_new_batch)
            return
        try:
            position = self.source.parse(checkpoint)
        except ValueError:
            self.logger.error(
                "Persistent subscription %s: the checkpoint %r in %s is not a position; starting over",
                self.key,
                checkpoint,
                self.checkpoint_stream,
            )
            self._state = NOT_READY
            self._on_checkpoint_loaded(None)
            return
        self._live_from = -1  # history from the checkpoint covers everything after it
        self._next_pull = position
        self._skip_first = position
        self.checkpoints.loaded(position)
        # the checkpointed event is a known event of the source: a group loaded on a new leader shows it
        # at once rather than null until an event is read after it (the read is of later events only)
        self._set_last_known(position)
        self._buffer = StreamBuffer(settings.history_buffer_size, settings.live_buffer_size, position, True)
        self._tell_loaded()
        self.parked.load_stats(self.try_reading_new_batch)

    def shutdown(self) -> None:
        """Drop every consumer (they are told: the gRPC call ends with "dropped")."""
        self._closed = True
        self._tell_loaded()
        for client in list(self.clients.values()):
            self.remove_client(client.correlation_id, notify=True)

    # -- reading ---------------------------------------------------------------------------------------
    def try_reading_new_batch(self) -> None:
        buffer = self._buffer
        if buffer is None or self._closed or self._state == NOT_READY:
            return
        if self._state & OUTSTANDING_PAGE_REQUEST:
            return
        if buffer.live:
            self._set_live()
            return
        if not buffer.can_accept(self.settings.read_batch_size):
            return
        self._state |= OUTSTANDING_PAGE_REQUEST
        batch = min(self.settings.read_batch_size or 20, 500, MAX_PULL_BATCH)
        count = min(max(self.settings.read_batch_size, 10), batch)
        if self.source.is_all:
            window = max(batch, self.settings.max_checkpoint_count)
            self._io.run(
                f"reading $all for {self.key}",
                self._store.read_all,
                self._next_pull,
                count,
                self.source.allows if self.source.filter is not None else None,
                window,
                self.settings.resolve_links,
                then=self._on_read,
                failed=self._on_read_error,
            )
        else:
            self._io.run(
                f"reading {self.source.stream} for {self.key}",
                self._store.read_stream,
                self.source.stream,
                self._next_pull,
                count,
                self.settings.resolve_links,
                then=self._on_read,
                failed=self._on_read_error,
            )

    def _on_read_error(self, exc: BaseException) -> None:
        """A read of the source failed. A hard-deleted source (StreamDeleted) is for good: as KurrentDB's HandleReadError, the page request stays outstanding,
        so the group reads no more and stays faulted until it is loaded again (updated, the
        subscriptions restarted, the node restarted, the stream recreated and the group reloaded). Any
        other error is read again at the next tick. Either way the fault is logged once, when it
        begins or changes, never at each retry, and the group's consumers are dropped."""
        permanent = isinstance(exc, StreamDeleted)
        if not permanent:
            self._state &= ~OUTSTANDING_PAGE_REQUEST
        self._faulted = True
        fault = f"{type(exc).__name__}: {exc}"
        if fault != self._read_fault:
            self._read_fault = fault
            self.logger.error(
                "A non-recoverable error has occurred in persistent subscription %s reading %s: %s. "
                "Dropping all connected clients%s.",
                self.key,
                self.source.stream,
                exc,
                (
                    "; the group reads no more until it is loaded again"
                    if permanent
                    else "; reading again each second, logged again only if the error changes"
                ),
            )
        for client in list(self.clients.values()):
            self.remove_client(client.correlation_id, notify=True)

    def _on_read(self, result: ReadResult) -> None:
        buffer = self._buffer
        if buffer is None or self._closed or not self._state & OUTSTANDING_PAGE_REQUEST:
            return
        self._state &= ~OUTSTANDING_PAGE_REQUEST
        if self._read_fault is not None:  # a transient fault is over: consumers are taken again
            self.logger.info(
                "Persistent subscription %s reads %s again (after %s)",
                self.key,
                self.source.stream,
                self._read_fault,
            )
            self._read_fault = None
            self._faulted = False
        if result.skipped and not result.events and self.source.is_all:
            # a filter left a whole window out: checkpoint where that window started
            self.handle_skipped(self._next_pull, result.skipped)
        if buffer.live:
            return
        events = list(result.events)
        if self._skip_first is not None:
            if events and self.source.position_of(events[0]) == self._skip_first:
                events = events[1:]
            self._skip_first = None
        for resolved in events:
            if buffer.live:
                # the page reached the live queue's head: the live feed hands over what follows (it
                # follows $all behind this read, so the rest of the page must not count as seen, or
                # the live feed's copies of those events would be dropped as duplicates and lost)
                break
            position = self.source.position_of(resolved)
            self._history_seen = max(self._history_seen, position)
            buffer.add_read(OutstandingMessage(resolved, position=position))
        if events:
            self._set_last_known(self.source.position_of(events[-1]))
        if buffer.live:
            self._set_live()
        if result.is_end and buffer.try_move_to_live():
            self._set_live()
            self._schedule_push()
            return
        self._next_pull = result.next_position
        self.try_reading_new_batch()
        self._schedule_push()

    def _set_live(self) -> None:
        self._state = (self._state & ~BEHIND) | LIVE_STATE

    def _set_behind(self) -> None:
        self._state = (self._state | BEHIND) & ~LIVE_STATE

    def _set_last_known(self, position: int) -> None:
        if self.last_known is None or self.last_known < position:
            self.last_known = position

    def notify_live(self, resolved: ResolvedEvent) -> None:
        """A committed event of this group's source (KurrentDB's NotifyLiveSubscriptionMessage)."""
        buffer = self._buffer
        if buffer is None or self._closed or self._state == NOT_READY:
            return
        position = self.source.position_of(resolved)
        if position < self.settings.start_from or position <= self._history_seen:
            return  # before the start, or already handed over by the history reader
        if resolved.original.log_position < self._live_from:
            return  # committed before the group was created from the end
        if self.source.filter is not None and not self.source.allows(resolved.original):
            self.handle_skipped(position, 1)
            return
        self._set_last_known(position)
        was_live = buffer.live
        buffer.add_live(OutstandingMessage(resolved, position=position))
        if not buffer.live:
            self._set_behind()
            if was_live:
                self._next_pull = position
        self._schedule_push()

    def handle_skipped(self, position: int, count: int) -> None:
        """Events a filter left out: they count towards the checkpoint (KurrentDB's HandleSkippedEvents)."""
        self.checkpoints.skipped(position, count)
        self.try_mark_checkpoint(False)

    # -- pushing to consumers --------------------------------------------------------------------------
    def _schedule_push(self) -> None:
        if self._push_scheduled:
            return
        self._push_scheduled = True
        self._schedule(self._push_from_schedule)

    def _push_from_schedule(self) -> None:
        self._push_scheduled = False
        self.push_to_clients()

    def push_to_clients(self) -> None:
        buffer = self._buffer
        if buffer is None or self._closed:
            return
        for message, is_retry in buffer.scan():
            sent, assigned = self.checkpoints.numbered(message)
            result = self._strategy.push(sent)
            if assigned and result in (PushResult.SENT, PushResult.SKIPPED):
                self.checkpoints.taken(sent)
            if result is PushResult.SENT:
                buffer.remove(message, is_retry)
                self._begin_processing(sent)
            elif result is PushResult.SKIPPED:
                if assigned:  # a new message its pinned consumer cannot take: to the back of retry
                    buffer.remove(message, is_retry)
                    buffer.add_retry_to_end(sent)
            else:
                return

    def take_next(self, count: int) -> list[tuple[ResolvedEvent, int]]:
        """Up to ``count`` messages handed out without a consumer (KurrentDB's GetNextNOrLessMessages,
        the HTTP competing-consumer read); they time out like any other."""
        buffer = self._buffer
        if buffer is None or self._state == NOT_READY:
            return []
        taken: list[tuple[ResolvedEvent, int]] = []
        for message, is_retry in buffer.scan():
            if len(taken) >= count:
                break
            buffer.remove(message, is_retry)
            sent, assigned = self.checkpoints.numbered(message)
            if assigned:
                self.checkpoints.taken(sent)
            self._begin_processing(sent)
            taken.append((message.resolved, message.retry_count))
        return taken

    def _begin_processing(self, message: OutstandingMessage) -> None:
        self.throughput.count()
        expires = self._clock.monotonic() + self.settings.message_timeout_ms / 1000
        if not self._outstanding.add(message, expires):
            self.logger.warning(
                "Skipping message %s/%s with duplicate eventId %s",
                message.resolved.original.stream,
                message.resolved.original.event_number,
                uuid.UUID(bytes=message.event_id),
            )

    # -- consumers -------------------------------------------------------------------------------------
    @property
    def has_reached_max_clients(self) -> bool:
        limit = self.settings.max_subscriber_count
        return limit != 0 and len(self.clients) >= limit

    def add_client(
        self,
        correlation_id: uuid.UUID,
        connection_name: str,
        sink: ConsumerSink,
        max_in_flight: int,
        user: str,
        from_: str,
    ) -> None:
        extra = None
        if self.settings.extra_statistics:
            extra = RequestStatistics(lambda: self._clock.monotonic() * 1000)
        client = Client(correlation_id, connection_name, sink, max_in_flight, user, from_, extra)
        self.clients[correlation_id] = client
        self._strategy.client_added(client)
        if self._faulted:
            self.logger.error(
                "Dropping client %s from persistent subscription %s since the subscription has faulted.",
                correlation_id,
                self.key,
            )
            self.remove_client(correlation_id, notify=True)
            return
        self._schedule_push()

    def remove_client(self, correlation_id: uuid.UUID, *, notify: bool) -> None:
        client = self.clients.pop(correlation_id, None)
        if client is None:
            return
        self._strategy.client_removed(client)
        if notify:
            client.sink.dropped()
        lost = sorted(client.unconfirmed.values(), key=lambda m: m.resolved.original.event_number)
        for message in lost:
            self._retry(message)
        self._schedule_push()

    def _remove_processing(self, event_ids: list[bytes]) -> None:
        for client in self.clients.values():
            client.remove_from_processing(event_ids)
        for event_id in event_ids:
            self._outstanding.remove(event_id)

    def ack(self, event_ids: list[bytes]) -> None:
        self._remove_processing(event_ids)
        self._answered()

    def _answered(self) -> None:
        """After a consumer's ack or nack: the checkpoint, the next page, and the push of what the
        answer made room for, before the next answer is handled. KurrentDB queues that push behind
        the answer, and reads a consumer's answers off the call one at a time, so each answer's push
        goes out before the next answer is taken; answers read together here (one read of the call
        holds several) must not share one push, or the retries of later nacks would go out before
        the new event an earlier ack had made room for, and that event's own retry after newer ones."""
        self.try_mark_checkpoint(False)
        self.try_reading_new_batch()
        self.push_to_clients()

    def nack(self, event_ids: list[bytes], action: str, reason: str) -> None:
        """``action``: Unknown, Park, Retry, Skip or Stop (KurrentDB's NakAction)."""
        for event_id in event_ids:
            message = self._outstanding.get(event_id)
            if action in ("Retry", "Unknown"):
                if message is not None and not self._parked_after_retries(message):
                    self._retry(message)
            elif action == "Park":
                if message is not None:
                    self._park(message.resolved, "Client explicitly NAK'ed message.\n" + reason, "ClientNak")
            elif action == "Stop":
                pass  # KurrentDB takes no action for Stop
            else:  # Skip
                self._outstanding.remove(event_id)
        self._remove_processing(event_ids)
        self._answered()

    def _parked_after_retries(self, message: OutstandingMessage) -> bool:
        if message.retry_count < self.settings.max_retry_count:
            return False
        self._park(message.resolved, f"Reached retry count of {self.settings.max_retry_count}", "MaxRetries")
        return True

    def _retry(self, message: OutstandingMessage) -> None:
        buffer = self._buffer
        if buffer is None:
            return
        self._forget(message.event_id)
        buffer.add_retry(replace(message, retry_count=message.retry_count + 1))

    def _forget(self, event_id: bytes) -> None:
        """The message is no longer in flight: neither outstanding nor in any consumer's processing."""
        self._outstanding.remove(event_id)
        for client in self.clients.values():
            client.remove_from_processing([event_id])

    # -- parking (evdb/persistent/parking.py) ----------------------------------------------------------
    def _park(self, resolved: ResolvedEvent, reason: str, why: str) -> None:
        self.parked.park(resolved, reason, why, then=lambda: self._parked(resolved.event_id))

    def _parked(self, event_id: bytes) -> None:
        self._forget(event_id)
        self._schedule_push()

    def _take_replayed(self, messages: list[OutstandingMessage]) -> None:
        buffer = self._buffer
        if buffer is None:
            return
        for message in messages:
            buffer.add_retry(message)
        self._schedule_push()

    def replay_parked(self, stop_at: int | None) -> str:
        """Start replaying parked messages (:meth:`ParkedMessages.replay`)."""
        return self.parked.replay(stop_at, ready=self._state != NOT_READY)

    def truncate_parked(self, stop_at: int | None) -> str:
        """Drop parked messages unreplayed (:meth:`ParkedMessages.truncate`)."""
        return self.parked.truncate(stop_at, ready=self._state != NOT_READY)

    # -- checkpoints (evdb/persistent/checkpointing.py) and time -------------------------------------
    def try_mark_checkpoint(self, is_time_check: bool) -> None:
        buffer = self._buffer
        if buffer is None or self._closed:
            return
        self.checkpoints.try_mark(lowest_sequence(chain(self._outstanding, buffer.retry)), is_time_check)

    def tick(self) -> None:
        """A clock tick (KurrentDB's NotifyClockTick, every second): time out messages, checkpoint,
        read more if behind."""
        if self._state == NOT_READY or self._closed:
            return
        for message in self._outstanding.expire(self._clock.monotonic()):
            if not self._parked_after_retries(message):
                self._retry(message)
        self._schedule_push()
        self.try_mark_checkpoint(True)
        if self._state & (BEHIND | OUTSTANDING_PAGE_REQUEST) == BEHIND:
            self.try_reading_new_batch()

    # -- statistics (evdb/persistent/info.py) --------------------------------------------------------
    def statistics(self) -> dict[str, Any]:
        """KurrentDB's PersistentSubscriptionInfo (what GetInfo, List and the HTTP API show)."""
        seen = GroupInfo(
            self.source,
            self.group,
            state_name(self.state),
            self.settings,
            self.clients.values(),
            self._buffer,
            len(self._outstanding),
            self.parked,
            self.checkpoints.last_checkpointed,
            self.last_known,
        )
        return group_info(seen, self.throughput, self._clock.monotonic(), self._clock.ticks())
