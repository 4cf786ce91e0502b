"""The node's web Admin UI under ``/web/``: the page, its static files and its server-rendered parts.

``GET /web/`` is one page (no data in it, so anonymous callers get it): a login form, then the
parts of the UI, each fetched by the page's script with the operator's Basic credentials from
``/web/fragments/...`` and rendered here as HTML. Buttons call the node's own endpoints
(``POST /admin/scavenge``, ``DELETE /admin/scavenge/{id}``, ``/auto-scavenge/*``), so the node's
validation and messages are the only ones. Fragments obey the node's rules: the Admin part needs
``$ops`` or ``$admins``, a stream part the stream's read access, the stream list read access to ``$all``.

A request sent by the page carries ``X-Requested-With: XMLHttpRequest``; a 401 to such a request
goes without ``WWW-Authenticate``, so the browser shows the page's own login form rather than its
password dialog.
"""

from __future__ import annotations

import asyncio
import functools
import json
from importlib import resources
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import jinja2
from aiohttp import web

from evdb.cluster.advertising import client_member
from evdb.cluster.peers import PeerError, peer_name
from evdb.errors import InvalidInput, PersistentSubscriptionsNotReady
from evdb.http.common import get_principal, get_services, require_authenticated, require_ops
from evdb.http.openapi import EXTRA_PATHS
from evdb.http.streams import check_access, database, is_number, parse_position
from evdb.scavenge.scavenger import STAGES
from evdb.webui import views

if TYPE_CHECKING:
    from evdb.services import WebUiServices

__all__ = ["MAX_PAGE", "PAGE", "setup"]

PAGE = 20
MAX_PAGE = 200
STATIC = {"app.js": "text/javascript", "style.css": "text/css"}
PHASES = ("Beginning", *(phase for _stage, phase in STAGES))
_SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


