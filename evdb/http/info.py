"""Anonymous and read-only node facts: /info, /gossip, /stats, /metrics, /ping."""

from __future__ import annotations

import asyncio

from aiohttp import web

from evdb.http.common import get_node, json_response


async def info(request: web.Request) -> web.Response:
    from evdb.node import DB_VERSION, VERSION

    node = get_node(request)
    return json_response(
        {
            "dbVersion": DB_VERSION,
            "esVersion": VERSION,
            "state": "leader",
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


def gossip_member(node) -> dict:
    db = node.db
    chk = db.log.checkpoints
    return {
        "instanceId": str(node.instance_id),
        "timeStamp": node.clock.time(),
        "state": "Leader",
        "isAlive": True,
        "internalTcpIp": node.host,
        "internalTcpPort": 0,
        "externalTcpIp": node.host,
        "externalTcpPort": 0,
        "httpEndPointIp": node.host if node.host not in ("0.0.0.0", "::") else "127.0.0.1",
        "httpEndPointPort": node.port,
        "lastCommitPosition": db.committed_position,
        "writerCheckpoint": db.committed_position,
        "chaserCheckpoint": chk.chaser.value,
        "epochPosition": chk.epoch.value,
        "epochNumber": chk.proposal.value,
        "epochId": "00000000-0000-0000-0000-000000000000",
        "nodePriority": 0,
        "isReadOnlyReplica": False,
        "esVersion": __import__("evdb.node", fromlist=["VERSION"]).VERSION,
    }


async def gossip(request: web.Request) -> web.Response:
    node = get_node(request)
    return json_response({"members": [gossip_member(node)], "serverIp": node.host, "serverPort": node.port})


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
