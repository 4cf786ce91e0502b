"""Chunk work in worker processes gives the same results as in the scavenge thread."""

from __future__ import annotations

import logging
import os
import signal
import threading

import psutil
import pytest
from waiting import wait_until

from evdb.scavenge import executor, workers
from tests.scavenge.test_runs import ev, fill


def more(h, tag: str) -> None:
    """Another round of removable events (in new streams: fill's are tombstoned)."""
    for k in range(6):
        h.db.append(f"{tag}-tomb-{k}", [ev(i) for i in range(30)])
        h.db.delete_stream(f"{tag}-tomb-{k}", hard=True)
        h.db.append(f"{tag}-keep-{k}", [ev(i) for i in range(20)])


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


def test_a_scavenge_in_worker_processes_matches_one_in_the_thread(
    tmp_path, make_harness, monkeypatch, caplog
):
    caplog.set_level(logging.DEBUG, logger="test.scavenge")
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
    # each copy made in a worker says where its time went (DEBUG), naming its chunks
    copies = [r.getMessage() for r in caplog.records if "in a worker process took" in r.getMessage()]
    assert copies and all("chunk-" in m and "checksum" in m and "page faults" in m for m in copies)
    h.reopen()
    assert h.survivors() == expected


def test_a_copy_in_a_worker_counts_where_its_time_went(tmp_path, make_harness, monkeypatch):
    """The checksum, the writes and the waits for the copy's writeback are timed in the worker (in
    this process here, with the workers' disk), so a slow copy shows which of them made it slow."""
    h = make_harness(tmp_path / "timed")
    fill(h)
    h.complete_chunk()
    chunk = next(c for c in h.db.log.distinct_chunks() if c.is_completed)
    monkeypatch.setattr(workers, "_stop", threading.Event())
    monkeypatch.setattr(workers, "_parent", os.getppid())
    monkeypatch.setattr(workers.disk, "current", workers._WritebackDisk())
    builder = h.db.log.new_chunk_builder(chunk.start_number, chunk.end_number)
    args = workers._builder_args(builder)
    builder.abort()
    path, removed, unusable, times = workers._copy_files([chunk.path], args, None, True, True, None)
    try:
        assert removed == 0 and unusable == []
        assert times is not None
        assert 0 < times.hashing <= times.seconds and 0 < times.writing <= times.seconds
        assert times.waiting >= 0 and times.resting == 0 and times.minor_faults >= 0
        assert "checksum" in times.describe()
    finally:
        os.unlink(path)


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


def test_the_worker_processes_outlive_a_run(tmp_path, make_harness, in_processes):
    """Worker start-up is paid once per node (per scavenge service), not once per scavenge."""
    h = make_harness(tmp_path / "twice")
    fill(h)
    assert h.scavenge()[1] == "Success"
    first = h.service.workers.pids()
    assert first, "the first run should have started worker processes"
    more(h, "second")
    assert h.scavenge(threads=2)[1] == "Success"
    assert h.service.workers.starts == 1
    assert set(first) <= set(h.service.workers.pids())
    for pid in first:
        os.kill(pid, 0)  # still running between runs
    h.close()
    for pid in first:
        wait_until(lambda pid=pid: not psutil.pid_exists(pid) or _zombie(pid), 30, f"worker {pid} to exit")


def _zombie(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_worker_killed_between_runs_is_replaced(tmp_path, make_harness, in_processes):
    control = make_harness(tmp_path / "control")
    fill(control)
    control.scavenge()
    more(control, "second")
    control.scavenge()
    more(control, "third")
    control.scavenge()
    expected = control.survivors()

    h = make_harness(tmp_path / "killed")
    fill(h)
    assert h.scavenge()[1] == "Success"
    for pid in h.service.workers.pids():
        os.kill(pid, signal.SIGKILL)
    more(h, "second")
    assert h.scavenge()[1] == "Success"  # the dead pool is noticed; the run goes on in the thread
    more(h, "third")
    assert h.scavenge()[1] == "Success"
    assert h.survivors() == expected
    assert h.service.workers.starts == 2 and h.service.workers.pids()  # fresh processes for the next run


@pytest.mark.parametrize("where", ["processes", "thread"])
def test_a_stop_while_one_copy_is_synced_and_the_next_made(tmp_path, make_harness, monkeypatch, where):
    """The scavenge thread fsyncs and switches in a copy while the next one is being made: a stop
    requested then ends the run with every copy switched in or removed, and the run resumes."""
    if where == "processes":
        monkeypatch.setattr(workers, "PROCESS_MIN_CHUNK_SIZE", 0)
        monkeypatch.setattr(workers, "PROCESS_MIN_DATA", 0)
    control = make_harness(tmp_path / "control")
    fill(control)
    control.scavenge()
    expected = control.survivors()

    h = make_harness(tmp_path / "stopped")
    fill(h)
    copies, switched = [], []
    real_copy, real_switch = executor._copy, executor._switch_group

    def copy(ctx, decisions, chunk, weight):
        copies.append(chunk.start_number)
        return real_copy(ctx, decisions, chunk, weight)

    def switch_in(ctx, held):
        # the next copy was handed out before this one is synced: wait until it is being made
        wait_until(lambda: len(copies) > len(switched) + 1, 30, "the next copy to start")
        h.service._current.stop()
        switched.append(held.parts[0].chunk.start_number)
        return real_switch(ctx, held)

    monkeypatch.setattr(executor, "_copy", copy)
    monkeypatch.setattr(executor, "_switch_group", switch_in)
    assert h.scavenge()[1] == "Stopped"
    assert len(switched) == 1 and len(copies) == 2
    assert not [n for n in os.listdir(h.path / "db") if n.endswith(".tmp")]
    monkeypatch.undo()
    h.reopen()
    assert h.scavenge()[1] == "Success"
    assert h.survivors() == expected


def test_threads_make_copies_at_once(tmp_path, make_harness, monkeypatch):
    h = make_harness(tmp_path / "parallel")
    fill(h)
    inside, most = [0], [0]
    lock = threading.Lock()
    real_copy = executor._copy

    def copy(ctx, decisions, chunk, weight):
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        try:  # hold the first copy until a second one runs beside it (or give up after a while)
            wait_until(lambda: most[0] >= 2, 10, "a second copy at the same time", interval=0.01)
            return real_copy(ctx, decisions, chunk, weight)
        finally:
            with lock:
                inside[0] -= 1

    monkeypatch.setattr(executor, "_copy", copy)
    assert h.scavenge(threads=2)[1] == "Success"
    assert most[0] == 2
