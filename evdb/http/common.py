"""What every HTTP handler shares: the node's services (evdb/services.py ApiServices), the principal, content negotiation, errors."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from xml.sax.saxutils import escape

from aiohttp import web

from evdb.auth import ADMINS, ANONYMOUS, OPS, Principal
from evdb.errors import InvalidInput
from evdb.http.bodies import read_body

if TYPE_CHECKING:
    from evdb.services import ApiServices

__all__ = [
    "ADMIN_FORMATS",
    "APPLICATION_XML",
    "JSON",
    "LOOP",
    "PRINCIPAL",
    "SERVICES",
    "TEXT",
    "XML",
    "AppLoop",
    "bad_request",
    "get_principal",
    "get_services",
    "json_response",
    "negotiated",
    "parse_json",
    "read_json",
    "request_loop",
    "require_authenticated",
    "require_ops",
    "response_format",
    "text_or_json",
    "wants_json",
    "xml_document",
]

SERVICES: web.AppKey[ApiServices] = web.AppKey("services")
PRINCIPAL: web.RequestKey[Principal] = web.RequestKey("principal", Principal)


class AppLoop:
    """The event loop an application serves on, kept (set as the app starts, evdb/http/app.py; else
    looked up at its first use): ``asyncio.get_running_loop()`` makes a ``getpid`` system call at each
    call on Python 3.11."""

    __slots__ = ("loop",)

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None

    def running(self) -> asyncio.AbstractEventLoop:
        """The kept loop (called on it)."""
        loop = self.loop
        if loop is None:
            loop = self.loop = asyncio.get_running_loop()
        return loop


LOOP: web.AppKey[AppLoop] = web.AppKey("loop", AppLoop)


def get_services(request: web.Request) -> ApiServices:
    return request.app[SERVICES]


def request_loop(request: web.Request) -> asyncio.AbstractEventLoop:
    """The running event loop of a request's handler, without a system call after the app's first."""
    held = request.app.get(LOOP)
    if held is None:  # an application not made by build_app
        return asyncio.get_running_loop()
    return held.running()


def get_principal(request: web.Request) -> Principal:
    return request.get(PRINCIPAL, ANONYMOUS)


def wants_json(request: web.Request) -> bool:
    """KurrentDB's content negotiation: JSON for ``Accept: application/json`` or ``?format=json``."""
    if request.query.get("format") == "json":
        return True
    accept = request.headers.get("Accept", "")
    return "json" in accept


def json_response(
    data: Any,
    status: int = 200,
    *,
    content_type: str = "application/json",
    headers: dict | None = None,
    compact: bool = False,
) -> web.Response:
    """JSON indented by two spaces, as KurrentDB's HTTP codec writes it (Json.NET, ``Formatting.Indented``);
    ``compact`` for the answers KurrentDB writes with ASP.NET's serializer (auto-scavenge)."""
    text = (
        json.dumps(data, separators=(",", ":")) if compact else json.dumps(data, indent=2, ensure_ascii=False)
    )
    return web.Response(text=text, status=status, content_type=content_type, headers=headers)


# -- KurrentDB's content negotiation (KestrelToInternalBridgeMiddleware.SelectResponseCodec) -------------
JSON, TEXT, XML, APPLICATION_XML = "application/json", "text/plain", "text/xml", "application/xml"
#: the formats of KurrentDB's legacy admin endpoints (AdminController), the first the default
ADMIN_FORMATS = (TEXT, JSON, XML, APPLICATION_XML)
_FORMAT_PARAMETER = {"json": JSON, "text": TEXT, "xml": XML}
NOT_ACCEPTABLE = "Requested URI is not available in requested format"


def _suits(media: tuple[str, str], fmt: str) -> bool:
    kind, sub = media
    own_kind, own_sub = fmt.split("/")
    return kind == "*" or (kind == own_kind and sub in ("*", own_sub))


def _accepted(header: str) -> list[tuple[str, str]]:
    """The media types of an Accept header, highest ``q`` first (ties in their order); unreadable
    ones are skipped."""
    ranked = []
    for position, part in enumerate(header.split(",")):
        pieces = [p.strip() for p in part.split(";")]
        kind, _, sub = pieces[0].lower().partition("/")
        if not kind or not sub:
            continue
        q = 1.0
        for parameter in pieces[1:]:
            name, _, value = parameter.partition("=")
            if name.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        ranked.append((-q, position, (kind, sub)))
    return [media for _, _, media in sorted(ranked)]


def response_format(request: web.Request, formats: tuple[str, ...] = ADMIN_FORMATS) -> str:
    """The format of the answer, chosen as KurrentDB chooses its codec: ``?format=json|text|xml``, else
    the Accept header (highest ``q`` first, the first of ``formats`` that suits each), else the first of
    ``formats``. None suits: ``406 Not Acceptable`` (``Accept: text/html`` on an admin endpoint)."""
    wanted = request.query.get("format", "").lower()
    accept = request.headers.get("Accept", "").strip()
    if wanted:
        kind, _, sub = _FORMAT_PARAMETER.get(wanted, "none/none").partition("/")
        candidates = [(kind, sub)]
    elif accept:
        candidates = _accepted(accept)
    else:
        return formats[0]
    for media in candidates:
        for fmt in formats:
            if _suits(media, fmt):
                return fmt
    raise web.HTTPNotAcceptable(reason=NOT_ACCEPTABLE, text="")


