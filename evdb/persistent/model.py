"""What a persistent subscription group is: its event source, positions, settings and their rules.

The one place for the rules every surface (gRPC, HTTP) applies to a group's settings
(:func:`check_settings`), and for KurrentDB's stored forms: the ``$persistentSubscriptionConfig`` entry
(:meth:`GroupSettings.to_entry` / :func:`settings_from_entry`), the checkpoint text (``5`` for a stream,
``C:120/P:120`` for ``$all``) and the filter's ``{context, type, data, isAllStream}`` record.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from evdb.errors import PersistentSubscriptionFailed
from evdb.storage.records import EventRecord

__all__ = [
    "ALL",
    "LINK_TO",
    "STRATEGIES",
    "EventFilterSpec",
    "EventSource",
    "GroupSettings",
    "OutstandingMessage",
    "ResolvedEvent",
    "bare_key",
    "check_settings",
    "checkpoint_stream",
    "group_key",
    "needs_resolving",
    "parked_stream",
    "settings_from_entry",
]

ALL = "$all"
LINK_TO = "$>"
CONFIG_STREAM = "$persistentSubscriptionConfig"
CONFIG_EVENT_TYPE = "$PersistentConfig"
CHECKPOINT_EVENT_TYPE = "$SubscriptionCheckpoint"
#: KurrentDB's consumer strategies (SystemConsumerStrategies)
STRATEGIES = ("DispatchToSingle", "RoundRobin", "Pinned", "PinnedByCorrelation")
#: the position a group that starts "from the end" records (KurrentDB's IsLivePosition)
LIVE = -1


def needs_resolving(record: EventRecord, resolve_links: bool) -> bool:
    """Whether a record read from a source is handed out as another event: a ``$>`` link of a group
    that resolves links (everything else is handed out as read, with no read of the log)."""
    return resolve_links and record.event_type == LINK_TO


def group_key(stream: str, group: str) -> str:
    """A group's id: KurrentDB's ``<stream>::<group>`` (the gRPC confirmation carries it), with ``%``
    and ``:`` of the stream written ``%25`` and ``%3A``, so the first ``::`` always ends the stream and
    no two groups share a key (nor checkpoint and parked streams): with the bare form, group ``x::y`` of
    stream ``secret`` and group ``y`` of stream ``secret::x`` were one. A stream without ``%`` or ``:``
    keeps KurrentDB's key."""
    return f"{stream.replace('%', '%25').replace(':', '%3A')}::{group}"


def checkpoint_stream(stream: str, group: str) -> str:
    return f"$persistentsubscription-{group_key(stream, group)}-checkpoint"


def parked_stream(stream: str, group: str) -> str:
    return f"$persistentsubscription-{group_key(stream, group)}-parked"


def bare_key(stream: str, group: str) -> str:
    """The key in the ambiguous form stored before :func:`group_key` escaped the stream (the names of
    the checkpoint and parked streams of groups made then; differs only for a stream with ``%``/``:``)."""
    return f"{stream}::{group}"


@dataclass(frozen=True, slots=True)
class ResolvedEvent:
    """An event as a group hands it out: ``event`` (None for a link that does not resolve) and the
    ``link`` that pointed at it (None when it is not a resolved link)."""

    event: EventRecord | None
    link: EventRecord | None = None

    @property
    def original(self) -> EventRecord:
        """The record read from the source: the link when there is one (its id is the ack id)."""
        original = self.link if self.link is not None else self.event
        assert original is not None
        return original

    @property
    def event_id(self) -> bytes:
        return self.original.event_id


# -- filters ------------------------------------------------------------------------------------------
_FILTER_CONTEXTS = {"streamid": "StreamId", "eventtype": "EventType"}
_FILTER_TYPES = {"prefix": "Prefix", "regex": "Regex"}


@dataclass(frozen=True, slots=True)
class OutstandingMessage:
    """An event handed to a group's consumers and not yet acknowledged (engine and strategies share it)."""

    resolved: ResolvedEvent
    retry_count: int = 0
    is_replayed: bool = False  # a parked message being replayed
    sequence: int | None = None
    position: int | None = None
    previous_position: int | None = None

    @property
    def event_id(self) -> bytes:
        return self.resolved.event_id


def default_all_allows(stream: str) -> bool:
    """KurrentDB's DefaultAllFilterStrategy (its first matching rule decides): every event of a
    non-system stream, and of every system (``$``) stream too except three: ``$epoch-information``, and
    the checkpoint and parked-message streams of ``$all`` groups (``$persistentsubscription-$all::...
    -checkpoint`` / ``-parked``; a group would otherwise feed on its own checkpoints). So ``$all``
    groups do see ``$``-streams such as ``$settings``, metadata streams and other groups' streams."""
    if not stream.startswith("$"):
        return True
    if stream == "$epoch-information":
        return False
    prefix = "$persistentsubscription-$all::"
    return not (stream.startswith(prefix) and (stream.endswith("-checkpoint") or stream.endswith("-parked")))


