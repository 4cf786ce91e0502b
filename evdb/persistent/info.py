"""A group's figures as KurrentDB's PersistentSubscriptionInfo shows them (what GetInfo, List, the HTTP
API and the metrics read): the items it handed out, the rates between two readings, its connections."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from evdb.persistent.buffer import StreamBuffer
from evdb.persistent.model import EventSource, GroupSettings
from evdb.persistent.parking import ParkedMessages
from evdb.persistent.strategies import Client

__all__ = ["GroupInfo", "Throughput", "group_info"]


class Throughput:
    """The messages a group handed out, and how many since the last reading of its info (each reading
    starts a new measurement, as KurrentDB's GetStatistics does)."""

    def __init__(self, now: float) -> None:
        self._started = now
        self.total_items = 0
        self._last_time = 0.0
        self._last_items = 0

    def count(self) -> None:
        self.total_items += 1

    def measure(self, now: float) -> tuple[float, int]:
        """(seconds since the last reading, items handed out since then); starts the next measurement."""
        elapsed = now - self._started
        run = elapsed - self._last_time
        items = self.total_items - self._last_items
        self._last_time = elapsed
        self._last_items = self.total_items
        return run, items


def _per_second(items: int, run: float) -> int:
    return int(items / run) if run > 0 else 0


def _connection(client: Client, run: float) -> dict[str, Any]:
    since = client.total_items - client.last_total_items
    client.last_total_items = client.total_items
    measurements = client.extra_statistics.measurements() if client.extra_statistics is not None else []
    return {
        "from": client.from_,
        "username": client.username,
        "averageItemsPerSecond": _per_second(since, run),
        "totalItems": client.total_items,
        "countSinceLastMeasurement": since,
        "observedMeasurements": [{"key": key, "value": value} for key, value in measurements],
        "availableSlots": client.available_slots,
        "inFlightMessages": client.in_flight,
        "connectionName": client.connection_name,
    }


@dataclass(frozen=True)
class GroupInfo:
    """What :func:`group_info` reads of a group at one moment."""

    source: EventSource
    group: str
    status: str
    settings: GroupSettings
    clients: Iterable[Client]
    buffer: StreamBuffer | None
    outstanding: int
    parked: ParkedMessages
    last_checkpointed: int | None
    last_known: int | None


def group_info(group: GroupInfo, throughput: Throughput, now: float, now_ticks: int) -> dict[str, Any]:
    """KurrentDB's PersistentSubscriptionInfo of ``group`` (``now``: the monotonic clock's seconds,
    ``now_ticks``: its 100 ns ticks); starts the next rate measurement."""
    run, items = throughput.measure(now)
    clients = list(group.clients)
    connections = [_connection(client, run) for client in clients]
    buffer = group.buffer
    settings = group.settings
    source = group.source
    parked = group.parked
    return {
        "eventSource": source.stream,
        "groupName": group.group,
        "status": group.status,
        "connections": connections,
        "averagePerSecond": _per_second(items, run),
        "lastCheckpointedEventPosition": source.format(group.last_checkpointed),
        "lastKnownEventPosition": source.format(group.last_known),
        "totalItems": throughput.total_items,
        "countSinceLastMeasurement": items,
        "checkPointAfterMilliseconds": settings.checkpoint_after_ms,
        "bufferSize": settings.history_buffer_size,
        "liveBufferSize": settings.live_buffer_size,
        "maxCheckPointCount": settings.max_checkpoint_count,
        "maxRetryCount": settings.max_retry_count,
        "messageTimeoutMilliseconds": settings.message_timeout_ms,
        "minCheckPointCount": settings.min_checkpoint_count,
        "readBatchSize": settings.read_batch_size,
        "resolveLinktos": settings.resolve_links,
        "startFrom": source.format(settings.start_from),
        "readBufferCount": len(buffer.buffer) if buffer else 0,
        "retryBufferCount": len(buffer.retry) if buffer else 0,
        "liveBufferCount": len(buffer.live_buffer) if buffer else 0,
        "extraStatistics": settings.extra_statistics,
        "totalInFlightMessages": sum(client.in_flight for client in clients),
        "outstandingMessagesCount": group.outstanding,
        "namedConsumerStrategy": settings.consumer_strategy,
        "maxSubscriberCount": settings.max_subscriber_count,
        "parkedMessageCount": parked.count,
        "parkedDueToClientNak": parked.due_to_client_nak,
        "parkedDueToMaxRetries": parked.due_to_max_retries,
        "parkedMessageReplays": parked.replays,
        "parkedMessageTruncations": parked.truncations,
        "oldestParkedMessage": parked.oldest_age(now_ticks),
    }
