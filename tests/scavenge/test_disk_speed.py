"""What keeps a scavenge at the disk's speed without hurting the node (issue 23): a copy's writes reach
the disk a step at a time (evdb/scavenge/workers.py ``_WritebackDisk``), chunk execution fsyncs the
log folder once for the deletions of all its switches (a power cut at any disk call of it still leaves
a database that opens and scavenges to the same end), and a chunk's pages read at open are not kept
mapped (``Chunk.drop_pages``)."""

from __future__ import annotations

import gc
import itertools
import os
import shutil

import numpy as np
import pytest
from reclaiming import RecordingReclaimer

from evdb.database import Database
from evdb.scavenge import chunkscan, executor, workers
from evdb.storage import disk
from evdb.storage.chunk import Chunk, ChunkBuilder
from evdb.storage.disk import use_disk
from evdb.storage.disk_model import DiskModel
from evdb.storage.log import TransactionLog
from evdb.streams import NewEvent
from tests.scavenge import test_chunkscan
from tests.scavenge.conftest import Harness
from tests.scavenge.test_fused_merge import cut_power_at_each_call, power_cut_setup
from tests.scavenge.test_runs import fill

MIB = 1 << 20


def _calls(monkeypatch, *, supported: bool = True) -> list[tuple]:
    calls: list[tuple] = []

    def start(fd, offset=0, length=0):
        calls.append(("start", offset, length))
        return supported

    def wait(fd, offset, length):
        calls.append(("wait", offset, length))
        return supported

    monkeypatch.setattr(disk, "start_writeback", start)
    monkeypatch.setattr(disk, "wait_writeback", wait)
    real_fdatasync = os.fdatasync
    monkeypatch.setattr(os, "fdatasync", lambda fd: (calls.append(("fdatasync",)), real_fdatasync(fd)))
    return calls


