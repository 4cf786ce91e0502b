"""The system projections engine over a real database (in-process): what it writes, its checkpoints,
an idempotent resume, reset, disable and enable."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from evdb.clock import SystemClock
from evdb.database import Database
from evdb.errors import ProjectionNotFound, ProjectionOperationFailed, StreamNotFound
from evdb.projections import SystemProjections
from evdb.projections.links import resolve_links
from evdb.projections.service import checkpoint_stream, parse_tag
from evdb.streams import NewEvent
from evdb.subscriptions import CommitNotifier

LOG = logging.getLogger("tests.projections")


def _events(db: Database, stream: str) -> list:
    try:
        return db.read_stream_forward(stream, 0, 4096).events
    except StreamNotFound:
        return []


def _links(db: Database, stream: str) -> list[str]:
    return [e.data.decode() for e in _events(db, stream)]


async def _until(condition, what: str, timeout: float = 20.0) -> None:
    """Bounded wait for a condition reached by the service's own tasks (on this loop)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


class Harness:
    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.db = Database.open(str(path) if path else None, chunk_size=65536)
        self.notifier = CommitNotifier(self.db)
        self.service: SystemProjections | None = None

    async def start(self, *, start_standard: bool = True) -> SystemProjections:
        self.service = SystemProjections(
            database=lambda: self.db,
            notifier=lambda: self.notifier,
            is_leader=lambda: True,
            clock=SystemClock(),
            logger=LOG,
            start_standard=start_standard,
        )
        await self.service.start()
        await _until(lambda: self.service is not None and self.service.active, "the projections to load")
        return self.service

    async def caught_up(self, *names: str) -> None:
        assert self.service is not None
        service = self.service
        end = self.db.readable_position

        def done() -> bool:
            return all(service._runtimes[n].next_position >= end for n in names or service.names())

        await _until(done, "the projections to catch up")

    async def stop(self) -> None:
        if self.service is not None:
            await self.service.stop()
            self.service = None

    def close(self) -> None:
        self.notifier.close()
        self.db.close()


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    h = Harness(None)
    yield h
    await h.stop()
    h.close()


async def test_links_as_kurrentdb_writes_them(harness: Harness) -> None:
    db = harness.db
    db.append("order-1", [NewEvent.json("OrderPlaced", {"a": 1}), NewEvent.json("OrderPaid", {})])
    db.append("order-2", [NewEvent.json("OrderPlaced", {"b": 2}, {"$correlationId": "c-1"})])
    db.append("account-x-y", [NewEvent("Opened", b"raw bytes")])
    db.append("nocategory", [NewEvent.json("OrderPlaced", {})])
    db.append("bad-json", [NewEvent("Broken", b"{not json", is_json=True)])  # skipped by validation
    db.set_stream_metadata("order-1", {"$maxCount": 10})
    await harness.start()
    await harness.caught_up()

    assert _links(db, "$ce-order") == ["0@order-1", "1@order-1", "0@order-2"]
    assert _links(db, "$ce-account") == ["0@account-x-y"]
    assert _links(db, "$et-OrderPlaced") == ["0@order-1", "0@order-2", "0@nocategory"]
    assert _links(db, "$et-$metadata") == ["0@$$order-1"]
    assert _events(db, "$et-Broken") == []
    assert "0@order-1" in _links(db, "$streams") and "0@$$order-1" in _links(db, "$streams")
    assert not any(link.endswith("@bad-json") for link in _links(db, "$streams"))
    assert [e.data for e in _events(db, "$category-order")] == [b"order-1", b"order-2"]
    assert {e.event_type for e in _events(db, "$category-order")} == {"$@"}
    assert _links(db, "$bc-c-1") == ["0@order-2"]

    link = _events(db, "$ce-order")[0]
    assert link.event_type == "$>" and not link.is_json
    meta = json.loads(link.metadata)
    source = db.read_event("order-1", 0)
    assert list(meta) == ["$v", "$c", "$p", "$o", "$causedBy"]
    assert meta["$c"] == meta["$p"] == source.log_position
    assert meta["$o"] == "order-1" and meta["$causedBy"] == str(source.id)
    assert meta["$v"].split(":")[0] == "3" and meta["$v"].endswith(":4")  # $by_category is projection 3
    bc = json.loads(_events(db, "$bc-c-1")[0].metadata)
    assert bc["$correlationId"] == "c-1" and bc["$eventTimestamp"].endswith("Z")
    # the emitted streams' metadata: readable by all (KurrentDB's ACL for a $-stream it writes)
    assert db.get_stream_metadata("$ce-order")[0].raw == {"$acl": {"$r": "$all", "$mr": "$all"}}
    # system streams are not projected (no feedback from the projections' own output)
    assert _events(db, "$ce-$ce") == [] and _events(db, "$et-$>") == []

    # live: a new event is linked, and the links resolve to the events
    db.append("order-3", [NewEvent.json("OrderPlaced", {})])
    await harness.caught_up()
    assert _links(db, "$ce-order")[-1] == "0@order-3"
    resolved = resolve_links(db.read_event, _events(db, "$ce-order"))
    assert [(r.event.stream, r.event.event_number) for r in resolved if r.event] == [
        ("order-1", 0),
        ("order-1", 1),
        ("order-2", 0),
        ("order-3", 0),
    ]


