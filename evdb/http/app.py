"""Builds the node's aiohttp application: middlewares, then every feature's routes."""

from __future__ import annotations

import asyncio
import importlib
import time
from typing import TYPE_CHECKING

from aiohttp import web

from evdb.auth import ANONYMOUS, parse_basic_authorization
from evdb.errors import (
    AccessDenied,
    DatabaseClosed,
    EvdbError,
    InvalidInput,
    NotLeader,
    ScavengeAlreadyRunning,
    ScavengeNotFound,
    StreamDeleted,
    StreamNotFound,
    WrongExpectedVersion,
)
from evdb.http.common import NODE, PRINCIPAL, unauthorized

if TYPE_CHECKING:
    from evdb.node import Node

__all__ = ["ROUTE_MODULES", "build_app"]

#: Modules that add routes: each has ``setup(app)``.
ROUTE_MODULES = (
    "evdb.http.info",
    "evdb.http.admin",
    "evdb.http.cluster",
    "evdb.http.scavenge",
    "evdb.http.streams",
    "evdb.http.users",
    "evdb.http.openapi",
)

_UNAUTHORIZED_HEADERS = {"WWW-Authenticate": 'Basic realm="evdb"'}


@web.middleware
async def auth_middleware(request: web.Request, handler):
    """Resolve ``Authorization: Basic``; wrong credentials are a 401 on every endpoint."""
    header = request.headers.get("Authorization")
    if header:
        parsed = parse_basic_authorization(header)
        if parsed is None:
            raise web.HTTPUnauthorized(headers=_UNAUTHORIZED_HEADERS, text="Malformed Authorization header.")
        node = request.app[NODE]
        principal = await asyncio.to_thread(node.users.authenticate, *parsed)
        if principal is None:
            raise unauthorized()
        request[PRINCIPAL] = principal
    else:
        request[PRINCIPAL] = ANONYMOUS
    return await handler(request)


@web.middleware
async def error_middleware(request: web.Request, handler):
    """Map evdb's errors to HTTP answers; never let an unexpected error escape as a bare 500."""
    node = request.app[NODE]
    started = time.perf_counter()
    try:
        response = await handler(request)
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
    except StreamDeleted as exc:
        response = web.Response(status=410, text=str(exc))
    except StreamNotFound as exc:
        response = web.Response(status=404, text=str(exc))
    except (ScavengeAlreadyRunning, InvalidInput) as exc:
        response = web.Response(status=400, text=str(exc))
    except ScavengeNotFound as exc:
        response = web.Response(status=404, text=str(exc))
    except AccessDenied as exc:
        response = web.Response(status=403, text=str(exc))
    except NotLeader as exc:
        response = web.Response(status=503, text=str(exc))
    except DatabaseClosed as exc:
        response = web.Response(status=503, text=str(exc))
    except EvdbError as exc:
        node.logger.error("Request %s %s failed: %s", request.method, request.path, exc)
        response = web.Response(status=500, text=str(exc))
    except asyncio.CancelledError:
        raise
    except Exception:
        node.logger.exception("Unhandled error in %s %s", request.method, request.path)
        response = web.Response(status=500, text="Internal server error; see the node's log.")
    node.metrics.observe_http(request, response.status, time.perf_counter() - started)
    return response


def build_app(node: Node) -> web.Application:
    app = web.Application(middlewares=[error_middleware, auth_middleware], client_max_size=64 * 1024 * 1024)
    app[NODE] = node
    for name in ROUTE_MODULES:
        importlib.import_module(name).setup(app)
    return app
