"""Auto-scavenge endpoints, with KurrentDB's paths, bodies, status codes and roles.

Mapped only when auto-scavenge is enabled on the node (else 404, as KurrentDB). Any node answers:
a node that is not the leader forwards the request to the leader with the caller's credentials;
with no leader known the answer is KurrentDB's 500 problem ``No leader node was found in the cluster``.

- ``GET /auto-scavenge/enabled`` → 200 ``{"enabled": bool}`` (answered by the node itself)
- ``GET /auto-scavenge/status`` → 200 ``{"state", "schedule", "timeUntilNextCycle"}``
- ``POST /auto-scavenge/pause`` → 200 ``{}``; 202 empty while a node scavenge is being stopped
- ``POST /auto-scavenge/resume`` → 200 ``{}``; 400 ``"Auto scavenge process is currently pausing"``
- ``POST /auto-scavenge/configure`` ``{"schedule": "<cron>"}`` → 200 ``{}``; 400 JSON string
- ``GET /auto-scavenge/progress`` (evdb) → the cycle node by node and the last problem seen
- ``POST /auto-scavenge/cycle-now`` (evdb) → 200 ``{"clusterScavengeId", "members"}``: a cluster
  scavenge starts at once, as if the schedule fired now; 400 JSON string when it cannot (one is in
  progress, paused or pausing, the cluster is not healthy)

Reads need an authenticated user, commands ``$ops`` or ``$admins`` (401 without credentials, 403
without the role). With the earlier plugin form (plugin 0.0.1), ``/enabled`` is anonymous and every
other endpoint needs ``$ops``/``$admins``, as that plugin had it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from aiohttp import web

from evdb.autoscavenge.machine import AutoScavengeMachine, CycleNowRefused
from evdb.autoscavenge.schedule import InvalidSchedule, parse_schedule
from evdb.cluster.peers import PeerError
from evdb.errors import InvalidInput, NotLeader
from evdb.http.bodies import read_body
from evdb.http.common import (
    get_principal,
    get_services,
    json_response,
    parse_json,
    require_authenticated,
    require_ops,
)
from evdb.http.openapi import APP_PATHS, json_object

FORWARDED = "X-Evdb-Forwarded-By"


def _compact_json(data: Any, status: int = 200, **kwargs: Any) -> web.Response:
    """Compact JSON: KurrentDB's auto-scavenge answers through ASP.NET's serializer, not the indenting
    codec of its legacy endpoints."""
    return json_response(data, status, compact=True, **kwargs)


NO_LEADER = "No leader node was found in the cluster"
#: how long a node without a known leader waits for one (and for the next one, when the leader it forwarded
#: to stepped down) before answering NO_LEADER: a leader resigns at
#: the end of every auto-scavenge cycle (to be scavenged as a follower), and the next is elected within a
#: few election timeouts; a request arriving then waits for it instead of failing
LEADER_WAIT_SECONDS = 8.0


def _service(request: web.Request):
    return get_services(request).auto_scavenge


def problem(status: int, detail: str) -> web.Response:
    """ASP.NET's problem details (``Results.Problem``), as KurrentDB answers."""
    body = {
        "type": "https://tools.ietf.org/html/rfc9110#section-15.6.1",
        "title": "An error occurred while processing your request.",
        "status": status,
        "detail": detail,
    }
    return _compact_json(body, status, content_type="application/problem+json")


def _json_string(text: str, status: int = 400) -> web.Response:
    return _compact_json(text, status)


def _require_read(request: web.Request) -> None:
    if _service(request).enabling.plugin_form:
        require_ops(request, legacy=False)
    else:
        require_authenticated(request)


