"""KurrentDB's ``event_store.client.persistent_subscriptions.PersistentSubscriptions`` service.

Create, Update, Delete, GetInfo, List, ReplayParked, RestartSubsystem and the bidirectional Read (a
confirmation ``<stream>::<group>``, then events; the client's acks and nacks come back on the same
call). The work is done by the node's :class:`~evdb.persistent.PersistentSubscriptionService`;
errors answer with KurrentDB's statuses, messages and ``exception`` trailers (``stream-name``,
``group-name``, ``reason``). Any node but the leader answers Create, Update, Delete, Read and
ReplayParked with the leader's address (``require_leader``, whatever the
``requires-leader`` header says, as KurrentDB's node controller does), and GetInfo/List with
"Server Is Not Ready".
"""

from __future__ import annotations

import asyncio
import uuid
from typing import TYPE_CHECKING, Any

from grpclib import GRPCError
from grpclib.const import Cardinality, Handler, Status
from grpclib.server import Stream
from kurrentdbclient.protos.v1 import persistent_pb2, shared_pb2

from evdb.auth import Principal
from evdb.errors import (
    EvdbError,
    PersistentSubscriptionDropped,
    PersistentSubscriptionsNotReady,
)
from evdb.grpc.access import check_leader, check_stream_access, require_leader
from evdb.grpc.context import CallContext, call_context
from evdb.grpc.convert import recorded_event_fields, stream_name
from evdb.grpc.errors import access_denied, grpc_error
from evdb.grpc.server import MessageWriter
from evdb.persistent import ALL, EventFilterSpec, EventSource, GroupSettings
from evdb.persistent.model import LIVE, ResolvedEvent
from evdb.persistent.service import PersistentSubscriptionService
from evdb.storage.records import EventRecord

if TYPE_CHECKING:
    from evdb.services import GrpcServices

__all__ = ["PersistentSubscriptionsService"]

P = persistent_pb2
PREFIX = "/event_store.client.persistent_subscriptions.PersistentSubscriptions/"
_NAMED = {0: "DispatchToSingle", 1: "RoundRobin", 2: "Pinned"}
_NACK = {0: "Unknown", 1: "Park", 2: "Retry", 3: "Skip", 4: "Stop"}
_DROPPED = object()


def _recorded(record: EventRecord, position: int) -> P.ReadResp.ReadEvent.RecordedEvent:
    event_id = shared_pb2.UUID(string=str(uuid.UUID(bytes=record.event_id)))
    return P.ReadResp.ReadEvent.RecordedEvent(**recorded_event_fields(record, position, event_id))


def _read_event(resolved: ResolvedEvent, retry_count: int, structured: bool) -> P.ReadResp:
    position = resolved.original.log_position
    read_event = P.ReadResp.ReadEvent(commit_position=position, retry_count=retry_count)
    if resolved.event is not None:
        read_event.event.CopyFrom(_recorded(resolved.event, position))
    if resolved.link is not None:
        read_event.link.CopyFrom(_recorded(resolved.link, position))
    if structured:
        for part in (read_event.event, read_event.link):
            if part.id.string:
                value = uuid.UUID(part.id.string).bytes
                part.id.structured.most_significant_bits = int.from_bytes(value[:8], "big", signed=True)
                part.id.structured.least_significant_bits = int.from_bytes(value[8:], "big", signed=True)
    return P.ReadResp(event=read_event)


def _event_id(message: shared_pb2.UUID) -> bytes | None:
    which = message.WhichOneof("value")
    try:
        if which == "string":
            return uuid.UUID(message.string).bytes
        if which == "structured":
            s = message.structured
            return s.most_significant_bits.to_bytes(
                8, "big", signed=True
            ) + s.least_significant_bits.to_bytes(8, "big", signed=True)
    except (ValueError, OverflowError):
        return None
    return None


