"""Events of system streams ($-names) are never redacted: the tool and the node's own socket service
refuse them with an error naming the stream, and nothing changes (issue 20, item 5)."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import httpx
import pytest
from redaction_helpers import ADMIN, chunk_files, running_node, write_events
from waiting import until

from evdb.redaction import RedactionClient, RedactionRefused, socket_path
from evdb.redaction.rewrite import EventToRedact, write_redacted_copy
from evdb.redaction.tool import main as redact_main
from evdb.storage.chunk import chunk_file_name

SYSTEM_EVENTS = ["0@$user-admin", "0@$users", "0@$epochs", "0@$$orders", "0@$scavenges"]


def snapshot(db_dir: str) -> dict[str, bytes]:
    return {n: Path(db_dir, n).read_bytes() for n in chunk_files(db_dir)}


async def prepared(r) -> None:
    """Default users written, a metadata event for orders, and chunk 0 (which holds them) completed."""
    db = r.db
    await until(lambda: db.stream_state("$user-admin").last_event_number >= 0, "the admin user", 20.0)
    await asyncio.to_thread(db.set_stream_metadata, "orders", {"$maxCount": 100})
    await write_events(db, "orders", 30)
    first = db.log.chunk_for(db.read_event("$user-admin", 0).log_position)
    assert first.is_completed


async def authenticated_status(r) -> int:
    async with httpx.AsyncClient(base_url=r.node.http_url, auth=ADMIN, timeout=30) as client:
        return (await client.get("/streams/orders/0", headers={"Accept": "application/json"})).status_code


async def test_the_tool_refuses_system_streams_and_changes_nothing(tmp_path, clock, capsys):
    async with running_node(tmp_path, clock) as r:
        assert r.service is not None and r.service.is_serving  # the node's own service
        await prepared(r)
        before = snapshot(r.db_dir)
        for events in [*SYSTEM_EVENTS, "3@orders,0@$user-admin"]:
            code = await asyncio.to_thread(redact_main, ["--db", r.db_dir, "--events", events])
            err = capsys.readouterr().err
            assert code == 2, (events, err)
            stream = events.rsplit("@", 1)[1]
            assert f"0@{stream}" in err and "system stream" in err, err
        assert snapshot(r.db_dir) == before
        assert not r.db.read_event("orders", 3).is_redacted
        assert await authenticated_status(r) == 200


async def test_the_nodes_socket_refuses_positions_of_system_events(tmp_path, clock):
    async with running_node(tmp_path, clock) as r:
        await prepared(r)
        st = os.stat(socket_path(r.db_dir))
        assert (st.st_dev, st.st_ino) == r.node.redaction._inode  # the node's own socket, not a second one
        with RedactionClient(socket_path(r.db_dir)) as c:
            for item in SYSTEM_EVENTS:
                number, _, stream = item.partition("@")
                with pytest.raises(RedactionRefused) as info:
                    await asyncio.to_thread(
                        c.call, "getEventPositions", stream=stream, eventNumber=int(number)
                    )
                assert info.value.code == "SystemStream"
                assert stream in str(info.value)
            # a user stream is still served
            answer = await asyncio.to_thread(c.call, "getEventPositions", stream="orders", eventNumber=3)
            assert answer["positions"]


async def test_the_node_refuses_to_switch_in_a_chunk_with_a_redacted_system_event(tmp_path, clock):
    """A client that writes its own redacted copy (bypassing getEventPositions) is refused too."""
    async with running_node(tmp_path, clock) as r:
        await prepared(r)
        db, d = r.db, r.db_dir
        admin = db.read_event("$user-admin", 0)
        chunk = db.log.chunk_for(admin.log_position)
        target = chunk.file_name
        event = EventToRedact("$user-admin", 0, admin.log_position, chunk.physical_offset(admin.log_position))
        copy = os.path.join(d, "sys.redact.tmp")
        await asyncio.to_thread(write_redacted_copy, os.path.join(d, target), copy, [event])
        before = snapshot(d)
        with RedactionClient(socket_path(d)) as c, pytest.raises(RedactionRefused) as info:
            await asyncio.to_thread(
                c.call, "switchChunk", targetChunkFile=target, newChunkFile="sys.redact.tmp"
            )
        assert info.value.code == "NewChunkRedactsSystemStream"
        assert "0@$user-admin" in str(info.value) and "sys.redact.tmp" in str(info.value)
        assert snapshot(d) == before
        assert not db.read_event("$user-admin", 0).is_redacted
        assert await authenticated_status(r) == 200
        os.unlink(copy)


async def test_a_system_event_redacted_earlier_does_not_block_redacting_others(tmp_path, clock, capsys):
    """A chunk whose system event was redacted before this rule existed can still have user events
    redacted: only newly redacted system events are refused."""
    async with running_node(tmp_path, clock) as r:
        await prepared(r)
        db, d = r.db, r.db_dir
        rec = db.read_event("$$orders", 0)
        chunk = db.log.chunk_for(rec.log_position)
        target = chunk.file_name
        event = EventToRedact("$$orders", 0, rec.log_position, chunk.physical_offset(rec.log_position))
        copy = os.path.join(d, "old.redact.tmp")
        await asyncio.to_thread(write_redacted_copy, os.path.join(d, target), copy, [event])
    # as an earlier version left it: the node stopped, the copy put in place of the chunk
    os.unlink(os.path.join(d, target))
    shutil.move(copy, os.path.join(d, chunk_file_name(chunk.start_number, 1)))
    async with running_node(tmp_path, clock) as r:
        assert r.db.read_event("$$orders", 0).is_redacted
        assert await asyncio.to_thread(redact_main, ["--db", r.db_dir, "--events", "2@orders"]) == 0, (
            capsys.readouterr().err
        )
        assert r.db.read_event("orders", 2).is_redacted