async def _leader_within(cluster, timeout: float) -> tuple[str, int] | str | None:
    """``"here"`` when this node leads, else the leader's HTTP endpoint; while none is known (an
    election under way) look again every 0.1 s, for at most ``timeout`` seconds: None then."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        if cluster.is_leader:
            return "here"
        leader = cluster.leader_http_endpoint()
        if leader is not None or loop.time() >= deadline:
            return leader
        await asyncio.sleep(0.1)


async def _on_leader(request: web.Request, local) -> web.Response:
    """Run ``local()`` here when this node leads; else forward the request to the leader."""
    service = _service(request)
    services = get_services(request)
    if not service.active:
        return problem(503, "AutoScavenge is not enabled")
    if request.headers.get(FORWARDED) and not service.cluster.is_leader:
        # forwarded to a node that no longer leads: no second hop; the sender tries the next leader
        return problem(500, NO_LEADER)
    headers = {FORWARDED: service.cluster.self_endpoint, "Accept": request.headers.get("Accept", "*/*")}
    for name in ("Authorization", "Content-Type"):
        if name in request.headers:
            headers[name] = request.headers[name]
    body = await read_body(request)  # sent on inflated (Content-Encoding is not forwarded)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + LEADER_WAIT_SECONDS
    while True:
        leader = await _leader_within(service.cluster, max(0.0, deadline - loop.time()))
        if leader == "here":
            try:
                return await local()
            except NotLeader as exc:
                # it stepped down while the request waited for the auto-scavenge lock, is taking office
                # (it cannot read the streams whole yet), or its state was outdated: the request did
                # nothing; run it again on whichever node leads, within the same bound
                if request.headers.get(FORWARDED) and not service.cluster.is_leader:
                    return problem(500, NO_LEADER)  # no second hop: the sender tries the next leader
                if loop.time() >= deadline:
                    return problem(500, f"{NO_LEADER} ({exc})")
                await asyncio.sleep(0.1)
                continue
        if leader is None:
            return problem(500, NO_LEADER)  # KurrentDB's words: none elected within LEADER_WAIT_SECONDS
        try:
            status, data, content_type = await service.forward(
                leader, request.method, request.path, body, headers
            )
        except PeerError as exc:  # names the leader and the reason (a certificate, say)
            services.logger.warning("Could not forward %s %s: %s", request.method, request.path, exc)
            return problem(500, f"{NO_LEADER} ({exc})")
        # the leader stepped down as the request reached it (it resigns at the end of every cycle):
        # it did nothing with it; send it to the next leader, within the same bound
        if not (status == 500 and NO_LEADER.encode() in data and loop.time() < deadline):
            break
        await asyncio.sleep(0.1)
    response = web.Response(status=status, body=data)
    if content_type:
        response.headers["Content-Type"] = content_type
    return response


async def enabled(request: web.Request) -> web.Response:
    service = _service(request)
    if not service.enabling.plugin_form:
        require_authenticated(request)
    return _compact_json({"enabled": bool(service.active)})


async def status(request: web.Request) -> web.Response:
    return await _leader_view(request, AutoScavengeMachine.status)


async def progress(request: web.Request) -> web.Response:
    return await _leader_view(request, AutoScavengeMachine.progress)


async def _leader_view(
    request: web.Request, view: Callable[[AutoScavengeMachine], dict[str, Any]]
) -> web.Response:
    """A read of the leader's machine (``GET /auto-scavenge/status`` and ``/progress``), for the callers
    :func:`_require_read` lets through: answered here when this node leads, else by the leader."""
    _require_read(request)

    async def local() -> web.Response:
        async with _service(request).leading() as machine:
            return _compact_json(view(machine))

    return await _on_leader(request, local)


async def pause(request: web.Request) -> web.Response:
    require_ops(request, legacy=False)

    async def local() -> web.Response:
        get_services(request).logger.info("Auto-scavenge pause requested by %s", get_principal(request).name)
        async with _service(request).leading() as machine:
            code = await machine.pause()
        if code == 202:
            return web.Response(status=202)
        return _compact_json({})

    return await _on_leader(request, local)


async def resume(request: web.Request) -> web.Response:
    require_ops(request, legacy=False)

    async def local() -> web.Response:
        async with _service(request).leading() as machine:
            reason = await machine.resume()
        if reason is not None:
            return _json_string(reason)
        return _compact_json({})

    return await _on_leader(request, local)


async def cycle_now(request: web.Request) -> web.Response:
    """evdb extension: start a cluster scavenge now; the roles of the other commands."""
    require_ops(request, legacy=False)

    async def local() -> web.Response:
        who = get_principal(request).name
        try:
            async with _service(request).leading() as machine:
                started = await machine.cycle_now(who)
        except CycleNowRefused as exc:
            get_services(request).logger.info("Auto-scavenge cycle-now requested by %s refused: %s", who, exc)
            return _json_string(str(exc))
        return _compact_json({"clusterScavengeId": started.cluster_scavenge_id, "members": started.members})

    return await _on_leader(request, local)


def _is_json(content_type: str) -> bool:
    return content_type == "application/json" or content_type.endswith("+json")


async def _schedule_from(request: web.Request) -> Any:
    """The ``schedule`` of a configure payload; raises a 400 answer for an invalid payload."""
    raw = await read_body(request)
    if not _is_json(request.content_type) or not raw.strip():
        raise web.HTTPBadRequest(text=json.dumps("Invalid payload"), content_type="application/json")
    try:
        body = parse_json(raw)
    except InvalidInput:  # not JSON, NaN, nested too deep: KurrentDB's answer
        raise web.HTTPBadRequest(
            text=json.dumps("Invalid payload"), content_type="application/json"
        ) from None
    if not isinstance(body, dict):
        raise web.HTTPBadRequest(text=json.dumps("Invalid payload"), content_type="application/json")
    found = [v for k, v in body.items() if str(k).lower() == "schedule"]
    if not found:
        raise web.HTTPBadRequest(text=json.dumps("Invalid payload"), content_type="application/json")
    return found[0]


async def configure(request: web.Request) -> web.Response:
    require_ops(request, legacy=False)
    service = _service(request)
    value = await _schedule_from(request)
    try:
        schedule = parse_schedule(value, allow_seconds=service.allow_seconds)
    except InvalidSchedule as exc:
        return _json_string(str(exc))

    async def local() -> web.Response:
        async with service.leading() as machine:
            await machine.configure(schedule)
        return _compact_json({})

    return await _on_leader(request, local)


def setup(app: web.Application) -> None:
    from evdb.http.common import SERVICES

    service = app[SERVICES].auto_scavenge
    if service is None or not service.enabling.mapped:
        return  # not mapped: 404, as KurrentDB when the feature is off
    r = app.router
    r.add_get("/auto-scavenge/enabled", enabled)
    r.add_get("/auto-scavenge/status", status)
    r.add_get("/auto-scavenge/progress", progress)
    r.add_post("/auto-scavenge/pause", pause)
    r.add_post("/auto-scavenge/resume", resume)
    r.add_post("/auto-scavenge/configure", configure)
    r.add_post("/auto-scavenge/cycle-now", cycle_now)
    app[APP_PATHS] = [*app.get(APP_PATHS, []), _openapi_paths()]


# -- OpenAPI ------------------------------------------------------------------------------------------
_UNAUTH = {"description": "Not authenticated, or wrong credentials"}
_FORBIDDEN = {"description": "Authenticated without the $ops or $admins role"}
_NO_LEADER = {
    "description": "No leader (problem details)",
    "content": {"application/problem+json": {"schema": {"type": "object"}}},
}
_DISABLED = {
    "description": "AutoScavenge is not enabled (not licensed): problem details",
    "content": {"application/problem+json": {"schema": {"type": "object"}}},
}
_EMPTY_OBJECT = json_object()
_JSON_STRING = {"application/json": {"schema": {"type": "string"}}}


def _openapi_paths() -> dict[str, Any]:
    status = json_object(
        {
            "state": {
                "type": "string",
                "enum": ["NotConfigured", "Waiting", "InProgress", "Pausing", "Paused"],
            },
            "schedule": {"type": "string", "nullable": True},
            "timeUntilNextCycle": {"type": "string", "nullable": True},
        },
        ["state", "schedule", "timeUntilNextCycle"],
    )
    common = {"401": _UNAUTH, "500": _NO_LEADER, "503": _DISABLED}
    return {
        "/auto-scavenge/enabled": {
            "get": {
                "summary": "Whether auto-scavenge runs on this node",
                "responses": {
                    "200": {
                        "description": "OK",
                        "content": json_object({"enabled": {"type": "boolean"}}, ["enabled"]),
                    },
                    "401": _UNAUTH,
                },
            }
        },
        "/auto-scavenge/status": {
            "get": {
                "summary": "The auto-scavenge state, schedule and time until the next cluster scavenge",
                "responses": {
                    "200": {"description": "OK", "content": status},
                    **common,
                },
            }
        },
        "/auto-scavenge/progress": {
            "get": {
                "summary": "evdb: the running cluster scavenge node by node, and the last problem seen",
                "responses": {"200": {"description": "OK", "content": _EMPTY_OBJECT}, **common},
            }
        },
        "/auto-scavenge/pause": {
            "post": {
                "summary": "Pause auto-scavenge (stops the running node scavenge)",
                "responses": {
                    "200": {"description": "Paused", "content": _EMPTY_OBJECT},
                    "202": {"description": "Pausing: the node scavenge is being stopped"},
                    "403": _FORBIDDEN,
                    **common,
                },
            }
        },
        "/auto-scavenge/resume": {
            "post": {
                "summary": "Resume auto-scavenge where it left off",
                "responses": {
                    "200": {"description": "Resumed", "content": _EMPTY_OBJECT},
                    "400": {"description": "Still pausing", "content": _JSON_STRING},
                    "403": _FORBIDDEN,
                    **common,
                },
            }
        },
        "/auto-scavenge/cycle-now": {
            "post": {
                "summary": (
                    "Start a cluster scavenge now, as if the schedule fired (evdb extension; $ops or $admins)"
                ),
                "responses": {
                    "200": {
                        "description": "Started: the cluster scavenge's id and the members it scavenges",
                        "content": json_object(
                            {
                                "clusterScavengeId": {"type": "string"},
                                "members": {"type": "array", "items": {"type": "string"}},
                            },
                            ["clusterScavengeId", "members"],
                        ),
                    },
                    "400": {
                        "description": (
                            "Not started: a cluster scavenge is in progress, auto-scavenge is paused or "
                            "pausing, or not every cluster member is alive"
                        ),
                        "content": _JSON_STRING,
                    },
                    "403": _FORBIDDEN,
                    **common,
                },
            }
        },
        "/auto-scavenge/configure": {
            "post": {
                "summary": "Set the auto-scavenge schedule (a five-field CRON expression, UTC)",
                "requestBody": {
                    "required": True,
                    "content": json_object({"schedule": {"type": "string"}}, ["schedule"]),
                },
                "responses": {
                    "200": {"description": "Configured", "content": _EMPTY_OBJECT},
                    "400": {"description": "Invalid CRON expression or payload", "content": _JSON_STRING},
                    "403": _FORBIDDEN,
                    **common,
                },
            }
        },
    }