@dataclass(frozen=True, slots=True)
class EventFilterSpec:
    """A ``$all`` group's filter as KurrentDB stores it (EventFilterDto)."""

    context: str  # "streamid" | "eventtype"
    type: str  # "prefix" | "regex"
    data: str  # comma-separated prefixes, or one regex
    is_all_stream: bool = True

    @staticmethod
    def create(context: str, kind: str, values: list[str] | str) -> EventFilterSpec:
        """A checked filter; PersistentSubscriptionFailed-free: raises ValueError with the reason."""
        if context not in _FILTER_CONTEXTS:
            raise ValueError("Invalid context please provide one of the following: EventType, StreamId.")
        data = values if isinstance(values, str) else ",".join(values)
        if not data:
            raise ValueError("Please provide a comma delimited list of data with at least one item.")
        if kind not in _FILTER_TYPES:
            raise ValueError("Invalid type please provide one of the following: Regex, Prefix.")
        spec = EventFilterSpec(context, kind, data)
        spec.predicate()  # a regex that does not compile is refused here
        return spec

    def predicate(self) -> Callable[[EventRecord], bool]:
        by_stream = self.context == "streamid"
        if self.type == "regex":
            try:
                search = re.compile(self.data).search
            except re.error as exc:
                raise ValueError(f"Invalid filter regex: {exc}") from None
            if by_stream:
                return lambda r: default_all_allows(r.stream) and search(r.stream) is not None
            return lambda r: default_all_allows(r.stream) and search(r.event_type) is not None
        prefixes = tuple(p for p in self.data.split(",") if p)
        if by_stream:
            return lambda r: default_all_allows(r.stream) and r.stream.startswith(prefixes)
        return lambda r: default_all_allows(r.stream) and r.event_type.startswith(prefixes)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"context": self.context, "type": self.type, "data": self.data}
        if self.is_all_stream:
            out["isAllStream"] = True
        return out

    @staticmethod
    def from_json(raw: Any) -> EventFilterSpec:
        if not isinstance(raw, dict):
            raise ValueError("The filter is not an object.")
        spec = EventFilterSpec.create(
            str(raw.get("context", "")), str(raw.get("type", "")), str(raw.get("data", ""))
        )
        return replace(spec, is_all_stream=bool(raw.get("isAllStream", False)))


@dataclass(frozen=True, slots=True)
class EventSource:
    """What a group reads: one stream, or ``$all`` (maybe filtered)."""

    stream: str
    filter: EventFilterSpec | None = None
    _predicate: Callable[[EventRecord], bool] | None = field(default=None, compare=False, repr=False)

    @staticmethod
    def of(stream: str, spec: EventFilterSpec | None = None) -> EventSource:
        return EventSource(stream, spec, spec.predicate() if spec is not None else None)

    @property
    def is_all(self) -> bool:
        return self.stream == ALL

    def allows(self, record: EventRecord) -> bool:
        """Whether a committed record belongs to this source (KurrentDB's ProcessEventCommitted)."""
        if not self.is_all:
            return record.stream == self.stream
        if self._predicate is not None:
            return self._predicate(record)
        return default_all_allows(record.stream)

    def position_of(self, resolved: ResolvedEvent) -> int:
        original = resolved.original
        return original.log_position if self.is_all else original.event_number

    def format(self, position: int | None) -> str | None:
        """KurrentDB's text of a position: ``5``, ``C:120/P:120`` (None stays None)."""
        if position is None:
            return None
        return f"C:{position}/P:{position}" if self.is_all else str(position)

    def parse(self, text: str) -> int:
        """A checkpoint's or a stored start position's text; ValueError if it is not one."""
        if not self.is_all:
            return int(text)
        commit, _, prepare = text.partition("/")
        if not commit.startswith("C:") or not prepare.startswith("P:"):
            raise ValueError(f"'{text}' is not a $all position (C:<commit>/P:<prepare>).")
        return int(commit[2:])


