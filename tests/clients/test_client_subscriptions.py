"""Catch-up and live subscriptions through kurrentdbclient (sync and asyncio), stream and ``$all``."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest
from kurrentdbclient import AsyncKurrentDBClient, KurrentDBClient, NewEvent, StreamState
from kurrentdbclient.events import CaughtUp, Checkpoint
from kurrentdbclient.exceptions import StreamIsDeletedError


def name(prefix: str = "s") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def ev(kind: str = "Ev", n: int = 0) -> NewEvent:
    return NewEvent(type=kind, data=json.dumps({"n": n}).encode())


@pytest.fixture
def client(target):
    c = KurrentDBClient(target.uri)
    yield c
    c.close()


def test_stream_catch_up_then_live(client):
    stream = name()
    client.append_to_stream(
        stream, events=[ev("E", i) for i in range(3)], current_version=StreamState.NO_STREAM
    )
    with client.subscribe_to_stream(stream, include_caught_up=True, timeout=20) as sub:
        assert sub.subscription_id
        items = [next(sub) for _ in range(4)]
        assert [e.stream_position for e in items[:3]] == [0, 1, 2]
        assert isinstance(items[3], CaughtUp)
        client.append_to_stream(stream, events=[ev("E", 3), ev("E", 4)], current_version=2)
        live = [next(sub), next(sub)]
        assert [e.stream_position for e in live] == [3, 4]
    # from a revision: starts after it
    with client.subscribe_to_stream(stream, stream_position=1, timeout=20) as sub:
        assert next(sub).stream_position == 2
    # from the end: only new events
    with client.subscribe_to_stream(stream, from_end=True, include_caught_up=True, timeout=20) as sub:
        assert isinstance(next(sub), CaughtUp)
        client.append_event(stream, event=ev("Late"), current_version=4)
        late = next(sub)
        assert (late.type, late.stream_position) == ("Late", 5)


def test_subscription_to_a_stream_that_does_not_exist_yet(client):
    stream = name()
    with client.subscribe_to_stream(stream, include_caught_up=True, timeout=20) as sub:
        assert isinstance(next(sub), CaughtUp)
        client.append_event(stream, event=ev("First"), current_version=StreamState.NO_STREAM)
        assert next(sub).type == "First"


def test_subscription_to_a_tombstoned_stream_fails(client):
    stream = name()
    client.tombstone_stream(stream, current_version=StreamState.ANY)
    with pytest.raises(StreamIsDeletedError):
        sub = client.subscribe_to_stream(stream, timeout=20)
        next(sub)


def test_all_subscription_from_a_position_is_exclusive(client):
    stream = name()
    client.append_to_stream(
        stream, events=[ev("E", i) for i in range(3)], current_version=StreamState.NO_STREAM
    )
    first = client.get_stream(stream)[0]
    with client.subscribe_to_all(commit_position=first.commit_position, filter_exclude=(), timeout=20) as sub:
        nxt = next(sub)
        assert (nxt.stream_name, nxt.stream_position) == (stream, 1)
    with client.subscribe_to_all(filter_exclude=(), timeout=20) as sub:
        assert next(sub).type.startswith("$")  # from the start: the database's first (system) events


def test_filtered_all_subscription_checkpoints_and_resume(client):
    prefix = name("tenant")
    noise = name("noise")
    with client.subscribe_to_all(
        filter_include=[prefix],
        filter_by_stream_name=True,
        filter_by_prefix=True,
        include_checkpoints=True,
        include_caught_up=True,
        window_size=2,
        checkpoint_interval_multiplier=2,
        timeout=30,
    ) as sub:
        # history: everything so far is scanned; checkpoints every 4 events looked at
        seen_caught_up = False
        checkpoints = []
        while not seen_caught_up:
            item = next(sub)
            if isinstance(item, CaughtUp):
                seen_caught_up = True
            elif isinstance(item, Checkpoint):
                checkpoints.append(item.commit_position)
            else:
                pytest.fail(f"unexpected event {item}")
        assert checkpoints and checkpoints == sorted(checkpoints)
        # live: 9 events that do not match, then one that does
        client.append_to_stream(
            noise, events=[ev("N", i) for i in range(9)], current_version=StreamState.NO_STREAM
        )
        client.append_to_stream(f"{prefix}-1", events=[ev("Mine")], current_version=StreamState.NO_STREAM)
        live_checkpoints = []
        while True:
            item = next(sub)
            if isinstance(item, Checkpoint):
                live_checkpoints.append(item.commit_position)
                continue
            break
        assert item.stream_name == f"{prefix}-1" and item.type == "Mine"
        assert len(live_checkpoints) >= 2  # 9 non-matching events scanned, a checkpoint every 4
    # a checkpoint is a position to resume from: the matching event comes next
    with client.subscribe_to_all(
        commit_position=live_checkpoints[-1],
        filter_include=[prefix],
        filter_by_stream_name=True,
        filter_by_prefix=True,
        timeout=20,
    ) as resumed:
        assert next(resumed).type == "Mine"


async def test_async_client_subscriptions_and_batch_append(target):
    client = AsyncKurrentDBClient(target.uri)
    await client.connect()
    try:
        stream = name()
        position = await client.append_to_stream(
            stream, events=[ev("A"), ev("B")], current_version=StreamState.NO_STREAM
        )
        assert position > 0
        events = await client.get_stream(stream)
        assert [e.type for e in events] == ["A", "B"]
        sub = await client.subscribe_to_all(
            filter_include=[stream], filter_by_stream_name=True, include_caught_up=True, timeout=20
        )
        async with sub:
            got = []
            async for item in sub:
                if isinstance(item, CaughtUp):
                    await client.append_to_stream(stream, events=[ev("C")], current_version=1)
                    continue
                got.append(item.type)
                if len(got) == 3:
                    break
        assert got == ["A", "B", "C"]
        stream_sub = await client.subscribe_to_stream(stream, stream_position=0, timeout=20)
        async with stream_sub:
            first = await asyncio.wait_for(stream_sub.__anext__(), 10)
        assert first.stream_position == 1
    finally:
        await client.close()
