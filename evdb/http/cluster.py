"""Cluster endpoints: resign the leader, set the node priority; writes on a non-leader.

A write sent to a follower or a read-only replica is forwarded to the leader (the database's remote
writer does it) unless the request carries ``Kurrent-RequireLeader: true`` (or KurrentDB's older
``ES-RequireLeader``/``ES-RequireMaster``): then the answer is ``307 Temporary Redirect`` to the same
path on the leader, as KurrentDB answers.
"""

from __future__ import annotations

from aiohttp import web

from evdb.errors import InvalidInput, NotLeader
from evdb.http.common import get_services, require_ops
from evdb.http.openapi import EXTRA_PATHS

_REQUIRE_LEADER_HEADERS = ("Kurrent-RequireLeader", "ES-RequireLeader", "ES-RequireMaster")
_WRITE_METHODS = ("POST", "PUT", "DELETE")


async def resign(request: web.Request) -> web.Response:
    require_ops(request)
    services = get_services(request)
    if services.cluster is None:
        services.logger.info("Resign request ignored: a single node (ClusterSize 1) stays the leader")
    elif not await services.cluster.resign():
        services.logger.info(
            "Resign request ignored: this node is not the leader (%s)", services.cluster.state
        )
    return web.Response(status=200)


async def set_priority(request: web.Request) -> web.Response:
    require_ops(request)
    services = get_services(request)
    try:
        priority = int(request.match_info["priority"])
    except ValueError:
        raise InvalidInput("The priority must be an integer.") from None
    if not -1000 <= priority <= 1000:
        raise InvalidInput("The priority must be between -1000 and 1000.")
    if services.cluster is None:
        services.logger.info(
            "Node priority %d noted; a single node (ClusterSize 1) holds no elections", priority
        )
        return web.Response(status=200)
    services.cluster.priority = priority
    services.logger.info("Node priority set to %d", priority)
    return web.Response(status=200)


@web.middleware
async def require_leader_middleware(request: web.Request, handler):
    services = get_services(request)
    if (
        request.method in _WRITE_METHODS
        and request.path.startswith("/streams/")
        and services.cluster is not None
        and not services.cluster.is_leader
        and any(request.headers.get(h, "").lower() == "true" for h in _REQUIRE_LEADER_HEADERS)
    ):
        leader = services.cluster.leader_client_endpoint()  # as clients are told it (AdvertiseHostToClientAs)
        if leader is None:
            raise NotLeader()
        host, port = leader
        host = f"[{host}]" if ":" in host else host
        location = f"{services.addresses.scheme}://{host}:{port}{request.path_qs}"
        raise web.HTTPTemporaryRedirect(location)
    return await handler(request)


def setup(app: web.Application) -> None:
    app.router.add_post("/admin/node/resign", resign)
    app.router.add_post("/admin/node/priority/{priority}", set_priority)
    app.middlewares.append(require_leader_middleware)


_EMPTY_200 = {"description": "Done (an empty body); ignored, and logged, on a node that is not the leader"}
_UNAUTHORISED = {"description": "Not authenticated, or without the $ops or $admins role"}
EXTRA_PATHS.append(
    {
        "/admin/node/resign": {
            "post": {
                "summary": "The leader steps down; another member is elected and it becomes a follower",
                "responses": {"200": _EMPTY_200, "401": _UNAUTHORISED},
            }
        },
        "/admin/node/priority/{priority}": {
            "post": {
                "summary": "Set this node's priority in elections (-1000 to 1000)",
                "parameters": [
                    {"name": "priority", "in": "path", "required": True, "schema": {"type": "integer"}}
                ],
                "responses": {
                    "200": {"description": "Set (an empty body)"},
                    "400": {
                        "description": "Not an integer, or out of range",
                        "content": {"text/plain": {"schema": {"type": "string"}}},
                    },
                    "401": _UNAUTHORISED,
                },
            }
        },
    }
)
