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
