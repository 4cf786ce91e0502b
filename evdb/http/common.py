"""What every HTTP handler shares: the node key, the principal, content negotiation, errors."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from aiohttp import web

from evdb.auth import ADMINS, ANONYMOUS, OPS, Principal

if TYPE_CHECKING:
    from evdb.node import Node

__all__ = [
    "NODE",
    "PRINCIPAL",
    "bad_request",
    "get_node",
    "get_principal",
    "json_response",
    "require_authenticated",
    "require_ops",
    "text_or_json",
    "wants_json",
]

NODE: web.AppKey[Node] = web.AppKey("node")
PRINCIPAL: web.RequestKey[Principal] = web.RequestKey("principal", Principal)


def get_node(request: web.Request) -> Node:
    return request.app[NODE]


def get_principal(request: web.Request) -> Principal:
    return request.get(PRINCIPAL, ANONYMOUS)


def wants_json(request: web.Request) -> bool:
    """KurrentDB's content negotiation: JSON for ``Accept: application/json`` or ``?format=json``."""
    if request.query.get("format") == "json":
        return True
    accept = request.headers.get("Accept", "")
    return "json" in accept


def json_response(
    data: Any, status: int = 200, *, content_type: str = "application/json", headers: dict | None = None
) -> web.Response:
    return web.Response(
        text=json.dumps(data, separators=(",", ":")),
        status=status,
        content_type=content_type,
        headers=headers,
    )


def text_or_json(request: web.Request, data: dict[str, Any], status: int = 200) -> web.Response:
    """JSON when asked for, else ``Key: value`` lines (KurrentDB's text form)."""
    if wants_json(request):
        return json_response(data, status)
    text = "\n".join(f"{k[0].upper()}{k[1:]}: {v}" for k, v in data.items())
    return web.Response(text=text, status=status, content_type="text/plain")


def bad_request(reason: str) -> web.HTTPBadRequest:
    return web.HTTPBadRequest(text=reason, content_type="text/plain")


def unauthorized() -> web.HTTPUnauthorized:
    """401 with ``WWW-Authenticate`` and an empty body, as KurrentDB answers."""
    return web.HTTPUnauthorized(headers={"WWW-Authenticate": 'Basic realm="evdb"'}, text="")


def require_authenticated(request: web.Request) -> Principal:
    principal = get_principal(request)
    if not principal.is_authenticated:
        raise unauthorized()
    return principal


def require_ops(request: web.Request, *, legacy: bool = True) -> Principal:
    """Admin or ops. Legacy admin endpoints answer 401 for a missing role; newer ones 403."""
    principal = require_authenticated(request)
    if not principal.has_any({ADMINS, OPS}):
        if legacy:
            raise unauthorized()
        raise web.HTTPForbidden(text="Access denied.", content_type="text/plain")
    return principal


def require_admin(request: web.Request, *, legacy: bool = True) -> Principal:
    principal = require_authenticated(request)
    if not principal.is_admin:
        if legacy:
            raise unauthorized()
        raise web.HTTPForbidden(text="Access denied.", content_type="text/plain")
    return principal
