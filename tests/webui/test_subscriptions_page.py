"""The Admin UI's persistent subscriptions part: groups, consumers, lag, in flight and parked messages (a
consumer parks two over the HTTP API), the confirmed replay in real Chromium after which the parked count
goes to 0 and the messages come again; its access rule; a node that does not lead says who serves them."""

from __future__ import annotations

import asyncio

import httpx
from webui_helpers import ADMIN, SCREENSHOTS, log_in, node_options, write_orders

from evdb.free_port import free_port
from evdb.node import Node


async def _park_two(admin: httpx.AsyncClient, base: str) -> list[int]:
    """A group on order-0; a consumer takes three messages over HTTP, parks two and acks one."""
    created = await admin.put("/subscriptions/order-0/workers", json={"namedConsumerStrategy": "RoundRobin"})
    assert created.status_code == 201, created.text
    entries: list[dict] = []

    async def three_taken() -> bool:  # the group reads its stream after the create: ask until it has
        feed = await admin.get(f"/subscriptions/order-0/workers/{3 - len(entries)}?embed=body")
        assert feed.status_code == 200, feed.text
        entries.extend(feed.json()["entries"])
        return len(entries) == 3

    await _until(three_taken, "three messages handed out")
    parked = []
    for i, entry in enumerate(sorted(entries, key=lambda e: e["eventNumber"])):
        relation = "ack" if i == 0 else "nack"
        uri = next(link["uri"] for link in entry["links"] if link["relation"] == relation)
        answer = await admin.post(uri.removeprefix(base) + ("?action=park" if relation == "nack" else ""))
        assert answer.status_code == 202
        if relation == "nack":
            parked.append(entry["eventNumber"])
    return parked


async def _info(admin: httpx.AsyncClient) -> dict:
    answer = await admin.get("/subscriptions/order-0/workers/info")
    assert answer.status_code == 200, answer.text
    return answer.json()


async def _until(condition, what: str, timeout: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await condition():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def test_groups_with_parked_messages_and_their_confirmed_replay(node, page):
    await write_orders(node.db, streams=1, events=5, pad=10)
    async with httpx.AsyncClient(base_url=node.http_url, auth=ADMIN, timeout=30) as admin:
        parked = await _park_two(admin, node.http_url)

        async def two_parked() -> bool:
            return (await _info(admin))["parkedMessageCount"] == 2

        await _until(two_parked, "two parked messages")

        await log_in(page, node.http_url)
        await page.wait_for_selector("#node-role")
        await page.click("#nav a[data-section=subscriptions]")
        await page.wait_for_selector("#subscription-groups tr.subscription[data-parked='2']")
        row = await page.inner_text("#subscription-groups tr.subscription")
        cells = row.split("\t")
        assert cells[:7] == ["order-0", "workers", "Live", "RoundRobin", "0", "0", "2"], cells
        await page.screenshot(path=str(SCREENSHOTS / "admin-subscriptions.png"), full_page=True)

        await page.click("#subscription-groups button.replay-parked")
        await page.wait_for_selector("#confirm[open]")
        assert await page.evaluate("document.activeElement.id") == "confirm-cancel"
        assert await page.inner_text("#confirm-call") == "POST /subscriptions/order-0/workers/replayParked"
        await page.click("#confirm-send")
        await page.wait_for_selector("#message.ok")
        assert "replayParked → 200" in await page.inner_text("#message")
        # the page's own poll shows the count at 0; the parked messages are delivered again
        await page.wait_for_selector("#subscription-groups tr.subscription[data-parked='0']")
        again: list[int] = []

        async def delivered_again() -> bool:
            feed = await admin.get("/subscriptions/order-0/workers/2?embed=body")
            again.extend(e["eventNumber"] for e in feed.json()["entries"])
            return len(again) >= 2

        await _until(delivered_again, "the replayed messages")
        assert sorted(again) == parked


async def test_access_rule_and_a_node_that_does_not_lead(tmp_path):
    async with Node(node_options(tmp_path), name="first") as node:  # it leads and creates the users
        async with httpx.AsyncClient(base_url=node.http_url, timeout=30) as anon:
            assert (await anon.get("/web/fragments/subscriptions")).status_code == 401
        async with httpx.AsyncClient(base_url=node.http_url, auth=ADMIN, timeout=30) as admin:
            created = await admin.post(
                "/users/", json={"loginName": "reader", "fullName": "R", "groups": [], "password": "pw"}
            )
            assert created.status_code == 201
            empty = await admin.get("/web/fragments/subscriptions")
            assert empty.status_code == 200 and 'id="subscriptions-none"' in empty.text
        async with httpx.AsyncClient(base_url=node.http_url, auth=("reader", "pw"), timeout=30) as reader:
            assert (
                await reader.get("/web/fragments/subscriptions")
            ).status_code == 200  # statistics: any user
    seeds = f"127.0.0.1:{free_port()},127.0.0.1:{free_port()}"
    async with Node(
        node_options(tmp_path, "--cluster-size", "3", "--gossip-seed", seeds), name="alone"
    ) as node:
        assert not node.cluster.is_leader
        async with httpx.AsyncClient(base_url=node.http_url, auth=ADMIN, timeout=30) as admin:
            # a member that never heard from a leader holds no sign-in lease: it judges no credentials
            # (docs/cluster.md, sign-in leases) and tells the browser to try again
            part = await admin.get("/web/fragments/subscriptions")
            assert part.status_code == 503, part.text
            assert part.headers["Retry-After"] == "1" and "sign-in lease" in part.text