@functools.cache
def _templates() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("evdb.webui", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["stream_href"] = lambda name: "#/streams/" + quote(name, safe="")
    env.filters["bytes"] = _human_bytes
    env.filters["urlencode_all"] = lambda name: quote(str(name), safe="")
    return env


@functools.cache
def _static(name: str) -> bytes:
    return resources.files("evdb.webui").joinpath("static", name).read_bytes()


def _human_bytes(value: Any) -> str:
    if not isinstance(value, int):
        return ""
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(size) < 1024 or unit == "GiB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{value} B"


def _html(template: str, **values: Any) -> web.Response:
    text = _templates().get_template(template).render(**values)
    return web.Response(text=text, content_type="text/html", charset="utf-8", headers=_SECURITY_HEADERS)


# -- the page and its files ----------------------------------------------------------------------------
async def to_page(request: web.Request) -> web.Response:
    raise web.HTTPFound("/web/")


async def page(request: web.Request) -> web.Response:
    from evdb.version import VERSION

    return _html("page.html", version=VERSION)


async def static(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    if name not in STATIC:
        raise web.HTTPNotFound(text=f"No file '{name}' in the Admin UI.", content_type="text/plain")
    headers = {"X-Content-Type-Options": "nosniff", "Cache-Control": "no-cache"}
    return web.Response(body=_static(name), content_type=STATIC[name], charset="utf-8", headers=headers)


# -- parameters -------------------------------------------------------------------------------------------
def _event_number(request: web.Request, name: str) -> int | None:
    text = request.query.get(name)
    if text is None or text == "":
        return None
    if not is_number(text):
        raise InvalidInput(f"'{text}' is not an event number.")
    return int(text)


def _position(request: web.Request, name: str) -> int | None:
    text = request.query.get(name)
    if text is None or text == "":
        return None
    return parse_position(text)


def _count(request: web.Request) -> int:
    text = request.query.get("count")
    if text is None or text == "":
        return PAGE
    if not is_number(text) or not 1 <= int(text) <= MAX_PAGE:
        raise InvalidInput(f"count must be between 1 and {MAX_PAGE}.")
    return int(text)


# -- fragments ---------------------------------------------------------------------------------------------
async def cluster_fragment(request: web.Request) -> web.Response:
    """This node and the cluster members as it sees them (the members of ``/gossip``)."""
    principal = require_authenticated(request)
    services: WebUiServices = get_services(request)
    members = services.cluster.members() if services.cluster else []
    own_id = str(services.instance_id)
    return _html(
        "cluster.html",
        services=services,
        state=services.cluster.state if services.cluster else "Unknown",
        members=members,
        own_id=own_id,
        user=principal.name,
        secure=services.addresses.http_url.startswith("https:"),
    )


def _current_values(services: WebUiServices) -> dict[str, Any]:
    """Blocking: the running scavenge's figures, or the last one's id and result."""
    service = services.database.scavenge
    figures = service.progress() if service else None
    last = service.last() if service and figures is None else None
    percent = None
    if figures:
        if figures.get("phase") == "Calculation" and figures.get("streamsTotal"):
            percent = 100 * figures["streamsDone"] / figures["streamsTotal"]
        elif figures.get("chunksTotal"):
            percent = 100 * figures["chunksDone"] / figures["chunksTotal"]
    phase = figures.get("phase", "") if figures else ""
    return {
        "figures": figures,
        "percent": None if percent is None else round(min(100.0, percent), 1),
        "phase_number": PHASES.index(phase) if phase in PHASES else None,
        "phase_count": len(PHASES) - 1,
        "last": last,
    }


async def admin_current_fragment(request: web.Request) -> web.Response:
    """The running scavenge (id, phase, progress) with its stop button; the page polls it."""
    require_ops(request, legacy=False)
    services: WebUiServices = get_services(request)
    values = await asyncio.to_thread(_current_values, services)
    return _html("admin_current.html", **values)


async def admin_fragment(request: web.Request) -> web.Response:
    """The Admin page: current scavenge, start form, auto-scavenge box, history from ``$scavenges``."""
    require_ops(request, legacy=False)
    services: WebUiServices = get_services(request)
    db = database(request)

    def gather() -> dict[str, Any]:
        values = _current_values(services)
        running = values["figures"]["scavengeId"] if values["figures"] else None
        values["history"] = views.scavenge_history(db, 20, running)
        return values

    values = await asyncio.to_thread(gather)
    return _html("admin.html", **values)


async def streams_fragment(request: web.Request) -> web.Response:
    """Streams in order of their newest event (read from ``$all``: it needs ``$all`` read access)."""
    check_access(request, views.ALL, "read", page=True)
    before = _position(request, "before")
    listing = await asyncio.to_thread(views.stream_list, database(request), before)
    return _html("streams.html", listing=listing, before=before)


async def stream_fragment(request: web.Request) -> web.Response:
    """A stream's events, newest first, ``count`` a page; ``$all`` pages by log position."""
    stream = request.match_info["stream"]
    if not stream:
        raise InvalidInput("A stream name is needed.")
    count = _count(request)
    check_access(request, stream, "read", page=True)
    if stream == views.ALL:
        before = _position(request, "before")
        all_page = await asyncio.to_thread(views.read_all_page, database(request), before, count)
        return _html("all.html", page=all_page, user=get_principal(request).name)
    start = _event_number(request, "from")
    stream_page = await asyncio.to_thread(views.read_stream_page, database(request), stream, start, count)
    return _html("stream.html", page=stream_page)


async def subscriptions_fragment(request: web.Request) -> web.Response:
    """The persistent subscription groups (statistics: any authenticated user, as ``GET /subscriptions``)
    with a replay button for parked messages; a node that does not serve them (a follower: the leader
    does) says so and names the leader."""
    require_authenticated(request)
    services: WebUiServices = get_services(request)
    state = services.cluster.state if services.cluster else "Leader"
    try:
        groups = services.persistent.list()
    except PersistentSubscriptionsNotReady:
        leader = None
        for member in services.cluster.members() if services.cluster else []:
            if member.get("state") == "Leader" and member.get("isAlive"):
                shown = client_member(member)
                leader = f"{shown['httpEndPointIp']}:{shown['httpEndPointPort']}"
        scheme = "https" if services.addresses.http_url.startswith("https:") else "http"
        return _html("subscriptions.html", rows=None, state=state, leader=leader, scheme=scheme)
    return _html(
        "subscriptions.html", rows=views.subscription_rows(groups), state=state, leader=None, scheme=""
    )


#: seconds a member has to answer the archive page's ``GET /stats``
PEER_STATS_TIMEOUT = 2.0


async def _member_row(
    request: web.Request, services: WebUiServices, member: dict[str, Any]
) -> views.ArchiveRow:
    """A member's archive figures, from its ``GET /stats`` asked with the operator's own credentials."""
    address = (str(member.get("httpEndPointIp")), int(member.get("httpEndPointPort") or 0))
    endpoint = peer_name(address)  # host:port, [v6]:port
    role = str(member.get("state") or "Unknown")
    if not member.get("isAlive"):
        return views.archive_row(endpoint, role, False, None, "not alive (gossip)")
    if services.peers is None:
        return views.archive_row(endpoint, role, False, None, "no calls to other nodes from this node")
    headers = {"Accept": "application/json"}
    if "Authorization" in request.headers:
        headers["Authorization"] = request.headers["Authorization"]
    try:
        answer = await services.peers.request(
            "GET",
            endpoint,
            "/stats",
            timeout=PEER_STATS_TIMEOUT,
            headers=headers,
            what=f"GET /stats on {endpoint}",
        )
    except PeerError as exc:
        return views.archive_row(endpoint, role, False, None, str(exc))
    if answer.status != 200:
        return views.archive_row(
            endpoint, role, False, None, f"HTTP {answer.status} from /stats: {answer.text()[:300]}"
        )
    try:
        body = json.loads(answer.body)
    except ValueError:
        return views.archive_row(endpoint, role, False, None, "its /stats did not answer JSON")
    return views.archive_row(endpoint, role, False, body)


async def archive_fragment(request: web.Request) -> web.Response:
    """The archive (issue 37): its location, retention policy, checkpoint and the archiver's upload lag,
    and per member its local chunk files against what it reads from the archive only and what the next
    scavenge would free: this node's stats and each live member's ``GET /stats`` (with the operator's
    credentials); the page polls it."""
    require_ops(request, legacy=False)
    services: WebUiServices = get_services(request)
    own_stats = await asyncio.to_thread(services.collect_stats)
    own_id = str(services.instance_id)
    members = services.cluster.members() if services.cluster else []
    own_role = next((str(m.get("state")) for m in members if m.get("instanceId") == own_id), "Leader")
    others = [m for m in members if m.get("instanceId") != own_id]
    rows = [views.archive_row(services.name, own_role, True, own_stats)]
    rows += await asyncio.gather(*(_member_row(request, services, m) for m in others))
    page = views.archive_page(rows, _human_bytes, services.clock.time())
    return _html("archive.html", page=page)


def _hide_challenge_from_the_page(request: web.Request, response: web.StreamResponse) -> None:
    if response.status == 401 and request.headers.get("X-Requested-With") == "XMLHttpRequest":
        response.headers.popall("WWW-Authenticate", None)


async def _on_response_prepare(request: web.Request, response: web.StreamResponse) -> None:
    _hide_challenge_from_the_page(request, response)


def setup(app: web.Application) -> None:
    r = app.router
    r.add_get("/web", to_page)
    r.add_get("/web/", page)
    r.add_get("/web/index.html", page)
    r.add_get("/web/static/{name}", static)
    r.add_get("/web/fragments/cluster", cluster_fragment)
    r.add_get("/web/fragments/admin", admin_fragment)
    r.add_get("/web/fragments/admin/current", admin_current_fragment)
    r.add_get("/web/fragments/streams", streams_fragment)
    r.add_get("/web/fragments/subscriptions", subscriptions_fragment)
    r.add_get("/web/fragments/archive", archive_fragment)
    r.add_get("/web/fragments/streams/{stream}", stream_fragment)
    app.on_response_prepare.append(_on_response_prepare)


# -- OpenAPI ----------------------------------------------------------------------------------------------
_HTML = {"text/html": {"schema": {"type": "string"}}}
_TEXT = {"text/plain": {"schema": {"type": "string"}}}
_UNAUTH = {"description": "Not authenticated, or wrong credentials"}
_FORBIDDEN = {"description": "Authenticated without the access this part needs", "content": _TEXT}
_BAD = {"description": "Invalid parameter; the body says why", "content": _TEXT}


def _fragment(summary: str, *, params: list[dict] | None = None, extra: dict | None = None) -> dict:
    responses: dict[str, Any] = {
        "200": {"description": "HTML", "content": _HTML},
        "401": _UNAUTH,
        "403": _FORBIDDEN,
    }
    if params:
        responses["400"] = _BAD
    responses.update(extra or {})
    return {"get": {"summary": summary, "parameters": params or [], "responses": responses}}


def _query(name: str, description: str) -> dict:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "description": description,
        "schema": {"type": "string"},
    }


_STREAM_PARAM = {
    "name": "stream",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "minLength": 1},
}
EXTRA_PATHS.append(
    {
        "/web": {
            "get": {
                "summary": "Admin UI: redirects to /web/",
                "responses": {"302": {"description": "To /web/"}, "401": _UNAUTH},
            }
        },
        "/web/": {
            "get": {
                "summary": "Admin UI: the page (login form; it holds no data)",
                "responses": {"200": {"description": "HTML", "content": _HTML}, "401": _UNAUTH},
            }
        },
        "/web/index.html": {
            "get": {
                "summary": "Admin UI: the page, by KurrentDB's older name",
                "responses": {"200": {"description": "HTML", "content": _HTML}, "401": _UNAUTH},
            }
        },
        "/web/static/{name}": {
            "get": {
                "summary": "Admin UI: the page's script and style sheet",
                "parameters": [
                    {
                        "name": "name",
                        "in": "path",
                        "required": True,
                        "schema": {"type": "string", "enum": sorted(STATIC)},
                    }
                ],
                "responses": {
                    "200": {
                        "description": "The file",
                        "content": {
                            "text/javascript": {"schema": {"type": "string"}},
                            "text/css": {"schema": {"type": "string"}},
                        },
                    },
                    "401": _UNAUTH,
                    "404": {"description": "No such file", "content": _TEXT},
                },
            }
        },
        "/web/fragments/cluster": _fragment("Admin UI: this node and the cluster members with their roles"),
        "/web/fragments/admin": _fragment(
            "Admin UI: the Admin page (current scavenge, start form, auto-scavenge, history); $ops or $admins"
        ),
        "/web/fragments/admin/current": _fragment("Admin UI: the running scavenge; $ops or $admins"),
        "/web/fragments/subscriptions": _fragment(
            "Admin UI: the persistent subscription groups (consumers, lag, in flight, parked) with replay "
            "of parked messages; on a follower, which node serves them"
        ),
        "/web/fragments/archive": _fragment(
            "Admin UI: the archive (checkpoint, the archiver's upload lag, retention policy) and each member's "
            "local chunk files against its archive-only chunks and what the next scavenge frees; $ops or $admins"
        ),
        "/web/fragments/streams": _fragment(
            "Admin UI: streams by their newest event, read from $all",
            params=[_query("before", "$all position to continue from (a number or 32 hex digits)")],
        ),
        "/web/fragments/streams/{stream}": _fragment(
            "Admin UI: a stream's events newest first ($all pages by position); redacted events labelled",
            params=[
                _STREAM_PARAM,
                _query("from", "event number to read back from (default: the newest)"),
                _query("before", "for $all: position to read back from"),
                _query("count", f"events a page, 1 to {MAX_PAGE} (default {PAGE})"),
            ],
            extra={
                "404": {"description": "The stream does not exist", "content": _TEXT},
                "410": {"description": "The stream is deleted", "content": _TEXT},
            },
        ),
    }
)
