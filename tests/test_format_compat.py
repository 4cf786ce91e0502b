"""Databases written by earlier versions of evdb open and work with this one.

``tests/fixtures/db-v1`` is a small database written once by evdb with storage format version 1
(by ``tests/fixtures/make_v1_db.py``; ``manifest.json`` beside it lists what it holds). This test copies
it, opens the copy with the current code and checks that every event reads back with its data, the
deleted streams answer as deleted, a scavenge runs and appends work.

This test must keep passing with every later version of evdb: failing it means the databases users
have on disk no longer open. A new storage format version adds a new fixture (``db-v2`` ..., made by
its own script, with its own manifest) and tests for it; it never edits or regenerates ``db-v1``
(the first test checks the fixture's files against the hashes in its manifest).
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import shutil
from pathlib import Path

import pytest

from evdb import ManualClock, NewEvent
from evdb.database import Database
from evdb.errors import StreamDeleted, StreamNotFound, WrongExpectedVersion
from evdb.scavenge.service import ScavengeRequest, ScavengeService

FIXTURE = Path(__file__).parent / "fixtures" / "db-v1"
MAX_LONG = (1 << 63) - 1


@pytest.fixture(scope="module")
def manifest() -> dict:
    return json.loads((FIXTURE / "manifest.json").read_text())


@pytest.fixture
def db_dir(tmp_path) -> Path:
    """A copy of the fixture: the committed files are never opened for writing."""
    shutil.copytree(FIXTURE / "db", tmp_path / "db")
    return tmp_path / "db"


def open_db(db_dir: Path, manifest: dict, clock: ManualClock) -> Database:
    return Database.open(
        str(db_dir),
        clock=clock,
        chunk_size=manifest["chunkSize"],
        max_memtable_entries=manifest["maxMemTableSize"],
        existence_filter_capacity=manifest["existenceFilterCapacity"],
    )  # verifies every completed chunk


def check_events(db: Database, manifest: dict) -> None:
    """Every event of the manifest reads back whole, at its number and log position."""
    for stream, expected in manifest["streams"].items():
        forward = db.read_stream_forward(stream, 0, len(expected)).events  # (later appends may follow)
        assert [e.event_number for e in forward] == [x["number"] for x in expected], stream
        for record, x in zip(forward, expected, strict=True):
            assert str(record.id) == x["id"], (stream, x["number"])
            assert record.event_type == x["type"]
            assert record.is_json == x["isJson"]
            assert record.data == base64.b64decode(x["data"]), (stream, x["number"])
            assert record.metadata == base64.b64decode(x["metadata"]), (stream, x["number"])
            assert record.log_position == x["logPosition"]
        backward = db.read_stream_backward(stream, expected[-1]["number"], 10_000).events
        assert [e.event_number for e in backward] == [x["number"] for x in reversed(expected)]
        for x in expected[:: max(1, len(expected) // 7)]:
            assert str(db.read_event(stream, x["number"]).id) == x["id"]
    # $all holds them too, in log order
    wanted = {x["id"] for events in manifest["streams"].values() for x in events}
    in_all = [str(e.id) for e in db.iter_all(0) if str(e.id) in wanted]
    assert len(in_all) == len(wanted)


def check_deleted(db: Database, manifest: dict) -> None:
    for stream, fact in manifest["softDeleted"].items():
        with pytest.raises(StreamNotFound):
            db.read_stream_forward(stream)
        metadata, _ = db.get_stream_metadata(stream)
        assert metadata.truncate_before == MAX_LONG
        assert db.stream_state(stream).last_event_number == fact["lastEventNumber"]
    for stream in manifest["hardDeleted"]:
        with pytest.raises(StreamDeleted):
            db.read_stream_forward(stream)
        with pytest.raises(StreamDeleted):
            db.read_event(stream, 0)
    for stream, fact in manifest["maxCount"].items():
        metadata, _ = db.get_stream_metadata(stream)
        assert metadata.max_count == fact["maxCount"]
        assert db.read_stream_forward(stream).events[0].event_number == fact["firstReadable"]


def test_the_fixture_is_the_one_committed(manifest):
    """db-v1 is never edited: its files are exactly those its manifest names, with their hashes."""
    files = {
        p.relative_to(FIXTURE).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted((FIXTURE / "db").rglob("*"))
        if p.is_file()
    }
    assert files == manifest["files"]
    assert manifest["formatVersion"] == 1
    assert sum(p.stat().st_size for p in FIXTURE.rglob("*") if p.is_file()) < 2 * 1024 * 1024


def test_a_v1_database_reads_scavenges_and_appends(db_dir, manifest):
    clock = ManualClock(1_800_000_000.0)
    db = open_db(db_dir, manifest, clock)
    try:
        check_events(db, manifest)
        check_deleted(db, manifest)
        service = ScavengeService(
            db,
            state_path=ScavengeService.state_path_for(str(db_dir / "index")),
            logger=logging.getLogger("test.format_compat"),
            merging=True,
            clock=clock,
        )
        try:
            assert service.mark_interrupted() is None  # the v1 scavenge had completed
            scavenge_id = service.start(ScavengeRequest())
            assert service.wait(120)
            assert service.last() == (scavenge_id, "Success")
        finally:
            service.close()
        check_events(db, manifest)
        check_deleted(db, manifest)
        # appends: after the last event of a stream, a new stream, a soft-deleted stream (it comes
        # back, numbered on), a hard-deleted one (refused)
        stream, events = next(iter(manifest["streams"].items()))
        last = events[-1]["number"]
        with pytest.raises(WrongExpectedVersion):
            db.append(stream, [NewEvent("Late", b"{}", is_json=True)], last - 1)
        added = db.append(stream, [NewEvent("Late", b'{"v": 2}', is_json=True)], last)
        assert added.first_event_number == last + 1
        db.append("after-v1", [NewEvent("New", b"fresh")])
        (soft, fact), *_ = manifest["softDeleted"].items()
        assert db.append(soft, [NewEvent("Back", b"{}", is_json=True)]).first_event_number == (
            fact["lastEventNumber"] + 1
        )
        (hard, *_) = manifest["hardDeleted"]
        with pytest.raises(StreamDeleted):
            db.append(hard, [NewEvent("Never", b"{}", is_json=True)])
    finally:
        db.close()
    # opened again (every chunk verified), it holds the old events and the new ones
    db = open_db(db_dir, manifest, clock)
    try:
        check_events(db, manifest)
        assert db.read_event(stream, last + 1).data == b'{"v": 2}'
        assert db.read_stream_forward("after-v1").events[0].data == b"fresh"
        assert [e.event_type for e in db.read_stream_forward(soft).events] == ["Back"]
    finally:
        db.close()
