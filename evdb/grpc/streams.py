"""KurrentDB's ``event_store.client.streams.Streams`` service: Read (reads and catch-up/live
subscriptions of a stream or ``$all``), Append, BatchAppend, Delete and Tombstone.

Every event's commit and prepare positions are its log position. Reads page through the database
off the event loop; subscriptions follow :mod:`evdb.subscriptions`.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Callable
from operator import attrgetter
from typing import TYPE_CHECKING, Any

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
    StreamDeleted,
    StreamNotFound,
    WrongExpectedVersion,
)
from evdb.grpc.common import (
    CallContext,
    call_context,
    check_leader,
    check_stream_access,
    database,
    expected_version,
    grpc_error,
    parse_uuid,
    stream_name,
    timestamp_now,
    uuid_message,
)
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
    from evdb.node import Node

__all__ = ["StreamsService"]

ReadResp = streams_pb2.ReadResp
RecordedEvent = streams_pb2.ReadResp.ReadEvent.RecordedEvent
PAGE = 512
JSON = "application/json"
BINARY = "application/octet-stream"
_FORWARDS = streams_pb2.ReadReq.Options.Forwards


def _recorded(record: EventRecord, structured: bool) -> ReadResp:
    position = record.log_position
    event = RecordedEvent(
        id=uuid_message(record.event_id, structured),
        stream_identifier=shared_pb2.StreamIdentifier(stream_name=record.stream.encode()),
        stream_revision=record.event_number,
        prepare_position=position,
        commit_position=position,
        metadata={
            "type": record.event_type,
            "content-type": JSON if record.flags & 0x100 else BINARY,
            "created": str(record.timestamp),
        },
        custom_metadata=record.metadata,
        data=record.data,
    )
    return ReadResp(event=ReadResp.ReadEvent(event=event, commit_position=position))


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

    def __init__(self, node: Node) -> None:
        self.node = node

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
    async def _check_access(self, ctx: CallContext, stream: str, action: str) -> None:
        if ctx.principal.is_admin:
            return
        if is_metastream(stream):
            action = "metaread" if action == "read" else "metawrite"
        await asyncio.to_thread(check_stream_access, self.node, ctx.principal, stream, action)

    # -- Read --------------------------------------------------------------------------------------------
    async def read(self, stream: Stream) -> None:
        node = self.node
        ctx = await call_context(node, stream)
        request = await stream.recv_message()
        assert request is not None
        options = request.options
        check_leader(node, ctx)
        structured = options.uuid_option.WhichOneof("content") == "structured"
        subscribe = options.WhichOneof("count_option") == "subscription"
        try:
            if options.WhichOneof("stream_option") == "all":
                await self._check_access(ctx, "$all", "read")
                event_filter = (
                    _event_filter(options.filter) if options.WhichOneof("filter_option") == "filter" else None
                )
                if subscribe:
                    await self._subscribe_all(stream, options, event_filter, structured)
                else:
                    await self._read_all(stream, options, event_filter, structured)
            else:
                name = stream_name(options.stream.stream_identifier)
                await self._check_access(ctx, name, "read")
                if subscribe:
                    await self._subscribe_stream(stream, name, options.stream, structured)
                else:
                    await self._read_stream(stream, name, options, structured)
        except (GRPCError, asyncio.CancelledError):
            raise
        except EvdbError as exc:
            raise grpc_error(node, exc) from None

    async def _read_stream(self, stream: Stream, name: str, options: Any, structured: bool) -> None:
        db = database(self.node)
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
            batch = min(remaining, PAGE)
            try:
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
            for record in page.events:
                await stream.send_message(_recorded(record, structured))
            remaining -= len(page.events)
            if page.is_end_of_stream or not page.events:
                return
            number = page.next_event_number

    async def _read_all(
        self,
        stream: Stream,
        options: Any,
        event_filter: Callable[[EventRecord], bool] | None,
        structured: bool,
    ) -> None:
        db = database(self.node)
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
        while remaining > 0:
            batch = min(remaining, PAGE)
            try:
                if forwards:
                    # forwards, position is never None (see above)
                    page = await asyncio.to_thread(db.read_all_forward, position or 0, batch, event_filter)
                else:
                    page = await asyncio.to_thread(db.read_all_backward, position, batch, event_filter)
            except InvalidInput:
                raise _invalid_position(event_filter is not None) from None
            for record in page.events:
                await stream.send_message(_recorded(record, structured))
            remaining -= len(page.events)
            if page.is_end or (not page.events and forwards and page.next_position == position):
                return
            position = page.next_position

    async def _subscribe_stream(self, stream: Stream, name: str, options: Any, structured: bool) -> None:
        node = self.node
        state = await asyncio.to_thread(database(node).stream_state, name)
        if state.tombstoned:
            raise StreamDeleted(name)
        which = options.WhichOneof("revision_option")
        after = options.revision if which == "revision" else None
        await stream.send_message(
            ReadResp(confirmation=ReadResp.SubscriptionConfirmation(subscription_id=str(uuid.uuid4())))
        )
        last = after
        async for item in subscribe_to_stream(
            database(node), node.notifier, name, after=after, from_end=which == "end"
        ):
            if isinstance(item, CaughtUp):
                caught_up = ReadResp.CaughtUp(timestamp=timestamp_now(node))
                if last is not None:
                    caught_up.stream_revision = last
                await stream.send_message(ReadResp(caught_up=caught_up))
            else:
                last = item.event_number
                await stream.send_message(_recorded(item, structured))

    async def _subscribe_all(
        self,
        stream: Stream,
        options: Any,
        event_filter: Callable[[EventRecord], bool] | None,
        structured: bool,
    ) -> None:
        node = self.node
        which = options.all.WhichOneof("all_option")
        after = options.all.position.commit_position if which == "position" else None
        if after is not None:
            try:  # the position must be an event's (or the end)
                await asyncio.to_thread(database(node).read_all_forward, after, 1)
            except InvalidInput:
                raise _invalid_position(event_filter is not None) from None
        interval = 0
        if event_filter is not None and options.filter.WhichOneof("window") == "max":
            interval = max(1, options.filter.max) * max(1, options.filter.checkpointIntervalMultiplier)
        await stream.send_message(
            ReadResp(confirmation=ReadResp.SubscriptionConfirmation(subscription_id=str(uuid.uuid4())))
        )
        last = after
        scanned = 0
        async for item in subscribe_to_all(
            database(node), node.notifier, after=after, from_end=which == "end"
        ):
            if isinstance(item, CaughtUp):
                caught_up = ReadResp.CaughtUp(timestamp=timestamp_now(node))
                if last is not None:
                    caught_up.position.commit_position = last
                    caught_up.position.prepare_position = last
                await stream.send_message(ReadResp(caught_up=caught_up))
                continue
            if isinstance(item, FilterCheckpoint):  # not asked for (no filter given to the reader)
                continue
            last = item.log_position
            if event_filter is None or event_filter(item):
                await stream.send_message(_recorded(item, structured))
            if interval:
                scanned += 1
                if scanned >= interval:
                    scanned = 0
                    await stream.send_message(
                        ReadResp(
                            checkpoint=ReadResp.Checkpoint(
                                commit_position=last, prepare_position=last, timestamp=timestamp_now(node)
                            )
                        )
                    )

    # -- Append ------------------------------------------------------------------------------------------
    async def _write(self, name: str, events: list[NewEvent], expected: int) -> AppendResult:
        node = self.node
        check_metadata_events(name, events)  # how kurrentdbclient sets stream metadata
        started = node.clock.monotonic()
        result = await asyncio.wrap_future(database(node).append_async(name, events, expected))
        node.metrics.append_latency.observe(max(0.0, node.clock.monotonic() - started))
        if not result.duplicate:
            node.metrics.events_written.inc(len(events))
            node.metrics.bytes_written.inc(sum(len(e.data) + len(e.metadata) for e in events))
        return result

    async def append(self, stream: Stream) -> None:
        node = self.node
        ctx = await call_context(node, stream)
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
        check_leader(node, ctx)
        await self._check_access(ctx, name, "write")
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
            raise grpc_error(node, exc) from None
        success = streams_pb2.AppendResp.Success(**_append_position(result))
        if result.next_expected_version < 0:
            success.no_stream.SetInParent()
        else:
            success.current_revision = result.next_expected_version
        await stream.send_message(streams_pb2.AppendResp(success=success))

    # -- BatchAppend -------------------------------------------------------------------------------------
    async def batch_append(self, stream: Stream) -> None:
        """Batches by correlation id: the first request of a batch carries its options, the one with
        ``is_final`` ends it; each batch is appended atomically and answered by correlation id."""
        node = self.node
        ctx = await call_context(node, stream)
        pending: dict[str, tuple[Any, list[NewEvent]]] = {}
        async for request in stream:
            correlation = request.correlation_id.SerializeToString()
            if correlation not in pending:
                if not request.HasField("options"):
                    raise GRPCError(Status.INVALID_ARGUMENT, "A batch starts with its options.")
                pending[correlation] = (request.options, [])
            options, events = pending[correlation]
            events.extend(_new_event(m) for m in request.proposed_messages)
            if request.is_final:
                del pending[correlation]
                check_leader(node, ctx)
                await stream.send_message(await self._batch(ctx, request.correlation_id, options, events))

    async def _batch(
        self, ctx: CallContext, correlation_id: Any, options: Any, events: list[NewEvent]
    ) -> streams_pb2.BatchAppendResp:
        expected = expected_version(options, "expected_stream_position", "stream_position")
        response = streams_pb2.BatchAppendResp(
            correlation_id=correlation_id, stream_identifier=options.stream_identifier
        )
        if expected >= 0:
            response.stream_position = expected
        elif expected == NO_STREAM:
            response.no_stream.CopyFrom(empty_pb2.Empty())
        elif expected == STREAM_EXISTS:
            response.stream_exists.CopyFrom(empty_pb2.Empty())
        else:
            response.any.CopyFrom(empty_pb2.Empty())
        try:
            name = stream_name(options.stream_identifier)
        except GRPCError as exc:  # this batch fails, with the reason; the call goes on
            message = exc.message or "Invalid stream name."
            response.error.CopyFrom(_status(exc.status, message, shared_pb2.BadRequest(message=message)))
            return response
        await self._check_access(ctx, name, "write")
        try:
            result = await self._write(name, events, expected)
        except WrongExpectedVersion as exc:
            detail = shared_pb2.WrongExpectedVersion()
            if exc.current_version < 0:
                detail.current_no_stream.CopyFrom(empty_pb2.Empty())
            else:
                detail.current_stream_revision = exc.current_version
            if expected >= 0:
                detail.expected_stream_position = expected
            elif expected == NO_STREAM:
                detail.expected_no_stream.CopyFrom(empty_pb2.Empty())
            elif expected == STREAM_EXISTS:
                detail.expected_stream_exists.CopyFrom(empty_pb2.Empty())
            else:
                detail.expected_any.CopyFrom(empty_pb2.Empty())
            response.error.CopyFrom(_status(Status.FAILED_PRECONDITION, str(exc), detail))
            return response
        except StreamDeleted as exc:
            detail = shared_pb2.StreamDeleted(stream_identifier=options.stream_identifier)
            response.error.CopyFrom(_status(Status.FAILED_PRECONDITION, str(exc), detail))
            return response
        except EventTooLarge as exc:
            limit = min(database(self.node).config.max_append_size, 2**32 - 1)
            detail = shared_pb2.MaximumAppendSizeExceeded(maxAppendSize=limit)
            response.error.CopyFrom(_status(Status.INVALID_ARGUMENT, str(exc), detail))
            return response
        except EvdbError as exc:
            error = grpc_error(self.node, exc)
            if error.details:  # not leader: the call itself fails, as KurrentDB's does
                raise error from None
            message = error.message or str(exc)
            # bad input is a BadRequest with its reason (kurrentdbclient: BadRequestError), else Unknown
            detail = (
                shared_pb2.BadRequest(message=message)
                if isinstance(exc, InvalidInput)
                else shared_pb2.Unknown()
            )
            response.error.CopyFrom(_status(error.status, message, detail))
            return response
        success = response.success
        if result.next_expected_version < 0:
            success.no_stream.CopyFrom(empty_pb2.Empty())
        else:
            success.current_revision = result.next_expected_version
        if result.position < 0:
            success.no_position.CopyFrom(empty_pb2.Empty())
        else:
            success.position.commit_position = result.position
            success.position.prepare_position = result.position
        return response

    # -- Delete and Tombstone ----------------------------------------------------------------------------
    async def delete(self, stream: Stream) -> None:
        await self._delete(stream, hard=False)

    async def tombstone(self, stream: Stream) -> None:
        await self._delete(stream, hard=True)

    async def _delete(self, stream: Stream, *, hard: bool) -> None:
        node = self.node
        ctx = await call_context(node, stream)
        request = await stream.recv_message()
        assert request is not None
        options = request.options
        name = stream_name(options.stream_identifier)
        expected = expected_version(options, "expected_stream_revision", "revision")
        check_leader(node, ctx)
        await self._check_access(ctx, name, "delete")
        try:
            result = await asyncio.wrap_future(database(node).delete_stream_async(name, expected, hard=hard))
        except StreamNotFound:
            # KurrentDB's wording; kurrentdbclient reads "Actual version: -1" as "not found"
            raise GRPCError(
                Status.FAILED_PRECONDITION, str(WrongExpectedVersion(name, expected, -1))
            ) from None
        except EvdbError as exc:
            raise grpc_error(node, exc) from None
        node.logger.info("%s stream '%s' through gRPC", "Tombstoned" if hard else "Deleted", name)
        reply = streams_pb2.TombstoneResp if hard else streams_pb2.DeleteResp
        position = reply.Position(commit_position=result.position, prepare_position=result.position)
        await stream.send_message(reply(position=position))


def _status(status: Status, message: str, detail: Any) -> status_pb2.Status:
    packed = any_pb2.Any()
    packed.Pack(detail)
    code = code_pb2.Code.Value(status.name)  # grpclib's Status as google.rpc.Code (same names, numbers)
    return status_pb2.Status(code=code, message=message, details=packed)
