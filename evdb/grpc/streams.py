"""KurrentDB's ``event_store.client.streams.Streams`` service: Read (reads and catch-up/live
subscriptions of a stream or ``$all``), Append, BatchAppend, Delete and Tombstone.

Every event's commit and prepare positions are its log position. A read's first page, up to
``LOOP_PAGE`` events, is read on the event loop (the chunks and the index are ``mmap``ed: a worker
thread would hold the GIL through the same reads, and the hop costs two wake-ups); further pages, a
filtered ``$all`` read (which may look at many events to find a page) and link resolution go to a
worker thread. Subscriptions follow :mod:`evdb.subscriptions`. The messages of a page (and of a
subscription's catch-up page or live commit) are written to the connection together
(:class:`evdb.grpc.server.MessageWriter`), not one write per event.

A filtered ``$all`` subscription sends checkpoints as KurrentDB's ``AllSubscriptionFiltered`` does
(:class:`_FilterCheckpoints`): its search window is the filter's ``max`` or, sent as ``count`` (the
Node.js client's default), KurrentDB's read batch size (32); the interval is the window times the
checkpoint interval multiplier. While catching up, events are looked at in KurrentDB's pages (a page
ends after 32 matching events or a window of events) and a checkpoint follows the page that brings
the count of events looked at to the interval; one more comes at the end of history, before
``caught_up``; live, one comes every interval of events. A checkpoint names the last event looked at,
the position a client resumes after (evdb's subscriptions start after the position given).
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Callable
from functools import partial
from operator import attrgetter
from typing import TYPE_CHECKING, Any, NamedTuple

from google.protobuf import any_pb2, empty_pb2
from grpclib import GRPCError
from grpclib.const import Cardinality, Handler, Status
from grpclib.server import Stream
from kurrentdbclient.protos.google.rpc import code_pb2
from kurrentdbclient.protos.v1 import shared_pb2, status_pb2, streams_pb2

from evdb.errors import (
    EvdbError,
    EventTooLarge,
    InvalidInput,
    NotLeader,
    StreamDeleted,
    StreamNotFound,
    WrongExpectedVersion,
)
from evdb.grpc.access import check_leader, check_stream_access
from evdb.grpc.context import CallContext, call_context, database
from evdb.grpc.convert import (
    BINARY,
    JSON,
    expected_version,
    parse_uuid,
    recorded_event_fields,
    stream_name,
    timestamp_now,
    uuid_message,
)
from evdb.grpc.errors import KurrentError, grpc_error
from evdb.grpc.server import MessageWriter, send_messages
from evdb.projections.links import LINK_TYPE, Resolved, resolve_link, resolve_links
from evdb.storage.records import EventRecord
from evdb.streams import (
    NO_STREAM,
    STREAM_EXISTS,
    AppendResult,
    NewEvent,
    check_metadata_events,
    is_metastream,
)
from evdb.subscriptions import CaughtUp, FilterCheckpoint, subscribe_to_all, subscribe_to_stream

if TYPE_CHECKING:
    from evdb.services import GrpcServices

__all__ = ["StreamsService"]

ReadResp = streams_pb2.ReadResp
RecordedEvent = streams_pb2.ReadResp.ReadEvent.RecordedEvent
PAGE = 512
#: The most events of a read's first page read on the event loop (see the module docstring)
LOOP_PAGE = 128
#: KurrentDB's ``Enumerator.DefaultReadBatchSize``: the most matching events of a filtered page, and the
#: search window of a filter sent with ``count``
READ_BATCH_SIZE = 32
_FORWARDS = streams_pb2.ReadReq.Options.Forwards


def _recorded(record: EventRecord, structured: bool) -> ReadResp:
    position = record.log_position
    event = RecordedEvent(
        **recorded_event_fields(record, position, uuid_message(record.event_id, structured))
    )
    return ReadResp(event=ReadResp.ReadEvent(event=event, commit_position=position))


def _resolved(item: Resolved, structured: bool) -> ReadResp:
    """A record read with ``resolve_links`` (evdb/projections/links.py), as KurrentDB sends it: a link
    carries its target in ``event`` (absent when the target is gone) and itself in ``link``; the
    read's position is the link's."""
    if item.link is None:
        assert item.event is not None
        return _recorded(item.event, structured)
    read = ReadResp.ReadEvent(
        link=_recorded(item.link, structured).event.event, commit_position=item.link.log_position
    )
    if item.event is not None:
        read.event.CopyFrom(_recorded(item.event, structured).event.event)
    return ReadResp(event=read)


def _event_filter(options: Any) -> Callable[[EventRecord], bool] | None:
    """A ``FilterOptions`` as a predicate: prefixes or a regex, on the stream name or event type."""
    which = options.WhichOneof("filter")
    if which is None:
        return None
    expression = getattr(options, which)
    field = attrgetter("stream") if which == "stream_identifier" else attrgetter("event_type")
    prefixes = tuple(p for p in expression.prefix if p)
    if prefixes:
        return lambda record: field(record).startswith(prefixes)
    if expression.regex:
        try:
            pattern = re.compile(expression.regex)
        except re.error as exc:
            raise GRPCError(Status.INVALID_ARGUMENT, f"Invalid filter regex: {exc}") from None
        search = pattern.search
        return lambda record: search(field(record)) is not None
    return None


def _invalid_position(filtered: bool) -> GRPCError:
    """KurrentDB's answer to a ``$all`` position that is not an event's (kurrentdbclient reads the
    filtered form as InvalidCommitPositionError)."""
    kind = "FilteredReadAllResult" if filtered else "ReadAllResult"
    return GRPCError(Status.UNKNOWN, f"Unexpected {kind}: InvalidPosition")


def _filter_window(options: Any) -> tuple[int, int]:
    """(search window, checkpoint interval) of a filtered subscription: KurrentDB's
    ``maxSearchWindow ?? ReadBatchSize`` and ``checkpointIntervalMultiplier * window``."""
    which = options.WhichOneof("window")
    if which == "max":
        if options.max <= 0:
            raise GRPCError(
                Status.INVALID_ARGUMENT, "The filter's maximum search window must be greater than 0."
            )
        window = options.max
    elif which == "count":
        window = READ_BATCH_SIZE
    else:
        raise GRPCError(Status.INVALID_ARGUMENT, "A filter needs its search window: 'max' or 'count'.")
    if options.checkpointIntervalMultiplier <= 0:
        raise GRPCError(Status.INVALID_ARGUMENT, "The checkpoint interval multiplier must be greater than 0.")
    return window, window * options.checkpointIntervalMultiplier


class _FilterCheckpoints:
    """When a filtered ``$all`` subscription sends a checkpoint (see the module docstring)."""

    def __init__(self, window: int, interval: int) -> None:
        self.window = window
        self.interval = interval
        self.live = False
        self.counter = 0  # events looked at since the last checkpoint (catch-up: whole pages)
        self.page_looked = 0
        self.page_matched = 0
        self.last_looked: int | None = None
        self.last_sent: int | None = None  # the last checkpoint sent: never one at or before it again

    def looked_at(self, position: int, matched: bool) -> int | None:
        """An event was looked at; the checkpoint to send after it, if one is due."""
        self.last_looked = position
        if self.live:
            self.counter += 1
            if self.counter < self.interval:
                return None
            self.counter = 0
            return self._due()
        self.page_looked += 1
        self.page_matched += matched
        if self.page_matched < READ_BATCH_SIZE and self.page_looked < self.window:
            return None
        self.counter += self.page_looked  # the page is complete
        self.page_looked = self.page_matched = 0
        if self.counter < self.interval:
            return None
        self.counter %= self.interval
        return self._due()

    def caught_up(self) -> int | None:
        """History is delivered: the checkpoint KurrentDB sends before going live, if any."""
        self.live = True
        self.counter = 0
        return self._due()

    def _due(self) -> int | None:
        position = self.last_looked
        if position is None or (self.last_sent is not None and position <= self.last_sent):
            return None
        self.last_sent = position
        return position


def _append_position(result: AppendResult) -> dict[str, Any]:
    if result.position < 0:
        return {"no_position": shared_pb2.Empty()}
    return {"position": {"commit_position": result.position, "prepare_position": result.position}}


def _new_event(message: Any) -> NewEvent:
    metadata = message.metadata
    event_type = metadata.get("type")
    if not event_type:
        raise GRPCError(Status.INVALID_ARGUMENT, "Every event needs a 'type' in its metadata.")
    content_type = metadata.get("content-type", BINARY)
    return NewEvent(
        event_type,
        bytes(message.data),
        bytes(message.custom_metadata),
        parse_uuid(message.id),
        content_type == JSON,
    )


class StreamsService:
    """The Streams service of one node (a grpclib handler: see ``__mapping__``)."""

    def __init__(self, services: GrpcServices) -> None:
        self.services = services

    def __mapping__(self) -> dict[str, Handler]:
        prefix = "/event_store.client.streams.Streams/"
        return {
            prefix + "Read": Handler(
                self.read, Cardinality.UNARY_STREAM, streams_pb2.ReadReq, streams_pb2.ReadResp
            ),
            prefix + "Append": Handler(
                self.append, Cardinality.STREAM_UNARY, streams_pb2.AppendReq, streams_pb2.AppendResp
            ),
            prefix + "BatchAppend": Handler(
                self.batch_append,
                Cardinality.STREAM_STREAM,
                streams_pb2.BatchAppendReq,
                streams_pb2.BatchAppendResp,
            ),
            prefix + "Delete": Handler(
                self.delete, Cardinality.UNARY_UNARY, streams_pb2.DeleteReq, streams_pb2.DeleteResp
            ),
            prefix + "Tombstone": Handler(
                self.tombstone, Cardinality.UNARY_UNARY, streams_pb2.TombstoneReq, streams_pb2.TombstoneResp
            ),
        }

    # -- access ----------------------------------------------------------------------------------------
    def _check_access(self, ctx: CallContext, stream: str, action: str) -> None:
        if ctx.principal.is_admin:
            return
        if is_metastream(stream):
            action = "metaread" if action == "read" else "metawrite"
        check_stream_access(self.services, ctx.principal, stream, action)  # on the loop, as HTTP's

    # -- Read --------------------------------------------------------------------------------------------
    async def read(self, stream: Stream) -> None:
        services = self.services
        ctx = await call_context(services, stream)
        request = await stream.recv_message()
        assert request is not None
        options = request.options
        check_leader(services, ctx)
        structured = options.uuid_option.WhichOneof("content") == "structured"
        subscribe = options.WhichOneof("count_option") == "subscription"
        resolve = options.resolve_links
        try:
            if options.WhichOneof("stream_option") == "all":
                self._check_access(ctx, "$all", "read")
                event_filter = (
                    _event_filter(options.filter) if options.WhichOneof("filter_option") == "filter" else None
                )
                if subscribe:
                    await self._subscribe_all(stream, _AllRead(options, event_filter, structured, resolve))
                else:
                    await self._read_all(stream, _AllRead(options, event_filter, structured, resolve))
            else:
                name = stream_name(options.stream.stream_identifier)
                self._check_access(ctx, name, "read")
                if subscribe:
                    await self._subscribe_stream(stream, name, options.stream, structured, resolve)
                else:
                    await self._read_stream(stream, name, options, structured, resolve)
        except (GRPCError, asyncio.CancelledError):
            raise
        except EvdbError as exc:
            raise grpc_error(services, exc) from None

    async def _send_page(
        self, stream: Stream, db: Any, records: list[EventRecord], structured: bool, resolve: bool
    ) -> None:
        """A page of a read; with ``resolve``, its links resolved (off the event loop)."""
        if resolve and any(record.event_type == LINK_TYPE for record in records):
            items = await asyncio.to_thread(resolve_links, db.read_event, records)
            await send_messages(stream, (_resolved(item, structured) for item in items))
            return
        await send_messages(stream, (_recorded(record, structured) for record in records))

    async def _message(self, db: Any, record: EventRecord, structured: bool, resolve: bool) -> ReadResp:
        """One event of a subscription; with ``resolve``, a link resolved (off the event loop)."""
        if resolve and record.event_type == LINK_TYPE:
            return _resolved(await asyncio.to_thread(resolve_link, db.read_event, record), structured)
        return _recorded(record, structured)

    async def _read_stream(
        self, stream: Stream, name: str, options: Any, structured: bool, resolve: bool = False
    ) -> None:
        db = database(self.services)
        remaining = options.count
        which = options.stream.WhichOneof("revision_option")
        forwards = options.read_direction == _FORWARDS
        if which == "revision":
            number: int | None = options.stream.revision
        elif which == "end" or (which is None and not forwards):
            number = None if not forwards else -1
        else:
            number = 0
        if forwards and number == -1:
            return  # forwards from the end: nothing yet
        first = True
        while remaining > 0:
            try:
                if first:  # on the loop (see the module docstring)
                    batch = min(remaining, LOOP_PAGE)
                    if forwards:
                        page = db.read_stream_forward(name, number or 0, batch)
                    else:
                        page = db.read_stream_backward(name, number, batch)
                else:
                    batch = min(remaining, PAGE)
                    if forwards:
                        page = await asyncio.to_thread(db.read_stream_forward, name, number or 0, batch)
                    else:
                        page = await asyncio.to_thread(db.read_stream_backward, name, number, batch)
            except StreamNotFound:
                if first:
                    await stream.send_message(
                        ReadResp(
                            stream_not_found=ReadResp.StreamNotFound(
                                stream_identifier=shared_pb2.StreamIdentifier(stream_name=name.encode())
                            )
                        )
                    )
                return
            first = False
            await self._send_page(stream, db, page.events, structured, resolve)
            remaining -= len(page.events)
            if page.is_end_of_stream or not page.events:
                return
            number = page.next_event_number

    async def _read_all(self, stream: Stream, read: _AllRead) -> None:
        options, event_filter, structured, resolve = read
        db = database(self.services)
        remaining = options.count
        which = options.all.WhichOneof("all_option")
        forwards = options.read_direction == _FORWARDS
        if which == "position":
            position: int | None = options.all.position.commit_position
        elif which == "end":
            position = None
        else:
            position = 0 if forwards else None
        if forwards and position is None:
            return
        first = True
        while remaining > 0:
            on_loop = first and event_filter is None  # see the module docstring
            batch = min(remaining, LOOP_PAGE if on_loop else PAGE)
            first = False
            try:
                if on_loop and forwards:
                    page = db.read_all_forward(position or 0, batch, None)
                elif on_loop:
                    page = db.read_all_backward(position, batch, None)
                elif forwards:
                    # forwards, position is never None (see above)
                    page = await asyncio.to_thread(db.read_all_forward, position or 0, batch, event_filter)
                else:
                    page = await asyncio.to_thread(db.read_all_backward, position, batch, event_filter)
            except InvalidInput:
                raise _invalid_position(event_filter is not None) from None
            await self._send_page(stream, db, page.events, structured, resolve)
            remaining -= len(page.events)
            if page.is_end or (not page.events and forwards and page.next_position == position):
                return
            position = page.next_position

    async def _subscribe_stream(
        self, stream: Stream, name: str, options: Any, structured: bool, resolve: bool = False
    ) -> None:
        services = self.services
        state = database(services).stream_state(name)  # on the loop (see the module docstring)
        if state.tombstoned:
            raise StreamDeleted(name)
        which = options.WhichOneof("revision_option")
        after = options.revision if which == "revision" else None
        await stream.send_message(
            ReadResp(confirmation=ReadResp.SubscriptionConfirmation(subscription_id=str(uuid.uuid4())))
        )
        last = after
        writer = MessageWriter(stream)  # written each time the subscription waits
        try:
            async for item in subscribe_to_stream(
                database(services),
                services.database.notifier,
                name,
                after=after,
                from_end=which == "end",
                before_wait=writer.flush,
            ):
                if isinstance(item, CaughtUp):
                    caught_up = ReadResp.CaughtUp(timestamp=timestamp_now(services))
                    if last is not None:
                        caught_up.stream_revision = last
                    await writer.add(ReadResp(caught_up=caught_up))
                else:
                    last = item.event_number
                    await writer.add(await self._message(database(services), item, structured, resolve))
        except Exception:
            await writer.flush()  # what was read goes out before the error's trailers, as before
            raise

    async def _subscribe_all(self, stream: Stream, read: _AllRead) -> None:
        options, event_filter, structured, resolve = read
        services = self.services
        which = options.all.WhichOneof("all_option")
        after = options.all.position.commit_position if which == "position" else None
        if after is not None:
            try:  # the position must be an event's (or the end)
                database(services).read_all_forward(after, 1)  # on the loop (see the module docstring)
            except InvalidInput:
                raise _invalid_position(event_filter is not None) from None
        checkpoints = None
        if options.WhichOneof("filter_option") == "filter":
            checkpoints = _FilterCheckpoints(*_filter_window(options.filter))
        await stream.send_message(
            ReadResp(confirmation=ReadResp.SubscriptionConfirmation(subscription_id=str(uuid.uuid4())))
        )
        last = after
        due: int | None = None
        writer = MessageWriter(stream)  # written each time the subscription waits
        try:
            async for item in subscribe_to_all(
                database(services),
                services.database.notifier,
                after=after,
                from_end=which == "end",
                before_wait=writer.flush,
            ):
                if isinstance(item, CaughtUp):
                    if checkpoints is not None and (due := checkpoints.caught_up()) is not None:
                        await writer.add(self._checkpoint(due))
                    caught_up = ReadResp.CaughtUp(timestamp=timestamp_now(services))
                    if last is not None:
                        caught_up.position.commit_position = last
                        caught_up.position.prepare_position = last
                    await writer.add(ReadResp(caught_up=caught_up))
                    continue
                if isinstance(item, FilterCheckpoint):  # not asked for (no filter given to the reader)
                    continue
                last = item.log_position
                matched = event_filter is None or event_filter(item)
                if matched:
                    await writer.add(await self._message(database(services), item, structured, resolve))
                if checkpoints is not None and (due := checkpoints.looked_at(last, matched)) is not None:
                    await writer.add(self._checkpoint(due))
        except Exception:
            await writer.flush()  # what was read goes out before the error's trailers, as before
            raise

    def _checkpoint(self, position: int) -> ReadResp:
        return ReadResp(
            checkpoint=ReadResp.Checkpoint(
                commit_position=position, prepare_position=position, timestamp=timestamp_now(self.services)
            )
        )

    # -- Append ------------------------------------------------------------------------------------------
    def _submit(self, name: str, events: list[NewEvent], expected: int) -> asyncio.Future[AppendResult]:
        """Hand an append to the writer; answered on the loop: one wake-up per commit group, not one
        per append (asyncio.wrap_future)."""
        check_metadata_events(name, events)  # how kurrentdbclient sets stream metadata
        return database(self.services).append_on_loop(name, events, expected)

    def _appended(self, started: float, events: list[NewEvent], result: AppendResult) -> None:
        services = self.services
        if result.duplicate:  # one rule with the HTTP API (evdb/http/streams.py appended)
            services.metrics.observe_append(services.clock.monotonic() - started, 0, 0)
        else:
            size = sum(len(e.data) + len(e.metadata) for e in events)
            services.metrics.observe_append(services.clock.monotonic() - started, len(events), size)

    async def _write(self, name: str, events: list[NewEvent], expected: int) -> AppendResult:
        started = self.services.clock.monotonic()
        result = await self._submit(name, events, expected)
        self._appended(started, events, result)
        return result

    async def append(self, stream: Stream) -> None:
        services = self.services
        ctx = await call_context(services, stream)
        first = await stream.recv_message()
        if first is None or first.WhichOneof("content") != "options":
            raise GRPCError(Status.INVALID_ARGUMENT, "An append starts with its options.")
        options = first.options
        name = stream_name(options.stream_identifier)
        expected = expected_version(options, "expected_stream_revision", "revision")
        events = []
        async for message in stream:
            if message.WhichOneof("content") != "proposed_message":
                raise GRPCError(Status.INVALID_ARGUMENT, "Only events may follow an append's options.")
            events.append(_new_event(message.proposed_message))
        check_leader(services, ctx)
        self._check_access(ctx, name, "write")
        try:
            result = await self._write(name, events, expected)
        except WrongExpectedVersion as exc:
            wrong = streams_pb2.AppendResp.WrongExpectedVersion()
            if exc.current_version < 0:
                wrong.current_no_stream.SetInParent()
            else:
                wrong.current_revision = exc.current_version
            if expected >= 0:
                wrong.expected_revision = expected
            elif expected == NO_STREAM:
                wrong.expected_no_stream.SetInParent()
            elif expected == STREAM_EXISTS:
                wrong.expected_stream_exists.SetInParent()
            else:
                wrong.expected_any.SetInParent()
            await stream.send_message(streams_pb2.AppendResp(wrong_expected_version=wrong))
            return
        except EvdbError as exc:
            raise grpc_error(services, exc) from None
        success = streams_pb2.AppendResp.Success(**_append_position(result))
        if result.next_expected_version < 0:
            success.no_stream.SetInParent()
        else:
            success.current_revision = result.next_expected_version
        await stream.send_message(streams_pb2.AppendResp(success=success))

    # -- BatchAppend -------------------------------------------------------------------------------------
    async def batch_append(self, stream: Stream) -> None:
        """Batches by correlation id: the first request of a batch carries its options, the one with
        ``is_final`` ends it; each batch is appended atomically and answered by correlation id.

        A batch has the deadline its options give (a duration, or before 21.10 a point in time), as
        KurrentDB's: one already passed is answered ``Timeout`` at once; one that passes before the
        batch's final request has arrived is answered ``Timeout`` then, and what else comes for that
        batch is ignored (a batch complete in its first request, as every one the Node.js client
        sends with a single event, needs no timer).

        Complete batches are written as KurrentDB's are: handed to the writer in the order they
        arrive, without waiting for the ones before them to be written, and each answered when its
        write is done. So the batches of one call share the writer's commit groups (a client with
        10,000 appends in flight on one call, as the Node.js client's flood test, is not written one
        commit at a time past their deadlines). A batch costs no task of its own: it is handed to the
        writer from the reading loop, its answer is made in its write's done-callback, and one task
        of the call writes the answers held, those of a commit group in one write."""
        services = self.services
        ctx = await call_context(services, stream)
        pending: dict[bytes, tuple[Any, list[NewEvent], asyncio.Task[None] | None]] = {}
        expired: set[bytes] = set()
        writing: set[asyncio.Future[AppendResult]] = set()
        answers = MessageWriter(stream)
        held = asyncio.Event()  # answers wait in ``answers``
        failed: list[BaseException] = []
        loop = asyncio.get_running_loop()
        reading = asyncio.current_task()
        done_reading = False

        def fail(exc: BaseException) -> None:  # the call fails with it (not leader), as KurrentDB's
            failed.append(exc)
            if reading is not None:
                reading.cancel()  # at once, not at the client's next request

        def answer(message: streams_pb2.BatchAppendResp) -> None:
            answers.hold(message)
            held.set()

        async def send() -> None:
            """The answers held, written until the client has sent everything and all is answered."""
            try:
                while writing or not done_reading or answers.held:
                    await held.wait()
                    held.clear()
                    await answers.flush()
            except asyncio.CancelledError:
                raise
            except BaseException as exc:
                fail(exc)

        def written(future: asyncio.Future[AppendResult], batch: _Batch, started: float) -> None:
            writing.discard(future)
            if future.cancelled():
                return
            outcome: AppendResult | BaseException | None = future.exception()
            if outcome is None:
                outcome = future.result()
                self._appended(started, batch.events, outcome)
            try:
                answer(self._batch_answer(batch, outcome))
            except BaseException as exc:
                fail(exc)

        def submit(batch: _Batch) -> None:
            try:
                name = stream_name(batch.options.stream_identifier)
            except GRPCError as exc:  # this batch fails, with the reason; the call goes on
                answer(self._batch_answer(batch, exc))
                return
            try:
                self._check_access(ctx, name, "write")
            except GRPCError as exc:  # access denied: this batch is refused; the call goes on, as KurrentDB's
                if exc.status != Status.PERMISSION_DENIED:
                    raise
                answer(self._batch_answer(batch, exc))
                return
            started = services.clock.monotonic()
            try:
                future = self._submit(name, batch.events, batch.expected)
            except EvdbError as exc:
                answer(self._batch_answer(batch, exc))
                return
            writing.add(future)
            future.add_done_callback(partial(written, batch=batch, started=started))

        async def expire(correlation: bytes, correlation_id: Any, options: Any, seconds: float) -> None:
            await services.clock.sleep(seconds)
            if pending.pop(correlation, None) is not None:
                expired.add(correlation)
                answer(_timed_out(correlation_id, options))

        sender = loop.create_task(send())
        try:
            async for request in stream:
                correlation = request.correlation_id.SerializeToString()
                if correlation in expired:
                    if request.is_final:
                        expired.discard(correlation)
                    continue
                if correlation not in pending:
                    if not request.HasField("options"):
                        raise GRPCError(Status.INVALID_ARGUMENT, "A batch starts with its options.")
                    seconds = _batch_timeout(request.options, services.clock.time())
                    if seconds is not None and seconds <= 0:
                        if not request.is_final:
                            expired.add(correlation)
                        answer(_timed_out(request.correlation_id, request.options))
                        continue
                    timer = None
                    if seconds is not None and not request.is_final:
                        timer = loop.create_task(
                            expire(correlation, request.correlation_id, request.options, seconds)
                        )
                    pending[correlation] = (request.options, [], timer)
                options, events, timer = pending[correlation]
                events.extend(_new_event(m) for m in request.proposed_messages)
                if request.is_final:
                    del pending[correlation]
                    if timer is not None:
                        timer.cancel()
                    check_leader(services, ctx)
                    expected = expected_version(options, "expected_stream_position", "stream_position")
                    submit(_Batch(request.correlation_id, options, expected, events))
            done_reading = True  # the client has sent everything: its last answers still go out
            held.set()
            await sender
        except asyncio.CancelledError:
            if failed:  # a batch's write failed the call
                raise failed[0] from None
            raise
        finally:
            for _, _, timer in pending.values():
                if timer is not None:
                    timer.cancel()
            sender.cancel()

    def _batch_answer(
        self, batch: _Batch, outcome: AppendResult | BaseException
    ) -> streams_pb2.BatchAppendResp:
        """The answer to a batch, written or failed; raises what fails the whole call (not leader, or
        an error that is no append's)."""
        response = streams_pb2.BatchAppendResp(
            correlation_id=batch.correlation_id, stream_identifier=batch.options.stream_identifier
        )
        expected = batch.expected
        _set_expected(response, expected)
        if isinstance(outcome, BaseException):
            response.error.CopyFrom(self._batch_error(batch, outcome))
            return response
        success = response.success
        if outcome.next_expected_version < 0:
            success.no_stream.SetInParent()
        else:
            success.current_revision = outcome.next_expected_version
        if outcome.position < 0:
            success.no_position.SetInParent()
        else:
            success.position.commit_position = outcome.position
            success.position.prepare_position = outcome.position
        return response

    def _batch_error(self, batch: _Batch, exc: BaseException) -> status_pb2.Status:
        expected = batch.expected
        if isinstance(exc, GRPCError) and exc.status == Status.PERMISSION_DENIED:
            return _status(exc.status, exc.message or "Access Denied", shared_pb2.AccessDenied())
        if isinstance(exc, GRPCError):  # an invalid stream name
            message = exc.message or "Invalid stream name."
            return _status(exc.status, message, shared_pb2.BadRequest(message=message))
        if isinstance(exc, WrongExpectedVersion):
            detail = shared_pb2.WrongExpectedVersion()
            if exc.current_version < 0:
                detail.current_no_stream.CopyFrom(empty_pb2.Empty())
            else:
                detail.current_stream_revision = exc.current_version
            _set_expected(detail, expected, "expected_")
            return _status(Status.FAILED_PRECONDITION, str(exc), detail)
        if isinstance(exc, StreamDeleted):
            deleted = shared_pb2.StreamDeleted(stream_identifier=batch.options.stream_identifier)
            return _status(Status.FAILED_PRECONDITION, str(exc), deleted)
        if isinstance(exc, EventTooLarge):
            limit = min(database(self.services).config.max_append_size, 2**32 - 1)
            exceeded = shared_pb2.MaximumAppendSizeExceeded(maxAppendSize=limit)
            return _status(Status.INVALID_ARGUMENT, str(exc), exceeded)
        if not isinstance(exc, EvdbError):
            raise exc
        error = grpc_error(self.services, exc)
        if isinstance(exc, NotLeader) and isinstance(error, KurrentError):
            # not leader, the leader known: the call fails with its address, as KurrentDB's (with no
            # leader known, that batch alone is answered "Server Is Not Ready")
            raise error from None
        message = error.message or str(exc)
        # bad input is a BadRequest with its reason (kurrentdbclient: BadRequestError), else Unknown
        if isinstance(exc, InvalidInput):
            return _status(error.status, message, shared_pb2.BadRequest(message=message))
        return _status(error.status, message, shared_pb2.Unknown())

    # -- Delete and Tombstone ----------------------------------------------------------------------------
    async def delete(self, stream: Stream) -> None:
        await self._delete(stream, hard=False)

    async def tombstone(self, stream: Stream) -> None:
        await self._delete(stream, hard=True)

    async def _delete(self, stream: Stream, *, hard: bool) -> None:
        services = self.services
        ctx = await call_context(services, stream)
        request = await stream.recv_message()
        assert request is not None
        options = request.options
        name = stream_name(options.stream_identifier)
        expected = expected_version(options, "expected_stream_revision", "revision")
        check_leader(services, ctx)
        self._check_access(ctx, name, "delete")
        try:
            result = await database(services).delete_stream_on_loop(name, expected, hard=hard)
        except StreamNotFound:
            # KurrentDB's answer: a wrong expected version, actual -1 (kurrentdbclient: "not found")
            raise grpc_error(services, WrongExpectedVersion(name, expected, -1, "Delete")) from None
        except WrongExpectedVersion as exc:
            actual = exc.current_version
            if actual < 0:  # a soft-deleted stream: KurrentDB reports its last event number
                actual = await asyncio.to_thread(self._soft_deleted_last, name)
            raise grpc_error(services, WrongExpectedVersion(name, expected, actual, "Delete")) from None
        except EvdbError as exc:
            raise grpc_error(services, exc) from None
        services.logger.info("%s stream '%s' through gRPC", "Tombstoned" if hard else "Deleted", name)
        reply = streams_pb2.TombstoneResp if hard else streams_pb2.DeleteResp
        position = reply.Position(commit_position=result.position, prepare_position=result.position)
        await stream.send_message(reply(position=position))

    def _soft_deleted_last(self, name: str) -> int:
        """The last event number of a soft-deleted stream (readers see none: -1 for them)."""
        state = database(self.services).stream_state(name)
        return state.last_event_number if state.soft_deleted and not state.tombstoned else -1


def _batch_timeout(options: Any, now: float) -> float | None:
    """The seconds a batch may take, from its options (KurrentDB's ``deadline`` duration, or the
    pre-21.10 ``deadline_21_10_0`` point in time against ``now``); None: no deadline."""
    which = options.WhichOneof("deadline_option")
    if which == "deadline":
        return options.deadline.seconds + options.deadline.nanos / 1e9
    if which == "deadline_21_10_0":
        return options.deadline_21_10_0.seconds + options.deadline_21_10_0.nanos / 1e9 - now
    return None


def _timed_out(correlation_id: Any, options: Any) -> streams_pb2.BatchAppendResp:
    """KurrentDB's ``Status.Timeout`` answer to a batch whose deadline has passed."""
    return streams_pb2.BatchAppendResp(
        correlation_id=correlation_id,
        stream_identifier=options.stream_identifier,
        error=_status(Status.DEADLINE_EXCEEDED, "Timeout", shared_pb2.Timeout()),
    )


def _status(status: Status, message: str, detail: Any) -> status_pb2.Status:
    packed = any_pb2.Any()
    packed.Pack(detail)
    code = code_pb2.Code.Value(status.name)  # grpclib's Status as google.rpc.Code (same names, numbers)
    return status_pb2.Status(code=code, message=message, details=packed)


def _set_expected(message: Any, expected: int, prefix: str = "") -> None:
    """Set the expected-version oneof of a BatchAppend answer (``prefix`` "") or of its
    WrongExpectedVersion detail (``prefix`` "expected_"): ``stream_position``, ``no_stream``,
    ``stream_exists`` or ``any``."""
    if expected >= 0:
        setattr(message, f"{prefix}stream_position", expected)
        return
    kind = {NO_STREAM: "no_stream", STREAM_EXISTS: "stream_exists"}.get(expected, "any")
    getattr(message, f"{prefix}{kind}").CopyFrom(empty_pb2.Empty())


class _Batch(NamedTuple):
    """A complete batch of a BatchAppend call: its correlation id and options as sent, the expected
    version they give, its events."""

    correlation_id: Any
    options: Any
    expected: int
    events: list[NewEvent]


class _AllRead(NamedTuple):
    """A read or subscription of ``$all`` as asked: the request's options, its filter (None: every
    event), whether ids go as structured UUIDs, whether links are resolved."""

    options: Any
    event_filter: Callable[[EventRecord], bool] | None
    structured: bool
    resolve: bool
