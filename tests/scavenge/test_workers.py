"""Chunk work in worker processes gives the same results as in the scavenge thread."""

from __future__ import annotations

import os

import pytest

from evdb.scavenge import workers
from tests.scavenge.test_runs import fill


@pytest.fixture
def in_processes(monkeypatch):
    monkeypatch.setattr(workers, "PROCESS_MIN_CHUNK_SIZE", 0)
    monkeypatch.setattr(workers, "PROCESS_MIN_DATA", 0)


def test_a_near_empty_database_starts_no_worker_process(tmp_path, make_harness, monkeypatch):
    """Starting a worker process costs more than reading a few KiB: a near-empty database never pays it."""
    monkeypatch.setattr(workers, "PROCESS_MIN_CHUNK_SIZE", 0)
    h = make_harness(tmp_path / "small")
    fill(h)
    submitted = []
    monkeypatch.setattr(workers.ChunkWorkers, "_submit", lambda self, fn, *args: submitted.append(fn))
    assert h.scavenge()[1] == "Success"
    assert submitted == []


def test_a_scavenge_in_worker_processes_matches_one_in_the_thread(tmp_path, make_harness, monkeypatch):
    control = make_harness(tmp_path / "thread", merging=True)
    fill(control)
    assert control.scavenge()[1] == "Success"
    expected = control.survivors()
    names = sorted(n for n in os.listdir(control.path / "db") if n.startswith("chunk-"))
    monkeypatch.setattr(workers, "PROCESS_MIN_CHUNK_SIZE", 0)
    monkeypatch.setattr(workers, "PROCESS_MIN_DATA", 0)
    h = make_harness(tmp_path / "processes", merging=True)
    fill(h)
    assert h.scavenge()[1] == "Success"
    assert h.survivors() == expected
    assert sorted(n for n in os.listdir(h.path / "db") if n.startswith("chunk-")) == names
    assert not [n for n in os.listdir(h.path / "db") if n.endswith(".tmp")]
    h.reopen()
    assert h.survivors() == expected


def test_a_stop_reaches_the_workers_and_the_run_resumes(tmp_path, make_harness, in_processes):
    control = make_harness(tmp_path / "control")
    fill(control)
    control.scavenge()
    expected = control.survivors()

    h = make_harness(tmp_path / "stopped")
    fill(h)
    real = workers._copy_files
    calls = []

    def submit(self, fn, *args):  # a stop request arrives as the first copy is handed to a worker
        if fn is real and not calls:
            calls.append(args)
            self.stop.set()
        return original_submit(self, fn, *args)

    original_submit = workers.ChunkWorkers._submit
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setattr(workers.ChunkWorkers, "_submit", submit)
    try:
        assert h.scavenge()[1] == "Stopped"
    finally:
        monkeypatch.undo()
    assert calls
    assert not [n for n in os.listdir(h.path / "db") if n.endswith(".tmp")]
    h.reopen()
    assert h.scavenge()[1] == "Success"
    assert h.survivors() == expected


def test_a_damaged_chunk_found_by_a_worker_is_reported_by_name(tmp_path, make_harness, in_processes):
    h = make_harness(tmp_path / "damaged")
    fill(h)
    h.complete_chunk()
    chunk = next(c for c in h.db.log.distinct_chunks() if c.is_completed)
    with open(chunk.path, "r+b") as f:
        f.seek(200)
        byte = f.read(1)
        f.seek(200)
        f.write(bytes([byte[0] ^ 0xFF]))
    assert h.scavenge()[1] == "Errored"
    error = h.service.last_progress().error
    assert "checksum mismatch" in error and chunk.file_name in error
