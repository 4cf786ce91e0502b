"""Builds the node's aiohttp application: middlewares, then every feature's routes."""

from __future__ import annotations

import asyncio
import errno
import importlib
import time
from typing import TYPE_CHECKING

from aiohttp import web

from evdb.auth import ANONYMOUS, parse_basic_authorization
from evdb.autoscavenge.nodeauth import NODE_SCHEME, authenticate_node
from evdb.errors import DatabaseReopening, EvdbError, WrongExpectedVersion, status_of
from evdb.http.common import LOOP, NODE, PRINCIPAL, AppLoop, unauthorized

if TYPE_CHECKING:
    from evdb.node import Node

__all__ = ["ROUTE_MODULES", "build_app"]

#: Modules that add routes: each has ``setup(app)``.
ROUTE_MODULES = (
    "evdb.http.info",
    "evdb.http.admin",
    "evdb.http.reload",
    "evdb.http.cluster",
    "evdb.http.scavenge",
    "evdb.http.autoscavenge",
    "evdb.http.backup",
    "evdb.http.streams",
    "evdb.http.persistent",
    "evdb.http.projections",
    "evdb.http.users",
    "evdb.http.openapi",
    "evdb.webui.routes",
)

_UNAUTHORIZED_HEADERS = {"WWW-Authenticate": 'Basic realm="evdb"'}
#: paths served while the database is closed for a moment (truncate_and_reopen)
_WITHOUT_DATABASE = frozenset({"/ping", "/info", "/metrics"})


@web.middleware
async def auth_middleware(request: web.Request, handler):
    """Resolve ``Authorization: Basic``; wrong credentials are a 401 on every endpoint."""
    header = request.headers.get("Authorization")
    if header and header.startswith(f"{NODE_SCHEME} "):
        # the auto-scavenge leader driving this node's scavenge (evdb/autoscavenge/nodeauth.py)
        node = request.app[NODE]
        principal = await asyncio.to_thread(authenticate_node, node.db, header)
        if principal is None:
            raise unauthorized()
        request[PRINCIPAL] = principal
    elif header:
        parsed = parse_basic_authorization(header)
        if parsed is None:
            raise web.HTTPUnauthorized(headers=_UNAUTHORIZED_HEADERS, text="Malformed Authorization header.")
        node = request.app[NODE]
        # cached credentials on the loop, a worker thread only for a miss (the record read and scrypt)
        principal = await node.users.sign_in(*parsed)
        if principal is None:
            raise unauthorized()
        request[PRINCIPAL] = principal
    else:
        request[PRINCIPAL] = ANONYMOUS
    return await handler(request)


class _ReopenedUnderRequest(Exception):
    """A request failed because the node closed and reopened its database while it ran."""


@web.middleware
async def error_middleware(request: web.Request, handler):
    """Map evdb's errors to HTTP answers; never let an unexpected error escape as a bare 500."""
    node = request.app[NODE]
    started = time.perf_counter()
    if node.db is None and request.path not in _WITHOUT_DATABASE:
        # a follower cut its diverged log and is reopening the database: a moment's unavailability
        response = web.Response(
            status=503,
            text=DatabaseReopening.MESSAGE,
            headers={"Retry-After": "1"},
        )
        node.metrics.observe_http(request, response.status, time.perf_counter() - started)
        return response
    generation = node.db_generation
    try:
        try:
            response = await handler(request)
        except Exception as exc:
            if node.db is not None and node.db_generation == generation:
                raise
            raise _ReopenedUnderRequest() from exc
    except _ReopenedUnderRequest as exc:
        # the database was closed under the request (a follower cutting a diverged tail): nothing of
        # it was acknowledged; the client retries in a moment
        node.logger.info(
            "Request %s %s met the database reopening: %s", request.method, request.path, exc.__cause__
        )
        response = web.Response(
            status=503,
            text=DatabaseReopening.MESSAGE,
            headers={"Retry-After": "1"},
        )
    except web.HTTPException as exc:
        node.metrics.observe_http(request, exc.status, time.perf_counter() - started)
        raise
    except WrongExpectedVersion as exc:
        response = web.Response(
            status=400,
            text="Wrong expected EventNumber",
            headers={
                "Kurrent-CurrentVersion": str(exc.current_version),
                "ES-CurrentVersion": str(exc.current_version),
            },
        )
    except EvdbError as exc:
        known = status_of(exc)  # the one table of statuses (evdb/errors.py), shared with gRPC
        if known is None:
            node.logger.error("Request %s %s failed: %s", request.method, request.path, exc)
        response = web.Response(status=known[0] if known else 500, text=str(exc))
    except asyncio.CancelledError:
        raise
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            node.logger.exception("Unhandled error in %s %s", request.method, request.path)
            response = web.Response(status=500, text="Internal server error; see the node's log.")
        else:  # the database logged it and rolled the write back
            response = web.Response(
                status=507, text=f"The node's disk is full ({exc.strerror}): the write was not written."
            )
    except Exception:
        node.logger.exception("Unhandled error in %s %s", request.method, request.path)
        response = web.Response(status=500, text="Internal server error; see the node's log.")
    node.metrics.observe_http(request, response.status, time.perf_counter() - started)
    return response


def _client_limit_middleware(limit: int):
    """At most ``limit`` requests in progress per remote address (HttpMaxConcurrentRequestsPerClient);
    the next gets 429 with an empty body, before authentication is looked at."""
    in_progress: dict[str, int] = {}

    @web.middleware
    async def client_limit_middleware(request: web.Request, handler):
        client = request.remote or ""
        if in_progress.get(client, 0) >= limit:
            node = request.app[NODE]
            node.logger.warning(
                "Refused a request from %s: %d requests of that client are in progress "
                "(HttpMaxConcurrentRequestsPerClient)",
                client,
                limit,
            )
            return web.Response(status=429, headers={"Retry-After": "1"})
        in_progress[client] = in_progress.get(client, 0) + 1
        try:
            return await handler(request)
        finally:
            left = in_progress[client] - 1
            if left:
                in_progress[client] = left
            else:
                del in_progress[client]

    return client_limit_middleware


async def _remember_loop(app: web.Application) -> None:
    """The loop the app serves on from now (see request_loop), set at each start."""
    app[LOOP].loop = asyncio.get_running_loop()


def build_app(node: Node) -> web.Application:
    o = node.options
    app = web.Application(
        middlewares=[
            _client_limit_middleware(o.http_max_concurrent_requests_per_client),
            error_middleware,
            auth_middleware,
        ],
        client_max_size=o.http_max_request_body_size,
    )
    app[NODE] = node
    app[LOOP] = AppLoop()
    app.on_startup.append(_remember_loop)
    for name in ROUTE_MODULES:
        importlib.import_module(name).setup(app)
    return app
