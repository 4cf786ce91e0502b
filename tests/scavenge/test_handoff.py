"""Accumulation hands what chunk execution needs on (evdb/scavenge/handoff.py): the same copies, byte
for byte, as execution's own walk of each chunk; a hand-off is used only by the run that wrote it,
for the very chunk file it was written from."""

from __future__ import annotations

import logging
import os
import shutil
import struct

import numpy as np
import pytest

from evdb.scavenge import chunkscan, handoff, workers
from evdb.scavenge.chunkscan import record_table
from evdb.scavenge.handoff import HandoffUnusable, read_handoff, write_handoff
from evdb.storage.chunk import Chunk
from tests.scavenge.conftest import CHUNK, Harness
from tests.scavenge.test_runs import ev, fill


def fill_more(h: Harness, clock) -> None:
    """fill's removals, plus ``$maxAge`` streams whose events span the cut-off, and streams written
    one event at a time, interleaved, each at another time (runs of one record: the numbers and
    timestamps of a chunk then go to the hand-off as plain values, not segments)."""
    fill(h)
    for k in range(3):
        h.db.append(f"aged-{k}", [ev(i) for i in range(10)])
        h.db.set_stream_metadata(f"aged-{k}", {"$maxAge": 60})
    clock.advance(120)
    for i in range(60):
        for k in range(3):
            h.db.append(f"aged-{k}", [ev(i)])
            h.db.append(f"mixed-{k}", [ev(i)])
            clock.advance(0.001)
    h.db.set_stream_metadata("mixed-1", {"$maxCount": 10})
    h.complete_chunk()  # the run's own records (the point, its events) go to a chunk of their own


_ID_AT = struct.calcsize("<8sHHqii")  # where a chunk header's random id starts (16 bytes)


def contents(path) -> bytes:
    """A chunk file's bytes without what differs between two copies of the same records: the
    header's random id, and so the checksum of the whole file (checked here)."""
    Chunk.open(str(path), verify=True)
    with open(path, "rb") as f:
        raw = f.read()
    return raw[:_ID_AT] + raw[_ID_AT + 16 : -16]


def chunk_files(h: Harness) -> list[str]:
    return sorted(n for n in os.listdir(h.path / "db") if n.startswith("chunk-"))


def handoff_dir(h: Harness) -> str:
    return str(h.path / "db" / "index" / "scavenging" / "handoff")


def columns_match(table, got) -> None:
    for name in ("offsets", "sizes", "positions", "numbers", "timestamps", "run_of"):
        assert np.array_equal(getattr(table, name), getattr(got, name)), name
    assert got.run_names == table.run_names


def test_a_handoff_gives_the_columns_of_the_walk_for_new_and_scavenged_chunks(tmp_path, make_harness, clock):
    h = make_harness(tmp_path / "db", merging=True)
    fill_more(h, clock)
    plain = segmented = 0
    for phase in ("written", "scavenged"):
        for chunk in h.db.log.distinct_chunks():
            if not chunk.is_completed:
                continue
            table = record_table(chunk)
            path = str(tmp_path / f"{chunk.file_name}.handoff")
            write_handoff(
                path, chunk, offsets=table.offsets, sizes=table.sizes, types=table.types,
                positions=table.positions, numbers=table.numbers, timestamps=table.timestamps,
                run_starts=table.run_starts, run_names=table.run_names,
            )  # fmt: skip
            columns_match(table, read_handoff(path, chunk))
            if phase == "scavenged":
                assert chunk.is_scavenged or chunk.start_number == chunk.end_number
            runs = len(table.run_names)
            plain += runs * 2 > len(table)
            segmented += runs * 2 <= len(table)
        if phase == "written":
            assert h.scavenge()[1] == "Success"
    assert plain and segmented  # both codings were read back


@pytest.mark.parametrize("step", [0, 1])
def test_segments_give_back_any_int64_values(step):
    top, bottom = np.iinfo(np.int64).max, np.iinfo(np.int64).min
    values = np.array([bottom, bottom + 1, top - 1, top, top, 5, 6, 7, 7, 7, -1, 0, 1], dtype=np.int64)
    values = np.repeat(values, 3)  # long enough for segments to be smaller than plain values
    if step:
        values = values + np.arange(len(values), dtype=np.int64)  # (wraps, as the coding does)
    coded = handoff._segments(values, step)
    assert coded is not None
    assert np.array_equal(handoff._expand(*coded, step, len(values)), values)
    assert handoff._segments(np.arange(10, dtype=np.int64) * 7, step) is None  # no runs: plain


