"""Redaction end to end on a real in-process node: the tool, readers, restart, scavenge."""

from __future__ import annotations

import asyncio
import base64
import json
import os

from redaction_helpers import (
    ADMIN,
    chunk_files,
    payload,
    running_node,
    verify_all_chunks,
    wait_scavenge_done,
    write_events,
)
from waiting import until

from evdb.redaction import RedactionClient, socket_path
from evdb.redaction.tool import main as redact_main
from evdb.subscriptions import CaughtUp, subscribe_to_all, subscribe_to_stream

EVENTS = "application/vnd.kurrent.events+json"


async def redact(db_dir: str, events: str) -> int:
    return await asyncio.to_thread(redact_main, ["--db", db_dir, "--events", events])


def assert_redacted(db, stream: str, number: int, original) -> None:
    record = db.read_event(stream, number)
    assert record.is_redacted
    assert record.data == b"\xff" * len(original.data)
    assert (record.event_type, record.metadata, record.timestamp, record.event_id) == (
        original.event_type,
        original.metadata,
        original.timestamp,
        original.event_id,
    )
    assert (record.log_position, record.event_number, record.size) == (
        original.log_position,
        original.event_number,
        original.size,
    )


async def test_redact_read_restart_scavenge(tmp_path, clock):
    targets = [("orders", 3), ("orders", 30), ("users", 0)]
    async with running_node(tmp_path, clock) as r:
        db = r.db
        await write_events(db, "users", 2)
        await write_events(db, "orders", 45)
        await write_events(db, "trash", 25)
        assert len(chunk_files(r.db_dir)) >= 4
        originals = {t: db.read_event(*t) for t in targets}
        chunks_of = {t: db.log.chunk_for(originals[t].log_position).file_name for t in targets}
        assert len(set(chunks_of.values())) >= 2  # the events sit in different chunks
        neighbour = db.read_event("orders", 4)

        assert await redact(r.db_dir, "3@orders,30@orders,0@users") == 0
        for t in targets:
            assert_redacted(db, *t, originals[t])
        assert db.read_event("orders", 4) == neighbour  # others untouched
        assert not [n for n in os.listdir(r.db_dir) if n.endswith(".tmp")]
        for t in targets:  # a new version of each chunk replaced the old one
            assert chunks_of[t] not in chunk_files(r.db_dir)

        # HTTP: the flag and 0xFF data, in the entry and as the raw event
        import httpx

        async with httpx.AsyncClient(base_url=r.node.http_url, auth=ADMIN, timeout=30) as client:
            entry = (
                await client.get("/streams/orders/3?embed=body", headers={"Accept": "application/json"})
            ).json()
            assert entry["isRedacted"] is True
            assert base64.b64decode(entry["data"]) == b"\xff" * len(originals[("orders", 3)].data)
            assert entry["eventType"] == "Ev" and entry["metaData"] == {"m": 3}
            raw = await client.get("/streams/orders/3", headers={"Accept": "application/octet-stream"})
            assert raw.content == b"\xff" * len(originals[("orders", 3)].data)
            other = (
                await client.get("/streams/orders/4?embed=body", headers={"Accept": "application/json"})
            ).json()
            assert other["isRedacted"] is False and other["data"] == json.loads(payload("orders", 4))

            # $all and subscriptions agree with stream reads
            all_events = db.read_all_forward(0, 10_000, None).events
            seen = {(e.stream, e.event_number): e for e in all_events}
            for t in targets:
                assert seen[t].is_redacted and seen[t].data == b"\xff" * len(originals[t].data)
            sub = subscribe_to_all(db, r.node.notifier)
            via_sub = {}
            async for item in sub:
                if isinstance(item, CaughtUp):
                    break
                via_sub[(item.stream, item.event_number)] = item
            await sub.aclose()
            assert all(via_sub[t].is_redacted for t in targets)
            sub = subscribe_to_stream(db, r.node.notifier, "orders")
            flags = []
            async for item in sub:
                if isinstance(item, CaughtUp):
                    break
                flags.append(item.is_redacted)
            await sub.aclose()
            assert [i for i, f in enumerate(flags) if f] == [3, 30]

            # a second run changes nothing and says so
            assert await redact(r.db_dir, "3@orders") == 0
            assert_redacted(db, "orders", 3, originals[("orders", 3)])

            # delete a stream, then scavenge every chunk: the redacted events stay redacted
            await asyncio.to_thread(db.delete_stream, "trash")
            started = await client.post(
                "/admin/scavenge?threshold=-1", headers={"Accept": "application/json"}
            )
            assert started.status_code == 200
            assert await wait_scavenge_done(client) == "Success"
        for t in targets:
            assert_redacted(db, *t, originals[t])
        assert trash_left(db) <= 1  # a soft-deleted stream keeps its last event
        verify_all_chunks(r.db_dir)

    # restart: checksums verify at open, events still redacted
    verify_all_chunks(str(tmp_path / "db"))
    async with running_node(tmp_path, clock) as r:
        for t in targets:
            assert_redacted(r.db, *t, originals[t])
        assert r.db.read_event("orders", 4) == neighbour


