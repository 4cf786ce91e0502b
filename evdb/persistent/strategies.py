"""The consumers of a group and KurrentDB's four ways of choosing one for each message.

RoundRobin (next consumer with a free slot), DispatchToSingle (the first consumer until it is full),
Pinned (a bucket per source stream, 1024 buckets, KurrentDB's XXHash of the UTF-16 name) and
PinnedByCorrelation (the bucket of the event metadata's ``$correlationId``, else of the stream).
"""

from __future__ import annotations

import json
import math
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

import xxhash

from evdb.persistent.model import LINK_TO, OutstandingMessage, ResolvedEvent

__all__ = ["Client", "ConsumerSink", "PushResult", "RequestStatistics", "make_strategy"]

CORRELATION_ID = "$correlationId"
_BUCKETS = 1024
_SEED = 0xC58F1A7B  # KurrentDB's XXHashUnsafe default seed


class PushResult(Enum):
    SENT = "Sent"
    SKIPPED = "Skipped"
    NO_MORE_CAPACITY = "NoMoreCapacity"


class ConsumerSink(Protocol):
    """Where a consumer's messages go (the gRPC call's queue)."""

    def deliver(self, resolved: ResolvedEvent, retry_count: int) -> None: ...

    def dropped(self) -> None: ...


class RequestStatistics:
    """A consumer's extra statistics (KurrentDB's RequestStatistics, kept when the group was made with
    ``extraStatistics``): how long each message took from being sent until its ack or nack (or its
    timeout), in milliseconds, over the last ``window`` messages; read as KurrentDB's measurements
    (mean, median, fastest, quintiles, 90% .. 99.9%, highest)."""

    WINDOW = 1000

    def __init__(self, elapsed_ms: Callable[[], float], window: int = WINDOW) -> None:
        self._elapsed_ms = elapsed_ms
        self._window = window
        self._measurements: deque[int] = deque(maxlen=window)
        self._started: dict[bytes, float] = {}

    def start(self, event_id: bytes) -> None:
        self._started[event_id] = self._elapsed_ms()

    def end(self, event_id: bytes) -> None:
        start = self._started.pop(event_id, None)
        if start is not None:
            # whole milliseconds, as KurrentDB's; rounded first so float noise does not lose one
            self._measurements.append(int(round(self._elapsed_ms() - start, 3)))

    def measurements(self) -> list[tuple[str, int]]:
        items = sorted(self._measurements)
        if not items:
            return []
        size = len(items)

        def at(percentile: float) -> int:
            return items[min(int(percentile / 100 * size), size - 1)]

        out = [("Mean", sum(items) // size), ("Median", items[size // 2]), ("Fastest", items[0])]
        out += [(f"Quintile {i + 1}", at(i * 20)) for i in range(5)]
        out += [(f"{p:g}%", at(p)) for p in (90, 95, 99, 99.5, 99.9)]
        out.append(("Highest", items[-1]))
        return out


class Client:
    """One connected consumer: its free slots and the messages it has not confirmed yet."""

    def __init__(
        self,
        correlation_id: uuid.UUID,
        connection_name: str,
        sink: ConsumerSink,
        max_in_flight: int,
        username: str,
        from_: str,
        extra_statistics: RequestStatistics | None = None,
    ) -> None:
        self.correlation_id = correlation_id
        self.instance_id = uuid.uuid4()
        self.connection_name = connection_name
        self.sink = sink
        self.maximum_in_flight = max_in_flight
        self.available_slots = max_in_flight
        self.username = username
        self.from_ = from_
        self.total_items = 0
        self.last_total_items = 0
        self.unconfirmed: dict[bytes, OutstandingMessage] = {}
        self.on_confirmed: list[Callable[[Client, ResolvedEvent], None]] = []
        self.extra_statistics = extra_statistics

    @property
    def in_flight(self) -> int:
        return len(self.unconfirmed)

    def push(self, message: OutstandingMessage) -> bool:
        if self.available_slots <= 0:
            return False
        self.available_slots -= 1
        self.total_items += 1
        if self.extra_statistics is not None:
            self.extra_statistics.start(message.event_id)
        self.sink.deliver(message.resolved, message.retry_count)
        self.unconfirmed.setdefault(message.event_id, message)
        return True

    def remove_from_processing(self, event_ids: list[bytes]) -> None:
        for event_id in event_ids:
            if self.extra_statistics is not None:
                self.extra_statistics.end(event_id)
            message = self.unconfirmed.pop(event_id, None)
            if message is None:
                continue
            self.available_slots += 1
            for callback in self.on_confirmed:
                callback(self, message.resolved)


class Strategy(Protocol):
    name: str

    def client_added(self, client: Client) -> None: ...

    def client_removed(self, client: Client) -> None: ...

    def push(self, message: OutstandingMessage) -> PushResult: ...


class RoundRobin:
    name = "RoundRobin"

    def __init__(self) -> None:
        self.clients: deque[Client] = deque()

    def client_added(self, client: Client) -> None:
        self.clients.append(client)

    def client_removed(self, client: Client) -> None:
        self.clients.remove(client)

    def push(self, message: OutstandingMessage) -> PushResult:
        for _ in range(len(self.clients)):
            client = self.clients.popleft()
            pushed = client.push(message)
            self.clients.append(client)
            if pushed:
                return PushResult.SENT
        return PushResult.NO_MORE_CAPACITY


class DispatchToSingle(RoundRobin):
    name = "DispatchToSingle"

    def push(self, message: OutstandingMessage) -> PushResult:
        for _ in range(len(self.clients)):
            if self.clients[0].push(message):
                return PushResult.SENT
            self.clients.rotate(-1)
        return PushResult.NO_MORE_CAPACITY


@dataclass
class _Node:
    client: Client
    connected: bool = True
    assignment_count: int = 0


@dataclass
class _Bucket:
    node: _Node | None = None
    state: str = "Unassigned"  # Unassigned | Assigned | Disconnected
    in_flight: int = 0


def _source_stream(resolved: ResolvedEvent) -> str:
    record = resolved.event if resolved.event is not None else resolved.link
    assert record is not None
    if record.event_type == LINK_TO:  # an unresolved link: the stream it points at
        text = record.data.decode("utf-8", "replace")
        _, sep, stream = text.partition("@")
        return stream if sep else text
    return record.stream


def _correlation(resolved: ResolvedEvent) -> str | None:
    record = resolved.event if resolved.event is not None else resolved.link
    assert record is not None
    try:
        metadata = json.loads(record.metadata) if record.metadata else None
    except ValueError:
        return None
    value = metadata.get(CORRELATION_ID) if isinstance(metadata, dict) else None
    return value if isinstance(value, str) else None


class Pinned:
    """KurrentDB's PinnedConsumerState: buckets are assigned to the least loaded consumer, and moved
    to a new consumer until the assignments are balanced."""

    name = "Pinned"

    def __init__(self) -> None:
        self.buckets = [_Bucket() for _ in range(_BUCKETS)]
        self.nodes: list[_Node] = []
        self.assignment_count = 0

    def _source_id(self, resolved: ResolvedEvent) -> str:
        return _source_stream(resolved)

    def _bucket_of(self, resolved: ResolvedEvent) -> int:
        return xxhash.xxh32_intdigest(self._source_id(resolved).encode("utf-16-le"), seed=_SEED) % _BUCKETS

    def _node_of(self, client: Client) -> _Node | None:
        return next((n for n in self.nodes if n.client is client), None)

    @property
    def available_capacity(self) -> int:
        return sum(n.client.maximum_in_flight - n.client.in_flight for n in self.nodes if n.connected)

    def client_added(self, client: Client) -> None:
        node = _Node(client)
        self.nodes.append(node)
        client.on_confirmed.append(self._event_removed)
        connected = sum(1 for n in self.nodes if n.connected)
        balanced = math.ceil(self.assignment_count / connected)
        moves: list[int] = []
        for other in self.nodes:
            if other is node or not other.connected or other.assignment_count <= balanced:
                continue
            owned = [
                (b.in_flight, i)
                for i, b in enumerate(self.buckets)
                if b.node is other and b.state == "Assigned"
            ]
            owned.sort(key=lambda x: x[0])  # buckets without messages in flight move first
            moves.extend(i for _, i in owned[: other.assignment_count - balanced])
        for index in moves:
            self._assign(index, node)
        self.nodes = [n for n in self.nodes if n.connected or n.assignment_count > 0]

    def client_removed(self, client: Client) -> None:
        if self._event_removed in client.on_confirmed:
            client.on_confirmed.remove(self._event_removed)
        node = self._node_of(client)
        if node is None or not node.connected:
            return
        node.connected = False
        self.assignment_count -= node.assignment_count
        for bucket in self.buckets:
            if bucket.node is node:
                bucket.state = "Disconnected"
                bucket.in_flight = 0

    def _assign(self, index: int, node: _Node) -> None:
        bucket = self.buckets[index]
        if bucket.state != "Assigned":
            self.assignment_count += 1
        if bucket.state != "Unassigned" and bucket.node is not None:
            bucket.node.assignment_count -= 1
        bucket.state = "Assigned"
        bucket.node = node
        node.assignment_count += 1

    def _event_removed(self, client: Client, resolved: ResolvedEvent) -> None:
        bucket = self.buckets[self._bucket_of(resolved)]
        if bucket.node is not None and bucket.node.client is client:
            bucket.in_flight -= 1

    def push(self, message: OutstandingMessage) -> PushResult:
        if self.available_capacity == 0:
            return PushResult.NO_MORE_CAPACITY
        index = self._bucket_of(message.resolved)
        bucket = self.buckets[index]
        if bucket.state != "Assigned":
            least = min((n for n in self.nodes if n.connected), key=lambda n: n.assignment_count)
            self._assign(index, least)
        assert bucket.node is not None
        if not bucket.node.client.push(message):
            return PushResult.SKIPPED
        bucket.in_flight += 1
        return PushResult.SENT


class PinnedByCorrelation(Pinned):
    name = "PinnedByCorrelation"

    def _source_id(self, resolved: ResolvedEvent) -> str:
        return _correlation(resolved) or _source_stream(resolved)


def make_strategy(name: str) -> Strategy:
    """A new instance of the named strategy (the name was checked by model.check_settings)."""
    kinds: dict[str, Callable[[], Strategy]] = {
        "RoundRobin": RoundRobin,
        "DispatchToSingle": DispatchToSingle,
        "Pinned": Pinned,
        "PinnedByCorrelation": PinnedByCorrelation,
    }
    return kinds[name]()
