"""KurrentDB's projections HTTP API, for the system projections (KurrentDB's ProjectionsController).

- ``GET /projections/any``, ``/projections/all-non-transient``, ``/projections/continuous``: the
  projections' statistics ``{"projections": [...]}``; ``/projections/transient`` and
  ``/projections/onetime``: none (the system projections are continuous).
- ``GET /projection/{name}``: one projection's statistics; ``/projection/{name}/statistics``: the
  same in a ``{"projections": [...]}`` list; ``/state`` and ``/result``: their (empty) state;
  ``/query``: their source.
- ``GET /projection/{name}/config``: the projection's configuration as KurrentDB's ``ProjectionConfig``
  (evdb/projections/config.py); ``PUT`` replaces it while the projection is stopped or faulted (500
  "Cannot update the config of a projection that hasn't been stopped or faulted." otherwise, 400 for a
  body KurrentDB cannot read) and answers ``{"name": ...}``.
- ``POST /projection/{name}/command/enable|disable|abort|reset``: 200 ``{"name": ...}``.
- ``POST /projections/restart``: restart them all.
- ``POST /projections/continuous|transient|onetime`` and ``PUT /projection/{name}/query`` (creating or
  changing a user-defined JavaScript projection): 501 with the reason, as gRPC answers UNIMPLEMENTED;
  ``DELETE /projection/{name}``: 500 "We currently don't allow for the deletion of System
  Projections." (KurrentDB's answer), 404 for any other name.

Errors answer through evdb/errors.py STATUSES (404 not found, 501, 500 failed, 503 not the leader).
Every route needs an authenticated caller; the commands, config, delete and restart ``$admins`` or ``$ops``
(a refused caller gets 401, as KurrentDB answers). The routes are served only when the node runs
projections (``RunProjections`` System or All).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from aiohttp import web

from evdb.errors import InvalidInput, UserProjectionsNotSupported
from evdb.http.bodies import read_body
from evdb.http.common import get_services, json_response, parse_json, require_authenticated, require_ops
from evdb.projections.config import parse_config_update
from evdb.projections.standard import by_name

if TYPE_CHECKING:
    from evdb.projections import SystemProjections

__all__ = ["setup"]


def _projections(request: web.Request) -> SystemProjections:
    projections = get_services(request).projections
    if projections is None:  # routes are not added then; a guard for a node that changed
        raise web.HTTPNotFound(text="The node runs no projections (RunProjections is None).")
    return projections


def _formatted(request: web.Request, details: dict[str, Any]) -> dict[str, Any]:
    """KurrentDB's ``ProjectionStatisticsHttpFormatted``: the statistics and the projection's links."""
    base = f"{request.scheme}://{request.host}/projection/{quote(details['name'], safe='$')}"
    out = dict(details)
    out.update(
        {
            "partitionStateCacheSize": 0,
            "partitionStateCacheEvictions": 0,
            "statusUrl": base,
            "stateUrl": base + "/state",
            "resultUrl": base + "/result",
            "queryUrl": base + "/query?config=yes",
            "enableCommandUrl": base + "/command/enable",
            "disableCommandUrl": base + "/command/disable",
        }
    )
    return out


async def list_projections(request: web.Request) -> web.Response:
    require_authenticated(request)
    projections = _projections(request)
    mode = request.match_info["mode"]
    found = [] if mode in ("transient", "onetime") else projections.statistics()
    return json_response({"projections": [_formatted(request, d) for d in found]})


async def create_projection(request: web.Request) -> web.Response:
    require_authenticated(request)
    _projections(request)
    raise UserProjectionsNotSupported(request.query.get("name", ""))


async def restart(request: web.Request) -> web.Response:
    require_ops(request)
    await _projections(request).restart()
    return web.Response(text="Restarting", content_type="application/json")


async def status(request: web.Request) -> web.Response:
    require_authenticated(request)
    details = _projections(request).statistics(request.match_info["name"])[0]
    return json_response(_formatted(request, details))


async def statistics(request: web.Request) -> web.Response:
    require_authenticated(request)
    found = _projections(request).statistics(request.match_info["name"])
    return json_response({"projections": [_formatted(request, d) for d in found]})


async def state(request: web.Request) -> web.Response:
    require_authenticated(request)
    body = _projections(request).state(request.match_info["name"])
    return web.Response(text=body, content_type="application/json")


async def query(request: web.Request) -> web.Response:
    require_authenticated(request)
    name = request.match_info["name"]
    _projections(request).state(name)  # 404 for an unknown name, 503 on a follower
    definition = by_name(name)
    assert definition is not None
    return web.Response(text=definition.query, content_type="application/javascript")


async def update_query(request: web.Request) -> web.Response:
    require_authenticated(request)
    _projections(request)
    raise UserProjectionsNotSupported(request.match_info["name"])


async def get_config(request: web.Request) -> web.Response:
    require_ops(request)
    config = _projections(request).config(request.match_info["name"])
    return json_response(config.to_http())


async def put_config(request: web.Request) -> web.Response:
    require_ops(request)
    projections = _projections(request)
    name = request.match_info["name"]
    raw = await read_body(request)
    try:
        body = parse_json(raw, "The projection config")
    except InvalidInput as exc:
        raise InvalidInput(f"Failed to parse the projection config: {exc}") from None
    await projections.update_config(name, parse_config_update(body))
    return json_response({"name": name})


async def delete(request: web.Request) -> web.Response:
    require_ops(request)
    _projections(request).delete(request.match_info["name"])
    raise AssertionError("unreachable: delete always refuses")  # pragma: no cover


async def command(request: web.Request) -> web.Response:
    require_ops(request)
    projections = _projections(request)
    name = request.match_info["name"]
    action = request.match_info["command"]
    if action == "enable":
        await projections.enable(name)
    elif action == "disable":
        await projections.disable(name, write_checkpoint=True)
    elif action == "abort":
        await projections.disable(name, write_checkpoint=False)
    else:
        await projections.reset(name)
    return json_response({"name": name})


def setup(app: web.Application) -> None:
    from evdb.http.common import SERVICES

    services = app[SERVICES]
    if services.projections is None:  # KurrentDB serves no projections API without RunProjections
        return
    r = app.router
    r.add_get("/projections/{mode:any|all-non-transient|continuous|transient|onetime}", list_projections)
    r.add_post("/projections/{mode:continuous|transient|onetime}", create_projection)
    r.add_post("/projections/restart", restart)
    r.add_get("/projection/{name}", status)
    r.add_delete("/projection/{name}", delete)
    r.add_get("/projection/{name}/statistics", statistics)
    r.add_get("/projection/{name}/state", state)
    r.add_get("/projection/{name}/result", state)
    r.add_get("/projection/{name}/query", query)
    r.add_put("/projection/{name}/query", update_query)
    r.add_get("/projection/{name}/config", get_config)
    r.add_put("/projection/{name}/config", put_config)
    r.add_post("/projection/{name}/command/{command:enable|disable|abort|reset}", command)
