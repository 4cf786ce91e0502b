"""The pipelined writer (evdb/database/writer.py): the next group is written and shipped while the group
before it syncs, and still nothing is answered (to a caller, or to the replication gate) before its own
records are durable; a failed sync rolls back every group written after it.

The disk here is the real one, seen through a seam that can hold an fdatasync until the test lets it
return (or fail), and that knows, for each file, how far its bytes are durable: what was given to the
file before an fdatasync of it began, once that fdatasync has returned."""

from __future__ import annotations

import errno
import os
import threading
import uuid

import pytest
from waiting import wait_until

from evdb.database import Database
from evdb.errors import EvdbError, StreamNotFound
from evdb.storage import disk
from evdb.storage.chunk import HEADER_SIZE
from evdb.streams import NewEvent


class WatchedDisk(disk.OsDisk):
    """The real file system; each fd's durable end is tracked, and fdatasyncs can be held."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.written: dict[int, int] = {}  # fd -> end of the bytes given to the file
        self.durable: dict[int, int] = {}  # fd -> end of the bytes an fdatasync made durable
        self.hold = False
        self.entered = 0  # fdatasyncs begun while holding
        self.permits = threading.Semaphore(0)
        self.fail_next = False

    def pwrite(self, fd: int, data, offset: int) -> int:  # type: ignore[override]
        n = os.pwrite(fd, data, offset)
        with self.lock:
            self.written[fd] = max(self.written.get(fd, 0), offset + n)
        return n

    def fdatasync(self, fd: int) -> None:  # type: ignore[override]
        with self.lock:
            covered = self.written.get(fd, 0)
            held = self.hold
            if held:
                self.entered += 1
        if held:
            assert self.permits.acquire(timeout=60), "the test never let the fdatasync return"
            with self.lock:
                if self.fail_next:
                    self.fail_next = False
                    raise OSError(errno.EIO, os.strerror(errno.EIO))
        os.fdatasync(fd)
        with self.lock:
            self.durable[fd] = max(self.durable.get(fd, 0), covered)

    def durable_end(self, db: Database) -> int:
        """The log position up to which the active chunk's records are durable (one chunk here)."""
        chunk = db.log.active_chunk
        fd = chunk._fd
        assert fd is not None and chunk.start_position == 0
        with self.lock:
            return max(self.durable.get(fd, 0) - HEADER_SIZE, 0)


def ev() -> NewEvent:
    return NewEvent("E", b"{}", event_id=uuid.uuid4())


@pytest.fixture
def watched(tmp_path):
    seam = WatchedDisk()
    with disk.use_disk(seam):
        db = Database.open(str(tmp_path / "db"), chunk_size=1 << 22)
        try:
            yield seam, db
        finally:
            seam.hold = False
            seam.permits.release(100)
            db.close()


def test_the_next_group_ships_while_one_syncs_and_each_is_answered_after_its_own_sync(watched):
    seam, db = watched
    shipped: list[tuple[int, int]] = []  # (end announced, committed end then)
    db.before_sync = lambda end: shipped.append((end, db.committed_position))
    db.append("warm", [ev()])
    committed = db.committed_position
    seam.hold = True
    first = db.append_async("a", [ev()])
    wait_until(lambda: seam.entered == 1, what="the first group's fdatasync")
    second = db.append_async("b", [ev()])
    # written and shipped while the first group's sync is held: the pipelining
    wait_until(lambda: len(shipped) == 3, what="the second group shipped", detail=lambda: shipped)
    assert shipped[2][0] > shipped[1][0] > committed and shipped[2][1] == committed
    # nothing answered, committed or readable before it is durable
    assert not first.done() and not second.done()
    assert db.committed_position == committed
    with pytest.raises(StreamNotFound):
        db.read_stream_forward("a")
    seam.permits.release()  # the first sync returns
    assert first.result(timeout=30).position < shipped[1][0]
    assert db.read_stream_forward("a").events
    wait_until(lambda: seam.entered == 2, what="the second group's own fdatasync")
    assert not second.done()  # the first group's sync does not answer the second
    with pytest.raises(StreamNotFound):
        db.read_stream_forward("b")
    seam.permits.release()
    assert second.result(timeout=30).position < shipped[2][0] == db.committed_position


def test_a_failed_sync_rolls_back_the_groups_written_after_it(watched):
    seam, db = watched
    announced: list[int] = []
    db.before_sync = announced.append
    db.append("warm", [ev()])
    committed = db.committed_position
    seam.hold = True
    seam.fail_next = True
    first = db.append_async("a", [ev()])
    wait_until(lambda: seam.entered == 1, what="the first group's fdatasync")
    second = db.append_async("b", [ev()])
    wait_until(lambda: len(announced) == 3, what="the second group shipped")
    seam.hold = False  # the rollback's own fdatasync (zeroing the tail) is not held
    seam.permits.release()  # the first sync fails
    for future in (first, second):
        with pytest.raises((EvdbError, OSError)):
            future.result(timeout=30)
    assert announced[-1] == -1 and announced.count(-1) == 1  # the cluster hears it once
    assert db.committed_position == committed == db.log.end  # both groups rolled back
    for stream in ("a", "b"):
        with pytest.raises(StreamNotFound):
            db.read_stream_forward(stream)
    again = db.append("a", [ev()])  # the writer goes on from the committed end
    assert again.first_event_number == 0 and again.position >= committed


def test_no_answer_and_no_gate_call_precedes_durability(watched):
    """Many writers, no holds: every answer, and every position given to the replication gate, is
    durable in the file at that moment. Fails if the writer answered a group when it handed its sync
    over, or when an earlier group's sync returned."""
    seam, db = watched
    early: list[str] = []
    gated: list[int] = []

    def gate(position: int, answers: list) -> None:  # the writer thread; answers after the check
        if position > seam.durable_end(db):
            early.append(f"gate at {position}, durable to {seam.durable_end(db)}")
        gated.append(position)
        for answer, result in answers:
            answer.set_result(result)

    def check(future) -> None:  # run where the answer is set
        position = future.result().position
        if position >= seam.durable_end(db):
            early.append(f"answered {position}, durable to {seam.durable_end(db)}")

    db.replication_gate = gate
    shipped: list[int] = []
    db.before_sync = shipped.append

    def writer(k: int) -> None:
        for _ in range(40):
            future = db.append_async(f"w-{k}", [ev()])
            future.add_done_callback(check)
            future.result(timeout=30)

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert early == []
    assert gated and gated == sorted(gated)  # groups land in the order they were written
    assert shipped == sorted(shipped) and -1 not in shipped
    assert sum(len(db.read_stream_forward(f"w-{k}").events) for k in range(6)) == 240
