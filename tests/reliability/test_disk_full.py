"""Disk full, on a real small file system (an 8 MiB tmpfs mounted for the test; root only).

Appends fail with an error that says the disk is full, nothing acknowledged is lost, the node takes
appends again once space returns, and a scavenge that runs out of space leaves the old chunks in
place.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import subprocess
import time
import uuid

import httpx
import pytest

from evdb.clock import SystemClock
from evdb.database import Database
from evdb.errors import EvdbError, StreamDeleted, StreamNotFound
from evdb.node import Node
from evdb.options import load_options
from evdb.scavenge.service import ScavengeRequest, ScavengeService
from evdb.streams import NewEvent

OPTS = {"chunk_size": 256 * 1024, "max_memtable_entries": 64, "existence_filter_capacity": 1000}


def _mount(path) -> str | None:
    """Mount an 8 MiB tmpfs at ``path``; the reason when that is not possible."""
    if os.geteuid() != 0:
        return "mounting a tmpfs needs root"
    os.makedirs(path, exist_ok=True)
    out = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(path)], capture_output=True)
    if out.returncode != 0:
        return f"mount -t tmpfs refused: {out.stderr.decode().strip()}"
    return None


@pytest.fixture
def disk(tmp_path):
    mount_point = tmp_path / "disk"
    reason = _mount(mount_point)
    if reason:
        pytest.skip(reason)
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def _fill(disk, leave: int) -> str:
    """A filler file that leaves about ``leave`` bytes free; returns its path."""
    filler = str(disk / "filler")
    st = os.statvfs(disk)
    free = st.f_bavail * st.f_frsize
    with open(filler, "wb") as f:
        f.write(b"\0" * max(0, free - leave))
    return filler


def _append_until_full(db: Database, acked: dict, prefix: str, limit: int = 100_000) -> BaseException:
    for i in range(limit):
        ids = [uuid.uuid4() for _ in range(3)]
        stream = f"{prefix}-{i % 4}"
        try:
            result = db.append(stream, [NewEvent("T", os.urandom(1500), event_id=e) for e in ids])
        except (OSError, EvdbError) as exc:
            return exc
        acked[str(ids[0])] = (stream, result.first_event_number, [str(e) for e in ids])
    raise AssertionError("the disk never filled up")


def _check_acked(db: Database, acked: dict) -> None:
    by_stream: dict[str, list[str]] = {}
    for stream in {s for s, _, _ in acked.values()}:
        by_stream[stream] = [str(e.id) for e in db.read_stream_forward(stream, 0, 1_000_000).events]
    for stream, first, ids in acked.values():
        assert by_stream[stream][first : first + len(ids)] == ids, f"acknowledged events of {stream} lost"


#: no memtable dump while the disk fills: the index's own failure on a full disk is the test below
NO_DUMPS = {**OPTS, "max_memtable_entries": 1_000_000}


def test_appends_fail_clearly_lose_nothing_and_resume_when_space_returns(disk, caplog):
    filler = _fill(disk, 1024 * 1024)
    db_dir = str(disk / "db")
    acked: dict = {}
    with Database.open(db_dir, **NO_DUMPS) as db:
        exc = _append_until_full(db, acked, "s")
        assert "No space left on device" in str(exc)
        assert any("No space left on device" in r.getMessage() for r in caplog.records)
        assert len(acked) > 50
        # still full: more appends fail the same way, none is half-acknowledged
        for _ in range(3):
            with contextlib.suppress(OSError, EvdbError):
                ids = [uuid.uuid4()]
                result = db.append("s-0", [NewEvent("T", os.urandom(60_000), event_id=ids[0])])
                acked[str(ids[0])] = ("s-0", result.first_event_number, [str(ids[0])])
        _check_acked(db, acked)
        os.unlink(filler)  # space returns
        for _ in range(20):
            eid = uuid.uuid4()
            result = db.append("after", [NewEvent("T", os.urandom(1500), event_id=eid)])
            acked[str(eid)] = ("after", result.first_event_number, [str(eid)])
        _check_acked(db, acked)
    with Database.open(db_dir, **OPTS) as db:  # every chunk verifies; every acknowledged event is there
        _check_acked(db, acked)


def test_the_index_takes_entries_again_once_space_returns(disk):
    db_dir = str(disk / "db")
    with Database.open(db_dir, **{**OPTS, "max_memtable_entries": 64}) as db:
        for _ in range(63):  # the memtable is one entry short of being dumped
            db.append("s", [NewEvent("T", b"x")])
        filler = _fill(disk, 0)
        with contextlib.suppress(OSError, EvdbError):
            db.append("s", [NewEvent("T", b"x")])  # the 64th entry: the dump runs on a full disk
            db.index.wait_idle()
        os.unlink(filler)
        db.append("s", [NewEvent("T", b"after")])  # space is back: this append must work
        assert db.read_stream_forward("s", 0, 100).events[-1].data == b"after"
        deadline = time.monotonic() + 10  # the held-back table is written at the next retry (every 1 s)
        while True:
            try:
                db.index.wait_idle()
                break
            except EvdbError:
                assert time.monotonic() < deadline, "the index never wrote its table after space returned"
                time.sleep(0.05)
        assert len(db.index.tables()) == 1
    with Database.open(db_dir, **OPTS) as db:
        assert len(db.read_stream_forward("s", 0, 100).events) == 65


def _node_options(root):
    return load_options(
        [
            "--db", str(root / "db"), "--log", str(root.parent / "log"), "--insecure", "--http-port", "0",
            "--chunk-size", str(256 * 1024), "--max-mem-table-size", "64", "--stats-period-sec", "0",
        ],
        {},
    )  # fmt: skip


async def test_an_http_append_on_a_full_disk_is_507_and_says_so(disk):
    async with (
        Node(_node_options(disk), name="full") as node,
        httpx.AsyncClient(base_url=node.http_url, auth=("admin", "changeit"), timeout=30) as c,
    ):
        filler = _fill(disk, 64 * 1024)
        answers = []
        for _ in range(400):
            r = await c.post(
                "/streams/full",
                content=b'{"pad":"' + b"x" * 8000 + b'"}',
                headers={
                    "Content-Type": "application/json",
                    "Kurrent-EventType": "T",
                    "Kurrent-EventId": str(uuid.uuid4()),
                },
            )
            answers.append(r.status_code)
            if r.status_code != 201:
                break
        assert r.status_code == 507, (r.status_code, r.text)
        assert "No space left on device" in r.text and "not written" in r.text
        os.unlink(filler)
        r = await c.post(
            "/streams/full",
            json={"a": 1},
            headers={"Kurrent-EventType": "T", "Kurrent-EventId": str(uuid.uuid4())},
        )
        assert r.status_code == 201
        assert answers.count(201) + 1 == len(node.db.read_stream_forward("full", 0, 10_000).events)


async def test_concurrent_appends_on_a_full_disk_are_all_507(disk):
    """Appends committed in one group with the one that hit the full disk are told the same: 507."""
    async with (
        Node(_node_options(disk), name="full-group") as node,
        httpx.AsyncClient(base_url=node.http_url, auth=("admin", "changeit"), timeout=30) as c,
    ):
        filler = _fill(disk, 64 * 1024)

        async def append(i: int) -> int:
            r = await c.post(
                f"/streams/group-{i}",
                content=b'{"pad":"' + b"x" * 8000 + b'"}',
                headers={
                    "Content-Type": "application/json",
                    "Kurrent-EventType": "T",
                    "Kurrent-EventId": str(uuid.uuid4()),
                },
            )
            return r.status_code

        statuses: list[int] = []
        for _ in range(20):  # rounds of 16 concurrent appends until the disk is full
            statuses += await asyncio.gather(*(append(i) for i in range(16)))
            if 507 in statuses:
                break
        os.unlink(filler)
        assert 507 in statuses and set(statuses) <= {201, 507}, statuses


@pytest.mark.parametrize("fill_at", ["Accumulating", "ExecutingChunks", "MergingChunks"])
def test_a_scavenge_that_runs_out_of_space_leaves_the_old_chunks(disk, fill_at):
    """The disk fills up as the named stage starts (the scavenge database, then the new chunks)."""
    db_dir = str(disk / "db")
    index_dir = os.path.join(db_dir, "index")
    kept: dict[str, list[str]] = {}
    with Database.open(db_dir, **OPTS) as db:
        for _ in range(240):  # chunks mixing a stream to keep and one to delete
            for stream in ("keep", "drop"):
                eid = uuid.uuid4()
                db.append(stream, [NewEvent("T", os.urandom(3000), event_id=eid)])
                kept.setdefault(stream, []).append(str(eid))
        db.delete_stream("drop", hard=True)
        db.call_in_writer(lambda ctx: ctx.complete_active_chunk())

        def chunk_sizes() -> dict[str, int]:
            return {
                n: os.path.getsize(os.path.join(db_dir, n))
                for n in os.listdir(db_dir)
                if n.startswith("chunk-")
            }

        before = chunk_sizes()
        service = ScavengeService(
            db,
            clock=SystemClock(),
            state_path=ScavengeService.state_path_for(index_dir),
            logger=logging.getLogger("test.full"),
        )
        filled: list[str] = []

        def fill(stage: str) -> None:
            if stage == fill_at and not filled:
                before.clear()
                before.update(chunk_sizes())  # the stages before may have replaced chunks already
                filled.append(_fill(disk, 16 * 1024))  # less than one scavenged chunk needs

        service.stage_hook = fill
        try:
            service.start(ScavengeRequest())
            assert service.wait(60)
            _, result = service.last()
            progress = service.last_progress()
            assert result == "Errored", result
            # the file system's words, or SQLite's for the same thing
            assert any(w in (progress.error or "") for w in ("No space left on device", "disk is full")), (
                progress.error
            )
            after = {n for n in os.listdir(db_dir) if n.startswith("chunk-")}
            assert set(before) <= after, "an old chunk was removed by a scavenge that failed"
            assert not [n for n in os.listdir(db_dir) if n.endswith(".tmp")], "temporary files left behind"
            ids = [str(e.id) for e in db.read_stream_forward("keep", 0, 10_000).events]
            assert ids == kept["keep"]
            with pytest.raises((StreamDeleted, StreamNotFound)):
                db.read_stream_forward("drop", 0, 10)
            os.unlink(filled[0])
            service.stage_hook = lambda stage: None
            service.start(ScavengeRequest())
            assert service.wait(60)
            assert service.last()[1] == "Success"
        finally:
            service.close()
        assert [str(e.id) for e in db.read_stream_forward("keep", 0, 10_000).events] == kept["keep"]
        all_ids = {str(e.id) for e in db.iter_all(0)}
        assert not all_ids & set(kept["drop"]), "the deleted stream's events survived the scavenge"
    with Database.open(db_dir, **OPTS) as db:
        assert [str(e.id) for e in db.read_stream_forward("keep", 0, 10_000).events] == kept["keep"]
