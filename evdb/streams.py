"""Stream-level value types: expected versions, new and recorded events, metadata, read slices."""

from __future__ import annotations

import json
import os
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from evdb.errors import InvalidInput
from evdb.storage.records import MAX_EVENT_NUMBER, EventRecord


class _IdGenerator:
    """Event ids for events appended without one: RFC 9562 version-8 UUIDs made of a random
    per-process prefix and a counter. Unique (the 56-bit prefix is drawn from the OS's random
    source when the process starts) and several times cheaper than ``uuid.uuid4()``."""

    def __init__(self) -> None:
        raw = bytearray(os.urandom(9))
        raw[6] = (raw[6] & 0x0F) | 0x80  # version 8
        raw[8] = (raw[8] & 0x3F) | 0x80  # RFC variant
        self._prefix = bytes(raw)
        self._next = int.from_bytes(os.urandom(4), "big") << 16
        self._lock = threading.Lock()

    def take(self, count: int) -> list[bytes]:
        with self._lock:
            start = self._next
            self._next += count
        prefix = self._prefix
        return [prefix + n.to_bytes(7, "big") for n in range(start, start + count)]


_ids = _IdGenerator()


def random_ids(count: int) -> list[bytes]:
    """``count`` fresh, unique event ids (UUID bytes)."""
    return _ids.take(count)


__all__ = [
    "ANY",
    "MAX_EVENT_NUMBER",
    "MAX_NAME_BYTES",
    "NO_STREAM",
    "STREAM_EXISTS",
    "AllSlice",
    "AppendResult",
    "NewEvent",
    "StreamMetadata",
    "StreamSlice",
    "StreamState",
    "check_expected_version",
    "check_metadata_events",
    "check_stream_name",
    "is_metastream",
    "metastream_of",
    "original_stream_of",
    "random_ids",
]

#: Expected versions (KurrentDB's values).
ANY = -2
NO_STREAM = -1
STREAM_EXISTS = -4

#: The largest stream name and event type evdb accepts, in UTF-8 bytes.
MAX_NAME_BYTES = 4096

#: The numeric well-known metadata keys and their smallest values; KurrentDB holds each in a signed
#: 64-bit integer (``$maxAge`` and ``$cacheControl`` in seconds).
_METADATA_NUMBERS = {"$maxAge": 1, "$maxCount": 1, "$tb": 0, "$cacheControl": 1}
_INT64_MAX = (1 << 63) - 1
#: The role lists of ``$acl``: read, write, delete, metadata read, metadata write.
_ACL_ROLE_KEYS = ("$r", "$w", "$d", "$mr", "$mw")


def is_metastream(stream: str) -> bool:
    return stream.startswith("$$")


def metastream_of(stream: str) -> str:
    return "$$" + stream


def original_stream_of(metastream: str) -> str:
    return metastream[2:]


def check_stream_name(stream: object, what: str = "stream name") -> str:
    if not isinstance(stream, str) or not stream:
        raise InvalidInput(f"The {what} must be a non-empty string.")
    if len(stream.encode()) > MAX_NAME_BYTES:
        raise InvalidInput(f"The {what} is longer than {MAX_NAME_BYTES} bytes.")
    if stream == "$all":
        raise InvalidInput("'$all' is not a stream that can be written; it is the whole log.")
    return stream


def check_expected_version(expected: object) -> int:
    if isinstance(expected, bool) or not isinstance(expected, int):
        raise InvalidInput("The expected version must be an integer.")
    if expected < 0 and expected not in (ANY, NO_STREAM, STREAM_EXISTS):
        raise InvalidInput(
            f"Invalid expected version {expected}: use -2 (any), -1 (no stream), -4 (stream exists) or a number >= 0."
        )
    return expected


class NewEvent(NamedTuple):
    """An event to append. Without an ``event_id`` the database gives it a random one (then a
    retried append cannot be recognised as a duplicate: clients that retry should set ids).

    A named tuple, not a dataclass: batched appends create many, and a tuple is several times
    cheaper to build than a frozen dataclass."""

    event_type: str
    data: bytes = b""
    metadata: bytes = b""
    event_id: uuid.UUID | None = None
    is_json: bool = False

    @classmethod
    def json(
        cls, event_type: str, data: Any, metadata: Any = None, event_id: uuid.UUID | None = None
    ) -> NewEvent:
        return cls(
            event_type,
            json.dumps(data, separators=(",", ":")).encode(),
            json.dumps(metadata, separators=(",", ":")).encode() if metadata is not None else b"",
            event_id or uuid.uuid4(),
            True,
        )


@dataclass(frozen=True, slots=True)
class AppendResult:
    """What an append wrote: ``next_expected_version`` is the stream's last event number after it."""

    next_expected_version: int
    position: int  # log position of the last record written (of the original ones when idempotent)
    first_event_number: int
    duplicate: bool = False


