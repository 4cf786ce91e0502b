"""kurrentdbclient's asyncio client (grpc.aio) against a real node, over TLS and in insecure mode."""

from __future__ import annotations

import json
import uuid

import pytest
from kurrentdbclient import AsyncKurrentDBClient, NewEvent, StreamState
from kurrentdbclient.exceptions import NotFoundError, StreamIsDeletedError, WrongCurrentVersionError

MAX = 9223372036854775807


def name(prefix: str = "s") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def ev(kind: str = "Ev", n: int = 0) -> NewEvent:
    return NewEvent(type=kind, data=json.dumps({"n": n}).encode())


@pytest.fixture
async def client(target):
    c = AsyncKurrentDBClient(target.uri)
    await c.connect()
    yield c
    await c.close()


async def test_append_idempotency_reads_and_all(client):
    stream = name("acct")
    events = [ev("Opened"), ev("Credited", 1), ev("Debited", 2)]
    position = await client.append_to_stream(stream, events=events, current_version=StreamState.NO_STREAM)
    assert (
        await client.append_to_stream(stream, events=events, current_version=StreamState.NO_STREAM)
        == position
    )
    single = ev("Closed")
    p = await client.append_to_stream(stream, events=single, current_version=2)  # the Append RPC
    assert await client.append_to_stream(stream, events=single, current_version=2) == p
    with pytest.raises(WrongCurrentVersionError):
        await client.append_to_stream(stream, events=[ev()], current_version=1)
    recorded = await client.get_stream(stream)
    assert [e.type for e in recorded] == ["Opened", "Credited", "Debited", "Closed"]
    assert recorded[2].commit_position == position
    backwards = await client.get_stream(stream, backwards=True, limit=2)
    assert [e.stream_position for e in backwards] == [3, 2]
    assert await client.get_current_version(stream) == 3
    with pytest.raises(NotFoundError):
        await client.get_stream(name("missing"))

    read = await client.read_all(
        commit_position=recorded[1].commit_position, filter_include=["Debited|Closed"]
    )
    assert [e.type async for e in read][:2] == ["Debited", "Closed"]
    by_stream = await client.read_all(filter_include=[stream], filter_by_stream_name=True)
    assert [e.stream_position async for e in by_stream] == [0, 1, 2, 3]
    assert await client.get_commit_position() == p


async def test_delete_recreate_tombstone_and_metadata(client):
    stream = name()
    await client.append_to_stream(stream, events=[ev(), ev()], current_version=StreamState.NO_STREAM)
    await client.set_stream_metadata(stream, metadata={"$maxCount": 1})
    assert [e.stream_position for e in await client.get_stream(stream)] == [1]
    await client.delete_stream(stream, current_version=1)
    with pytest.raises(NotFoundError):
        await client.get_stream(stream)
    metadata, version = await client.get_stream_metadata(stream)
    assert metadata == {"$maxCount": 1, "$tb": MAX} and version == 1
    await client.append_to_stream(stream, events=[ev("Back")], current_version=StreamState.NO_STREAM)
    assert [(e.type, e.stream_position) for e in await client.get_stream(stream)] == [("Back", 2)]
    assert (await client.get_stream_metadata(stream))[0]["$tb"] == 2

    await client.tombstone_stream(stream, current_version=StreamState.ANY)
    with pytest.raises(StreamIsDeletedError):
        await client.get_stream(stream)
    with pytest.raises(StreamIsDeletedError):
        await client.append_to_stream(stream, events=[ev()], current_version=StreamState.ANY)
    with pytest.raises(NotFoundError):
        await client.delete_stream(name("never"), current_version=StreamState.EXISTS)
