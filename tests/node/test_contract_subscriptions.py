"""Server-sent-event subscriptions release the server's resources when the subscriber goes away."""

from __future__ import annotations

import asyncio
import time
import uuid


async def _settled_task_count(expected: int, within: float = 3.0) -> int:
    """Poll the loop's task count until it falls to ``expected`` or the time is up."""
    deadline = time.monotonic() + within
    while (count := len(asyncio.all_tasks())) > expected and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    return count


async def test_an_abandoned_subscription_ends_its_handler_without_a_new_event(client):
    await client.post(
        "/streams/subscribed",
        json={"n": 1},
        headers={"Kurrent-EventType": "E", "Kurrent-EventId": str(uuid.uuid4())},
    )
    baseline = await _settled_task_count(0, within=0.5)
    for _ in range(3):
        async with client.stream("GET", "/subscriptions/streams/subscribed") as response:
            assert response.status_code == 200
            assert response.headers["Content-Type"].startswith("text/event-stream")
            async for _chunk in response.aiter_bytes():
                break  # the first event, then hang up
    remaining = await _settled_task_count(baseline)
    assert remaining <= baseline, f"{remaining - baseline} tasks still run for closed subscriptions"


async def test_a_new_event_ends_the_handlers_of_abandoned_subscriptions(client):
    await client.post(
        "/streams/subscribed",
        json={"n": 1},
        headers={"Kurrent-EventType": "E", "Kurrent-EventId": str(uuid.uuid4())},
    )
    baseline = await _settled_task_count(0, within=0.5)
    for _ in range(3):
        async with client.stream("GET", "/subscriptions/streams/subscribed") as response:
            async for _chunk in response.aiter_bytes():
                break
    await client.post(
        "/streams/subscribed",
        json={"n": 2},
        headers={"Kurrent-EventType": "E", "Kurrent-EventId": str(uuid.uuid4())},
    )
    assert await _settled_task_count(baseline) <= baseline
