"""The vectorised record tables of the scavenge phases agree with decoding record by record."""

from __future__ import annotations

import random

import numpy as np
import pytest

from evdb.clock import TICKS_PER_SECOND
from evdb.errors import CorruptedFile
from evdb.scavenge.chunkscan import DecisionTable, discard_mask, record_table
from evdb.scavenge.decisions import Decider
from evdb.scavenge.point import ScavengePoint
from evdb.scavenge.state import StreamRow
from evdb.storage.chunk import HEADER_SIZE
from evdb.storage.records import MAX_EVENT_NUMBER, EventRecord
from evdb.streams import NewEvent

# names that differ only in the middle (past 16 bytes from either end), by length, or not at all
LONG = "a-long-stream-name-that-is-longer-than-thirty-two-bytes"
STREAMS = [
    "s",
    "t",
    "ab",
    "ba",
    LONG + "-1",
    LONG + "-2",
    LONG.replace("longer", "LONGER") + "-1",
    "x" * 16 + "1" + "x" * 16,
    "x" * 16 + "2" + "x" * 16,
    "x" * 33,
    "$$s",
    "ünïcödé",
]


def fill(db, clock, seed: int = 1) -> list:
    rng = random.Random(seed)
    for _ in range(60):
        stream = rng.choice(STREAMS)
        db.append(
            stream,
            [
                NewEvent(rng.choice(["E", "Ev"]), rng.randbytes(rng.randrange(0, 600)))
                for _ in range(rng.randrange(1, 6))
            ],
        )
        clock.advance(rng.choice([0, 1, 60]))
    db.delete_stream("t", hard=True)
    db.call_in_writer(lambda ctx: ctx.complete_active_chunk())
    return [c for c in db.log.distinct_chunks() if c.is_completed]


def decoded(chunk) -> list:
    return list(chunk.iter_records())


def test_record_tables_match_the_decoder(db, clock):
    for chunk in fill(db, clock):
        records = decoded(chunk)
        table = record_table(chunk)
        assert len(table) == len(records)
        assert table.positions.tolist() == [r.log_position for r in records]
        assert table.sizes.tolist() == [r.size for r in records]
        for i, r in enumerate(records):
            if type(r) is EventRecord:
                assert table.run_names[table.run_of[i]] == r.stream
                assert (table.numbers[i], table.timestamps[i], table.flags[i]) == (
                    r.event_number,
                    r.timestamp,
                    r.flags,
                )
            else:
                assert table.run_of[i] == -1


@pytest.mark.parametrize("unsafe", [False, True])
def test_discard_masks_match_the_decider_and_copies_keep_positions(db, clock, unsafe):
    chunks = fill(db, clock, seed=7)
    rng = random.Random(3)
    now = clock.ticks()
    rows = {}
    for name in STREAMS:
        if rng.random() < 0.2:
            continue
        rows[name] = StreamRow(
            name,
            tombstoned=name == "t",
            max_age=rng.choice([None, 30, 3600]),
            last_number=rng.choice([None, 3, 10]),
            discard_point=rng.choice([0, 2, 5, MAX_EVENT_NUMBER]),
        )
    limit = chunks[-1].start_position + chunks[-1].physical_end // 2
    point = ScavengePoint(0, limit, now, 0)
    decider = Decider(rows, point, unsafe)
    decisions = DecisionTable.from_decider(decider)
    for chunk in chunks:
        records = decoded(chunk)
        table = record_table(chunk)
        mask = discard_mask(table, decisions)
        assert mask.tolist() == [decider.discard_record(r) for r in records]
        # copy the kept records in bulk: same frames, same positions, readable by position
        keep = ~mask
        builder = db.log.new_chunk_builder(chunk.start_number, chunk.end_number)
        builder.add_records(chunk.buffer, table.offsets[keep], table.sizes[keep], table.positions[keep])
        new = builder.finish()
        kept = [r for r, k in zip(records, keep.tolist(), strict=True) if k]
        assert decoded(new) == kept
        for r in kept:
            assert new.physical_offset(r.log_position) is not None
        again = record_table(new)  # the position map path
        assert again.positions.tolist() == [r.log_position for r in kept]
        if new.path:
            import os

            os.unlink(new.path)


def test_a_damaged_chunk_is_reported(db, clock):
    chunk = fill(db, clock)[0]
    if chunk.path is None:
        chunk.buffer[HEADER_SIZE + 100] ^= 0xFF
    else:
        with open(chunk.path, "r+b") as f:
            f.seek(HEADER_SIZE + 100)
            byte = f.read(1)
            f.seek(HEADER_SIZE + 100)
            f.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(CorruptedFile):
        record_table(chunk)


def test_max_age_cutoff_in_ticks_is_compared_per_record(db, clock):
    db.append("aged", [NewEvent("E", b"old")])
    clock.advance(100)
    db.append("aged", [NewEvent("E", b"new"), NewEvent("E", b"last")])
    db.call_in_writer(lambda ctx: ctx.complete_active_chunk())
    chunk = next(c for c in db.log.distinct_chunks() if c.is_completed)
    row = StreamRow("aged", max_age=50, last_number=2)
    point = ScavengePoint(0, 1 << 40, clock.ticks(), 0)
    decider = Decider({"aged": row}, point, False)
    assert decider._cutoffs["aged"] == clock.ticks() - 50 * TICKS_PER_SECOND
    table = record_table(chunk)
    mask = discard_mask(table, DecisionTable.from_decider(decider))
    events = [i for i, r in enumerate(decoded(chunk)) if type(r) is EventRecord and r.stream == "aged"]
    assert np.asarray(mask)[events].tolist() == [True, False, False]


