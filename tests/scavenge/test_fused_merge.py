"""Chunk execution merges copies that fit together as it switches them in (evdb/scavenge/executor.py
``_Held``): the same chunks, the same survivors and the same reports as when the merging phase merges
them afterwards, without writing the first copy's records twice; a stop or a power cut at any disk
call of it leaves a database that opens, verifies and scavenges to the same end."""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import pytest

from evdb.database import Database
from evdb.scavenge import executor, merger
from evdb.scavenge.events import scavenge_stream
from evdb.storage.chunk import Chunk
from evdb.storage.disk import use_disk
from evdb.storage.disk_model import DiskModel
from tests.scavenge.conftest import CHUNK, Harness
from tests.scavenge.test_runs import ev, fill


def layout(h: Harness) -> list[tuple[int, int]]:
    return [(c.start_number, c.end_number) for c in h.db.log.distinct_chunks() if c.is_completed]


def event_types(h: Harness, scavenge_id: str) -> list[str]:
    return [e.event_type for e in h.db.iter_all(0) if e.stream == scavenge_stream(scavenge_id)]


def merges_made_by_the_merging_phase(monkeypatch) -> list[tuple[int, int]]:
    made: list[tuple[int, int]] = []
    real = merger._merge

    def merge(ctx, group):
        made.append((group[0].start_number, group[-1].end_number))
        return real(ctx, group)

    monkeypatch.setattr(merger, "_merge", merge)
    return made


def test_copies_that_fit_together_are_merged_once_with_the_same_result(tmp_path, make_harness, monkeypatch):
    control = make_harness(tmp_path / "control", merging=True)
    fill(control)
    with monkeypatch.context() as m:
        m.setattr(executor, "_may_grow", lambda ctx, held, pending: False)  # copies go live one by one
        control_merges = merges_made_by_the_merging_phase(m)
        assert control.scavenge()[1] == "Success"
    assert control_merges  # the data has copies that the merging phase merges

    h = make_harness(tmp_path / "fused", merging=True)
    fill(h)
    appended = []
    real_append = merger.append_copy

    def append_copy(head, tail, version):
        appended.append((head.start_number, head.end_number, tail.start_number))
        return real_append(head, tail, version)

    monkeypatch.setattr(executor, "append_copy", append_copy)
    merges = merges_made_by_the_merging_phase(monkeypatch)
    scavenge_id, result = h.scavenge()
    assert result == "Success"
    assert appended  # copies were merged as they were switched in ...
    assert merges == []  # ... so the merging phase found nothing left to merge
    assert layout(h) == layout(control)
    assert h.survivors() == control.survivors()
    assert not [n for n in os.listdir(h.path / "db") if n.endswith(".tmp")]
    # the same reports, in KurrentDB's order: every chunk, then the merges (in the merging phase)
    progress = h.service.last_progress()
    assert [(c.start_number, c.end_number, c.merged) for c in progress.chunks] == [
        (c.start_number, c.end_number, c.merged) for c in control.service.last_progress().chunks
    ]
    types = event_types(h, scavenge_id)
    assert "$scavengeMergeCompleted" in types
    last_chunk = max(i for i, t in enumerate(types) if t == "$scavengeChunksCompleted")
    assert min(i for i, t in enumerate(types) if t == "$scavengeMergeCompleted") > last_chunk
    h.reopen()  # every chunk verifies again (checksums, position maps)
    assert h.survivors() == control.survivors()
    h.db.append("after", [ev(1)])
    assert h.scavenge()[1] == "Success"


def test_a_stop_while_copies_are_held_removes_them_and_the_run_resumes(tmp_path, make_harness, monkeypatch):
    control = make_harness(tmp_path / "control", merging=True)
    fill(control)
    control.scavenge()
    expected = control.survivors()

    h = make_harness(tmp_path / "stopped", merging=True)
    fill(h)
    real_append = merger.append_copy

    def append_copy(head, tail, version):
        h.service._current.stop()
        return real_append(head, tail, version)

    monkeypatch.setattr(executor, "append_copy", append_copy)
    assert h.scavenge()[1] == "Stopped"
    assert not [n for n in os.listdir(h.path / "db") if n.endswith(".tmp")]
    monkeypatch.undo()
    h.reopen()
    assert h.scavenge()[1] == "Success"
    assert h.survivors() == expected


def _survivors_of(path) -> list[tuple[str, int]]:
    """The user streams' events in the database at ``path`` (opened on the real disk: every chunk
    verifies), then a scavenge to the end."""
    db = Database.open(str(path), chunk_size=CHUNK, max_memtable_entries=64, existence_filter_capacity=10_000)
    try:
        return [
            (e.stream, e.event_number)
            for e in db.iter_all(0)
            if not (
                e.stream.startswith("$$$") or (e.stream.startswith("$") and not e.stream.startswith("$$"))
            )
        ]
    finally:
        db.close()