async def test_scavenge_waits_for_a_redaction_session(tmp_path, clock):
    """A redaction session holds the chunk lock: a scavenge reaching its switch waits; afterwards
    it leaves the redacted chunk alone (it changed meanwhile) and a later scavenge keeps it redacted."""
    async with running_node(tmp_path, clock, "--disable-scavenge-merging") as r:
        db = r.db
        await write_events(db, "orders", 20)
        await write_events(db, "trash", 30)
        await write_events(db, "tail", 25)
        original = db.read_event("orders", 5)
        await asyncio.to_thread(db.delete_stream, "trash")
        import httpx

        async with httpx.AsyncClient(base_url=r.node.http_url, auth=ADMIN, timeout=30) as client:
            session = await asyncio.to_thread(RedactionClient, socket_path(r.db_dir))
            try:
                await asyncio.to_thread(session.call, "lockChunks")
                files_before = chunk_files(r.db_dir)
                started = await client.post("/admin/scavenge?threshold=-1")
                assert started.status_code == 200
                # the scavenge gets as far as executing chunks, but cannot switch any while the lock is held
                await until(lambda: _executing(r.node), "the scavenge to execute chunks", 20.0)
                # (its scavenge point completed the active chunk, so a new chunk file may have appeared)
                assert set(files_before) <= set(chunk_files(r.db_dir))
                assert r.node.scavenge.progress()["chunks"] == []  # no chunk switched yet
                # the redaction goes ahead under the same lock
                await redact_in_session(session, r.db_dir, "orders", 5)
                await asyncio.to_thread(session.call, "unlockChunks")
            finally:
                await asyncio.to_thread(session.close)
            assert await wait_scavenge_done(client) == "Success"
            assert_redacted(db, "orders", 5, original)
            started = await client.post("/admin/scavenge?threshold=-1")
            assert await wait_scavenge_done(client) == "Success"
            assert_redacted(db, "orders", 5, original)
            assert trash_left(db) <= 1  # a soft-deleted stream keeps its last event
        verify_all_chunks(r.db_dir)


def trash_left(db) -> int:
    return len([e for e in db.read_all_forward(0, 10_000, None).events if e.stream == "trash"])


def _executing(node) -> bool:
    progress = node.scavenge.progress()
    return bool(progress and progress["currentChunk"])


async def redact_in_session(session: RedactionClient, db_dir: str, stream: str, number: int) -> None:
    from evdb.redaction.rewrite import EventToRedact, write_redacted_copy

    p = (await asyncio.to_thread(session.call, "getEventPositions", stream=stream, eventNumber=number))[
        "positions"
    ][0]
    temp = os.path.join(db_dir, p["chunkFile"] + ".test.tmp")
    await asyncio.to_thread(
        write_redacted_copy,
        os.path.join(db_dir, p["chunkFile"]),
        temp,
        [EventToRedact(stream, number, p["logPosition"], p["chunkEventOffset"])],
    )
    answer = await asyncio.to_thread(
        session.call, "switchChunk", targetChunkFile=p["chunkFile"], newChunkFile=os.path.basename(temp)
    )
    assert answer["chunkFile"] != p["chunkFile"]


async def test_redaction_and_scavenge_at_the_same_time(tmp_path, clock):
    async with running_node(tmp_path, clock) as r:
        db = r.db
        await write_events(db, "orders", 40)
        await write_events(db, "trash", 30)
        await write_events(db, "tail", 25)
        originals = {n: db.read_event("orders", n) for n in (1, 15, 35)}
        await asyncio.to_thread(db.delete_stream, "trash")
        import httpx

        async with httpx.AsyncClient(base_url=r.node.http_url, auth=ADMIN, timeout=30) as client:
            started = await client.post("/admin/scavenge?threshold=-1")
            assert started.status_code == 200
            rc = await redact(r.db_dir, "1@orders,15@orders,35@orders")
            assert rc == 0
            assert await wait_scavenge_done(client) == "Success"
            for n, original in originals.items():
                assert_redacted(db, "orders", n, original)
            # whatever the first scavenge skipped, a second one removes; redaction stays
            await client.post("/admin/scavenge?threshold=-1")
            assert await wait_scavenge_done(client) == "Success"
        for n, original in originals.items():
            assert_redacted(db, "orders", n, original)
        assert trash_left(db) <= 1  # a soft-deleted stream keeps its last event
        verify_all_chunks(r.db_dir)
