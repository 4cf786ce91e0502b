"""The archive obeys the nodes' maintenance rules (issue 37): a scavenge rewrites the archived chunks with
the same decisions (a deleted stream's events leave the archived objects), a redaction of an archived
event leaves no plaintext in any object of the archive nor in any local file, and a kill at any call
to the archive during a rewrite leaves every archived chunk whole and readable."""

from __future__ import annotations

import logging
import os
import shutil

import pytest
from archive_helpers import CHUNK
from archive_helpers import archiver as _archiver
from archive_helpers import drain as _drain

from evdb.archive.archiver import chunk_object_name, read_checkpoint
from evdb.archive.cache import download_verified
from evdb.archive.filesystem import FileSystemStore
from evdb.archive.reads import ArchiveReads
from evdb.archive.restore import restore_from_archive
from evdb.archive.retention import Retention
from evdb.archive.store import ArchiveStore
from evdb.backup.copying import TMP_SUFFIX
from evdb.database import Database
from evdb.redaction.archived import redact_archived
from evdb.redaction.positions import event_positions
from evdb.scavenge.scavenger import ScavengeOptions, Scavenger
from evdb.scavenge.state import ScavengeState
from evdb.storage.chunk import Chunk
from evdb.storage.records import EventRecord
from evdb.streams import NewEvent

LOGGER = logging.getLogger("test.archive.maintenance")
DAY = 24 * 3600
SECRET = b"PLAINTEXT-OF-CUSTOMER-42"


def _write(path, clock) -> Database:
    """A secret first, then 3.5 chunks of orders in seven streams."""
    db = Database.open(str(path), clock=clock, chunk_size=CHUNK, existence_filter_capacity=10_000)
    db.append("customer-42", [NewEvent("Registered", data=SECRET * 20)])
    events = int(3.5 * CHUNK / 1100)
    for first in range(0, events, 10):
        batch = range(first, min(first + 10, events))
        db.append(f"order-{first % 7}", [NewEvent("Placed", data=bytes([i % 251]) * 1000) for i in batch])
    return db


def _reads(store: ArchiveStore, folder) -> ArchiveReads:
    """The node's archive reads, its cache in ``folder``."""
    return ArchiveReads(store, str(folder), chunk_size=CHUNK, max_cache_bytes=1 << 30, logger=LOGGER)


@pytest.fixture
def archived(tmp_path, clock, store):
    """The database with chunks 0-2 in the archive (each store): (db, store, reads)."""
    db = _write(tmp_path / "db", clock)
    assert _drain(_archiver(store, db)) == 3
    reads = _reads(store, tmp_path / "db" / "archive-cache")
    db.log.archive = reads
    yield db, store, reads
    db.close()
    reads.close()