async def test_deletions_are_linked_with_deleted(harness: Harness) -> None:
    db = harness.db
    db.append("cart-1", [NewEvent.json("Added", {})])
    db.append("cart-2", [NewEvent.json("Added", {})])
    db.delete_stream("cart-1")  # soft: $metadata with $tb max in $$cart-1
    db.delete_stream("cart-2", hard=True)  # tombstone
    await harness.start()
    await harness.caught_up()
    links = _events(db, "$ce-cart")
    assert [e.data.decode() for e in links][:2] == ["0@cart-1", "0@cart-2"]
    soft, hard = links[2], links[3]
    assert soft.data == b"0@$$cart-1" and json.loads(soft.metadata)["$deleted"] == -1
    assert json.loads(soft.metadata)["$o"] == "cart-1"
    assert hard.data == f"{2**63 - 1}@cart-2".encode() and json.loads(hard.metadata)["$deleted"] == -1
    deleted = _events(db, "$et-$deleted")
    assert [e.data for e in deleted] == [b"0@cart-1", f"{2**63 - 1}@cart-2".encode()]
    # a link to a deleted event resolves to the link alone; the soft delete's link reaches $$cart-1
    resolved = resolve_links(db.read_event, links)
    assert [r.event is None for r in resolved] == [True, True, False, True]
    assert all(r.link is not None for r in resolved)
    assert resolved[2].event is not None and resolved[2].event.event_type == "$metadata"


async def test_resume_after_a_stop_without_checkpoint_neither_loses_nor_duplicates(tmp_path: Path) -> None:
    h = Harness(tmp_path / "db")
    try:
        for n in range(30):
            h.db.append(f"item-{n % 3}", [NewEvent.json("Made", {"n": n})])
        service = await h.start()
        await h.caught_up()
        # links written, the checkpoint not yet (it waits for 4000 events or 2 seconds): as at a kill
        assert service.statistics("$by_category")[0]["lastCheckpoint"] == "C:-1/P:-1"
        service._supervisor.cancel()  # stop without the checkpoint a disable would write
        await h.stop()
        for n in range(30, 40):
            h.db.append(f"item-{n % 3}", [NewEvent.json("Made", {"n": n})])
        await h.start()
        await h.caught_up()
        links = _links(h.db, "$ce-item")
        assert len(links) == 40 and len(set(links)) == 40
        assert len(_links(h.db, "$et-Made")) == 40
        assert len(_links(h.db, "$streams")) == 3
        # a clean disable writes the checkpoint; the tag names the last event of $all processed
        assert h.service is not None
        position = h.service.statistics("$by_category")[0]["position"]
        await h.service.disable("$by_category")
        checkpoint = _events(h.db, checkpoint_stream("$by_category"))[-1]
        tag = parse_tag(checkpoint.metadata)
        assert tag is not None and position == f"C:{tag.position}/P:{tag.position}"
        assert tag.position >= h.db.read_event("item-0", 13).log_position
        assert h.service.statistics("$by_category")[0]["lastCheckpoint"] == position
        assert checkpoint.event_type == "$ProjectionCheckpoint"
    finally:
        await h.stop()
        h.close()


async def test_reset_starts_a_new_logical_stream(harness: Harness) -> None:
    db = harness.db
    db.append("shop-1", [NewEvent.json("Opened", {})])
    service = await harness.start()
    await harness.caught_up()
    before = service.statistics("$by_category")[0]
    assert before["status"] == "Running" and before["epoch"] == -1
    await service.reset("$by_category")
    await harness.caught_up("$by_category")
    after = service.statistics("$by_category")[0]
    assert after["epoch"] == after["version"] > before["version"]
    # the old link is truncated away; the stream holds the re-emitted one
    assert _links(db, "$ce-shop") == ["0@shop-1"]
    assert db.stream_state("$ce-shop").last_event_number == 1


async def test_disable_and_enable(harness: Harness) -> None:
    db = harness.db
    service = await harness.start(start_standard=False)
    assert {s["status"] for s in service.statistics()} == {"Stopped"}
    db.append("pen-1", [NewEvent.json("Made", {})])
    await service.enable("$by_event_type")
    await harness.caught_up("$by_event_type")
    assert _links(db, "$et-Made") == ["0@pen-1"]
    assert _events(db, "$ce-pen") == []
    await service.disable("$by_event_type")
    assert service.statistics("$by_event_type")[0]["status"] == "Stopped"
    db.append("pen-2", [NewEvent.json("Made", {})])
    await service.enable("$by_event_type")
    await harness.caught_up("$by_event_type")
    assert _links(db, "$et-Made") == ["0@pen-1", "0@pen-2"]
    with pytest.raises(ProjectionNotFound):
        service.statistics("my-projection")
    with pytest.raises(ProjectionOperationFailed):
        service.delete("$by_category")
    registration = _events(db, "$projections-$all")
    assert [e.event_type for e in registration] == ["$ProjectionsInitialized"] + ["$ProjectionCreated"] * 5
    assert [e.data for e in registration[1:]] == [
        b"$streams",
        b"$stream_by_category",
        b"$by_category",
        b"$by_event_type",
        b"$by_correlation_id",
    ]