def test_a_copy_has_at_most_two_steps_in_flight(tmp_path, monkeypatch):
    calls = _calls(monkeypatch)
    d = workers._WritebackDisk()
    fd = d.open(str(tmp_path / "copy"), os.O_CREAT | os.O_WRONLY)
    try:
        piece = b"x" * (MIB // 4 + 1)
        for i in range(20):
            assert d.pwrite(fd, piece, i * len(piece)) == len(piece)
        d.fsync(fd)
    finally:
        os.close(fd)
    starts = [c for c in calls if c[0] == "start"]
    waits = [c for c in calls if c[0] == "wait"]
    assert len(starts) == 5  # 5 MiB and 20 bytes written: a writeback started after each MiB
    assert starts[0][1] == 0 and all(a[1] + a[2] == b[1] for a, b in itertools.pairwise(starts))
    # before each step after the first is started, every byte of the steps before is waited for
    assert waits == [("wait", 0, s[1]) for s in starts[1:]]
    assert os.path.getsize(tmp_path / "copy") == 20 * len(piece)


def test_without_sync_file_range_a_copy_is_synced_every_few_mib(tmp_path, monkeypatch):
    calls = _calls(monkeypatch, supported=False)
    d = workers._WritebackDisk()
    fd = d.open(str(tmp_path / "copy"), os.O_CREAT | os.O_WRONLY)
    try:
        for i in range(20):
            d.pwrite(fd, b"y" * MIB, i * MIB)
    finally:
        os.close(fd)
    assert calls.count(("fdatasync",)) == 20 // 8
    assert not [c for c in calls if c[0] == "wait"]


def test_a_file_number_used_again_starts_afresh(tmp_path, monkeypatch):
    calls = _calls(monkeypatch)
    d = workers._WritebackDisk()
    fd = d.open(str(tmp_path / "a"), os.O_CREAT | os.O_WRONLY)
    d.pwrite(fd, b"a" * (3 * MIB), 0)
    os.close(fd)  # (a copy aborted: no fsync)
    fd2 = d.open(str(tmp_path / "b"), os.O_CREAT | os.O_WRONLY)
    try:
        calls.clear()
        d.pwrite(fd2, b"b" * MIB, 0)
    finally:
        os.close(fd2)
    assert calls == [("start", 0, MIB)]


def _mapped_rss(path: str, chunk: Chunk | None = None) -> int:
    """Bytes of ``path``'s mappings resident in this process (/proc/self/smaps); with ``chunk``, of
    that chunk's map only (the database that wrote the file may still hold maps of its own until
    they are collected)."""
    gc.collect()
    start = np.frombuffer(chunk.buffer, dtype=np.uint8).ctypes.data if chunk is not None else None
    total, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            fields = line.split()
            if "-" in fields[0] and len(fields) >= 5 and ":" in fields[3]:
                inside = len(fields) >= 6 and fields[5] == path
                if inside and start is not None:
                    inside = int(fields[0].split("-")[0], 16) == start
            elif inside and fields[0] == "Rss:":
                total += int(fields[1]) * 1024
    return total


def _one_completed_chunk(tmp_path) -> str:
    """A database whose first 4 MiB chunk is completed: that chunk's file."""
    db = Database.open(str(tmp_path / "db"), chunk_size=4 * MIB)
    try:
        while db.log.end < 4 * MIB + 1:
            db.append("s", [NewEvent("E", b"z" * 1000) for _ in range(500)])
    finally:
        db.close()
    return str(tmp_path / "db" / sorted(n for n in os.listdir(tmp_path / "db") if n.startswith("chunk-"))[0])


def test_a_chunk_verified_at_open_keeps_no_pages_mapped(tmp_path):
    first = _one_completed_chunk(tmp_path)
    chunk = Chunk.open(first)  # verifies: reads every byte
    assert chunk.file_size > 3 * MIB
    assert _mapped_rss(first) < MIB
    unverified = Chunk.open(first, verify=False)
    whole = bytes(unverified.buffer[:])  # maps every page again
    assert _mapped_rss(first) >= 3 * MIB  # (the measure sees them)
    unverified.drop_pages()
    assert _mapped_rss(first) < MIB
    assert bytes(chunk.buffer[:]) == whole  # still readable: the pages map again


def test_drop_pages_leaves_an_in_memory_chunk_alone():
    builder = ChunkBuilder(
        None, chunk_size=64 * 1024, start_number=0, end_number=0, version=1, data_end_position=0
    )
    new = builder.finish()
    before = bytes(new.buffer[:])
    new.drop_pages()
    assert bytes(new.buffer[:]) == before and any(before)


def test_a_power_cut_at_every_disk_call_of_chunk_execution(tmp_path, clock, monkeypatch):
    """Chunk execution leaves the folder fsync of its switches' deletions to one at its end: the
    power goes at each disk call from the first copy's fsync to that fsync; the database then opens
    (every chunk verifies, an older version left beside a newer one is deleted), holds every event
    the scavenge keeps and nothing never written, and a new scavenge ends where an uninterrupted one
    does. The switched-out files are cut down in 4 KiB steps once unmapped (``disk.Reclaimer``), as a
    big chunk's are, whenever the cut comes: never one a power cut could bring back (whether a file is
    cut before the power goes depends on the reclaimer's thread, not on the call counted)."""
    reclaimer = RecordingReclaimer()
    monkeypatch.setattr(disk, "reclaimer", reclaimer)
    template, original, expected = power_cut_setup(tmp_path, clock)

    window: list[int] = []
    folder_syncs: list[int] = []
    switches: list[int] = []
    model = DiskModel(str(tmp_path / "scratch-probe"))
    real_sync, real_switch = executor._sync, executor._switch_group
    real_fsync_dir, real_sync_directory = model.fsync_dir, TransactionLog.sync_directory

    def sync(held):
        if not window:
            window.append(model.calls)
        return real_sync(held)

    def switch(ctx, held):
        switches.append(model.calls)
        return real_switch(ctx, held)

    def fsync_dir(directory):
        if len(window) == 1:
            folder_syncs.append(model.calls)
        return real_fsync_dir(directory)

    def sync_directory(log):
        real_sync_directory(log)
        if len(window) == 1:
            window.append(model.calls)  # the last disk call of chunk execution

    monkeypatch.setattr(executor, "_sync", sync)
    monkeypatch.setattr(executor, "_switch_group", switch)
    monkeypatch.setattr(model, "fsync_dir", fsync_dir)
    monkeypatch.setattr(TransactionLog, "sync_directory", sync_directory)
    probe = tmp_path / "probe"
    shutil.copytree(template, probe)
    with use_disk(model):
        p = Harness(probe, clock)
        assert p.scavenge()[1] == "Success"
        p.close()
    monkeypatch.undo()
    monkeypatch.setattr(disk, "reclaimer", reclaimer)
    assert len(window) == 2 and len(switches) >= 2
    # one folder fsync per switch (its rename) and one for all the deletions
    assert len(folder_syncs) == len(switches) + 1

    cut_power_at_each_call(tmp_path, clock, range(window[0] + 1, window[1] + 2), template, original, expected)


# -- the compiled walk a window at a time (evdb/scavenge/chunkscan.py _windowed_columns) --------------
# test_chunkscan's comparisons of the compiled walk with the numpy one, again with windows far smaller
# than a chunk (and than some records): the same tables, the same first error, the checksum first
WINDOWS = [300, 4096]


@pytest.fixture(params=WINDOWS)
def small_windows(request, monkeypatch):
    monkeypatch.setattr(chunkscan, "_WINDOW", request.param)
    return request.param


def test_a_windowed_walk_gives_the_numpy_table(db, clock, small_windows):
    test_chunkscan.test_the_compiled_walk_gives_the_numpy_table(db, clock)


@pytest.mark.parametrize("window", [300, 1 << 20])
def test_a_walk_whose_columns_fill_up_gives_the_numpy_table(db, clock, monkeypatch, window):
    """The walk writes a chunk's columns in place, room for frames of _FRAME_GUESS bytes: a chunk of
    smaller frames fills them, and the walk stops where it filled them and goes on with twice the
    room (here from 64 records, doubled again and again), in windows smaller and bigger than that."""
    monkeypatch.setattr(chunkscan, "_WINDOW", window)
    monkeypatch.setattr(chunkscan, "_FRAME_GUESS", 1 << 30)
    grown: list[int] = []
    real = chunkscan._grown

    def watched(column, count):
        grown.append(count)
        return real(column, count)

    monkeypatch.setattr(chunkscan, "_grown", watched)
    test_chunkscan.test_the_compiled_walk_gives_the_numpy_table(db, clock)
    assert 64 in grown and 128 in grown  # (each of the nine columns, each time)


@pytest.mark.parametrize(
    "what", ["zero length", "long length", "short length", "trailer", "type", "position", "short event"]
)
def test_a_windowed_walk_reports_the_same_damage(tmp_path, clock, what, small_windows):
    test_chunkscan.test_both_walks_report_the_same_damage(tmp_path, clock, what)


@pytest.mark.parametrize("what", ["a record", "the header"])
def test_a_windowed_walk_reports_a_checksum_mismatch_first(tmp_path, clock, what, small_windows):
    test_chunkscan.test_the_checksum_is_checked_beside_the_compiled_walk_and_reported_first(
        tmp_path, clock, what
    )


def test_a_windowed_walk_keeps_a_window_of_pages_mapped(tmp_path, monkeypatch):
    """The walk lets each window's pages go as it passes them: once a window is let go, the chunk's
    file holds no more than about three windows of this process's memory (sampled then: the window's
    hash, which maps the next window on another thread, has ended)."""
    first = _one_completed_chunk(tmp_path)
    chunk = Chunk.open(first, verify=False)
    window = 256 * 1024
    monkeypatch.setattr(chunkscan, "_WINDOW", window)
    seen: list[int] = []
    let_go = chunk.drop_pages

    def watched(*args) -> None:
        let_go(*args)
        seen.append(_mapped_rss(first, chunk))

    monkeypatch.setattr(chunk, "drop_pages", watched)
    table = chunkscan.record_table(chunk, compiled=True, verify=True)
    assert len(table) > 3000 and len(seen) >= 12
    assert max(seen) <= 3 * window  # (two windows, and a large folio a fault mapped around it)
    # (a fault maps the whole of a large page-cache folio around it, which can reach a window back)
    assert _mapped_rss(first, chunk) <= window


# -- a switched-out chunk file's blocks freed a step at a time (evdb/storage/disk.py Reclaimer) ----------
def test_a_deleted_file_is_cut_down_a_step_at_a_time(tmp_path):
    from waiting import wait_until

    reclaimer = RecordingReclaimer()
    path = str(tmp_path / "old")
    with open(path, "wb") as f:
        f.write(b"o" * (5 * 4096 + 100))
    fd = reclaimer.hold(path, os.path.getsize(path))
    assert fd is not None
    os.unlink(path)
    reclaimer.release(fd, path)
    wait_until(lambda: path in reclaimer.done, 10, "the reclaimer's thread cut the file", interval=0.01)
    assert reclaimer.sizes[path] == [4 * 4096 + 100, 3 * 4096 + 100, 2 * 4096 + 100, 4096 + 100, 100]
    assert reclaimer.hold(str(tmp_path / "missing"), 10 * 4096) is None  # deleted as before
    small = str(tmp_path / "small")
    with open(small, "wb") as f:
        f.write(b"s" * 4096)
    assert reclaimer.hold(small, 4096) is None  # one step or less: not worth it


def test_a_file_that_still_has_a_name_is_never_cut(tmp_path):
    """A name left (the power-loss model's copy of a deletion not yet durable, a hard link): the file
    is left whole and the descriptor closed."""
    from waiting import wait_until

    reclaimer = RecordingReclaimer()
    path = str(tmp_path / "kept")
    data = os.urandom(3 * 4096)
    with open(path, "wb") as f:
        f.write(data)
    os.link(path, str(tmp_path / "link"))
    fd = reclaimer.hold(path, len(data))
    assert fd is not None
    os.unlink(path)
    reclaimer.release(fd, path)
    wait_until(lambda: path in reclaimer.done, 10, "the reclaimer's thread let the file go", interval=0.01)
    assert path not in reclaimer.sizes
    with open(tmp_path / "link", "rb") as f:
        assert f.read() == data


def test_a_switched_out_chunk_is_cut_only_once_no_map_of_it_is_left(tmp_path, clock, monkeypatch):
    """A reader holding a switched-out version still reads all of it; once it lets go, the file is cut
    down a step at a time; every other switched-out file of the scavenge is cut too."""
    from waiting import wait_until

    reclaimer = RecordingReclaimer()
    monkeypatch.setattr(disk, "reclaimer", reclaimer)
    h = Harness(tmp_path, clock)
    try:
        fill(h)
        h.complete_chunk()
        old = h.db.log.distinct_chunks()[0]
        assert old.is_completed and old.file_size > 4096
        path, before = old.path, bytes(old.buffer[:])
        assert path is not None
        assert h.scavenge()[1] == "Success"
        assert not os.path.exists(path) and h.db.log.distinct_chunks()[0] is not old
        gc.collect()
        assert path not in reclaimer.done
        assert bytes(old.buffer[:]) == before  # (the reader's map still reads every byte)
        del old
        gc.collect()
        wait_until(lambda: path in reclaimer.done, 10, "the unmapped version was cut", interval=0.01)
        assert reclaimer.sizes[path]
        assert len(reclaimer.done) > 1
    finally:
        h.close()
