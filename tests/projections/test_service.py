"""The system projections engine over a real database (in-process): what it writes, its checkpoints,
an idempotent resume, reset, disable and enable."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest

from evdb.clock import Clock, ManualClock, SystemClock
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
    def __init__(self, path: Path | None, clock: Clock | None = None) -> None:
        self.path = path
        self.clock = clock or SystemClock()
        self.db = Database.open(str(path) if path else None, chunk_size=65536)
        self.notifier = CommitNotifier(self.db)
        self.service: SystemProjections | None = None

    async def start(self, *, start_standard: bool = True) -> SystemProjections:
        self.service = SystemProjections(
            database=lambda: self.db,
            notifier=lambda: self.notifier,
            is_leader=lambda: True,
            clock=self.clock,
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
        assert service.statistics("$by_category")[0]["lastCheckpoint"] == "C:0/P:-1"  # the zero tag
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


def _runtime(service: SystemProjections, name: str):
    return service._runtimes[name]


async def test_by_event_type_writes_checkpoints_to_et(tmp_path: Path) -> None:
    """KurrentDB's IndexEventsByEventType: a ``$Checkpoint`` in ``$et`` at its start and at each
    checkpoint suggested (not at the checkpoint a stop writes), tagged as its other output."""
    h = Harness(tmp_path / "db", ManualClock())  # no checkpoint for time passing: the test moves none
    try:
        for n in range(7):
            h.db.append(f"kind-{n}", [NewEvent.json("Made", {"n": n})])
        service = await h.start(start_standard=False)
        small = replace(service.config("$by_event_type"), checkpoint_handled_threshold=3)
        await service.update_config("$by_event_type", small)
        await service.enable("$by_event_type")
        await _until(lambda: _events(h.db, "$et") != [], "the start's $Checkpoint")
        start = _events(h.db, "$et")[0]
        assert start.event_type == "$Checkpoint" and start.is_json
        assert json.loads(start.data) == {"$c": 0, "$p": -1}  # KurrentDB's zero tag: nothing processed
        meta = json.loads(start.metadata)
        assert list(meta) == ["$v", "$c", "$p"] and (meta["$c"], meta["$p"]) == (0, -1)
        assert meta["$v"].startswith("4:")  # $by_event_type is projection 4
        assert h.db.get_stream_metadata("$et")[0].raw == {"$acl": {"$r": "$all", "$mr": "$all"}}

        await h.caught_up("$by_event_type")  # one batch of 7 handled: one checkpoint suggested (>= 3)
        rt = _runtime(service, "$by_event_type")
        checkpoints = _events(h.db, checkpoint_stream("$by_event_type"))
        assert len(checkpoints) == 1 and checkpoints[0].data == b"[]"  # the (empty) state, as KurrentDB
        et = _events(h.db, "$et")
        assert [e.event_type for e in et] == ["$Checkpoint"] * 2
        tag = parse_tag(et[1].metadata)
        assert tag is not None and tag == parse_tag(checkpoints[0].metadata) and tag.position == rt.checkpoint
        assert json.loads(et[1].data) == {"$c": rt.checkpoint, "$p": rt.checkpoint}
        assert et[1].log_position < checkpoints[0].log_position  # $et first, then the checkpoint
        h.db.append("kind-7", [NewEvent.json("Made", {})])
        await h.caught_up("$by_event_type")
        assert rt.unchecked == 1 and len(_events(h.db, "$et")) == 2

        # a restart from the checkpoint writes its $Checkpoint again at that tag (as KurrentDB does)
        service._supervisor.cancel()  # type: ignore[union-attr]
        await h.stop()
        service = await h.start(start_standard=False)
        await _until(lambda: len(_events(h.db, "$et")) == 3, "the restart's $Checkpoint")
        et = _events(h.db, "$et")
        assert et[2].data == et[1].data and parse_tag(et[2].metadata) == parse_tag(et[1].metadata)
        await h.caught_up("$by_event_type")
        assert len(_links(h.db, "$et-Made")) == 8
        # the configuration was kept in $projections-$by_event_type and read back
        assert service.config("$by_event_type").checkpoint_handled_threshold == 3
        # a stop's checkpoint writes none to $et
        await service.disable("$by_event_type")
        assert len(_events(h.db, checkpoint_stream("$by_event_type"))) == 2
        assert len(_events(h.db, "$et")) == 3
    finally:
        await h.stop()
        h.close()


async def test_events_of_system_streams_do_not_make_checkpoints(harness: Harness) -> None:
    """Only handled events count towards a checkpoint (KurrentDB): the projections' own writes do not
    keep suggesting checkpoints once they are caught up."""
    harness.db.append("calm-1", [NewEvent.json("Made", {})])
    service = await harness.start()
    await harness.caught_up()
    for name in service.names():
        await service.disable(name)  # writes the checkpoint of the handled event
    for name in service.names():
        await service.enable(name)
    harness.db.append("$system-thing", [NewEvent.json("Noise", {})])
    await harness.caught_up()
    assert {_runtime(service, n).unchecked for n in service.names()} == {0}
    assert {s["eventsProcessedAfterRestart"] for s in service.statistics()} == {1}  # calm-1 only


async def test_a_tombstoned_emitted_stream_faults_the_projection(harness: Harness) -> None:
    db = harness.db
    db.append("gone-1", [NewEvent.json("Made", {})])
    db.delete_stream("$ce-gone", hard=True)
    service = await harness.start()
    await _until(lambda: service.statistics("$by_category")[0]["status"] != "Running", "the fault")
    stats = service.statistics("$by_category")[0]
    assert stats["status"] == "Faulted (Enabled)"
    assert stats["stateReason"] == "Stream : $ce-gone is deleted. Cannot emit events to it"
    await harness.caught_up("$by_event_type")
    assert service.statistics("$by_event_type")[0]["status"] == "Running"  # the others go on
    # a faulted projection's config may change; a running one's may not
    await service.update_config("$by_category", service.config("$by_category"))
    with pytest.raises(ProjectionOperationFailed, match="hasn't been stopped or faulted"):
        await service.update_config("$by_event_type", service.config("$by_event_type"))


async def test_emit_disabled_faults_at_the_first_write(harness: Harness) -> None:
    harness.db.append("quiet-1", [NewEvent.json("Made", {})])
    service = await harness.start(start_standard=False)
    off = replace(service.config("$streams"), emit_enabled=False)
    await service.update_config("$streams", off)
    await service.enable("$streams")
    await _until(lambda: service.statistics("$streams")[0]["status"] != "Running", "the fault")
    stats = service.statistics("$streams")[0]
    assert stats["status"] == "Faulted (Enabled)"
    assert stats["stateReason"] == "'emit' is not allowed by the projection/configuration/mode"
    assert _events(harness.db, "$streams") == []


async def test_a_tombstoned_checkpoint_stream_faults_only_its_projection_and_reset_runs_it(
    tmp_path: Path,
) -> None:
    """Issue 33 point 5: a deleted checkpoint stream stopped the whole subsystem at the next start."""
    h = Harness(tmp_path / "db")
    try:
        h.db.append("tomb-1", [NewEvent.json("Made", {})])
        service = await h.start()
        await h.caught_up()
        await service.disable("$by_event_type")  # writes its checkpoint
        await service.enable("$by_event_type")
        await h.stop()
        h.db.delete_stream(checkpoint_stream("$by_event_type"), hard=True)
        h.db.append("tomb-2", [NewEvent.json("Made", {})])

        service = await h.start()
        stats = service.statistics("$by_event_type")[0]
        assert stats["status"] == "Faulted (Enabled)"
        assert checkpoint_stream("$by_event_type") in stats["stateReason"]
        await h.caught_up("$by_category", "$streams")  # the others run
        assert _links(h.db, "$ce-tomb") == ["0@tomb-1", "0@tomb-2"]
        assert _links(h.db, "$et-Made") == ["0@tomb-1"]

        await service.reset("$by_event_type")  # runs it again, from the start, in a new epoch
        await h.caught_up("$by_event_type")
        assert service.statistics("$by_event_type")[0]["status"] == "Running"
        assert _links(h.db, "$et-Made") == ["0@tomb-1", "0@tomb-2"]
        await service.disable("$by_event_type")  # a checkpoint it cannot write is not an error
        assert service.statistics("$by_event_type")[0]["status"] == "Stopped"
        await service.enable("$by_event_type")

        await service.restart()  # and after a restart it loads and runs without a reset
        await _until(lambda: service.active, "the subsystem to restart")
        h.db.append("tomb-3", [NewEvent.json("Made", {})])
        await h.caught_up()
        assert {s["status"] for s in service.statistics()} == {"Running"}
        assert _links(h.db, "$et-Made") == ["0@tomb-1", "0@tomb-2", "0@tomb-3"]
        assert _links(h.db, "$ce-tomb") == ["0@tomb-1", "0@tomb-2", "0@tomb-3"]
    finally:
        await h.stop()
        h.close()


async def test_a_checkpoint_stream_tombstoned_while_running_faults_only_its_projection(
    harness: Harness, caplog
) -> None:
    db = harness.db
    db.append("live-1", [NewEvent.json("Made", {})])
    service = await harness.start()
    await harness.caught_up()
    db.delete_stream(checkpoint_stream("$by_category"), hard=True)
    await service.disable("$by_category")
    await service.enable("$by_category")
    db.append("live-2", [NewEvent.json("Made", {})])
    await harness.caught_up("$by_event_type")
    await service.disable("$by_category")  # the checkpoint write meets the tombstone
    assert service.statistics("$by_category")[0]["status"] == "Stopped"
    assert "is deleted (tombstoned)" in caplog.text
    caplog.clear()
    await service.reset("$by_category")
    await service.enable("$by_category")
    await harness.caught_up("$by_category")
    await service.disable("$by_category")  # its checkpoints are now kept in memory only: no fault
    await service.enable("$by_category")
    db.append("live-3", [NewEvent.json("Made", {})])
    await harness.caught_up("$by_category")
    assert service.statistics("$by_category")[0]["status"] == "Running"
    assert "faulted" not in caplog.text
    assert _links(db, "$ce-live") == ["0@live-1", "0@live-2", "0@live-3"]
    assert service.statistics("$by_event_type")[0]["status"] == "Running"


def test_before_it_loads_them_a_leader_asks_for_a_moment_and_a_follower_redirects():
    """A CI run asked a single node for a projection's statistics in the instant between taking office
    and loading the projections, and got "Leader info available" from the leader itself (a redirect
    to nowhere). The leader answers ProjectionsNotReady (503 / UNAVAILABLE, which clients retry); a
    follower still redirects."""
    from evdb.errors import NotLeader, ProjectionsNotReady, status_of

    leading = True
    db = Database.open(None, chunk_size=65536)
    try:
        service = SystemProjections(
            database=lambda: db,
            notifier=lambda: CommitNotifier(db),
            is_leader=lambda: leading,
            clock=ManualClock(),
            logger=LOG,
            start_standard=True,
        )
        with pytest.raises(ProjectionsNotReady) as not_ready:
            service.statistics("$by_category")
        with pytest.raises(ProjectionsNotReady):
            service.statistics()
        assert status_of(not_ready.value) == (503, "UNAVAILABLE")
        leading = False
        with pytest.raises(NotLeader):
            service.statistics("$by_category")
    finally:
        db.close()