@dataclass(frozen=True, slots=True)
class StreamMetadata:
    """Parsed stream metadata (the last ``$metadata`` event of ``$$stream``)."""

    max_age: int | None = None  # seconds
    max_count: int | None = None
    truncate_before: int | None = None
    cache_control: int | None = None
    acl: dict[str, Any] | None = None
    raw: dict[str, Any] = field(default_factory=dict)

    @property
    def is_soft_deleted(self) -> bool:
        return self.truncate_before == MAX_EVENT_NUMBER

    @classmethod
    def from_bytes(cls, data: bytes) -> StreamMetadata:
        """Parse tolerantly: metadata that is not a JSON object counts as empty (as in KurrentDB)."""
        try:
            raw = json.loads(data) if data else {}
        except (ValueError, UnicodeDecodeError, RecursionError):  # RecursionError: nested too deep
            return cls()
        if not isinstance(raw, dict):
            return cls()
        return cls.from_dict(raw, strict=False)

    @classmethod
    def from_dict(cls, raw: dict[str, Any], *, strict: bool = True) -> StreamMetadata:
        """``strict`` (writes): refuse a well-known key of the wrong type or out of range, naming it.
        Not strict (reading what a log holds): ignore a value of the wrong type or below the minimum,
        as KurrentDB does, and keep one beyond 64 bits (an older version wrote it; the scavenge
        clamps it)."""

        def number(key: str) -> int | None:
            value = raw.get(key)
            if value is None:
                return None
            minimum = _METADATA_NUMBERS[key]
            integer = isinstance(value, int) and not isinstance(value, bool)
            if integer and minimum <= value <= _INT64_MAX:
                return value
            if strict:
                raise InvalidInput(
                    f"Stream metadata {key} must be an integer from {minimum} to {_INT64_MAX}."
                )
            # a log written before this rule may hold larger numbers: kept (the scavenge clamps them)
            return value if integer and value > _INT64_MAX else None

        acl = raw.get("$acl")
        if acl is not None and not isinstance(acl, dict):
            if strict:
                raise InvalidInput("Stream metadata $acl must be an object.")
            acl = None
        if acl is not None and strict:
            for key in _ACL_ROLE_KEYS:
                roles = acl.get(key)
                if roles is None or isinstance(roles, str):
                    continue
                if not isinstance(roles, list) or not all(isinstance(role, str) for role in roles):
                    raise InvalidInput(
                        f"Stream metadata $acl {key} must be a role name or a list of role names (strings)."
                    )
        return cls(
            max_age=number("$maxAge"),
            max_count=number("$maxCount"),
            truncate_before=number("$tb"),
            cache_control=number("$cacheControl"),
            acl=acl,
            raw=dict(raw),
        )

    def to_bytes(self) -> bytes:
        return json.dumps(self.raw, separators=(",", ":")).encode()


def check_metadata_events(stream: str, events: Sequence[NewEvent]) -> None:
    """Validate the ``$metadata`` events of an append to a metastream as stream metadata (what a
    client that sets metadata by appending, as KurrentDB's gRPC clients do, writes). Data that is not
    a JSON object is left alone: it reads as empty metadata, as in KurrentDB."""
    if not is_metastream(stream):
        return
    for event in events:
        if event.event_type != "$metadata":
            continue
        try:
            raw = json.loads(event.data) if event.data else None
        except (ValueError, UnicodeDecodeError, RecursionError):
            continue
        if isinstance(raw, dict):
            StreamMetadata.from_dict(raw)


@dataclass(frozen=True, slots=True)
class StreamState:
    """What a stream is now: its last event number (-1: none), tombstone, metadata."""

    stream: str
    last_event_number: int
    tombstoned: bool
    metadata: StreamMetadata
    metadata_version: int  # last event number of the metastream, -1 when none

    @property
    def soft_deleted(self) -> bool:
        return self.metadata.is_soft_deleted

    @property
    def exists(self) -> bool:
        return self.last_event_number >= 0 and not self.tombstoned and not self.soft_deleted

    @property
    def visible_last_event_number(self) -> int:
        """The last event number a write's expected version is checked against: -1 when soft deleted
        (the stream has no events then, though its numbers go on from the last)."""
        return -1 if self.soft_deleted else self.last_event_number


@dataclass(frozen=True, slots=True)
class StreamSlice:
    stream: str
    events: list[EventRecord]
    from_event_number: int
    next_event_number: int  # where the next read in the same direction starts (-1: none left backwards)
    last_event_number: int
    is_end_of_stream: bool


@dataclass(frozen=True, slots=True)
class AllSlice:
    events: list[EventRecord]
    from_position: int
    next_position: int
    is_end: bool
