"""What every HTTP handler shares: the node key, the principal, content negotiation, errors."""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

from aiohttp import web

from evdb.auth import ADMINS, ANONYMOUS, OPS, Principal
from evdb.errors import InvalidInput

if TYPE_CHECKING:
    from evdb.node import Node

__all__ = [
    "NODE",
    "PRINCIPAL",
    "bad_request",
    "get_node",
    "get_principal",
    "json_response",
    "parse_json",
    "read_json",
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


def _refuse_constant(name: str) -> Any:
    raise InvalidInput(f"{name} is not a JSON value (JSON has no NaN or infinities).")


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise InvalidInput(f"The number {text[:40]} is too large for JSON (beyond a 64-bit float).")
    return value


def parse_json(body: bytes | str, what: str = "The body") -> Any:
    """The one JSON parser of request bodies (and of the JSON inside them): KurrentDB's JSON, so
    ``NaN``, ``Infinity``, ``-Infinity`` and numbers beyond a 64-bit float (which Python would read as
    infinity) are refused, and so is nesting too deep to parse. Raises InvalidInput (a 400)."""
    try:
        return json.loads(body, parse_constant=_refuse_constant, parse_float=_finite_float)
    except InvalidInput as exc:
        raise InvalidInput(f"{what} is not valid JSON: {exc}") from None
    except RecursionError:
        raise InvalidInput(f"{what} is not accepted: its JSON nests too deep.") from None
    except ValueError:  # includes UnicodeDecodeError
        raise InvalidInput(f"{what} is not valid JSON.") from None


async def read_json(request: web.Request, what: str = "The body", *, empty: Any = None) -> Any:
    """The request's body through :func:`parse_json`; ``empty`` when there is none (if not None)."""
    body = await request.read()
    if not body.strip() and empty is not None:
        return empty
    return parse_json(body, what)


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
