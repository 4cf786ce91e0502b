"""Log records and their framing.

Every record in a chunk is framed as::

    u32 length | body (length bytes) | u32 xxh32(body) | u32 length

The leading length lets the log be read forwards, the trailing one backwards; the checksum (xxHash32)
detects a torn or corrupted record wherever it is read. A record's *logical size* is its frame size; log positions
advance by it when the record is first written, and a record keeps its position forever, even after
its chunk is scavenged or merged (the position is stored in the record itself).
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum, IntFlag
from typing import NamedTuple

import xxhash

from evdb.errors import CorruptedFile

__all__ = [
    "EVENT_HEADER",
    "FRAME_OVERHEAD",
    "MAX_EVENT_NUMBER",
    "SYSTEM_HEADER",
    "EventRecord",
    "RecordFlags",
    "RecordType",
    "SystemRecord",
    "SystemRecordKind",
    "decode_body",
    "encode_event",
    "encode_system",
    "frame_size_at",
    "read_frame",
    "read_frame_before",
]

#: The event number a tombstone carries (KurrentDB's EventNumber.DeletedStream).
MAX_EVENT_NUMBER = (1 << 63) - 1

_LEN = struct.Struct("<I")
_TRAILER = struct.Struct("<II")  # xxh32 checksum, length
FRAME_OVERHEAD = 12
FORMAT_VERSION = 1


class RecordType(IntEnum):
    EVENT = 1
    SYSTEM = 2


class RecordFlags(IntFlag):
    NONE = 0
    DATA = 0x01
    TRANSACTION_BEGIN = 0x02
    TRANSACTION_END = 0x04
    STREAM_DELETE = 0x08
    IS_COMMITTED = 0x20
    IS_JSON = 0x100
    IS_REDACTED = 0x200


class SystemRecordKind(IntEnum):
    EPOCH = 1


# type, version, flags, log position, event number, timestamp ticks, event id,
# stream length, event type length, data length, metadata length
EVENT_HEADER = struct.Struct("<BBHqqq16sHHII")
# type, version, kind, log position, timestamp ticks, payload length
SYSTEM_HEADER = struct.Struct("<BBHqqI")


class EventRecord(NamedTuple):
    """An event as stored in the log (commit and prepare are one: its position is final).

    A named tuple rather than a dataclass: ``$all`` scans create one per record, and tuple creation
    is several times cheaper than a frozen dataclass's ``__init__``.
    """

    log_position: int
    event_number: int
    stream: str
    event_type: str
    event_id: bytes  # 16 bytes, UUID in RFC 4122 byte order
    timestamp: int  # 100 ns ticks since the Unix epoch
    flags: int
    data: bytes
    metadata: bytes
    size: int = 0  # frame size in the log (logical size); set by the decoder

    @property
    def id(self) -> uuid.UUID:
        return uuid.UUID(bytes=self.event_id)

    @property
    def is_json(self) -> bool:
        return bool(self.flags & 0x100)

    @property
    def is_redacted(self) -> bool:
        return bool(self.flags & 0x200)

    @property
    def is_tombstone(self) -> bool:
        return bool(self.flags & 0x08)

    @property
    def next_position(self) -> int:
        return self.log_position + self.size


@dataclass(frozen=True, slots=True)
class SystemRecord:
    """A record the cluster machinery writes (epochs); never returned as an event."""

    log_position: int
    kind: int
    timestamp: int
    payload: bytes
    size: int = 0

    @property
    def next_position(self) -> int:
        return self.log_position + self.size


Record = EventRecord | SystemRecord


def _frame(body: bytes) -> bytes:
    n = len(body)
    return b"".join((_LEN.pack(n), body, _TRAILER.pack(xxhash.xxh32_intdigest(body), n)))


def encode_event(
    *,
    log_position: int,
    event_number: int,
    stream: str,
    event_type: str,
    event_id: bytes,
    timestamp: int,
    flags: int,
    data: bytes,
    metadata: bytes,
) -> bytes:
    """Encode an event record, framed, ready to be written at ``log_position``."""
    s = stream.encode()
    t = event_type.encode()
    head = EVENT_HEADER.pack(
        RecordType.EVENT,
        FORMAT_VERSION,
        flags,
        log_position,
        event_number,
        timestamp,
        event_id,
        len(s),
        len(t),
        len(data),
        len(metadata),
    )
    return _frame(b"".join((head, s, t, data, metadata)))


def encode_events(
    *,
    position: int,
    first_number: int,
    stream: bytes,
    events: Sequence,
    ids: list[bytes],
    timestamp: int,
    base_flags: int,
    end_flag: int,
    begin_flag: int = 0x02,
    event_types: list[bytes] | None = None,
) -> tuple[bytes, list[int]]:
    """Encode the events of one append (``NewEvent`` values) starting at ``position``.

    The first record gets ``begin_flag`` (TransactionBegin, or 0 when it continues an append), the
    last gets ``end_flag`` (TransactionEnd, or 0 when another record closes the append). Returns
    the framed records as one block and their positions. This is the writer's hot path, hence the
    local bindings and the single join.
    """
    pack = EVENT_HEADER.pack
    checksum = xxhash.xxh32_intdigest
    pack_len = _LEN.pack
    pack_trailer = _TRAILER.pack
    join = b"".join
    ls = len(stream)
    parts: list[bytes] = []
    extend = parts.extend
    positions: list[int] = []
    number = first_number
    last = len(events) - 1
    json_flag = RecordFlags.IS_JSON.value
    types = event_types or [e.event_type.encode() for e in events]
    for i, e in enumerate(events):
        etype = types[i]
        data = e.data
        meta = e.metadata
        flags = base_flags | json_flag if e.is_json else base_flags
        if i == 0:
            flags |= begin_flag
        if i == last:
            flags |= end_flag
        body = join(
            (
                pack(
                    1,
                    FORMAT_VERSION,
                    flags,
                    position,
                    number,
                    timestamp,
                    ids[i],
                    ls,
                    len(etype),
                    len(data),
                    len(meta),
                ),
                stream,
                etype,
                data,
                meta,
            )
        )
        n = len(body)
        extend((pack_len(n), body, pack_trailer(checksum(body), n)))
        positions.append(position)
        position += n + FRAME_OVERHEAD
        number += 1
    return join(parts), positions


def event_frame_size(stream_bytes: int, type_bytes: int, data: int, metadata: int) -> int:
    return FRAME_OVERHEAD + EVENT_HEADER.size + stream_bytes + type_bytes + data + metadata


def encode_system(*, log_position: int, kind: int, timestamp: int, payload: bytes) -> bytes:
    head = SYSTEM_HEADER.pack(RecordType.SYSTEM, FORMAT_VERSION, kind, log_position, timestamp, len(payload))
    return _frame(head + payload)


def data_offset_in_frame(record_frame: bytes | memoryview) -> tuple[int, int]:
    """Where an event's data lies inside its frame: (offset from the frame start, length).

    The redaction tool uses this to overwrite the data in place with 0xFF bytes.
    """
    (_, _, _, _, _, _, _, ls, lt, ld, _) = EVENT_HEADER.unpack_from(record_frame, 4)
    return 4 + EVENT_HEADER.size + ls + lt, ld


def reframe(body: bytes) -> bytes:
    """Frame a body again (after an in-place edit such as redaction) with a fresh CRC."""
    return _frame(body)


def decode_body(body: bytes, size: int) -> EventRecord | SystemRecord:
    rtype = body[0]
    if rtype == RecordType.EVENT:
        (_, _, flags, pos, number, ts, eid, ls, lt, ld, lm) = _unpack_event(body, 0)
        o = _EVENT_HEADER_SIZE
        stream = body[o : o + ls].decode()
        o += ls
        etype = body[o : o + lt].decode()
        o += lt
        return EventRecord(
            pos, number, stream, etype, eid, ts, flags, body[o : o + ld], body[o + ld : o + ld + lm], size
        )
    if rtype == RecordType.SYSTEM:
        (_, _, kind, pos, ts, lp) = SYSTEM_HEADER.unpack_from(body, 0)
        o = SYSTEM_HEADER.size
        return SystemRecord(pos, kind, ts, bytes(body[o : o + lp]), size)
    raise ValueError(f"unknown record type {rtype}")


_unpack_len = _LEN.unpack_from
_unpack_trailer = _TRAILER.unpack_from
_unpack_event = EVENT_HEADER.unpack_from
_EVENT_HEADER_SIZE = EVENT_HEADER.size
_checksum = xxhash.xxh32_intdigest


def read_frame(buf, offset: int, limit: int, *, where: str = "log") -> tuple[EventRecord | SystemRecord, int]:
    """Decode the record framed at ``offset``; return it and the offset just after it.

    ``limit`` is the end of valid data in ``buf``. Raises :class:`CorruptedFile` when the frame
    is torn, its lengths disagree or its CRC does not match.
    """
    if offset + FRAME_OVERHEAD > limit:
        raise CorruptedFile(where, f"truncated record at offset {offset}")
    (n,) = _unpack_len(buf, offset)
    end = offset + n + FRAME_OVERHEAD
    if end > limit or n == 0:
        raise CorruptedFile(where, f"bad record length {n} at offset {offset}")
    body = buf[offset + 4 : offset + 4 + n]
    expected, n2 = _unpack_trailer(buf, offset + 4 + n)
    if n2 != n or _checksum(body) != expected:
        raise CorruptedFile(where, f"record checksum mismatch at offset {offset}")
    try:
        return decode_body(body, n + FRAME_OVERHEAD), end
    except (ValueError, struct.error, UnicodeDecodeError) as exc:
        raise CorruptedFile(where, f"undecodable record at offset {offset}: {exc}") from None


def read_frames(buf, offset: int, limit: int, max_records: int, *, where: str = "log") -> tuple[list, int]:
    """Decode up to ``max_records`` consecutive records from ``offset``; return them and the offset
    after the last one. The same checks as :func:`read_frame`, in one tight loop (``$all`` scans)."""
    out: list = []
    append = out.append
    unpack_len = _unpack_len
    unpack_trailer = _unpack_trailer
    unpack_event = _unpack_event
    checksum = _checksum
    header_size = _EVENT_HEADER_SIZE
    new_event = tuple.__new__
    event_cls = EventRecord
    while offset < limit and len(out) < max_records:
        if offset + FRAME_OVERHEAD > limit:
            raise CorruptedFile(where, f"truncated record at offset {offset}")
        (n,) = unpack_len(buf, offset)
        end = offset + n + FRAME_OVERHEAD
        if end > limit or n == 0:
            raise CorruptedFile(where, f"bad record length {n} at offset {offset}")
        body = buf[offset + 4 : offset + 4 + n]
        expected, n2 = unpack_trailer(buf, offset + 4 + n)
        if n2 != n or checksum(body) != expected:
            raise CorruptedFile(where, f"record checksum mismatch at offset {offset}")
        if body[0] == 1:
            try:
                (_, _, flags, pos, number, ts, eid, ls, lt, ld, lm) = unpack_event(body, 0)
                o = header_size + ls
                o2 = o + lt
                o3 = o2 + ld
                append(
                    new_event(
                        event_cls,
                        (
                            pos,
                            number,
                            body[header_size:o].decode(),
                            body[o:o2].decode(),
                            eid,
                            ts,
                            flags,
                            body[o2:o3],
                            body[o3 : o3 + lm],
                            n + FRAME_OVERHEAD,
                        ),
                    )
                )
            except (struct.error, UnicodeDecodeError) as exc:
                raise CorruptedFile(where, f"undecodable record at offset {offset}: {exc}") from None
        else:
            try:
                append(decode_body(body, n + FRAME_OVERHEAD))
            except (ValueError, struct.error, UnicodeDecodeError) as exc:
                raise CorruptedFile(where, f"undecodable record at offset {offset}: {exc}") from None
        offset = end
    return out, offset


def read_frame_before(
    buf, end: int, start: int, *, where: str = "log"
) -> tuple[EventRecord | SystemRecord, int]:
    """Decode the record that ends at ``end``; return it and the offset where it starts."""
    if end - FRAME_OVERHEAD < start:
        raise CorruptedFile(where, f"no record ends at offset {end}")
    (n,) = _LEN.unpack_from(buf, end - 4)
    begin = end - n - FRAME_OVERHEAD
    if begin < start:
        raise CorruptedFile(where, f"bad record length {n} before offset {end}")
    record, _after = read_frame(buf, begin, end, where=where)
    return record, begin


def frame_size_at(buf, offset: int) -> int:
    (n,) = _LEN.unpack_from(buf, offset)
    return n + FRAME_OVERHEAD