# -- the compiled record walk (evdb/scavenge/framescan.py, numba) against the numpy one -------------
def same_tables(a, b) -> None:
    for field in ("offsets", "sizes", "types", "flags", "positions", "numbers", "timestamps", "run_of"):
        left, right = getattr(a, field), getattr(b, field)
        assert left.dtype == right.dtype, field
        assert left.tolist() == right.tolist(), field
    assert a.run_names == b.run_names
    assert a.run_starts.tolist() == b.run_starts.tolist()


def test_the_compiled_walk_gives_the_numpy_table(db, clock):
    chunks = fill(db, clock, seed=11)
    # the same stream twice in a row under other event types: one run, whatever follows the name
    db.append("s", [NewEvent("A", b"1")])
    db.append("s", [NewEvent("Bee", b"22"), NewEvent("C", b"")])
    db.call_in_writer(lambda ctx: ctx.complete_active_chunk())
    chunks = [c for c in db.log.distinct_chunks() if c.is_completed]
    for chunk in chunks:
        for streams in (True, False):
            compiled = record_table(chunk, compiled=True, streams=streams)
            same_tables(compiled, record_table(chunk, compiled=False, streams=streams))
        # runs are exact: two neighbouring runs never hold the same stream
        table = record_table(chunk, compiled=True)
        for k in range(1, len(table.run_starts)):
            i = int(table.run_starts[k])
            if table.run_of[i - 1] >= 0:
                assert table.run_names[k] != table.run_names[k - 1]
        # a scavenged copy: the walk goes by its position map
        builder = db.log.new_chunk_builder(chunk.start_number, chunk.end_number)
        keep = np.arange(len(table)) % 3 != 1
        builder.add_records(chunk.buffer, table.offsets[keep], table.sizes[keep], table.positions[keep])
        new = builder.finish()
        same_tables(record_table(new, compiled=True), record_table(new, compiled=False))
        if new.path:
            import os

            os.unlink(new.path)
    last = record_table(chunks[-1], compiled=True)
    assert last.run_names[-1] == "s" and len(table) > 0
    assert [last.run_of[i] for i in range(len(last) - 3, len(last))] == [len(last.run_names) - 1] * 3


def damage(chunk, offset: int, value: bytes) -> None:
    """Overwrite bytes of a chunk's data (its file, or its memory) at ``offset`` after the header."""
    if chunk.path is None:
        chunk.buffer[HEADER_SIZE + offset : HEADER_SIZE + offset + len(value)] = value
    else:
        with open(chunk.path, "r+b") as f:
            f.seek(HEADER_SIZE + offset)
            f.write(value)


@pytest.mark.parametrize(
    "what",
    ["zero length", "long length", "short length", "trailer", "type", "position", "short event"],
)
def test_both_walks_report_the_same_damage(tmp_path, clock, what):
    from evdb.database import Database

    db = Database.open(str(tmp_path / "db"), clock=clock, chunk_size=64 * 1024, existence_filter_capacity=100)
    try:
        chunk = fill(db, clock, seed=5)[0]
        second = int(record_table(chunk, compiled=False).offsets[1]) - HEADER_SIZE
        size = int(record_table(chunk, compiled=False).sizes[1])
        edits = {
            "zero length": (second, b"\0\0\0\0"),
            "long length": (second, (10**6).to_bytes(4, "little")),
            "short length": (second, (size - 13).to_bytes(4, "little")),
            "trailer": (second + size - 4, b"\x01\x02\x03\x04"),
            "type": (second + 4, b"\x07"),
            "position": (second + 8, (123456789).to_bytes(8, "little")),
            "short event": (second + 48, b"\xff\x7f"),
        }
        offset, value = edits[what]
        damage(chunk, offset, value)
        errors = []
        for compiled in (True, False):
            with pytest.raises(CorruptedFile) as caught:
                record_table(chunk, verify=False, compiled=compiled)
            errors.append(str(caught.value))
        assert errors[0] == errors[1]
        assert chunk.file_name in errors[0] or (chunk.path or "") in errors[0]
    finally:
        db.close()


@pytest.mark.parametrize("what", ["a record", "the header"])
def test_the_checksum_is_checked_beside_the_compiled_walk_and_reported_first(tmp_path, clock, what):
    """With ``verify``, the compiled walk runs on another thread while the chunk is hashed: a damaged
    chunk is reported as a checksum mismatch (before any record damage the walk found), as the numpy
    path reports it, and an intact one gives the same table as without ``verify``."""
    from evdb.database import Database

    db = Database.open(str(tmp_path / "db"), clock=clock, chunk_size=64 * 1024, existence_filter_capacity=100)
    try:
        chunk = fill(db, clock, seed=7)[0]
        assert chunk.path is not None and chunk.footer is not None
        same_tables(record_table(chunk, compiled=True, verify=True), record_table(chunk, verify=False))
        if what == "a record":
            damage(chunk, int(record_table(chunk, compiled=False).offsets[1]) - HEADER_SIZE, b"\0\0\0\0")
        else:  # (its padding: nothing but the checksum notices)
            with open(chunk.path, "r+b") as f:
                f.seek(HEADER_SIZE - 1)
                f.write(b"\x01")
        for compiled in (True, False):
            with pytest.raises(CorruptedFile, match="chunk checksum mismatch"):
                record_table(chunk, verify=True, compiled=compiled)
    finally:
        db.close()
