"""Anonymous and read-only node facts: /info, /gossip, /stats, /metrics, /ping, /health/live; and the
node's options,
/info/options (admins and ops: it shows file paths and settings).

Answers are negotiated as KurrentDB's controllers negotiate them (evdb/http/common.py
``response_format``): indented JSON by default; ``Accept: application/xml`` or ``text/xml`` (or
``?format=xml``) gives XML where KurrentDB serializes to XML (``/gossip``, ``/ping``); ``/info`` keeps its
JSON body under the content type asked for, as KurrentDB's does; ``/stats`` has no XML form (KurrentDB's
XML codec cannot write its dictionary: the body is empty); ``Accept: text/html`` is ``406``.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from evdb.cluster.advertising import client_gossip
from evdb.http.common import (
    APPLICATION_XML,
    JSON,
    TEXT,
    XML,
    get_services,
    json_response,
    negotiated,
    require_ops,
    response_format,
)

#: the formats of KurrentDB's InfoController, GossipController, PingController and StatController
_INFO = (JSON, XML, APPLICATION_XML, TEXT)
_GOSSIP = (JSON, APPLICATION_XML, XML, TEXT)
_STATS = (JSON, XML, APPLICATION_XML)


async def info(request: web.Request) -> web.Response:
    from evdb.version import DB_VERSION, VERSION

    services = get_services(request)
    fmt = response_format(request, _INFO)  # the body is JSON whatever is asked for, as KurrentDB's
    return json_response(
        {
            "dbVersion": DB_VERSION,
            "esVersion": VERSION,
            "state": services.cluster.state.lower() if services.cluster else "unknown",
            "features": {
                "projections": services.projections is not None,  # RunProjections System or All
                "userManagement": True,
                "atomPub": True,
                "scavenge": True,
                "evdb": True,
            },
            "authentication": {"type": "internal", "properties": {}},
            "instanceId": str(services.instance_id),
        },
        content_type=fmt,
    )


async def options(request: web.Request) -> web.Response:
    """``GET /info/options``: one object per option, with the value in effect and what the configuration
    gives now (read again for this request), so a restart-only option that changed since the start shows
    ``restartPending`` (evdb/options/pending.py)."""
    from evdb.options.pending import option_states

    require_ops(request)
    services = get_services(request)
    return json_response(await asyncio.to_thread(option_states, services.options))


async def gossip(request: web.Request) -> web.Response:
    services = get_services(request)
    assert services.cluster is not None  # Node.start makes it before it opens the HTTP port
    # the addresses clients are told (AdvertiseHostToClientAs); the cluster's in internalHttpEndPoint*
    body = client_gossip(services.cluster.members(), services.addresses.client_endpoint)
    members = ",".join(
        ", ".join(f"{k[:1].upper()}{k[1:]}: {v}" for k, v in m.items()) for m in body["members"]
    )
    text = f"Server: {body['serverIp']}:{body['serverPort']}, Members: [{members}]"
    return negotiated(
        request, "ClientClusterInfo", body, formats=_GOSSIP, items={"Members": "ClientMemberInfo"}, text=text
    )


async def stats(request: web.Request) -> web.Response:
    services = get_services(request)
    fmt = response_format(request, _STATS)
    if fmt != JSON:
        return web.Response(text="", content_type=fmt)
    return json_response(await asyncio.to_thread(services.collect_stats))


async def metrics(request: web.Request) -> web.Response:
    services = get_services(request)
    body = await asyncio.to_thread(services.metrics.render)
    return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})


async def ping(request: web.Request) -> web.Response:
    text = "Ping request successfully handled"
    return negotiated(request, "TextMessage", {"text": text}, formats=_INFO, text=f"Text: {text}")


async def health_live(request: web.Request) -> web.Response:
    """KurrentDB's liveness probe: GET or HEAD, 204 (or the ``liveCode`` asked for) while the node is
    started, 503 once it stops; any other method is 404, as there."""
    if request.method not in ("GET", "HEAD"):
        raise web.HTTPNotFound()
    if not get_services(request).metrics.live:
        return web.Response(status=503)
    try:
        status = int(request.query.get("liveCode", "204"))
    except ValueError:
        status = 204  # not a number: the default, as KurrentDB's int.TryParse
    return web.Response(status=status if 100 <= status <= 599 else 204)


def setup(app: web.Application) -> None:
    app.router.add_get("/info", info)
    app.router.add_get("/info/options", options)
    app.router.add_get("/gossip", gossip)
    app.router.add_get("/stats", stats)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/ping", ping)
    app.router.add_route("*", "/health/live", health_live)