@dataclass(frozen=True, slots=True)
class GroupSettings:
    """A group's settings, in KurrentDB's units (milliseconds, counts)."""

    start_from: int = 0  # event number or log position; LIVE (-1): from the end
    resolve_links: bool = False
    extra_statistics: bool = False
    message_timeout_ms: int = 30_000
    max_retry_count: int = 10
    live_buffer_size: int = 500
    history_buffer_size: int = 500
    read_batch_size: int = 20
    checkpoint_after_ms: int = 2_000
    min_checkpoint_count: int = 10
    max_checkpoint_count: int = 1_000
    max_subscriber_count: int = 0
    consumer_strategy: str = "RoundRobin"

    def to_entry(self, source: EventSource, group: str) -> dict[str, Any]:
        """The ``$persistentSubscriptionConfig`` entry (KurrentDB's PersistentSubscriptionEntry, camel
        case, false/0/null fields left out as its serializer does)."""
        values: list[tuple[str, Any]] = [
            ("stream", source.stream),
            ("group", group),
            ("filter", source.filter.to_json() if source.filter is not None else None),
            ("resolveLinkTos", self.resolve_links),
            ("extraStatistics", self.extra_statistics),
            ("messageTimeout", self.message_timeout_ms),
            ("startFrom", -(2**63) if source.is_all else self.start_from),
            ("startPosition", source.format(self.start_from)),
            ("liveBufferSize", self.live_buffer_size),
            ("historyBufferSize", self.history_buffer_size),
            ("maxRetryCount", self.max_retry_count),
            ("readBatchSize", self.read_batch_size),
            ("checkPointAfter", self.checkpoint_after_ms),
            ("minCheckPointCount", self.min_checkpoint_count),
            ("maxCheckPointCount", self.max_checkpoint_count),
            ("maxSubscriberCount", self.max_subscriber_count),
            ("namedConsumerStrategy", self.consumer_strategy),
        ]
        return {k: v for k, v in values if v not in (None, False, 0)}


def settings_from_entry(entry: dict[str, Any]) -> tuple[EventSource, str, GroupSettings]:
    """A stored entry back as (source, group, settings); ValueError naming what is wrong."""
    stream = entry.get("stream")
    group = entry.get("group")
    if not isinstance(stream, str) or not stream or not isinstance(group, str) or not group:
        raise ValueError("the entry has no stream or no group")
    spec = EventFilterSpec.from_json(entry["filter"]) if entry.get("filter") else None
    source = EventSource.of(stream, spec)
    strategy = entry.get("namedConsumerStrategy") or (
        "RoundRobin" if entry.get("preferRoundRobin") else "DispatchToSingle"
    )
    start_text = entry.get("startPosition")
    start = source.parse(start_text) if isinstance(start_text, str) else int(entry.get("startFrom", 0))

    def number(name: str) -> int:
        value = entry.get(name, 0)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{name} is not an integer")
        return value

    settings = GroupSettings(
        start_from=start,
        resolve_links=bool(entry.get("resolveLinkTos", False)),
        extra_statistics=bool(entry.get("extraStatistics", False)),
        message_timeout_ms=number("messageTimeout"),
        max_retry_count=number("maxRetryCount"),
        live_buffer_size=number("liveBufferSize"),
        history_buffer_size=number("historyBufferSize"),
        read_batch_size=number("readBatchSize"),
        checkpoint_after_ms=number("checkPointAfter"),
        min_checkpoint_count=number("minCheckPointCount"),
        max_checkpoint_count=number("maxCheckPointCount"),
        max_subscriber_count=number("maxSubscriberCount"),
        consumer_strategy=str(strategy),
    )
    return source, group, settings


def check_settings(source: EventSource, group: str, settings: GroupSettings, last_position: int) -> None:
    """KurrentDB's rules for a group's settings (create and update, every surface); raises
    PersistentSubscriptionFailed with KurrentDB's reason. ``last_position``: the log's end, which a
    ``$all`` start position may not pass."""

    def fail(reason: str) -> None:
        raise PersistentSubscriptionFailed(source.stream, group, reason)

    if not group:
        fail("Group name cannot be empty.")
    if settings.consumer_strategy not in STRATEGIES:
        fail(f"Consumer strategy {settings.consumer_strategy} does not exist.")
    start = settings.start_from
    if source.is_all:
        if start > last_position:
            fail(
                "Invalid Start From position: commit position must be less than or equal to the last "
                "commit position in the transaction file."
            )
        if start < -1:
            fail(
                "Invalid Start From position: prepare and commit positions must be greater than or equal "
                "to 0 or both equal to -1."
            )
    elif start < -1:
        fail("Invalid Start From position: event number must be greater than or equal to -1.")
    for what, value in (
        ("Buffer Size", settings.history_buffer_size),
        ("Live Buffer Size", settings.live_buffer_size),
        ("Read Batch Size", settings.read_batch_size),
    ):
        if value <= 0:
            fail(f"{what} ({value}) must be positive")
    if settings.read_batch_size >= settings.history_buffer_size:
        fail(
            "Specified argument was out of the range of valid values. "
            "(Parameter 'ReadBatchSize may not be greater than or equal to BufferSize')"
        )
    for what, value in (
        ("Message Timeout", settings.message_timeout_ms),
        ("Max Retry Count", settings.max_retry_count),
        ("Checkpoint After", settings.checkpoint_after_ms),
        ("Min Checkpoint Count", settings.min_checkpoint_count),
        ("Max Checkpoint Count", settings.max_checkpoint_count),
        ("Max Subscriber Count", settings.max_subscriber_count),
    ):
        if value < 0:
            fail(f"{what} ({value}) must not be negative")