def _scavenge(db, reads, clock, state_path) -> str:
    retention = Retention(reads, days=1, logical_bytes=CHUNK * 3 // 2, clock=clock, logger=LOGGER)
    state = ScavengeState(str(state_path))
    try:
        scavenger = Scavenger(
            db, state, ScavengeOptions(), "s1", logger=LOGGER, clock=clock, retention=retention
        )
        return str(scavenger.run())
    finally:
        state.close()


def _archived_records(store: ArchiveStore, number: int) -> list:
    chunk = Chunk.from_bytes(store.get_bytes(chunk_object_name(number)), chunk_object_name(number))
    return list(chunk.iter_records())


def _streams(records) -> set[str]:
    return {r.stream for r in records if isinstance(r, EventRecord)}


def test_a_scavenge_removes_a_deleted_streams_events_from_the_archived_chunks(
    archived, clock, tmp_path, caplog
):
    db, store, reads = archived
    assert all("order-3" in _streams(_archived_records(store, n)) for n in range(3))
    kept = [
        (e.stream, e.event_number) for e in db.read_all_forward(0, 100_000).events if e.stream != "order-3"
    ]
    last = db.read_stream_backward("order-3", None, 1).events[0].event_number
    db.delete_stream("order-3")
    clock.advance(2 * DAY)
    # another node of the cluster: the same log (its scavenge to its own first point decides the same)
    shutil.copytree(tmp_path / "db", tmp_path / "other", ignore=shutil.ignore_patterns("archive-cache"))
    assert _scavenge(db, reads, clock, tmp_path / "scavenge.db") == "Success"
    left = []
    for n in range(3):  # the objects' own bytes: no event of the deleted stream, every other one
        records = _archived_records(store, n)
        left += [r.event_number for r in records if isinstance(r, EventRecord) and r.stream == "order-3"]
        assert "order-0" in _streams(records)
        assert Chunk.from_bytes(store.get_bytes(chunk_object_name(n)), "object").is_scavenged
    assert left in ([], [last])  # (a scavenge keeps a soft-deleted stream's last event, as locally)
    # retention let chunks 0-1 go: $all reads them from the archive, without the deleted stream
    assert db.log.archived_chunks >= 2
    read = [(e.stream, e.event_number) for e in db.read_all_forward(0, 100_000).events]
    assert [e for e in read if e[0].startswith(("order-", "customer-")) and e[0] != "order-3"] == kept
    assert [e[1] for e in read if e[0] == "order-3"] in ([], [last])
    # a node restored from the scavenged archive alone reads the same log up to the archive checkpoint
    target = tmp_path / "restored" / "db"
    restore_from_archive(store, str(target), chunk_size=CHUNK)
    restored = Database.open(str(target), clock=clock, chunk_size=CHUNK, existence_filter_capacity=10_000)
    try:
        end = read_checkpoint(store).position
        mine = [
            (e.stream, e.event_number) for e in db.read_all_forward(0, 100_000).events if e.log_position < end
        ]
        assert [(e.stream, e.event_number) for e in restored.read_all_forward(0, 100_000).events] == mine
    finally:
        restored.close()
    sizes = {o.name: o.etag for o in store.list() if o.name.startswith("chunk-")}
    # the other node's scavenge to the same point skips the archived chunks by their markers: no
    # download, no rewrite
    other_reads = _reads(store, tmp_path / "other" / "archive-cache")
    other = Database.open(
        str(tmp_path / "other"),
        clock=clock,
        chunk_size=CHUNK,
        existence_filter_capacity=10_000,
        archive=other_reads,
    )
    try:
        caplog.set_level(logging.INFO, LOGGER.name)
        assert _scavenge(other, other_reads, clock, tmp_path / "other-scavenge.db") == "Success"
        assert "Archived chunk 0 is scavenged to scavenge point 0 already" in caplog.text
        assert (
            "Scavenged archived chunk"
            not in caplog.text.split("is scavenged to scavenge point 0 already")[-1]
        )
    finally:
        other.close()
        other_reads.close()
    assert {o.name: o.etag for o in store.list() if o.name.startswith("chunk-")} == sizes
    # a second scavenge on this node (a new point) finds nothing more to rewrite in the archive
    db.append("other", [NewEvent("Noted", data=b"x")])
    assert _scavenge(db, reads, clock, tmp_path / "scavenge.db") == "Success"
    assert {o.name: o.etag for o in store.list() if o.name.startswith("chunk-")} == sizes


def test_a_local_file_scavenged_beyond_its_archived_copy_stays_until_a_scavenge_rewrites_the_copy(
    archived, clock, tmp_path, caplog
):
    db, store, reads = archived
    last = db.read_stream_backward("order-3", None, 1).events[0].event_number
    db.delete_stream("order-3")
    clock.advance(2 * DAY)
    state = ScavengeState(str(tmp_path / "scavenge.db"))
    try:  # a scavenge that knows nothing of the archive (an archiver uploaded unscavenged copies)
        assert (
            str(Scavenger(db, state, ScavengeOptions(), "s0", logger=LOGGER, clock=clock).run()) == "Success"
        )
    finally:
        state.close()
    assert all("order-3" in _streams(_archived_records(store, n)) for n in range(3))
    policy = Retention(reads, days=1, logical_bytes=CHUNK * 3 // 2, clock=clock, logger=LOGGER)
    assert policy.apply(db.log) == []  # deleting the file would bring order-3 back into $all
    assert "more records than this file" in caplog.text
    assert _scavenge(db, reads, clock, tmp_path / "scavenge.db") == "Success"  # rewrites the copies
    assert db.log.archived_chunks >= 2
    read = [e.event_number for e in db.read_all_forward(0, 100_000).events if e.stream == "order-3"]
    left = [
        r.event_number
        for n in range(3)
        for r in _archived_records(store, n)
        if isinstance(r, EventRecord) and r.stream == "order-3"
    ]
    assert read in ([], [last]) and left in ([], [last])  # (a soft-deleted stream's last event stays)


def _files_holding(root, needle: bytes) -> list[str]:
    found = []
    for folder, _, files in os.walk(root):
        for name in files:
            path = os.path.join(folder, name)
            with open(path, "rb") as f:
                if needle in f.read():
                    found.append(path)
    return found


def test_a_redacted_archived_event_leaves_no_plaintext_in_the_bucket_nor_on_the_node(
    archived, clock, tmp_path
):
    db, store, _ = archived
    with db.log.chunk_lock:
        db.log.leave_to_archive(2)  # chunks 0-1 in the archive only
    assert db.read_event("customer-42", 0).data == SECRET * 20  # read through the cache: plaintext there
    assert _files_holding(tmp_path / "db" / "archive-cache", SECRET)
    positions = event_positions(db, "customer-42", 0)
    assert [(p["chunkFile"], p["archived"]) for p in positions] == [("archive:chunk-000000.000001", True)]
    events = [{"stream": "customer-42", "eventNumber": 0, "logPosition": positions[0]["logPosition"]}]

    def redact() -> dict:
        return redact_archived(db.log, 0, events, node="test", now=clock.time, logger=LOGGER)

    answer = redact()
    assert answer["redacted"] == ["0@customer-42"] and 0 in answer["droppedFromCache"]
    assert [o.name for o in store.list() if SECRET in store.get_bytes(o.name)] == []
    assert _files_holding(tmp_path, SECRET) == []  # the database folder, the cache, the archive folder
    event = db.read_event("customer-42", 0)
    assert event.data == b"\xff" * len(SECRET * 20)
    info = download_verified(store, 0, CHUNK, str(tmp_path / "c.tmp"), str(tmp_path / "c"))[0]
    assert info.version == 1  # the next version, verified whole
    again = redact()  # a second run: nothing more to do
    assert again["already"] == ["0@customer-42"] and again["redacted"] == []


# -- a kill at every call to the archive during the archive's scavenge ----------------------------------


class Killed(BaseException):
    """The node died: nothing of it runs on (no handler catches a BaseException)."""


class Dying(FileSystemStore):
    """The folder store of a node killed at its ``kill_at``-th call (every later call fails too)."""

    def __init__(self, folder: str, kill_at: int | None) -> None:
        super().__init__(folder)
        self.kill_at = kill_at
        self.calls = 0

    def _call(self) -> None:
        self.calls += 1
        if self.kill_at is not None and self.calls >= self.kill_at:
            raise Killed()

    def put_file(self, name, path):
        if self.kill_at is not None and self.calls + 1 == self.kill_at:  # killed in the middle of the copy
            with open(path, "rb") as f:
                half = f.read(os.path.getsize(path) // 2)
            with open(os.path.join(self.folder, f"{name}.{self.calls}{TMP_SUFFIX}"), "wb") as f:
                f.write(half)
        self._call()
        return super().put_file(name, path)

    def put_bytes(self, name, data, **kw):
        self._call()
        return super().put_bytes(name, data, **kw)

    def get_bytes(self, name):
        self._call()
        return super().get_bytes(name)

    def get_range(self, name, start, length):
        self._call()
        return super().get_range(name, start, length)

    def download(self, name, path):
        self._call()
        return super().download(name, path)

    def head(self, name):
        self._call()
        return super().head(name)

    def delete(self, name):
        self._call()
        return super().delete(name)


def _template(root, clock) -> int:
    """A database whose chunks 0-2 are archived (``root/db``, ``root/archive``), its stream order-3
    deleted; the number of order-3's last event (a scavenge keeps it)."""
    db = _write(root / "db", clock)
    try:
        (root / "archive").mkdir()
        assert _drain(_archiver(FileSystemStore(str(root / "archive")), db)) == 3
        last = db.read_stream_backward("order-3", None, 1).events[0].event_number
        db.delete_stream("order-3")
    finally:
        db.close()
    return last


def _killed_run(template, last: int, tmp_path, clock, kill_at: int | None) -> tuple[int, list[str]]:
    """Scavenge the deleted stream out of a copy of ``template``, killed at the ``kill_at``-th call to
    the archive; check the archive, then resume with a live store. The calls the run made and the
    problems found."""
    root = tmp_path / f"kill-{kill_at}"
    shutil.copytree(template, root)
    db = Database.open(str(root / "db"), clock=clock, chunk_size=CHUNK, existence_filter_capacity=10_000)
    folder = root / "archive"
    dying = Dying(str(folder), None)
    reads = _reads(dying, root / "db" / "archive-cache")
    db.log.archive = reads
    dying.kill_at = kill_at
    problems = []
    try:
        result = _scavenge(db, reads, clock, root / "scavenge.db")
        if kill_at is not None:
            problems.append(f"not killed: {result}")
    except Killed:
        pass
    finally:
        calls = dying.calls
        db.close()
        reads.close()
    live = FileSystemStore(str(folder))
    for n in range(read_checkpoint(live).position // CHUNK):  # every object whole, checksum-valid
        try:
            download_verified(live, n, CHUNK, str(root / "v.tmp"), str(root / f"v{n}"))
        except Exception as exc:
            problems.append(f"chunk {n}: {exc}")
    reads = _reads(live, root / "db" / "archive-cache")
    db = Database.open(
        str(root / "db"), clock=clock, chunk_size=CHUNK, existence_filter_capacity=10_000, archive=reads
    )
    try:
        if _scavenge(db, reads, clock, root / "scavenge.db") != "Success":
            problems.append("the resumed scavenge failed")
        left = [
            r.event_number
            for n in range(3)
            for r in _archived_records(live, n)
            if isinstance(r, EventRecord) and r.stream == "order-3"
        ]
        if left not in ([], [last]):  # (the last event of a soft-deleted stream stays)
            problems.append(f"the archived chunks still hold order-3's {left} after the resumed scavenge")
        if [e.event_number for e in db.read_all_forward(0, 100_000).events if e.stream == "order-3"] not in (
            [],
            [last],
        ):
            problems.append("$all still reads order-3")
    finally:
        db.close()
        reads.close()
    return calls, problems


def test_a_kill_at_any_call_to_the_archive_during_its_scavenge_leaves_it_whole(tmp_path, clock):
    last = _template(tmp_path / "template", clock)
    clock.advance(2 * DAY)
    calls, problems = _killed_run(tmp_path / "template", last, tmp_path, clock, None)
    assert not problems and calls > 10, (calls, problems)
    failures = []
    # every call of the first chunks' rewrites (each kind of call: the lease, the download, the put,
    # its check, the release), then every fifth (the same kinds again), and the last one
    for kill_at in sorted({*range(1, 16), *range(16, calls, 5), calls}):
        _, problems = _killed_run(tmp_path / "template", last, tmp_path, clock, kill_at)
        failures += [f"killed at call {kill_at}: {p}" for p in problems]
    assert not failures, "\n".join(failures)


def test_a_kill_at_any_call_to_the_archive_during_a_redaction_leaves_it_whole_and_a_rerun_finishes(
    tmp_path, clock
):
    (tmp_path / "archive").mkdir()
    db = _write(tmp_path / "db", clock)
    try:
        assert _drain(_archiver(FileSystemStore(str(tmp_path / "archive")), db)) == 3
        position = event_positions(db, "customer-42", 0)[0]["logPosition"]
        events = [{"stream": "customer-42", "eventNumber": 0, "logPosition": position}]
        kill_at, calls = 1, None
        while calls is None or kill_at <= calls:
            dying = Dying(str(tmp_path / "archive"), kill_at)
            reads = _reads(dying, tmp_path / "db" / "archive-cache")
            db.log.archive = reads
            try:
                redact_archived(db.log, 0, events, node="test", now=clock.time, logger=LOGGER)
                calls = dying.calls  # not killed: every call was made
            except Killed:
                pass
            finally:
                reads.close()
            live = FileSystemStore(str(tmp_path / "archive"))
            for n in range(3):  # whole and checksum-valid, the plaintext or not
                download_verified(live, n, CHUNK, str(tmp_path / "v.tmp"), str(tmp_path / f"v{n}"))
            kill_at += 1
            if calls is None and kill_at > 40:
                raise AssertionError("a redaction makes more than 40 calls to the archive")
        # the last run was not killed: the plaintext is gone from the archive and the work folder
        live = FileSystemStore(str(tmp_path / "archive"))
        assert [o.name for o in live.list() if SECRET in live.get_bytes(o.name)] == []
        assert _files_holding(tmp_path / "db" / "archiving", SECRET) == []
    finally:
        db.close()


def test_a_cached_chunk_another_node_rewrote_is_not_served_after_a_restart(archived, clock, tmp_path):
    db, store, reads = archived
    with db.log.chunk_lock:
        db.log.leave_to_archive(2)
    assert db.read_event("customer-42", 0).data == SECRET * 20  # cached with the plaintext
    position = event_positions(db, "customer-42", 0)[0]["logPosition"]
    other = _reads(store, tmp_path / "other-cache")  # another node's redaction rewrites the copy
    db.log.archive = other
    events = [{"stream": "customer-42", "eventNumber": 0, "logPosition": position}]
    assert redact_archived(db.log, 0, events, node="other", now=clock.time, logger=LOGGER)["redacted"]
    other.close()
    reads.close()
    restarted = _reads(store, tmp_path / "db" / "archive-cache")  # this node restarted: its old file
    db.log.archive = restarted
    try:
        assert db.read_event("customer-42", 0).data == b"\xff" * len(SECRET * 20)
        assert restarted.cache.stats.downloads == 1
        assert _files_holding(tmp_path / "db" / "archive-cache", SECRET) == []
    finally:
        restarted.close()
        db.log.archive = reads


class _Down(FileSystemStore):
    """A folder that, while ``down``, answers every call as an unreachable store does (injected)."""

    down = False

    def __getattribute__(self, name):
        attr = super().__getattribute__(name)
        if name.startswith("_") or not callable(attr) or not object.__getattribute__(self, "down"):
            return attr

        def unreachable(*_args, **_kwargs):
            raise object.__getattribute__(self, "_unavailable")(name, "connection refused")

        return unreachable


def test_an_unreachable_archive_leaves_its_chunks_to_the_next_scavenge_and_the_local_ones_go_on(
    tmp_path, clock, caplog
):
    """Local maintenance does not wait for the archive: the scavenge succeeds on the node's own chunks
    and says the archive's are left; the next one, the archive back, rewrites them."""
    store = _Down(str(tmp_path / "archive"))
    db = _write(tmp_path / "db", clock)
    reads = _reads(store, tmp_path / "db" / "archive-cache")
    try:
        assert _drain(_archiver(store, db)) == 3
        db.log.archive = reads
        last = db.read_stream_backward("order-3", None, 1).events[0].event_number
        db.delete_stream("order-3")
        clock.advance(2 * DAY)
        caplog.set_level(logging.INFO, LOGGER.name)
        store.down = True
        assert _scavenge(db, reads, clock, tmp_path / "scavenge.db") == "Success"
        assert "cannot be reached" in caplog.text and "left to the next scavenge" in caplog.text
        local = [e.event_number for e in db.read_all_forward(0, 100_000).events if e.stream == "order-3"]
        assert local in ([], [last])  # the node's own chunks were scavenged
        store.down = False
        assert any("order-3" in _streams(_archived_records(store, n)) for n in range(3))  # not the archive's

        assert _scavenge(db, reads, clock, tmp_path / "scavenge.db") == "Success"
        left = [
            r.event_number
            for n in range(3)
            for r in _archived_records(store, n)
            if isinstance(r, EventRecord) and r.stream == "order-3"
        ]
        assert left in ([], [last])
    finally:
        db.close()
        reads.close()
