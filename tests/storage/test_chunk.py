from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from evdb.errors import CorruptedFile
from evdb.storage import records as rec
from evdb.storage.chunk import (
    FOOTER_SIZE,
    HEADER_SIZE,
    Chunk,
    ChunkFooter,
    ChunkHeader,
    chunk_file_name,
    parse_chunk_file_name,
)

CHUNK = 64 * 1024


def frame(position: int, number: int, data: bytes = b"x" * 20, stream: str = "s") -> bytes:
    return rec.encode_event(
        log_position=position,
        event_number=number,
        stream=stream,
        event_type="t",
        event_id=os.urandom(16),
        timestamp=0,
        flags=0,
        data=data,
        metadata=b"",
    )


@given(
    size=st.integers(1, 1 << 40),
    start=st.integers(0, 999_999),
    span=st.integers(0, 1000),
    scavenged=st.booleans(),
    cid=st.binary(min_size=16, max_size=16),
    version=st.integers(0, 999_999),
)
def test_header_round_trip(size, start, span, scavenged, cid, version):
    header = ChunkHeader(size, start, start + span, scavenged, cid, version)
    raw = header.encode()
    assert len(raw) == HEADER_SIZE
    assert ChunkHeader.decode(raw, "x") == header


@given(physical=st.integers(0, 1 << 40), end=st.integers(0, 1 << 60), count=st.integers(0, 1 << 30))
def test_footer_round_trip(physical, end, count):
    footer = ChunkFooter(physical, end, count)
    raw = footer.encode_without_checksum() + b"h" * 16
    assert len(raw) == FOOTER_SIZE
    assert ChunkFooter.decode(raw, 0, "x") == ChunkFooter(physical, end, count, b"h" * 16)


@given(st.integers(0, 999_999), st.integers(0, 999_999))
def test_file_names(number, version):
    assert parse_chunk_file_name(chunk_file_name(number, version)) == (number, version)


def test_file_name_rejects_other_names():
    assert parse_chunk_file_name("chunk-00000a.000000") is None
    assert parse_chunk_file_name("writer.chk") is None


@pytest.mark.parametrize("in_memory", [False, True])
def test_write_complete_reopen(tmp_path, in_memory):
    directory = None if in_memory else str(tmp_path)
    chunk = Chunk.create_active(directory, CHUNK, 0)
    frames = []
    position = 0
    for i in range(50):
        f = frame(position, i)
        frames.append(f)
        assert chunk.write(f) == position
        position += len(f)
    chunk.flush()
    records = list(chunk.iter_records())
    assert [r.event_number for r in records] == list(range(50))
    last, begin = chunk.read_before(chunk.physical_end)
    assert last.event_number == 49 and begin == position - len(frames[-1])
    chunk.complete()
    assert chunk.is_completed and chunk.data_end_position == position
    if not in_memory:
        path = os.path.join(directory, chunk_file_name(0, 0))
        assert os.path.getsize(path) == HEADER_SIZE + position + FOOTER_SIZE
        reopened = Chunk.open(path)
        assert [r.event_number for r in reopened.iter_records()] == list(range(50))
        assert reopened.physical_offset(frames[0].__len__()) == len(frames[0])


def test_corrupt_completed_chunk_is_named(tmp_path):
    chunk = Chunk.create_active(str(tmp_path), CHUNK, 0)
    chunk.write(frame(0, 0))
    chunk.complete()
    path = chunk.path
    with open(path, "r+b") as f:
        f.seek(HEADER_SIZE + 10)
        b = f.read(1)
        f.seek(HEADER_SIZE + 10)
        f.write(bytes([b[0] ^ 0xFF]))
    with pytest.raises(CorruptedFile) as err:
        Chunk.open(path)
    assert path in str(err.value) and "checksum" in str(err.value)
    Chunk.open(path, verify=False)  # opening without verification is possible (SkipDbVerify)


def test_truncated_completed_chunk_is_named(tmp_path):
    chunk = Chunk.create_active(str(tmp_path), CHUNK, 0)
    chunk.write(frame(0, 0))
    chunk.complete()
    with open(chunk.path, "r+b") as f:
        f.truncate(os.path.getsize(chunk.path) - 7)
    with pytest.raises(CorruptedFile) as err:
        Chunk.open(chunk.path)
    assert chunk.path in str(err.value)


def test_scavenged_chunk_maps_logical_positions(tmp_path):
    from evdb.storage.chunk import ChunkBuilder

    builder = ChunkBuilder(
        str(tmp_path),
        chunk_size=CHUNK,
        start_number=0,
        end_number=1,
        version=1,
        data_end_position=CHUNK + 500,
    )
    kept = [(100, frame(100, 1)), (4000, frame(4000, 7)), (CHUNK + 300, frame(CHUNK + 300, 9))]
    for position, f in kept:
        builder.add(f, position)
    chunk = builder.finish()
    assert chunk.path.endswith(".scavenge.tmp")
    reopened = Chunk.open(chunk.path)
    assert reopened.is_scavenged and reopened.end_number == 1
    for position, _ in kept:
        offset = reopened.physical_offset(position)
        record, _ = reopened.read_at(offset)
        assert record.log_position == position
    assert reopened.physical_offset(101) is None
    assert reopened.physical_offset_at_or_after(101) == reopened.physical_offset(4000)
    assert reopened.data_end_position == CHUNK + 500


def test_add_records_asks_whether_to_stop_once_per_8_mib_not_per_run(tmp_path):
    """A scavenge copy of many short runs (every other record kept) asks ``should_stop`` before its
    first piece and then once per 8 MiB copied, not once per run (a worker's check costs system
    calls); a stop asked for is still seen before anything is copied, and the copy is whole."""
    import numpy as np

    from evdb.storage.chunk import ChunkBuilder

    size = 1000
    frames = [frame(i * size, i, data=b"d" * (size - len(frame(0, 0, data=b"")))) for i in range(24_000)]
    assert all(len(f) == size for f in frames)
    buf = b"".join(frames)
    keep = np.arange(0, len(frames), 2, dtype=np.int64)  # 12,000 runs of one record
    offsets, sizes, positions = keep * size, np.full(len(keep), size, dtype=np.int64), keep * size

    def builder() -> ChunkBuilder:
        return ChunkBuilder(
            str(tmp_path),
            chunk_size=1 << 26,
            start_number=0,
            end_number=0,
            version=1,
            data_end_position=1 << 26,
        )

    asked: list[int] = []
    copy = builder()

    def should_stop() -> bool:
        asked.append(copy.physical_size)
        return False

    copy.add_records(buf, offsets, sizes, positions, should_stop)
    chunk = copy.finish(sync=False)
    # 12 MB of runs: asked before the first, and again once the runs copied reach 8 MiB
    assert asked == [0, -(-(8 << 20) // size) * size]
    assert chunk.physical_end == len(keep) * size
    for k in (0, 1, len(keep) - 1):
        record, _ = chunk.read_at(k * size)
        assert record.log_position == int(positions[k])
    stopped = builder()
    with pytest.raises(InterruptedError):
        stopped.add_records(buf, offsets, sizes, positions, lambda: True)
    assert stopped.physical_size == 0
    stopped.abort()
