"""Builds the node's aiohttp application: middlewares, then every feature's routes."""

from __future__ import annotations

import asyncio
import importlib
import time
from typing import TYPE_CHECKING

from aiohttp import web

from evdb.auth import ANONYMOUS, parse_basic_authorization
from evdb.autoscavenge.nodeauth import NODE_SCHEME, authenticate_node
from evdb.http.answers import REOPENING, ClientLimit, authenticate_now, error_answer
from evdb.http.common import LOOP, PRINCIPAL, SERVICES, AppLoop, unauthorized
from evdb.tls.user_certificates import certificate_principal

if TYPE_CHECKING:
    from evdb.services import ApiServices

__all__ = ["CLIENT_LIMIT", "ROUTE_MODULES", "build_app"]

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
#: the app's per-client limit: its middleware and the lean path (evdb/http/lean.py) count in it
CLIENT_LIMIT: web.AppKey[ClientLimit] = web.AppKey("client_limit", ClientLimit)
#: paths served while the database is closed for a moment (truncate_and_reopen)
_WITHOUT_DATABASE = frozenset({"/ping", "/info", "/metrics", "/health/live"})


@web.middleware
async def auth_middleware(request: web.Request, handler):
    """Resolve ``Authorization: Basic``; wrong credentials are a 401 on every endpoint."""
    header = request.headers.get("Authorization")
    services = request.app[SERVICES]
    if not header and services.options.user_certificates_enabled:  # KurrentDB's X.509 user certificates
        by_certificate = await certificate_principal(
            request.transport,
            settings=services.settings,
            license=services.license,
            clock=services.clock,
            users=services.database.users,
        )
        if by_certificate is not None:
            request[PRINCIPAL] = by_certificate
            return await handler(request)
    principal = authenticate_now(services, header)  # no header, or credentials signed in before
    if principal is None:
        assert header
        if header.startswith(f"{NODE_SCHEME} "):
            # the auto-scavenge leader driving this node's scavenge (evdb/autoscavenge/nodeauth.py)
            principal = await asyncio.to_thread(authenticate_node, services.database.db, header)
        elif request.path in _PUBLIC and not services.database.users.may_judge_now():
            # a route anyone may call, on a member without a sign-in lease (no leader this moment):
            # served as to an anonymous caller, without judging the credentials, rather than a 503.
            # Else `evdb cluster status`, the dashboard and clients' discovery, which send credentials
            # everywhere, see every node as unreachable exactly when an election is under way
            principal = ANONYMOUS
        else:
            parsed = parse_basic_authorization(header)
            if parsed is None:
                raise web.HTTPUnauthorized(
                    headers=_UNAUTHORIZED_HEADERS, text="Malformed Authorization header."
                )
            # a worker thread for the record read and scrypt; a success is remembered for the header.
            # A reload and its outcome are judged on the node's own user records, lease or not: the
            # spec's rolling certificate update reloads nodes that, by design, cannot reach the others
            # (and so hold no sign-in lease); they touch only the node's own files and return no data
            principal = await services.database.users.sign_in_header(
                header, *parsed, leased=request.path not in _WITHOUT_LEASE
            )
        if principal is None:
            raise unauthorized()
    request[PRINCIPAL] = principal
    return await handler(request)


#: routes whose callers a cluster member judges without a sign-in lease (evdb/cluster/lease.py)
_WITHOUT_LEASE = frozenset({"/admin/reloadconfig", "/admin/certificates"})
#: routes that need no authority (anonymous callers may use them, and they answer every caller alike)
_PUBLIC = frozenset({"/gossip", "/ping", "/info", "/health/live"})


@web.middleware
async def error_middleware(request: web.Request, handler):
    """Map evdb's errors to HTTP answers (evdb.http.answers.error_answer); never let an unexpected
    error escape as a bare 500."""
    services = request.app[SERVICES]
    started = time.perf_counter()
    if services.database.db is None and request.path not in _WITHOUT_DATABASE:
        # a follower cut its diverged log and is reopening the database: a moment's unavailability
        response = REOPENING.response()
        services.metrics.observe_http(request, response.status, time.perf_counter() - started)
        return response
    generation = services.database.generation
    try:
        response = await handler(request)
    except Exception as exc:
        reopened = services.database.db is None or services.database.generation != generation
        if isinstance(exc, web.HTTPException) and not reopened:
            services.metrics.observe_http(request, exc.status, time.perf_counter() - started)
            raise
        response = error_answer(services, exc, request.method, request.path, generation).response()
    services.metrics.observe_http(request, response.status, time.perf_counter() - started)
    return response


def _client_limit_middleware(limit: ClientLimit):
    """At most ``limit.limit`` requests in progress per remote address
    (HttpMaxConcurrentRequestsPerClient); the next gets 429 with an empty body, before authentication
    is looked at."""

    @web.middleware
    async def client_limit_middleware(request: web.Request, handler):
        client = request.remote or ""
        if limit.full(client):
            services = request.app[SERVICES]
            services.logger.warning(
                "Refused a request from %s: %d requests of that client are in progress "
                "(HttpMaxConcurrentRequestsPerClient)",
                client,
                limit.limit,
            )
            return web.Response(status=429, headers={"Retry-After": "1"})
        limit.enter(client)
        try:
            return await handler(request)
        finally:
            limit.leave(client)

    return client_limit_middleware


async def _remember_loop(app: web.Application) -> None:
    """The loop the app serves on from now (see request_loop), set at each start."""
    app[LOOP].loop = asyncio.get_running_loop()


def build_app(services: ApiServices) -> web.Application:
    o = services.options
    limit = ClientLimit(o.http_max_concurrent_requests_per_client)
    app = web.Application(
        middlewares=[
            _client_limit_middleware(limit),
            error_middleware,
            auth_middleware,
        ],
        client_max_size=o.http_max_request_body_size,
    )
    app[SERVICES] = services
    app[LOOP] = AppLoop()
    app[CLIENT_LIMIT] = limit
    app.on_startup.append(_remember_loop)
    for name in ROUTE_MODULES:
        importlib.import_module(name).setup(app)
    return app
