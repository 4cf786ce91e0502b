"""The system projections, as KurrentDB's native handlers (src/KurrentDB.Projections.V1/Standard) define
them: which events of ``$all`` each one looks at, and what it writes for each.

Every handler reads ``$all`` forward without resolving links. KurrentDB's ``$all`` source filter
(``TransactionFileEventFilter``) skips events of system streams (names starting with ``$``), except
the metadata streams of non-system streams (``$$order-1``); without ``includeLinks`` it skips link
events (``$>``) too. Content validation skips an event flagged JSON whose data is not JSON (empty
data included). What passes is handed to the projection's handler, which returns what to write.

Categories use the first ``-`` of the stream name (the source ``first\\r\\n-`` KurrentDB creates the
projections with): ``order-1-a`` is in category ``order``; a name starting with ``$`` or with no ``-``
after its first character has none.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NamedTuple

from evdb.clock import TICKS_PER_SECOND
from evdb.projections.links import LINK_TYPE, STREAM_REFERENCE_TYPE, link_data
from evdb.storage.records import EventRecord
from evdb.streams import StreamMetadata, is_metastream, original_stream_of

__all__ = [
    "PARTITION_CHECKPOINT_TYPE",
    "STANDARD_PROJECTIONS",
    "Emitted",
    "StandardProjection",
    "by_name",
    "category_of",
    "is_valid_content",
    "passes_source",
    "stream_deleted_by",
]

_NAMESPACE = "native:KurrentDB.Projections.Core.Standard."
_DELETED = -1  # the value KurrentDB writes for "$deleted" in a link's metadata
_FIRST_DASH = "first\r\n-"
#: KurrentDB's ``ProjectionEventTypes.PartitionCheckpoint``: what ``$by_event_type`` writes to ``$et``
PARTITION_CHECKPOINT_TYPE = "$Checkpoint"


class Emitted(NamedTuple):
    """One event a projection writes for a source event."""

    stream: str
    event_type: str  # "$>" (a link) or "$@" (a stream reference)
    data: bytes
    #: metadata keys written after the checkpoint tag, in order (JSON values)
    extra: tuple[tuple[str, Any], ...] = ()
    is_json: bool = False


def category_of(stream: str) -> str | None:
    """KurrentDB's ``StreamCategoryExtractorByFirstSeparator('-')``."""
    if stream.startswith("$"):
        return None
    dash = stream.find("-")
    return stream[:dash] if dash > 0 else None


def passes_source(record: EventRecord, include_links: bool) -> bool:
    """KurrentDB's ``TransactionFileEventFilter.PassesSource`` for an event read from ``$all``."""
    if not include_links and record.event_type == LINK_TYPE:
        return False
    stream = record.stream
    if not stream.startswith("$"):
        return True
    return is_metastream(stream) and not original_stream_of(stream).startswith("$")


def _is_json(data: bytes) -> bool:
    if not data:
        return False
    try:
        json.loads(data, parse_constant=_refuse)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return False
    return True


def _refuse(name: str) -> Any:
    raise ValueError(name)  # NaN and the infinities are not JSON


def is_valid_content(record: EventRecord) -> bool:
    """KurrentDB's content-type validation: an event flagged JSON must hold JSON (not empty)."""
    return not record.is_json or _is_json(record.data)


def stream_deleted_by(record: EventRecord) -> str | None:
    """The stream ``record`` deletes (KurrentDB's ``StreamDeletedHelper.IsStreamDeletedEvent``): a
    tombstone (``$streamDeleted``) deletes its own stream; a ``$metadata`` event of ``$$s`` whose
    ``$tb`` is the largest event number soft-deletes ``s``. None for any other event."""
    stream = record.stream
    if is_metastream(stream):
        if record.event_type == "$metadata" and StreamMetadata.from_bytes(record.data).is_soft_deleted:
            return original_stream_of(stream)
        return None
    return stream if record.event_type == "$streamDeleted" else None


def _position(record: EventRecord) -> bytes:
    return link_data(record.event_number, record.stream)


# -- the handlers ----------------------------------------------------------------------------------------
def _index_streams(record: EventRecord) -> list[Emitted]:
    """``$streams``: a link to the first event of every stream."""
    if record.event_number != 0:
        return []
    return [Emitted("$streams", LINK_TYPE, _position(record))]


def _categorize_streams(record: EventRecord) -> list[Emitted]:
    """``$stream_by_category``: a ``$@`` event naming each new stream, in ``$category-<category>``."""
    if record.event_number != 0:
        return []
    category = category_of(record.stream)
    if category is None:
        return []
    return [Emitted(f"$category-{category}", STREAM_REFERENCE_TYPE, record.stream.encode())]


