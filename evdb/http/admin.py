"""Admin endpoints: shutdown, merge indexes and the logs endpoint (scavenge, reload and cluster commands
join in their own modules)."""

from __future__ import annotations

import asyncio
import os
import re
import uuid
from datetime import UTC, datetime

from aiohttp import web

from evdb.http.common import get_services, json_response, negotiated, require_ops

#: KurrentDB's logs endpoint lists the newest JSON log files, at most this many
_MAX_LOG_FILES = 1000
_LOG_FILE = re.compile(r"^[A-Za-z0-9._-]+\.json$")


async def shutdown(request: web.Request) -> web.Response:
    require_ops(request)
    services = get_services(request)
    services.logger.info("Shutting down because /admin/shutdown request has been received.")
    asyncio.get_running_loop().call_soon(services.shutdown_requested.set)
    return web.Response(status=200)


async def merge_indexes(request: web.Request) -> web.Response:
    """KurrentDB's ``POST /admin/mergeindexes``: merge every index table into one; the answer names
    the request (``mergeIndexesId``), in the format asked for."""
    require_ops(request)
    services = get_services(request)
    services.logger.info("Request merge indexes because /admin/mergeindexes request has been received.")
    correlation = str(uuid.uuid4())
    await asyncio.to_thread(services.database.open_db().index.merge_indexes)
    return negotiated(request, "MergeIndexesResultDto", {"mergeIndexesId": correlation})


def _logs_folder(request: web.Request) -> str:
    """The node's log folder, if the licence grants KurrentDB's LOGS_ENDPOINT (else, as KurrentDB's
    plugin without it, there is no endpoint: 404); the caller must be an operator or an admin (401)."""
    services = get_services(request)
    license_ = services.license
    if license_ is None or not license_.allows("LOGS_ENDPOINT", services.clock.time()):
        raise web.HTTPNotFound()
    require_ops(request)
    folder = os.path.join(services.options.log, services.name)  # evdb.logs: <log_dir>/<node name>/
    if not os.path.isdir(folder):
        raise web.HTTPNotFound()
    return folder


def _iso_local(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat()


async def list_logs(request: web.Request) -> web.Response:
    """KurrentDB's logs endpoint: the node's JSON log files, newest first (name, times, size)."""
    folder = _logs_folder(request)
    rows = []
    for entry in os.scandir(folder):
        if entry.is_file() and entry.name.endswith(".json"):
            stat = entry.stat()
            rows.append((stat.st_mtime, entry.name, stat))
    rows.sort(reverse=True)
    body = [
        {
            "name": name,
            "createdAt": _iso_local(getattr(stat, "st_birthtime", stat.st_ctime)),
            "lastModified": _iso_local(mtime),
            "size": stat.st_size,
        }
        for mtime, name, stat in rows[:_MAX_LOG_FILES]
    ]
    return json_response(body, content_type="application/json")


async def get_log(request: web.Request) -> web.StreamResponse:
    """One log file of the logs endpoint (only ``.json`` files are served, as KurrentDB's)."""
    folder = _logs_folder(request)
    name = request.match_info["name"]
    path = os.path.join(folder, name)
    if not _LOG_FILE.match(name) or not os.path.isfile(path):
        raise web.HTTPNotFound()
    return web.FileResponse(path, headers={"Content-Type": "application/json"})


def setup(app: web.Application) -> None:
    app.router.add_post("/admin/shutdown", shutdown)
    app.router.add_post("/admin/mergeindexes", merge_indexes)
    app.router.add_get("/admin/logs", list_logs)
    app.router.add_get("/admin/logs/", list_logs)
    app.router.add_get("/admin/logs/{name}", get_log)
