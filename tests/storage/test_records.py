from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from evdb.errors import CorruptedFile
from evdb.storage import records as rec

names = st.text(min_size=1, max_size=40)
i63 = st.integers(min_value=0, max_value=(1 << 63) - 1)


@given(
    position=i63,
    number=i63,
    stream=names,
    event_type=names,
    event_id=st.binary(min_size=16, max_size=16),
    timestamp=i63,
    flags=st.integers(min_value=0, max_value=0xFFFF),
    data=st.binary(max_size=300),
    metadata=st.binary(max_size=100),
)
def test_event_record_round_trip(
    position, number, stream, event_type, event_id, timestamp, flags, data, metadata
):
    frame = rec.encode_event(
        log_position=position,
        event_number=number,
        stream=stream,
        event_type=event_type,
        event_id=event_id,
        timestamp=timestamp,
        flags=flags,
        data=data,
        metadata=metadata,
    )
    assert len(frame) == rec.event_frame_size(
        len(stream.encode()), len(event_type.encode()), len(data), len(metadata)
    )
    record, end = rec.read_frame(frame, 0, len(frame))
    assert end == len(frame)
    assert isinstance(record, rec.EventRecord)
    assert (record.log_position, record.event_number, record.stream, record.event_type) == (
        position,
        number,
        stream,
        event_type,
    )
    assert (record.event_id, record.timestamp, record.flags, record.data, record.metadata) == (
        event_id,
        timestamp,
        flags,
        data,
        metadata,
    )
    assert record.size == len(frame)
    back, begin = rec.read_frame_before(frame, len(frame), 0)
    assert back == record and begin == 0
    offset, length = rec.data_offset_in_frame(frame)
    assert frame[offset : offset + length] == data


@given(position=i63, kind=st.integers(1, 100), timestamp=i63, payload=st.binary(max_size=200))
def test_system_record_round_trip(position, kind, timestamp, payload):
    frame = rec.encode_system(log_position=position, kind=kind, timestamp=timestamp, payload=payload)
    record, end = rec.read_frame(frame, 0, len(frame))
    assert record == rec.SystemRecord(position, kind, timestamp, payload, len(frame))
    assert end == len(frame)


def _sample() -> bytes:
    return rec.encode_event(
        log_position=0,
        event_number=0,
        stream="s",
        event_type="t",
        event_id=b"\1" * 16,
        timestamp=1,
        flags=0,
        data=b"hello",
        metadata=b"",
    )


@given(st.data())
def test_any_flipped_byte_is_detected(data):
    frame = bytearray(_sample())
    i = data.draw(st.integers(0, len(frame) - 1))
    frame[i] ^= data.draw(st.integers(1, 255))
    with pytest.raises(CorruptedFile):
        rec.read_frame(bytes(frame), 0, len(frame))


def test_torn_frame_is_detected():
    frame = _sample()
    for cut in range(1, len(frame)):
        with pytest.raises(CorruptedFile):
            rec.read_frame(frame[:cut], 0, cut)


def test_redaction_edit_keeps_size_and_reframes():
    frame = _sample()
    offset, length = rec.data_offset_in_frame(frame)
    body = bytearray(frame[4:-8])
    body[offset - 4 : offset - 4 + length] = b"\xff" * length
    redacted = rec.reframe(bytes(body))
    assert len(redacted) == len(frame)
    record, _ = rec.read_frame(redacted, 0, len(redacted))
    assert record.data == b"\xff" * 5
