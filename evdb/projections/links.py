"""Link events and their resolution: the one rule every read path uses.

A link is an event of type ``$>`` whose data is ``<eventNumber>@<streamId>`` (KurrentDB's format; the
system projections write them, and so does the scavenge's ``$scavenges`` stream). A reader that asks
for links to be resolved gets, for each record it reads, a :class:`Resolved` pair, as KurrentDB's
``ResolvedEvent``:

- a record that is not a link: ``Resolved(event=record, link=None)``;
- a link whose target can be read (as clients see it: not deleted, truncated, expired or scavenged):
  ``Resolved(event=target, link=record)``;
- a link whose target cannot be read: ``Resolved(event=None, link=record)`` - the link alone, no
  event, as KurrentDB answers (gRPC then sends the link with no event; kurrentdbclient skips it);
- a ``$>`` record whose data is not ``<number>@<stream>``: as a plain event, as KurrentDB does.

Resolution reads the database (blocking): call it off the event loop.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import NamedTuple

from evdb.errors import InvalidInput, StreamDeleted, StreamNotFound
from evdb.storage.records import MAX_EVENT_NUMBER, EventRecord

__all__ = [
    "LINK_TYPE",
    "STREAM_REFERENCE_TYPE",
    "EventReader",
    "Resolved",
    "link_data",
    "parse_link",
    "resolve_link",
    "resolve_links",
]

#: KurrentDB's ``SystemEventTypes.LinkTo``.
LINK_TYPE = "$>"
#: KurrentDB's ``SystemEventTypes.StreamReference`` (``$stream_by_category`` writes them; not links).
STREAM_REFERENCE_TYPE = "$@"

#: How resolution reads a link's target: ``Database.read_event`` (raises StreamNotFound, StreamDeleted).
EventReader = Callable[[str, int], EventRecord]


class Resolved(NamedTuple):
    """A record as a reader that resolves links sees it (KurrentDB's ``ResolvedEvent``)."""

    event: EventRecord | None  # the event: the link's target when resolved; None when it is gone
    link: EventRecord | None  # the link record, when the record read was a link

    @property
    def original(self) -> EventRecord:
        """The record that was read (the link, or the event itself): its position is the feed's."""
        record = self.link if self.link is not None else self.event
        assert record is not None
        return record


def link_data(event_number: int, stream: str) -> bytes:
    """A link's data: ``<eventNumber>@<streamId>``."""
    return f"{event_number}@{stream}".encode()


def parse_link(data: bytes) -> tuple[int, str] | None:
    """``(event number, stream)`` of a link's data, or None when it is not ``<number>@<stream>``."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    number, at, stream = text.partition("@")
    if not at or not stream:
        return None
    number = number.strip()
    digits = number[1:] if number[:1] == "-" else number
    if not digits.isascii() or not digits.isdigit():
        return None
    value = int(number)
    if not -(MAX_EVENT_NUMBER + 1) <= value <= MAX_EVENT_NUMBER:  # a C# long
        return None
    return value, stream


def resolve_link(read_event: EventReader, record: EventRecord) -> Resolved:
    """``record`` as a reader that resolves links sees it (see the module docstring)."""
    if record.event_type != LINK_TYPE:
        return Resolved(record, None)
    target = parse_link(record.data)
    if target is None:
        return Resolved(record, None)  # KurrentDB: an invalid link payload is read as the event itself
    number, stream = target
    if number < 0:  # Database.read_event reads -1 as "the last": a link never means that
        return Resolved(None, record)
    try:
        event = read_event(stream, number)
    except (StreamNotFound, StreamDeleted, InvalidInput):
        # not found, deleted, truncated, expired, scavenged, or a name no stream can have; a database
        # that is closing or reopening is not a missing target: that error goes to the reader
        return Resolved(None, record)
    return Resolved(event, record)


def resolve_links(read_event: EventReader, records: Iterable[EventRecord]) -> list[Resolved]:
    """:func:`resolve_link` for each record, in order."""
    return [resolve_link(read_event, record) for record in records]