def power_cut_setup(tmp_path, clock, **harness) -> tuple[Path, list, list]:
    """For the power-cut tests: a filled database in ``tmp_path/template``, the events it holds, and
    those an uninterrupted scavenge of a copy of it keeps (``harness``: Harness's options)."""
    template = tmp_path / "template"
    h = Harness(template, clock, **harness)
    fill(h)
    original = h.survivors()
    h.close()
    control = Harness(tmp_path / "control", clock, **harness)
    shutil.copytree(template / "db", tmp_path / "control" / "db", dirs_exist_ok=True)
    control.reopen()
    control.scavenge()
    expected = control.survivors()
    control.close()
    return template, original, expected


def cut_power_at_each_call(tmp_path, clock, calls: range, template, original, expected, **harness) -> None:
    """Scavenge a copy of ``template`` once per disk call in ``calls`` with the power cut there: the
    database then opens (every chunk verifies), holds every event the scavenge keeps and nothing never
    written, and a new scavenge ends where an uninterrupted one does, leaving no temporary file."""
    rng = random.Random(23)
    for cut in calls:
        run = tmp_path / f"cut-{cut}"
        shutil.copytree(template, run)
        model = DiskModel(str(tmp_path / f"scratch-{cut}"))
        with use_disk(model):
            r = Harness(run, clock, **harness)
            model.cut_after(cut - model.calls)
            r.scavenge()  # Errored (or Success when the cut comes after its last disk call)
            model.cut()
            report = model.power_loss(rng)
            r.close()
        got = _survivors_of(run / "db")
        assert set(expected) <= set(got) <= set(original), f"cut at call {cut}: {report.summary()}"
        r = Harness(run, clock, **harness)
        try:
            assert r.scavenge()[1] == "Success", f"cut at call {cut}"
            assert r.survivors() == expected, f"cut at call {cut}: {report.summary()}"
            assert not [n for n in os.listdir(run / "db") if n.endswith(".tmp")]
        finally:
            r.close()
        shutil.rmtree(run)


def test_a_power_cut_at_every_disk_call_of_a_merge_made_by_chunk_execution(tmp_path, clock, monkeypatch):
    """The power goes at each disk call from the first copy held back to the merged file switched in;
    the database then opens (every chunk verifies), holds every event the scavenge keeps and nothing
    that was never written, and a new scavenge ends where an uninterrupted one does."""
    template, original, expected = power_cut_setup(tmp_path, clock, merging=True)

    # where the merge's disk calls are: from the first copy held back (its fsync) to its switch-in
    window: list[int] = []
    model = DiskModel(str(tmp_path / "scratch-probe"))
    real_sync, real_switch = executor._sync, executor._switch_group

    def sync(held):
        if not window:
            window.append(model.calls)
        return real_sync(held)

    def switch(ctx, held):
        result = real_switch(ctx, held)
        if len(held.parts) > 1 and len(window) == 1:
            window.append(model.calls)
        return result

    monkeypatch.setattr(executor, "_sync", sync)
    monkeypatch.setattr(executor, "_switch_group", switch)
    probe = tmp_path / "probe"
    shutil.copytree(template, probe)
    with use_disk(model):
        p = Harness(probe, clock, merging=True)
        assert p.scavenge()[1] == "Success"
        p.close()
    monkeypatch.undo()
    assert len(window) == 2, "no merge was made by chunk execution"

    cut_power_at_each_call(
        tmp_path, clock, range(window[0] + 1, window[1] + 2), template, original, expected, merging=True
    )


@pytest.mark.parametrize("tail_records", [0, 3])
def test_append_copy_gives_the_chunk_a_builder_gives(tmp_path, tail_records):
    """A merge made in the head's own file is byte for byte a valid chunk: it opens with its checksum
    checked and reads every record of both copies at its position."""
    db = Database.open(str(tmp_path / "db"), chunk_size=CHUNK, max_memtable_entries=64)
    try:
        for i in range(3):
            db.append(f"s-{i}", [ev(k) for k in range(30)])
            db.call_in_writer(lambda ctx: ctx.complete_active_chunk())
        log = db.log
        chunks = [c for c in log.distinct_chunks() if c.is_completed][:2]
        copies = []
        for chunk, keep in zip(chunks, (10, tail_records), strict=True):
            builder = log.new_chunk_builder(chunk.start_number, chunk.end_number)
            records = list(chunk.iter_records())[:keep]
            for record in records:
                offset = chunk.physical_offset_at_or_after(record.log_position)
                builder.add(chunk.raw_frame(offset), record.log_position)
            copies.append((builder.finish(), [r.log_position for r in records]))
        (head, head_positions), (tail, tail_positions) = copies
        merged = merger.append_copy(head, tail, version=5)
        again = Chunk.open(merged.path, verify=True)
        assert (again.start_number, again.end_number, again.version) == (0, 1, 5)
        assert [r.log_position for r in again.iter_records()] == head_positions + tail_positions
        assert again.data_end_position == tail.data_end_position
        os.unlink(merged.path)
        os.unlink(tail.path)
    finally:
        db.close()