def _categorize_events(record: EventRecord) -> list[Emitted]:
    """``$by_category``: a link to every event in ``$ce-<category>`` (a link event's own target when
    the event is a link), with ``$o`` (the stream) and, for a deletion, ``$deleted``."""
    deleted = stream_deleted_by(record)
    original = deleted if deleted is not None else record.stream
    category = category_of(original)
    if category is None:
        return []
    target = record.data if record.event_type == LINK_TYPE else _position(record)
    extra: tuple[tuple[str, Any], ...] = (("$o", original),)
    if deleted is not None:
        extra += (("$deleted", _DELETED),)
    return [Emitted(f"$ce-{category}", LINK_TYPE, target, extra)]


def _index_event_types(record: EventRecord) -> list[Emitted]:
    """``$by_event_type``: a link to every event in ``$et-<type>``; a deletion goes to ``$et-$deleted``
    (its link names the deleted stream, as KurrentDB writes it)."""
    if record.event_type == LINK_TYPE:
        return []
    deleted = stream_deleted_by(record)
    if deleted is not None:
        return [
            Emitted(
                "$et-$deleted", LINK_TYPE, link_data(record.event_number, deleted), (("$deleted", _DELETED),)
            )
        ]
    return [Emitted(f"$et-{record.event_type}", LINK_TYPE, _position(record))]


def _correlation_id(metadata: bytes) -> str | None:
    if not metadata:
        return None
    try:
        parsed = json.loads(metadata)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(parsed, dict):
        return None
    value = parsed.get("$correlationId")
    if isinstance(value, bool) or value is None or isinstance(value, (dict, list)):
        return None
    return value if isinstance(value, str) else json.dumps(value)


def _timestamp(ticks: int) -> str:
    """.NET's ``yyyy-MM-ddTHH:mm:ss.ffffffZ``."""
    moment = datetime.fromtimestamp(ticks // TICKS_PER_SECOND, UTC)
    micros = (ticks % TICKS_PER_SECOND) // 10
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + f".{micros:06d}Z"


def _by_correlation_id(record: EventRecord) -> list[Emitted]:
    """``$by_correlation_id``: a link to every event whose metadata has a ``$correlationId``, in
    ``$bc-<correlation id>``, with ``$eventTimestamp``."""
    correlation = _correlation_id(record.metadata)
    if correlation is None:
        return []
    extra = (("$eventTimestamp", _timestamp(record.timestamp)),)
    return [Emitted(f"$bc-{correlation}", LINK_TYPE, _position(record), extra)]


@dataclass(frozen=True, slots=True)
class StandardProjection:
    """A system projection: its name, how KurrentDB registers it, and its handler."""

    name: str
    handler: str  # KurrentDB's handler type name
    query: str  # the source KurrentDB creates it with
    include_links: bool
    emit: Callable[[EventRecord], list[Emitted]]
    #: KurrentDB's ``IProjectionCheckpointHandler``: the stream that gets a ``$Checkpoint`` event at the
    #: projection's start and at each checkpoint it is suggested (``$by_event_type``: ``$et``, which
    #: KurrentDB's event-type index reader reads to know how far the ``$et-`` streams are written)
    index_checkpoint_stream: str | None = None

    @property
    def handler_type(self) -> str:
        return _NAMESPACE + self.handler

    def passes(self, record: EventRecord) -> bool:
        """True when ``record`` of ``$all`` is handed to the handler (KurrentDB counts these towards
        its checkpoints: ``CheckpointHandledThreshold``)."""
        return passes_source(record, self.include_links) and is_valid_content(record)

    def process(self, record: EventRecord) -> list[Emitted]:
        """What this projection writes for ``record`` of ``$all`` (nothing when it skips it)."""
        if not self.passes(record):
            return []
        return self.emit(record)


#: In the order KurrentDB creates them (their projection ids are 1 to 5, their events' numbers in
#: ``$projections-$all``).
STANDARD_PROJECTIONS: tuple[StandardProjection, ...] = (
    StandardProjection("$streams", "IndexStreams", "", True, _index_streams),
    StandardProjection(
        "$stream_by_category", "CategorizeStreamByPath", _FIRST_DASH, True, _categorize_streams
    ),
    StandardProjection("$by_category", "CategorizeEventsByStreamPath", _FIRST_DASH, True, _categorize_events),
    StandardProjection("$by_event_type", "IndexEventsByEventType", "", False, _index_event_types, "$et"),
    StandardProjection(
        "$by_correlation_id",
        "ByCorrelationId",
        '{"correlationIdProperty":"$correlationId"}',
        False,
        _by_correlation_id,
    ),
)

_BY_NAME = {p.name: p for p in STANDARD_PROJECTIONS}


def by_name(name: str) -> StandardProjection | None:
    return _BY_NAME.get(name)
