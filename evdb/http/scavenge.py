"""Scavenge endpoints, with KurrentDB's paths, parameters, messages, status codes and bodies."""

from __future__ import annotations

import asyncio

from aiohttp import web

from evdb.errors import ScavengeNotFound
from evdb.http.common import (
    get_services,
    json_response,
    negotiated,
    require_ops,
    response_format,
    text_or_json,
)
from evdb.http.openapi import EXTRA_PATHS, SCAVENGE_ID_CONTENT, TEXT_CONTENT, json_object
from evdb.scavenge.params import ScavengeRequest, parse_scavenge_request

#: ``GET /admin/scavenge/last`` when no scavenge has run: KurrentDB answers ``Guid.Empty``
NO_SCAVENGE_ID = "00000000-0000-0000-0000-000000000000"


def parse_request(request: web.Request) -> ScavengeRequest:
    """The query's parameters, checked by the rules every surface shares (evdb.scavenge.params)."""
    q = request.query
    scavenge_request = parse_scavenge_request(
        threads=q.get("threads"),
        threshold=q.get("threshold"),
        throttle_percent=q.get("throttlePercent"),
        sync_only=q.get("syncOnly"),
        start_from_chunk=q.get("startFromChunk"),
    )
    if "startFromChunk" in q:
        get_services(request).logger.warning("startFromChunk is deprecated and ignored (it will be removed).")
    return scavenge_request


async def start(request: web.Request) -> web.Response:
    require_ops(request)
    response_format(request)  # an answer it cannot give (Accept: text/html) is refused first: 406
    services = get_services(request)
    query = request.query_string
    services.logger.info(
        "Request scavenging because /admin/scavenge%s request has been received.",
        f"?{query}" if query else "",
    )
    scavenge_request = parse_request(request)
    scavenge_id = await asyncio.to_thread(services.database.open_scavenge().start, scavenge_request)
    return text_or_json(request, {"scavengeId": scavenge_id}, dto="ScavengeResultDto")


async def current(request: web.Request) -> web.Response:
    require_ops(request)
    services = get_services(request)
    scavenge_id = services.database.open_scavenge().current_id() or ""
    link = f"/admin/scavenge/{scavenge_id}" if scavenge_id else ""
    return text_or_json(
        request, {"scavengeId": scavenge_id, "scavengeLink": link}, dto="ScavengeGetCurrentResultDto"
    )


async def last(request: web.Request) -> web.Response:
    require_ops(request)
    services = get_services(request)
    found = await asyncio.to_thread(services.database.open_scavenge().last)
    if found is None:  # KurrentDB's ScavengeGetLastResultDto defaults: the zero GUID, no link
        return text_or_json(
            request,
            {"scavengeId": NO_SCAVENGE_ID, "scavengeLink": "", "scavengeResult": "Unknown"},
            dto="ScavengeGetLastResultDto",
        )
    scavenge_id, result = found
    return text_or_json(
        request,
        {
            "scavengeId": scavenge_id,
            "scavengeLink": f"/admin/scavenge/{scavenge_id}",
            "scavengeResult": result,
        },
        dto="ScavengeGetLastResultDto",
    )


async def progress(request: web.Request) -> web.Response:
    """evdb extension: the live figures of the running scavenge (phase, chunks, weights, bytes)."""
    require_ops(request)
    services = get_services(request)
    figures = services.database.open_scavenge().progress()
    if figures is None:
        last_run = services.database.open_scavenge().last_progress()
        body = {"running": False, "last": last_run.to_json(services.clock.time()) if last_run else None}
    else:
        body = {"running": True, **figures}
    return json_response(body)


async def stop(request: web.Request) -> web.Response:
    require_ops(request)
    services = get_services(request)
    scavenge_id = request.match_info["scavenge_id"]
    response_format(request)  # 406 before anything is done, as KurrentDB
    services.logger.info(
        "Stopping scavenge because /admin/scavenge/%s DELETE request has been received.", scavenge_id
    )
    try:
        stopped = await services.database.open_scavenge().stop_async(scavenge_id)
    except ScavengeNotFound:
        return web.Response(status=404, text="Scavenge Id does not exist", content_type="text/plain")
    return negotiated(request, "string", stopped)


def setup(app: web.Application) -> None:
    r = app.router
    r.add_post("/admin/scavenge", start)
    r.add_get("/admin/scavenge/current", current)
    r.add_get("/admin/scavenge/last", last)
    r.add_get("/admin/scavenge/progress", progress)
    r.add_delete("/admin/scavenge/{scavenge_id}", stop)


_q = [
    {"name": "threads", "in": "query", "required": False, "schema": {"type": "integer"}},
    {"name": "threshold", "in": "query", "required": False, "schema": {"type": "integer"}},
    {"name": "throttlePercent", "in": "query", "required": False, "schema": {"type": "integer"}},
    {"name": "syncOnly", "in": "query", "required": False, "schema": {"type": "boolean"}},
    {
        "name": "startFromChunk",
        "in": "query",
        "required": False,
        "schema": {"type": "integer"},
        "deprecated": True,
    },
]
_ok = {"description": "OK", "content": SCAVENGE_ID_CONTENT}
EXTRA_PATHS.append(
    {
        "/admin/scavenge": {
            "post": {
                "summary": "Start a scavenge on this node",
                "parameters": _q,
                "responses": {
                    "200": {
                        "description": "Started",
                        "content": {
                            **json_object({"scavengeId": {"type": "string"}}, ["scavengeId"]),
                            **TEXT_CONTENT,
                        },
                    },
                    "400": {"description": "Invalid parameter, or already running", "content": TEXT_CONTENT},
                    "401": {"description": "Not authenticated, or not admin/ops"},
                },
            }
        },
        "/admin/scavenge/current": {
            "get": {
                "summary": "The running scavenge",
                "responses": {"200": _ok, "401": {"description": "Not authenticated, or not admin/ops"}},
            },
            "delete": {
                "summary": "Stop the running scavenge (answers once it has stopped)",
                "responses": {
                    "200": {"description": "Stopped", "content": TEXT_CONTENT},
                    "401": {"description": "Not authenticated, or not admin/ops"},
                    "404": {"description": "No scavenge is running", "content": TEXT_CONTENT},
                },
            },
        },
        "/admin/scavenge/last": {
            "get": {
                "summary": "The most recent scavenge and its result (the zero GUID and Unknown before any)",
                "responses": {"200": _ok, "401": {"description": "Not authenticated, or not admin/ops"}},
            }
        },
        "/admin/scavenge/progress": {
            "get": {
                "summary": "evdb: live progress of the running scavenge",
                "responses": {
                    "200": {
                        "description": "Progress",
                        "content": json_object(),
                    },
                    "401": {"description": "Not authenticated, or not admin/ops"},
                },
            }
        },
        "/admin/scavenge/{scavengeId}": {
            "delete": {
                "summary": "Stop the scavenge with this id (answers once it has stopped)",
                "parameters": [
                    {"name": "scavengeId", "in": "path", "required": True, "schema": {"type": "string"}}
                ],
                "responses": {
                    "200": {"description": "Stopped", "content": TEXT_CONTENT},
                    "401": {"description": "Not authenticated, or not admin/ops"},
                    "404": {"description": "No scavenge with this id is running", "content": TEXT_CONTENT},
                },
            }
        },
    }
)