def _settings(settings: Any, start: int, strategy: str) -> GroupSettings:
    which_timeout = settings.WhichOneof("message_timeout")
    if which_timeout == "message_timeout_ticks":
        timeout = int(settings.message_timeout_ticks // 10_000)
    else:
        timeout = settings.message_timeout_ms
    which_after = settings.WhichOneof("checkpoint_after")
    if which_after == "checkpoint_after_ticks":
        after = int(settings.checkpoint_after_ticks // 10_000)
    else:
        after = settings.checkpoint_after_ms
    return GroupSettings(
        start_from=start,
        resolve_links=settings.resolve_links,
        extra_statistics=settings.extra_statistics,
        message_timeout_ms=timeout,
        max_retry_count=settings.max_retry_count,
        live_buffer_size=settings.live_buffer_size,
        history_buffer_size=settings.history_buffer_size,
        read_batch_size=settings.read_batch_size,
        checkpoint_after_ms=after,
        min_checkpoint_count=settings.min_checkpoint_count,
        max_checkpoint_count=settings.max_checkpoint_count,
        max_subscriber_count=settings.max_subscriber_count,
        consumer_strategy=strategy,
    )


def _revision(value: int) -> int:
    """A stream revision as a start: KurrentDB reads the unsigned 64-bit field as a signed one, so
    18446744073709551615 (what clients still send in the deprecated ``Settings.revision`` for "from
    end") is -1, the end."""
    return LIVE if value >= 2**63 else int(value)


def _start(options: Any, *, stream: bool) -> int:
    if stream:
        which = options.WhichOneof("revision_option")
        if which == "revision":
            return _revision(options.revision)
        return LIVE if which == "end" else 0
    which = options.WhichOneof("all_option")
    if which == "position":
        return int(options.position.commit_position)
    return LIVE if which == "end" else 0


def _filter(options: Any) -> EventFilterSpec | None:
    if options.WhichOneof("filter_option") != "filter":
        return None
    flt = options.filter
    which = flt.WhichOneof("filter")
    if which is None:
        return None
    expression = getattr(flt, which)
    context = "streamid" if which == "stream_identifier" else "eventtype"
    try:
        if expression.regex:
            return EventFilterSpec.create(context, "regex", expression.regex)
        return EventFilterSpec.create(context, "prefix", [p for p in expression.prefix if p])
    except ValueError as exc:
        raise GRPCError(Status.INVALID_ARGUMENT, str(exc)) from None


def _info(stats: dict[str, Any]) -> P.SubscriptionInfo:
    info = P.SubscriptionInfo(
        event_source=stats["eventSource"],
        group_name=stats["groupName"],
        status=stats["status"],
        average_per_second=stats["averagePerSecond"],
        total_items=stats["totalItems"],
        count_since_last_measurement=stats["countSinceLastMeasurement"],
        last_checkpointed_event_position=stats["lastCheckpointedEventPosition"] or "",
        last_known_event_position=stats["lastKnownEventPosition"] or "",
        resolve_link_tos=stats["resolveLinktos"],
        start_from=stats["startFrom"] or "",
        message_timeout_milliseconds=stats["messageTimeoutMilliseconds"],
        extra_statistics=stats["extraStatistics"],
        max_retry_count=stats["maxRetryCount"],
        live_buffer_size=stats["liveBufferSize"],
        buffer_size=stats["bufferSize"],
        read_batch_size=stats["readBatchSize"],
        check_point_after_milliseconds=stats["checkPointAfterMilliseconds"],
        min_check_point_count=stats["minCheckPointCount"],
        max_check_point_count=stats["maxCheckPointCount"],
        read_buffer_count=stats["readBufferCount"],
        live_buffer_count=stats["liveBufferCount"],
        retry_buffer_count=stats["retryBufferCount"],
        total_in_flight_messages=stats["totalInFlightMessages"],
        outstanding_messages_count=stats["outstandingMessagesCount"],
        named_consumer_strategy=stats["namedConsumerStrategy"],
        max_subscriber_count=stats["maxSubscriberCount"],
        parked_message_count=stats["parkedMessageCount"],
    )
    for conn in stats["connections"]:
        info.connections.append(
            P.SubscriptionInfo.ConnectionInfo(
                username=conn["username"],
                average_items_per_second=conn["averageItemsPerSecond"],
                total_items=conn["totalItems"],
                count_since_last_measurement=conn["countSinceLastMeasurement"],
                available_slots=conn["availableSlots"],
                in_flight_messages=conn["inFlightMessages"],
                connection_name=conn["connectionName"],
                observed_measurements=[
                    P.SubscriptionInfo.Measurement(key=m["key"], value=m["value"])
                    for m in conn["observedMeasurements"]
                ],
                **{"from": conn["from"]},
            )
        )
    return info


class _Sink:
    """A consumer's messages on their way to the gRPC call (KurrentDB drops what a full buffer
    cannot take: the group times it out and retries it)."""

    def __init__(self, size: int) -> None:
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        self.size = size

    def deliver(self, resolved: ResolvedEvent, retry_count: int) -> None:
        if self.queue.qsize() < self.size:
            self.queue.put_nowait((resolved, retry_count))

    def dropped(self) -> None:
        self.queue.put_nowait(_DROPPED)


class PersistentSubscriptionsService:
    """The gRPC adapter over the node's persistent subscriptions (a grpclib handler)."""

    def __init__(self, services: GrpcServices) -> None:
        self.services = services

    def __mapping__(self) -> dict[str, Handler]:
        unary = Cardinality.UNARY_UNARY
        return {
            PREFIX + "Create": Handler(self.create, unary, P.CreateReq, P.CreateResp),
            PREFIX + "Update": Handler(self.update, unary, P.UpdateReq, P.UpdateResp),
            PREFIX + "Delete": Handler(self.delete, unary, P.DeleteReq, P.DeleteResp),
            PREFIX + "Read": Handler(self.read, Cardinality.STREAM_STREAM, P.ReadReq, P.ReadResp),
            PREFIX + "GetInfo": Handler(self.get_info, unary, P.GetInfoReq, P.GetInfoResp),
            PREFIX + "ReplayParked": Handler(
                self.replay_parked, unary, P.ReplayParkedReq, P.ReplayParkedResp
            ),
            PREFIX + "List": Handler(self.list, unary, P.ListReq, P.ListResp),
            PREFIX + "RestartSubsystem": Handler(self.restart, unary, shared_pb2.Empty, shared_pb2.Empty),
        }

    @property
    def service(self) -> PersistentSubscriptionService:
        return self.services.persistent

    async def _begin(self, stream: Stream, *, leader: bool = True) -> tuple[CallContext, Any]:
        """The caller and the request; with ``leader``, a node that is not the leader answers with the
        leader's address (KurrentDB's controller denies these messages on any other node, whether
        or not the client requires the leader). GetInfo and List do not: a follower, which runs no
        groups, answers them "Server Is Not Ready"."""
        ctx = await call_context(self.services, stream)
        request = await stream.recv_message()
        if leader:
            require_leader(self.services)
        return ctx, request

    @staticmethod
    def _require_ops(principal: Principal) -> None:
        if not principal.is_authenticated or not principal.is_ops:
            raise access_denied()

    @staticmethod
    def _require_authenticated(principal: Principal) -> None:
        if not principal.is_authenticated:
            raise access_denied()

    async def _run(self, stream: Stream, work: Any) -> None:
        try:
            await work()
        except (EvdbError, GRPCError) as exc:
            raise grpc_error(self.services, exc) from None

    # -- management ------------------------------------------------------------------------------------
    async def create(self, stream: Stream) -> None:
        async def work() -> None:
            ctx, request = await self._begin(stream)
            self._require_ops(ctx.principal)
            options = request.options
            settings = options.settings
            strategy = settings.consumer_strategy or _NAMED.get(settings.named_consumer_strategy, "")
            which = options.WhichOneof("stream_option")
            if which == "all":
                source = EventSource.of(ALL, _filter(options.all))
                start = _start(options.all, stream=False)
            elif which == "stream":
                source = EventSource.of(stream_name(options.stream.stream_identifier))
                start = _start(options.stream, stream=True)
            else:  # before 21.10: the stream and the revision in the settings
                source = EventSource.of(stream_name(options.stream_identifier))
                start = _revision(settings.revision)
            user = ctx.principal.name or None
            await self.service.create(source, options.group_name, _settings(settings, start, strategy), user)
            await stream.send_message(P.CreateResp())

        await self._run(stream, work)

    async def update(self, stream: Stream) -> None:
        async def work() -> None:
            ctx, request = await self._begin(stream)
            self._require_ops(ctx.principal)
            options = request.options
            settings = options.settings
            strategy = _NAMED.get(settings.named_consumer_strategy, str(settings.named_consumer_strategy))
            which = options.WhichOneof("stream_option")
            if which == "all":
                source = EventSource.of(ALL)
                start = _start(options.all, stream=False)
            elif which == "stream":
                source = EventSource.of(stream_name(options.stream.stream_identifier))
                start = _start(options.stream, stream=True)
            else:
                source = EventSource.of(stream_name(options.stream_identifier))
                start = _revision(settings.revision)
            user = ctx.principal.name or None
            await self.service.update(source, options.group_name, _settings(settings, start, strategy), user)
            await stream.send_message(P.UpdateResp())

        await self._run(stream, work)

    def _source_name(self, options: Any) -> str:
        if options.WhichOneof("stream_option") == "all":
            return ALL
        return stream_name(options.stream_identifier)

    async def delete(self, stream: Stream) -> None:
        async def work() -> None:
            ctx, request = await self._begin(stream)
            self._require_ops(ctx.principal)
            options = request.options
            await self.service.delete(
                self._source_name(options), options.group_name, ctx.principal.name or None
            )
            await stream.send_message(P.DeleteResp())

        await self._run(stream, work)

    async def get_info(self, stream: Stream) -> None:
        async def work() -> None:
            ctx, request = await self._begin(stream, leader=False)
            self._require_authenticated(ctx.principal)
            options = request.options
            stats = self.service.info(self._source_name(options), options.group_name)
            await stream.send_message(P.GetInfoResp(subscription_info=_info(stats)))

        await self._run(stream, work)

    async def list(self, stream: Stream) -> None:
        async def work() -> None:
            ctx, request = await self._begin(stream, leader=False)
            self._require_authenticated(ctx.principal)
            options = request.options
            name: str | None = None
            if options.WhichOneof("list_option") == "list_for_stream":
                for_stream = options.list_for_stream
                if for_stream.WhichOneof("stream_option") == "all":
                    name = ALL
                else:
                    name = stream_name(for_stream.stream)
            stats = self.service.list(name)
            await stream.send_message(P.ListResp(subscriptions=[_info(s) for s in stats]))

        await self._run(stream, work)

    async def replay_parked(self, stream: Stream) -> None:
        async def work() -> None:
            ctx, request = await self._begin(stream)
            self._require_ops(ctx.principal)
            options = request.options
            stop_at = options.stop_at if options.WhichOneof("stop_at_option") == "stop_at" else None
            self.service.replay_parked(
                self._source_name(options), options.group_name, stop_at, ctx.principal.name or None
            )
            await stream.send_message(P.ReplayParkedResp())

        await self._run(stream, work)

    async def restart(self, stream: Stream) -> None:
        async def work() -> None:
            ctx, _ = await self._begin(stream, leader=False)
            check_leader(self.services, ctx)  # a subsystem message, not one KurrentDB's controller denies
            self._require_ops(ctx.principal)
            await restart_subscriptions(self.services)
            await stream.send_message(shared_pb2.Empty())

        await self._run(stream, work)

    # -- Read ------------------------------------------------------------------------------------------
    async def read(self, stream: Stream) -> None:
        services = self.services
        ctx = await call_context(services, stream)
        first = await stream.recv_message()
        if first is None:
            return
        if first.WhichOneof("content") != "options":
            raise GRPCError(
                Status.INVALID_ARGUMENT, "A persistent subscription read starts with its options."
            )
        options = first.options
        require_leader(services)
        try:
            name = (
                ALL
                if options.WhichOneof("stream_option") == "all"
                else stream_name(options.stream_identifier)
            )
            if not ctx.principal.is_admin:
                check_stream_access(
                    services, ctx.principal, name, "read"
                )  # on the loop, as the streams' reads
        except GRPCError as exc:
            if exc.status in (Status.PERMISSION_DENIED, Status.UNAUTHENTICATED):
                raise access_denied() from None
            raise
        structured = options.uuid_option.WhichOneof("content") == "structured"
        metadata: Any = stream.metadata or {}
        connection_name = str(metadata.get("connection-name", "<unknown>"))
        peer = stream.peer.addr() if stream.peer is not None else None
        from_ = f"{peer[0]}:{peer[1]}" if peer else ""
        sink = _Sink(max(1, options.buffer_size))
        service = self.service
        try:
            connection = await service.connect(
                name,
                options.group_name,
                sink,
                buffer_size=max(1, options.buffer_size),
                connection_name=connection_name,
                user=ctx.principal.name or None,
                from_=from_,
            )
        except EvdbError as exc:
            raise grpc_error(services, exc) from None
        pump = asyncio.get_running_loop().create_task(self._acks(stream, connection.key))
        try:
            await stream.send_message(
                P.ReadResp(
                    subscription_confirmation=P.ReadResp.SubscriptionConfirmation(
                        subscription_id=connection.key
                    )
                )
            )
            writer = MessageWriter(stream)
            while True:  # until the group drops it or the client cancels the call (as KurrentDB)
                item = await sink.queue.get()
                while True:  # what the group has pushed meanwhile goes out in one write
                    if item is _DROPPED:
                        await writer.flush()
                        raise grpc_error(services, PersistentSubscriptionDropped(name, options.group_name))
                    resolved, retry_count = item
                    await writer.add(_read_event(resolved, retry_count, structured))
                    if sink.queue.empty():
                        break
                    item = sink.queue.get_nowait()
                await writer.flush()
        finally:
            pump.cancel()
            service.disconnect(connection)

    async def _acks(self, stream: Stream, key: str) -> None:
        """The client's acks and nacks, until it closes its side of the call."""
        service = self.service
        async for request in stream:
            which = request.WhichOneof("content")
            if which == "ack":
                ids = [i for i in (_event_id(m) for m in request.ack.ids) if i is not None]
                service.ack(key, ids)
            elif which == "nack":
                ids = [i for i in (_event_id(m) for m in request.nack.ids) if i is not None]
                action = _NACK.get(request.nack.action, "Unknown")
                service.nack(key, ids, action, request.nack.reason)


async def restart_subscriptions(services: GrpcServices) -> None:
    """RestartPersistentSubscriptions (this service's RestartSubsystem and the Operations call)."""
    try:
        await services.persistent.restart()
    except PersistentSubscriptionsNotReady:
        raise GRPCError(
            Status.INTERNAL,
            "Subscription group  on stream  failed: "
            "'Persistent Subscriptions cannot be restarted as it is in the wrong state.'",
        ) from None
