"""Anonymous and read-only node facts: /info, /gossip, /stats, /metrics, /ping."""

from __future__ import annotations

import asyncio

from aiohttp import web

from evdb.http.common import get_node, json_response


async def info(request: web.Request) -> web.Response:
    from evdb.version import DB_VERSION, VERSION

    node = get_node(request)
    return json_response(
        {
            "dbVersion": DB_VERSION,
            "esVersion": VERSION,
            "state": node.cluster.state.lower() if node.cluster else "unknown",
            "features": {
                "projections": False,
                "userManagement": True,
                "atomPub": True,
                "scavenge": True,
                "evdb": True,
            },
            "authentication": {"type": "internal", "properties": {}},
            "instanceId": str(node.instance_id),
        }
    )


async def gossip(request: web.Request) -> web.Response:
    node = get_node(request)
    assert node.cluster is not None  # Node.start makes it before it opens the HTTP port
    return json_response(
        {"members": node.cluster.members(), "serverIp": node.advertised_host, "serverPort": node.port}
    )


async def stats(request: web.Request) -> web.Response:
    node = get_node(request)
    return json_response(await asyncio.to_thread(node.collect_stats))


async def metrics(request: web.Request) -> web.Response:
    node = get_node(request)
    body = await asyncio.to_thread(node.metrics.render)
    return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})


async def ping(request: web.Request) -> web.Response:
    return json_response({"text": "Ping request successfully handled"})


def setup(app: web.Application) -> None:
    app.router.add_get("/info", info)
    app.router.add_get("/gossip", gossip)
    app.router.add_get("/stats", stats)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/ping", ping)