def _xml_name(key: str) -> str:
    """A camelCase JSON name as the .NET property it comes from: ``scavengeId`` → ``ScavengeId``."""
    for short in ("es", "db"):  # KurrentDB's ESVersion, DBVersion
        if key.startswith(short) and key[2:3].isupper():
            return short.upper() + key[2:]
    return key[:1].upper() + key[1:]


def _xml_element(name: str, value: Any, items: Mapping[str, str]) -> str:
    if value is None:
        return ""
    if isinstance(value, Mapping):
        inner = "".join(_xml_element(_xml_name(str(k)), v, items) for k, v in value.items())
    elif isinstance(value, list | tuple):
        item = items.get(name, "Item")
        inner = "".join(_xml_element(item, v, items) for v in value)
    elif isinstance(value, bool):
        inner = "true" if value else "false"
    else:
        inner = escape(str(value))
    return f"<{name}>{inner}</{name}>" if inner else f"<{name} />"


def xml_document(root: str, data: Any, items: Mapping[str, str] | None = None) -> str:
    """``data`` as .NET's XmlSerializer writes the object KurrentDB answers with (its XML codec): the
    declaration, the root named after the class with the two schema namespaces, one element per
    property (PascalCase; an absent value is left out, an empty one is ``<Name />``); list elements are
    named by ``items`` (the list's element name → the element type's name)."""
    declaration = '<?xml version="1.0" encoding="utf-8"?>'
    if not isinstance(data, Mapping):  # a string: <string>value</string>
        return declaration + _xml_element(root, data, {})
    body = _xml_element(root, data, items or {})
    namespaces = (
        ' xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" xmlns:xsd="http://www.w3.org/2001/XMLSchema"'
    )
    name_end = len(root) + 1
    if body.endswith(" />"):
        return f"{declaration}{body[:name_end]}{namespaces} />"
    return f"{declaration}{body[:name_end]}{namespaces}{body[name_end:]}"


def negotiated(
    request: web.Request,
    dto: str,
    data: Any,
    *,
    formats: tuple[str, ...] = ADMIN_FORMATS,
    status: int = 200,
    items: Mapping[str, str] | None = None,
    text: str | None = None,
) -> web.Response:
    """``data`` in the format the request asks for (:func:`response_format`): indented JSON, KurrentDB's
    text form (``Key: value, Key: value``, or ``text``), or XML (:func:`xml_document`, ``dto`` the class
    name KurrentDB serializes)."""
    fmt = response_format(request, formats)
    if fmt == JSON:
        return json_response(data, status)
    if fmt == TEXT:
        if text is None:
            pairs = data.items() if isinstance(data, Mapping) else []
            text = ", ".join(f"{_xml_name(k)}: {v}" for k, v in pairs) if pairs else str(data)
        return web.Response(text=text, status=status, content_type=TEXT)
    return web.Response(text=xml_document(dto, data, items), status=status, content_type=fmt)


def _refuse_constant(name: str) -> Any:
    raise InvalidInput(f"{name} is not a JSON value (JSON has no NaN or infinities).")


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise InvalidInput(f"The number {text[:40]} is too large for JSON (beyond a 64-bit float).")
    return value


#: one decoder for every request (json.loads with hooks would build a new one per call)
_DECODER = json.JSONDecoder(parse_constant=_refuse_constant, parse_float=_finite_float)


def parse_json(body: bytes | str, what: str = "The body") -> Any:
    """The one JSON parser of request bodies (and of the JSON inside them): KurrentDB's JSON, so
    ``NaN``, ``Infinity``, ``-Infinity`` and numbers beyond a 64-bit float (which Python would read as
    infinity) are refused, and so is nesting too deep to parse. Raises InvalidInput (a 400)."""
    try:
        if isinstance(body, str):
            if body.startswith("\ufeff"):  # as json.loads: a BOM in text is not JSON
                raise ValueError("Unexpected UTF-8 BOM")
            return _DECODER.decode(body)
        # bytes as json.loads reads them: UTF-8, -16 or -32 told apart by their first bytes
        return _DECODER.decode(body.decode(json.detect_encoding(body), "surrogatepass"))
    except InvalidInput as exc:
        raise InvalidInput(f"{what} is not valid JSON: {exc}") from None
    except RecursionError:
        raise InvalidInput(f"{what} is not accepted: its JSON nests too deep.") from None
    except ValueError:  # includes UnicodeDecodeError
        raise InvalidInput(f"{what} is not valid JSON.") from None


async def read_json(request: web.Request, what: str = "The body", *, empty: Any = None) -> Any:
    """The request's body (evdb/http/bodies.py: inflated, bounded) through :func:`parse_json`;
    ``empty`` when there is none (if not None)."""
    body = await read_body(request)
    if not body.strip() and empty is not None:
        return empty
    return parse_json(body, what)


def text_or_json(
    request: web.Request, data: dict[str, Any], status: int = 200, *, dto: str = "Result"
) -> web.Response:
    """A legacy admin answer in the format asked for (:func:`negotiated`): text by default (KurrentDB's
    ``Key: value, Key: value``), JSON, or XML of the .NET class ``dto``."""
    return negotiated(request, dto, data, status=status)


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