def test_a_handoff_of_another_file_or_a_damaged_one_is_not_used(tmp_path, make_harness, clock):
    h = make_harness(tmp_path / "db")
    fill_more(h, clock)
    first, second = [c for c in h.db.log.distinct_chunks() if c.is_completed][:2]
    table = record_table(first)
    path = str(tmp_path / "first.handoff")
    write_handoff(
        path, first, offsets=table.offsets, sizes=table.sizes, types=table.types,
        positions=table.positions, numbers=table.numbers, timestamps=table.timestamps,
        run_starts=table.run_starts, run_names=table.run_names,
    )  # fmt: skip
    with pytest.raises(HandoffUnusable, match="written from another file"):
        read_handoff(path, second)
    with open(path, "rb") as f:
        raw = f.read()
    for name, damaged in (
        ("torn", raw[: len(raw) // 2]),
        ("flipped", raw[:100] + bytes([raw[100] ^ 1]) + raw[101:]),
    ):
        bad = str(tmp_path / f"{name}.handoff")
        with open(bad, "wb") as f:
            f.write(damaged)
        with pytest.raises(HandoffUnusable, match="checksum mismatch") as caught:
            read_handoff(bad, first)
        assert caught.value.path == bad

    # a copy given an unusable hand-off walks the chunk: the same file as without one
    decisions = chunkscan.DecisionTable({"count-0": (35, 39, None)}, 1 << 62, False)
    made = []
    for given in (None, path, str(tmp_path / "flipped.handoff")):
        unusable: list[tuple[str, str]] = []
        builder = h.db.log.new_chunk_builder(second.start_number, second.end_number)
        new, removed = workers.build_copy(
            [second], builder, decisions, lambda: False, verify=False, handoffs=[given], unusable=unusable
        )
        assert new.path is not None
        made.append((contents(new.path), removed))
        os.unlink(new.path)
        assert [where for where, _ in unusable] == ([] if given is None else [given])
    assert made[0] == made[1] == made[2]


@pytest.mark.parametrize("where", ["thread", "processes"])
def test_scavenges_with_and_without_handoffs_write_the_same_chunk_files(
    tmp_path, make_harness, clock, monkeypatch, caplog, where
):
    """The same database scavenged twice, once with the hand-offs and once with each chunk walked
    again in execution (as a later run walks the chunks an earlier one accumulated): the same chunk
    files, byte for byte. With the hand-offs, execution walks no chunk."""
    if where == "processes":
        monkeypatch.setattr(workers, "PROCESS_MIN_CHUNK_SIZE", 0)
        monkeypatch.setattr(workers, "PROCESS_MIN_DATA", 0)
    template = make_harness(tmp_path / "template", merging=True)
    fill_more(template, clock)
    end = template.db.committed_position  # the runs' own records (their points, ...) come after
    template.close()
    walks: list[str] = []  # the stage of each chunk walk in this process
    stage = [""]
    real_record_table = workers.record_table

    def counted(chunk, *args, **kwargs):
        walks.append(stage[0])
        return real_record_table(chunk, *args, **kwargs)

    monkeypatch.setattr(workers, "record_table", counted)
    results = {}
    for handoffs in (True, False):
        shutil.copytree(tmp_path / "template", tmp_path / str(handoffs))
        h = make_harness(tmp_path / str(handoffs), merging=True)
        h.service.handoffs = handoffs
        seen: list[list[str]] = []

        def hook(s: str, h=h, seen=seen) -> None:
            stage[0] = s
            if s == "Calculating":  # accumulation is over: one hand-off per chunk it read, or none
                seen.append(sorted(os.listdir(handoff_dir(h))) if os.path.isdir(handoff_dir(h)) else [])

        h.service.stage_hook = hook
        walks.clear()
        with caplog.at_level(logging.WARNING):
            assert h.scavenge()[1] == "Success"
        files = chunk_files(h)
        results[handoffs] = (
            files,
            [contents(h.path / "db" / n) for n in files if int(n[6:12]) * CHUNK < end],
            h.survivors(),
        )
        if handoffs:
            assert len(seen[0]) >= 4 and all(n.endswith(".handoff") for n in seen[0])
            if where == "thread":
                assert walks and "ExecutingChunks" not in walks
        else:
            assert seen == [[]]
            if where == "thread":
                assert "ExecutingChunks" in walks
        assert not os.path.exists(handoff_dir(h))  # (removed as the run ends)
        h.close()
    assert "hand-off" not in caplog.text
    assert results[True][0] == results[False][0]
    assert len(results[True][1]) >= 3 and results[True][1] == results[False][1]
    assert results[True][2] == results[False][2]
    assert any(not n.endswith(".000000") for n in results[True][0])  # (copies were made, and merged)


def test_a_stopped_run_leaves_no_handoff_and_the_next_walks_the_chunks(tmp_path, make_harness, clock, caplog):
    """A run stopped after accumulation removes its hand-offs; one left by a killed run (planted
    here, under a chunk's name) is removed unread as the next run starts, and that run walks the
    chunks: the same result as a run never stopped."""
    template = make_harness(tmp_path / "template", merging=True)
    fill_more(template, clock)
    template.close()
    for name in ("control", "stopped"):
        shutil.copytree(tmp_path / "template", tmp_path / name)
    control = make_harness(tmp_path / "control", merging=True)
    assert control.scavenge()[1] == "Success"
    expected = control.survivors()
    h = make_harness(tmp_path / "stopped", merging=True)

    def stop_at(s: str) -> None:
        if s == "Calculating":
            h.service._current.stop()

    h.service.stage_hook = stop_at
    assert h.scavenge()[1] == "Stopped"
    assert not os.path.exists(handoff_dir(h))  # (removed as the run ends)
    first = next(c for c in h.db.log.distinct_chunks() if c.is_completed)
    os.makedirs(handoff_dir(h))
    with open(os.path.join(handoff_dir(h), first.file_name + handoff.SUFFIX), "wb") as f:
        f.write(b"left by a killed run")
    h.service.stage_hook = lambda s: None
    h.reopen()
    with caplog.at_level(logging.WARNING):
        assert h.scavenge()[1] == "Success"
    assert "hand-off" not in caplog.text
    assert h.survivors() == expected
    assert chunk_files(h)[:-1] == chunk_files(control)[:-1]
    assert not os.path.exists(handoff_dir(h))
