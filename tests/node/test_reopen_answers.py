"""A request that meets the database being closed and reopened under it (a follower cutting a diverged
tail) answers 503 with Retry-After, never 500; the same failure outside a reopen is still a 500."""

from __future__ import annotations

import logging
from types import SimpleNamespace

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from evdb.http.app import error_middleware
from evdb.http.common import SERVICES


def _app(node) -> web.Application:
    app = web.Application(middlewares=[error_middleware])
    app[SERVICES] = node
    opened = node.database

    async def write(request: web.Request) -> web.Response:
        opened.generation += request.query.get("reopen") == "1"  # the reopen happens mid-request
        opened.db = None if request.query.get("reopen") == "1" else opened.db
        raise AttributeError("'NoneType' object has no attribute 'append_async'")

    app.router.add_post("/streams/s", write)
    return app


def _node():
    return SimpleNamespace(
        database=SimpleNamespace(db=object(), generation=0),
        logger=logging.getLogger("test-reopen"),
        metrics=SimpleNamespace(observe_http=lambda *a: None),
    )


async def test_a_request_that_meets_a_reopen_gets_503():
    node = _node()
    async with TestClient(TestServer(_app(node))) as client:
        response = await client.post("/streams/s?reopen=1")
        assert response.status == 503
        assert response.headers["Retry-After"] == "1"
        assert "reopening" in await response.text()


async def test_the_same_failure_without_a_reopen_is_still_an_error():
    node = _node()
    async with TestClient(TestServer(_app(node))) as client:
        response = await client.post("/streams/s")
        assert response.status == 500
