"""GET /health/live, KurrentDB's liveness probe (its Docker images, compose files and Kubernetes probes
use it): no authentication, 204 by default, ``?liveCode=`` picks the status, GET and HEAD only, 503 once
the node is stopping."""

from __future__ import annotations

import httpx
import pytest

from evdb.node import Node
from tests.node.conftest import node_options


@pytest.mark.parametrize("method", ["GET", "HEAD"])
async def test_live_answers_204_without_credentials(anon, method):
    r = await anon.request(method, "/health/live")
    assert r.status_code == 204, r.text
    assert r.content == b""


@pytest.mark.parametrize("method", ["GET", "HEAD"])
async def test_live_code_chooses_the_status(anon, method):
    assert (await anon.request(method, "/health/live?liveCode=200")).status_code == 200
    assert (await anon.request(method, "/health/live?liveCode=299")).status_code == 299
    assert (await anon.request(method, "/health/live?liveCode=abc")).status_code == 204


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS"])
async def test_other_methods_are_not_found(anon, method):
    assert (await anon.request(method, "/health/live")).status_code == 404


async def test_wrong_credentials_are_refused_as_everywhere(node):
    # KurrentDB's probe needs none; a wrong password is still a 401, as on every endpoint
    async with httpx.AsyncClient(base_url=node.http_url, auth=("admin", "wrong"), timeout=30) as c:
        assert (await c.get("/health/live")).status_code == 401


async def test_a_stopping_node_is_not_live(tmp_path, clock):
    node = Node(node_options(tmp_path), clock=clock, name="live")
    await node.start()
    try:
        async with httpx.AsyncClient(base_url=node.http_url, timeout=30) as c:
            assert (await c.get("/health/live")).status_code == 204
            node.metrics.set_live(False)  # what Node.stop does first, before it closes the port
            assert (await c.get("/health/live")).status_code == 503
    finally:
        await node.stop()
