"""Admin endpoints: shutdown (scavenge, reload and cluster commands join in their own modules)."""

from __future__ import annotations

import asyncio

from aiohttp import web

from evdb.http.common import get_node, require_ops


async def shutdown(request: web.Request) -> web.Response:
    require_ops(request)
    node = get_node(request)
    node.logger.info("Shutting down because /admin/shutdown request has been received.")
    asyncio.get_running_loop().call_soon(node.shutdown_requested.set)
    return web.Response(status=200)


def setup(app: web.Application) -> None:
    app.router.add_post("/admin/shutdown", shutdown)
