"""Streams over HTTP, in the shape of KurrentDB's AtomPub API, plus server-sent-event subscriptions.

Reads answer JSON feeds (``application/vnd.kurrent.atom+json`` or ``application/json``); pages are
linked ``self|first|last|next|previous|metadata`` as KurrentDB links them. Live subscriptions are an
evdb extension: ``GET /subscriptions/streams/{stream}`` and ``/subscriptions/$all`` answer
``text/event-stream`` (see docs/http-api.md).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import uuid
import zlib
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NamedTuple
from urllib.parse import quote
from xml.sax.saxutils import escape

from aiohttp import web

from evdb.auth import Principal, stream_access
from evdb.clock import TICKS_PER_SECOND
from evdb.errors import EvdbError, EventTooLarge, InvalidInput, StreamDeleted
from evdb.http.answers import Answer
from evdb.http.bodies import read_body
from evdb.http.common import (
    _accepted,
    bad_request,
    get_principal,
    get_services,
    json_response,
    parse_json,
    request_loop,
    unauthorized,
)
from evdb.projections.links import LINK_TYPE, Resolved, parse_link, resolve_link, resolve_links
from evdb.storage.records import EventRecord
from evdb.streams import ANY, AppendResult, NewEvent, StreamMetadata, is_metastream
from evdb.subscriptions import CaughtUp, subscribe_to_all, subscribe_to_stream

if TYPE_CHECKING:
    from evdb.database import Database
    from evdb.services import ApiServices

ATOM = "application/vnd.kurrent.atom+json"
ATOM_XML = "application/atom+xml"
#: KurrentDB's description document of a stream (its two names)
STREAMDESC = ("application/vnd.kurrent.streamdesc+json", "application/vnd.eventstore.streamdesc+json")
PAGE = 20
MAX_PAGE = 4096
EVENTS_TYPES = ("application/vnd.kurrent.events+json", "application/vnd.eventstore.events+json")
ALL = "$all"


def is_number(text: str) -> bool:
    """ASCII digits only (``"³".isdigit()`` is true, and ``int("³")`` fails)."""
    return text.isascii() and text.isdigit()


#: a request's header by name, case-insensitively (aiohttp's ``request.headers.get``, or the lean
#: path's, evdb/http/lean.py): what the transport-neutral rules below read headers through
HeaderGetter = Callable[[str], str | None]


def kurrent_header(get: HeaderGetter, name: str) -> str | None:
    """A ``Kurrent-*`` header, or its legacy ``ES-*`` name."""
    return get(f"Kurrent-{name}") or get(f"ES-{name}")


def header(request: web.Request, name: str) -> str | None:
    """A ``Kurrent-*`` header of an aiohttp request, or its legacy ``ES-*`` name."""
    return kurrent_header(request.headers.get, name)


def database(request: web.Request) -> Database:
    """The node's open database. A follower cutting a diverged tail closes and reopens it: a request
    that meets it closed is answered 503, try again (evdb.http.app's error middleware)."""
    return get_services(request).database.open_db()


# -- access control ----------------------------------------------------------------------------------
def check_access(request: web.Request, stream: str, action: str, *, page: bool = False) -> Principal:
    """Stream ACLs (evdb.auth.stream_access): a refused caller gets 401, anonymous or not, as KurrentDB
    answers a denied controller action over HTTP (gRPC answers PERMISSION_DENIED). The web Admin UI's
    parts (``page``) answer a signed-in user 403, so that the page says "access denied" rather than
    asking them to sign in again."""
    principal = get_principal(request)
    check_stream_access(database(request), principal, stream, action, page=page)
    return principal


def check_stream_access(
    db: Database, principal: Principal, stream: str, action: str, *, page: bool = False
) -> None:
    """:func:`check_access` for a principal already known (both HTTP paths: aiohttp's and the lean one)."""
    verdict = stream_access(db, principal, stream, action)
    if verdict == "unauthenticated" or (verdict == "denied" and not page):
        raise unauthorized()
    if verdict == "denied":
        raise web.HTTPForbidden(text="Access denied.", content_type="text/plain")


# -- shapes ------------------------------------------------------------------------------------------
def _iso(ticks: int) -> str:
    return datetime.fromtimestamp(ticks / TICKS_PER_SECOND, UTC).isoformat().replace("+00:00", "Z")


def _base(request: web.Request) -> str:
    return f"{request.scheme}://{request.host}"


def encode_position(position: int) -> str:
    """KurrentDB's ``$all`` page position: commit and prepare positions as 16 hex digits each."""
    return f"{position:016X}{position:016X}"


_HEX = frozenset("0123456789abcdefABCDEF")


def parse_position(text: str) -> int:
    """A ``$all`` position: 32 hex digits (KurrentDB's commit+prepare form, what the links carry) or a
    decimal log position. 32 characters are always hex, even when they are all decimal digits (a
    decimal position that long would be far beyond any log)."""
    if len(text) == 32 and _HEX.issuperset(text):
        return int(text[:16], 16)
    if is_number(text) and len(text) < 32:
        return int(text)
    raise InvalidInput(f"'{text}' is not a position: use 32 hex digits (commit and prepare) or a number.")


def event_json(record: EventRecord, *, embed: str | None = None) -> dict[str, Any]:
    """The fields of an event (evdb adds ``position`` and ``isRedacted``)."""
    out: dict[str, Any] = {
        "eventId": str(record.id),
        "eventType": record.event_type,
        "eventNumber": record.event_number,
        "streamId": record.stream,
        "isJson": record.is_json,
        "isMetaData": is_metastream(record.stream),
        "isLinkMetaData": False,
        "positionEventNumber": record.event_number,
        "positionStreamId": record.stream,
        "position": record.log_position,
        "isRedacted": record.is_redacted,
        "updated": _iso(record.timestamp),
    }
    if embed in ("body", "rich", "tryharder", "pretty"):
        out["data"] = _payload(record.data, record.is_json and not record.is_redacted)
        if record.metadata:
            out["metaData"] = _payload(record.metadata, record.is_json)
    elif embed == "raw":  # evdb extension: the exact bytes, base64 (what `evdb mirror` copies)
        out["dataBase64"] = base64.b64encode(record.data).decode()
        out["metaDataBase64"] = base64.b64encode(record.metadata).decode()
    return out


def _payload(data: bytes, is_json: bool) -> Any:
    if is_json:  # JSON the feed can carry; else (stored by an older version or over gRPC) as text
        try:
            return parse_json(data)
        except InvalidInput:
            pass
    try:
        return data.decode()
    except UnicodeDecodeError:
        return base64.b64encode(data).decode()


def _entry(request: web.Request, record: EventRecord, embed: str | None) -> dict[str, Any]:
    uri = f"{_base(request)}/streams/{quote(record.stream, safe='$')}/{record.event_number}"
    entry = {
        "title": f"{record.event_number}@{record.stream}",
        "id": uri,
        "updated": _iso(record.timestamp),
        "author": {"name": "evdb"},
        "summary": record.event_type,
        "links": [{"uri": uri, "relation": "edit"}, {"uri": uri, "relation": "alternate"}],
    }
    entry.update(event_json(record, embed=embed))
    return entry


def resolve_link_tos(request: web.Request, default: bool) -> bool:
    """The ``Kurrent-ResolveLinkTos`` header (legacy ``ES-ResolveLinkTos``): ``true`` or ``false`` in
    any case; absent, ``default`` (KurrentDB: true for stream reads, false for ``$all``)."""
    value = header(request, "ResolveLinkTos")
    if not value:
        return default
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise InvalidInput("Kurrent-ResolveLinkTos header in wrong format.")


def _resolved_json(item: Resolved, embed: str | None) -> dict[str, Any]:
    """A resolved link's fields (KurrentDB's rich entry): the target's, positioned at the link; a
    link whose target is gone has only the link's position fields."""
    link = item.link
    if link is None:
        assert item.event is not None
        return event_json(item.event, embed=embed)
    out = event_json(item.event, embed=embed) if item.event is not None else {}
    out.update(
        {
            "positionEventNumber": link.event_number,
            "positionStreamId": link.stream,
            "position": link.log_position,
            "isLinkMetaData": bool(link.metadata),
            "updated": _iso(link.timestamp),
        }
    )
    if embed in ("body", "rich", "tryharder", "pretty") and link.metadata:
        out["linkMetaData"] = link.metadata.decode("utf-8", "replace")
    return out


def _resolved_entry(request: web.Request, item: Resolved, embed: str | None) -> dict[str, Any]:
    """A feed entry of a read that resolves links: a link's entry names its target (summary ``$>``)."""
    link = item.link
    target = parse_link(link.data) if link is not None else None
    if link is None or target is None:
        assert item.event is not None
        return _entry(request, item.event, embed)
    number, stream = target
    uri = f"{_base(request)}/streams/{quote(stream, safe='$')}/{number}"
    entry: dict[str, Any] = {
        "title": f"{number}@{stream}",
        "id": uri,
        "author": {"name": "evdb"},
        "summary": LINK_TYPE,
        "links": [{"uri": uri, "relation": "edit"}, {"uri": uri, "relation": "alternate"}],
    }
    entry.update(_resolved_json(item, embed))
    return entry


async def _entries(
    request: web.Request, db: Database, records: list[EventRecord], embed: str | None, resolve: bool
) -> list[dict[str, Any]]:
    """The entries of a page; with ``resolve``, links resolved (evdb/projections/links.py)."""
    if resolve and any(record.event_type == LINK_TYPE for record in records):
        items = await asyncio.to_thread(resolve_links, db.read_event, records)
        return [_resolved_entry(request, item, embed) for item in items]
    return [_entry(request, record, embed) for record in records]


def _page_count(text: str) -> int:
    if not is_number(text) or not 1 <= int(text) <= MAX_PAGE:
        raise InvalidInput(f"The page size must be between 1 and {MAX_PAGE}.")
    return int(text)


# -- reading streams ---------------------------------------------------------------------------------
def _feed_format(request: web.Request) -> str:
    """The format a stream feed is asked in: a description document or the Atom XML feed when the
    Accept header names one before anything else evdb answers feeds in (KurrentDB's codecs); else
    evdb's JSON feed (``ATOM``)."""
    for kind, sub in _accepted(request.headers.get("Accept", "")):
        media = f"{kind}/{sub}"
        if media in STREAMDESC or media == ATOM_XML:
            return media
        if media in (ATOM, "application/vnd.eventstore.atom+json", "application/json") or kind == "*":
            return ATOM
    return ATOM


#: the content-type part of the JSON feed's ETag that KurrentDB's documentation shows (its examples send
#: ``If-None-Match: 26;-2060438500``); KurrentDB's own value is a per-process string hash
_DOCUMENTED_TYPE_HASH = {ATOM: -2060438500, "application/vnd.eventstore.atom+json": -2060438500}


def _etag(version: int, content_type: str) -> str:
    """KurrentDB's ETag of a feed: ``version;hash-of-the-content-type`` (the documented value for the
    JSON feed, a stable hash for any other type), so a feed's ETag names its content type too."""
    digest = _DOCUMENTED_TYPE_HASH.get(content_type, zlib.crc32(content_type.encode()) - 2**31)
    return f"{version};{digest}"


def _not_modified(request: web.Request, version: int, content_type: str) -> bool:
    """``If-None-Match`` names this version of the feed in this content type (KurrentDB: 304)."""
    given = request.headers.get("If-None-Match")
    return given is not None and given.strip().strip('"') == _etag(version, content_type)


async def _description(request: web.Request, stream: str, media: str) -> web.Response:
    """KurrentDB's description document of a stream: where its feed is and its persistent groups."""
    services = get_services(request)
    escaped = quote(stream, safe="")
    try:
        groups = [g["groupName"] for g in services.persistent.list(stream)]
    except EvdbError:  # none, or the subsystem not running: no subscriptions listed
        groups = []
    links: dict[str, Any] = {
        "self": {"href": f"/streams/{escaped}", "supportedContentTypes": [media]},
        "stream": {
            "href": f"/streams/{escaped}",
            "supportedContentTypes": [ATOM_XML, ATOM, "application/vnd.eventstore.atom+json"],
        },
    }
    if groups:
        links["streamSubscription"] = [
            {
                "href": f"/subscriptions/{escaped}/{group}",
                "supportedContentTypes": [
                    "application/vnd.eventstore.competingatom+xml",
                    "application/vnd.kurrent.competingatom+json",
                    "application/vnd.eventstore.competingatom+json",
                ],
            }
            for group in groups
        ]
    body = {
        "title": f"Description document for '{stream}'",
        "description": "The description document will be presented when no accept header is present "
        "or it was requested",
        "_links": links,
    }
    return json_response(body, content_type=media)


def _atom_xml(feed: dict[str, Any]) -> str:
    """The feed as an Atom document (RFC 4287), as KurrentDB's XML codec writes its feeds."""

    def link(item: dict[str, Any]) -> str:
        return f'<link href="{escape(item["uri"], {chr(34): "&quot;"})}" rel="{item["relation"]}" />'

    def author(item: dict[str, Any]) -> str:
        return f"<author><name>{escape(item['author']['name'])}</name></author>"

    parts = [
        '<?xml version="1.0" encoding="utf-8"?><feed xmlns="http://www.w3.org/2005/Atom">',
        f"<title>{escape(feed['title'])}</title><id>{escape(feed['id'])}</id>",
        f"<updated>{feed['updated']}</updated>{author(feed)}",
        *(link(item) for item in feed["links"]),
    ]
    for entry in feed["entries"]:
        parts.append(
            f"<entry><title>{escape(entry['title'])}</title><id>{escape(entry['id'])}</id>"
            f"<updated>{entry['updated']}</updated>{author(entry)}"
            f"<summary>{escape(entry['summary'])}</summary>"
            + "".join(link(item) for item in entry["links"])
            + "</entry>"
        )
    parts.append("</feed>")
    return "".join(parts)


async def _feed(
    request: web.Request, stream: str, start: int | None, direction: str, count: int
) -> web.Response:
    services = get_services(request)
    check_access(request, stream, "read")
    media = _feed_format(request)
    if media in STREAMDESC and direction == "backward":  # KurrentDB: the head and backward pages
        return await _description(request, stream, media)
    embed = request.query.get("embed")
    resolve = resolve_link_tos(request, True)
    long_poll = header(request, "LongPoll")
    db = database(request)
    if direction == "forward":
        assert start is not None
        page = await asyncio.to_thread(db.read_stream_forward, stream, start, count)
        if not page.events and long_poll and is_number(long_poll):
            seen = db.readable_position
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    services.database.notifier.wait_beyond(seen), timeout=min(int(long_poll), 300)
                )
            page = await asyncio.to_thread(db.read_stream_forward, stream, start, count)
        events = list(reversed(page.events))
    else:
        page = await asyncio.to_thread(db.read_stream_backward, stream, start, count)
        events = page.events
    base = f"{_base(request)}/streams/{quote(stream, safe='$')}"
    last = page.last_event_number
    links = [
        {"uri": base, "relation": "self"},
        {"uri": f"{base}/head/backward/{count}", "relation": "first"},
        {"uri": f"{base}/0/forward/{count}", "relation": "last"},
    ]
    if events:
        oldest = events[-1].event_number
        newest = events[0].event_number
        if oldest > 0:
            links.append({"uri": f"{base}/{oldest - 1}/backward/{count}", "relation": "next"})
        links.append({"uri": f"{base}/{newest + 1}/forward/{count}", "relation": "previous"})
    else:
        links.append({"uri": f"{base}/{last + 1}/forward/{count}", "relation": "previous"})
    links.append({"uri": f"{base}/metadata", "relation": "metadata"})
    head = direction == "backward" and (start is None or start >= last)
    content_type = ATOM_XML if media == ATOM_XML else ATOM
    if _not_modified(request, last, content_type):
        return web.Response(status=304, reason="Not Modified")
    # KurrentDB's caching: a page that can no longer change is cacheable for a year, without an ETag;
    # the head (or a page still being filled) carries the ETag and must be revalidated
    if direction == "backward":
        settled = start is not None and last >= start and not head
    else:
        settled = start is not None and last + 1 >= start + count
    cache = {"Vary": "Accept"}
    if settled:
        cache["Cache-Control"] = "max-age=31536000, public"
    else:
        cache["Cache-Control"] = "max-age=0, no-cache, must-revalidate"
        cache["ETag"] = f'"{_etag(last, content_type)}"'
    entries = await _entries(request, db, events, embed, resolve)
    body = {
        "title": f"Event stream '{stream}'",
        "id": base,
        "updated": _iso(events[0].timestamp) if events else _iso(services.clock.ticks()),
        "streamId": stream,
        "author": {"name": "evdb"},
        "headOfStream": head or (direction == "forward" and page.is_end_of_stream),
        "selfUrl": base,
        "eTag": _etag(last, content_type),
        "links": links,
        "entries": entries,
    }
    if media == ATOM_XML:
        return web.Response(text=_atom_xml(body), content_type=ATOM_XML, headers=cache)
    return json_response(body, content_type=ATOM, headers=cache)


async def read_stream_head(request: web.Request) -> web.Response:
    stream = request.match_info["stream"]
    if stream == ALL:
        return await _all_feed(request, None, "backward", PAGE)
    return await _feed(request, stream, None, "backward", PAGE)


async def read_stream_page(request: web.Request) -> web.Response:
    stream = request.match_info["stream"]
    where = request.match_info["start"]
    direction = request.match_info["direction"]
    count = _page_count(request.match_info["count"])
    if stream == ALL:
        start = None if where == "head" else parse_position(where)
        return await _all_feed(request, start, direction, count)
    if where == "head":
        start = None
    elif is_number(where):
        start = int(where)
    else:
        raise InvalidInput(f"'{where}' is not an event number.")
    if direction == "forward" and start is None:
        raise InvalidInput("Reading forward needs an event number to start from.")
    return await _feed(request, stream, start, direction, count)


async def read_event(request: web.Request) -> web.Response:
    stream = request.match_info["stream"]
    number_text = request.match_info["number"]
    check_access(request, stream, "read")
    if number_text == "head":
        number = -1
    elif is_number(number_text):
        number = int(number_text)
    else:
        raise InvalidInput(f"'{number_text}' is not an event number.")
    resolve = resolve_link_tos(request, True)
    db = database(request)
    record = await asyncio.to_thread(db.read_event, stream, number)
    accept = request.headers.get("Accept", "")
    if resolve and record.event_type == LINK_TYPE:
        item = await asyncio.to_thread(resolve_link, db.read_event, record)
        if "atom" in accept or request.query.get("embed"):
            return json_response(_resolved_entry(request, item, "body"), content_type=ATOM)
        record = item.event if item.event is not None else record
    if "atom" in accept or request.query.get("embed"):
        entry = _entry(request, record, "body")
        return json_response(entry, content_type=ATOM)
    if record.is_json and not record.is_redacted:
        return web.Response(body=record.data, content_type="application/json")
    return web.Response(body=record.data, content_type="application/octet-stream")


async def _all_feed(request: web.Request, start: int | None, direction: str, count: int) -> web.Response:
    services = get_services(request)
    check_access(request, ALL, "read")
    db = database(request)
    embed = request.query.get("embed")
    resolve = resolve_link_tos(request, False)
    if direction == "forward":
        page = await asyncio.to_thread(db.read_all_forward, start or 0, count)
        events = list(reversed(page.events))
        after = page.next_position
        before = start or 0
    else:
        page = await asyncio.to_thread(db.read_all_backward, start, count)
        events = page.events
        after = start if start is not None else db.readable_position
        before = page.next_position
    base = f"{_base(request)}/streams/%24all"
    entries = await _entries(request, db, events, embed, resolve)
    links = [
        {"uri": base, "relation": "self"},
        {"uri": f"{base}/head/backward/{count}", "relation": "first"},
        {"uri": f"{base}/{encode_position(0)}/forward/{count}", "relation": "last"},
        {"uri": f"{base}/{encode_position(before)}/backward/{count}", "relation": "next"},
        {"uri": f"{base}/{encode_position(after)}/forward/{count}", "relation": "previous"},
    ]
    body = {
        "title": "All events",
        "id": base,
        "updated": _iso(services.clock.ticks()),
        "author": {"name": "evdb"},
        "headOfStream": after >= db.readable_position,
        "selfUrl": base,
        "links": links,
        "entries": entries,
    }
    return json_response(body, content_type=ATOM)


# -- writing -----------------------------------------------------------------------------------------
# The append's rules, transport-neutral: aiohttp's handler (append, below) and the lean HTTP/1.1 path
# (evdb/http/lean.py) both call begin_append, submit_append and appended, in that order.
def expected_version(get: HeaderGetter) -> int:
    value = kurrent_header(get, "ExpectedVersion")
    if value is None:
        return ANY
    try:
        return int(value)
    except ValueError:
        raise InvalidInput(f"Kurrent-ExpectedVersion '{value}' is not a number.") from None


def _expected_version(request: web.Request) -> int:
    return expected_version(request.headers.get)


def _event_id(text: Any) -> uuid.UUID:
    try:
        return uuid.UUID(str(text))
    except ValueError:
        raise InvalidInput(f"'{text}' is not a valid event id (a UUID).") from None


def _to_bytes(value: Any) -> tuple[bytes, bool]:
    if value is None:
        return b"", False
    if isinstance(value, str):
        return value.encode(), False
    try:  # parsed by parse_json: no NaN or infinity can be here, and allow_nan=False makes sure
        return json.dumps(value, separators=(",", ":"), allow_nan=False).encode(), True
    except RecursionError:
        raise InvalidInput("The body is not accepted: its JSON nests too deep.") from None
    except ValueError:
        raise InvalidInput("The body is not valid JSON (NaN or an infinity).") from None


def _from_base64(value: Any, name: str) -> bytes:
    if value is None:
        return b""
    try:
        return base64.b64decode(value, validate=True)
    except (TypeError, ValueError):
        raise InvalidInput(f"'{name}' must be base64 text.") from None


class EventIdRequired(Exception):
    """A single-event append without an event id: KurrentDB answers 307 to
    ``/streams/{stream}/incoming/{guid}``, a fresh id the client posts to (a retry is idempotent)."""


def events_of(
    content_type: str, body: bytes, get: HeaderGetter, incoming_id: str | None = None
) -> list[NewEvent]:
    """The events of an append's body: ``content_type`` as aiohttp parses it (``request.content_type``:
    ``application/octet-stream`` when absent), ``get`` the request's headers; ``incoming_id``: the id
    of ``/streams/{stream}/incoming/{guid}`` (a header's id comes first, as KurrentDB's)."""
    if content_type in EVENTS_TYPES:
        items = parse_json(body)
        if not isinstance(items, list):
            raise InvalidInput("The body must be a JSON array of events.")
        events = []
        for item in items:
            if (
                not isinstance(item, dict)
                or not isinstance(item.get("eventType"), str)
                or "eventId" not in item
            ):
                raise InvalidInput("Each event needs an eventId and an eventType.")
            if "dataBase64" in item or "metadataBase64" in item:  # evdb extension: exact bytes
                data = _from_base64(item.get("dataBase64"), "dataBase64")
                metadata = _from_base64(item.get("metadataBase64"), "metadataBase64")
                data_json = item.get("isJson") is True
            else:
                data, data_json = _to_bytes(item.get("data"))
                metadata, _ = _to_bytes(item.get("metadata"))
            events.append(NewEvent(item["eventType"], data, metadata, _event_id(item["eventId"]), data_json))
        return events
    if content_type in ("application/json", "application/octet-stream", "text/plain"):
        event_type = kurrent_header(get, "EventType")
        if not event_type:
            raise InvalidInput("A single-event append needs the Kurrent-EventType header.")
        event_id = incoming_id or kurrent_header(get, "EventId")
        if not event_id:
            raise EventIdRequired()
        # KurrentDB stores a single event's body as it came, valid JSON or not (isJson from the type)
        return [
            NewEvent(
                event_type,
                body,
                b"",
                _event_id(event_id),
                content_type == "application/json",
            )
        ]
    raise web.HTTPUnsupportedMediaType(
        text=f"Unsupported content type '{content_type}'; use {EVENTS_TYPES[0]} or application/json.",
        content_type="text/plain",
    )


#: the append's answer: JSON (what ``content_type="application/json"`` with text makes), built once
_APPENDED_TYPE = "application/json; charset=utf-8"


def begin_append(services: ApiServices, principal: Principal, stream: str) -> Database:
    """The checks of an append before its body is read: the stream (``$all`` is read-only), the open
    database, the caller's access. Returns the database the append goes to."""
    if stream == ALL:
        raise web.HTTPMethodNotAllowed("POST", ["GET"])
    db = (
        services.database.open_db()
    )  # once per request (the access check and the write use the same database)
    check_stream_access(db, principal, stream, "metawrite" if is_metastream(stream) else "write")
    return db


class PendingAppend(NamedTuple):
    """An append handed to the writer: its answer to await, and what :func:`appended` counts."""

    future: asyncio.Future[AppendResult]
    stream: str
    events: list[NewEvent]
    started: float


def submit_append(
    services: ApiServices,
    db: Database,
    stream: str,
    content_type: str,
    body: bytes,
    get: HeaderGetter,
    loop: asyncio.AbstractEventLoop,
    content_length: int | None,
    incoming_id: str | None = None,
) -> PendingAppend:
    """Parse the body (metadata events are checked with the rest in the database), and hand the
    append to the writer, answered with its commit group's wake-up of ``loop``. Nothing is written
    when this raises."""
    events = events_of(content_type, body, get, incoming_id)
    expected = expected_version(get)
    started = services.clock.monotonic()
    try:
        future = db.append_on_loop(stream, events, expected, loop=loop)
    except EventTooLarge as exc:
        raise web.HTTPRequestEntityTooLarge(
            max_size=db.config.max_append_size, actual_size=content_length or 0, text=str(exc)
        ) from None
    return PendingAppend(future, stream, events, started)


def appended(services: ApiServices, pending: PendingAppend, result: AppendResult, base: str) -> Answer:
    """The 201 answer of an acknowledged append (``base``: ``scheme://host`` of the request), counted
    in the append metrics."""
    if result.duplicate:
        services.metrics.observe_append(services.clock.monotonic() - pending.started, 0, 0)
    else:
        size = sum(len(e.data) + len(e.metadata) for e in pending.events)
        services.metrics.observe_append(
            services.clock.monotonic() - pending.started, len(pending.events), size
        )
    location = f"{base}/streams/{quote(pending.stream, safe='$')}/{result.first_event_number}"
    # json.dumps of two ints, without the encoder's machinery
    body = f'{{"nextExpectedVersion": {result.next_expected_version:d}, "position": {result.position:d}}}'
    return Answer(201, (("Location", location), ("Content-Type", _APPENDED_TYPE)), body.encode())


async def append(request: web.Request) -> web.Response:
    return await _append(request, None)


async def append_incoming(request: web.Request) -> web.Response:
    """``POST /streams/{stream}/incoming/{guid}``: a single event whose id is the one in the path."""
    guid = request.match_info["guid"]
    try:
        uuid.UUID(guid)
    except ValueError:
        raise InvalidInput("Invalid request. Unable to parse guid") from None
    return await _append(request, guid)


async def _append(request: web.Request, incoming_id: str | None) -> web.Response:
    stream = request.match_info["stream"]
    services = get_services(request)
    db = begin_append(services, get_principal(request), stream)
    body = await read_body(request)
    try:
        pending = submit_append(
            services,
            db,
            stream,
            request.content_type,
            body,
            request.headers.get,
            request_loop(request),
            request.content_length,
            incoming_id,
        )
    except EventIdRequired:
        location = f"{_base(request)}/streams/{quote(stream, safe='$')}/incoming/{uuid.uuid4()}"
        return web.Response(
            status=307,
            reason="Temporary Redirect",
            text="Forwarding to idempotent URI",
            content_type="text/plain",
            headers={"Location": location},
        )
    result = await pending.future
    return appended(services, pending, result, _base(request)).response()


async def delete(request: web.Request) -> web.Response:
    stream = request.match_info["stream"]
    if stream == ALL:
        raise web.HTTPMethodNotAllowed("DELETE", ["GET"])
    check_access(request, stream, "delete")
    hard = (header(request, "HardDelete") or "").lower() == "true"
    await database(request).delete_stream_on_loop(stream, _expected_version(request), hard=hard)
    return web.Response(status=204)


# -- metadata ----------------------------------------------------------------------------------------
async def get_metadata(request: web.Request) -> web.Response:
    stream = request.match_info["stream"]
    check_access(request, stream, "metaread")
    metadata, version = await asyncio.to_thread(database(request).get_stream_metadata, stream)
    if version < 0:
        return json_response({})
    return json_response(metadata.raw, headers={"Kurrent-MetadataVersion": str(version)})


async def set_metadata(request: web.Request) -> web.Response:
    stream = request.match_info["stream"]
    check_access(request, stream, "metawrite")
    parsed = parse_json(await read_body(request), "The metadata body")
    if isinstance(parsed, list):
        if len(parsed) != 1 or not isinstance(parsed[0], dict):
            raise InvalidInput("Post exactly one metadata event.")
        parsed = parsed[0].get("data")
    if not isinstance(parsed, dict):
        raise InvalidInput("Stream metadata must be a JSON object.")
    StreamMetadata.from_dict(parsed)
    result = await asyncio.to_thread(
        database(request).set_stream_metadata, stream, parsed, _expected_version(request)
    )
    return web.Response(
        status=201,
        headers={
            "Location": f"{_base(request)}/streams/{quote('$$' + stream, safe='$')}/{result.first_event_number}"
        },
    )


# -- subscriptions (server-sent events) --------------------------------------------------------------
async def _sse(request: web.Request, items) -> web.StreamResponse:
    resolve = resolve_link_tos(request, False)  # before the answer starts: a bad header is a 400
    db = database(request)
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)
    embed = request.query.get("embed", "body")
    try:
        async for item in items:
            if isinstance(item, CaughtUp):
                chunk = f"event: caught-up\ndata: {json.dumps({'position': item.position})}\n\n"
            else:
                if resolve and item.event_type == LINK_TYPE:
                    fields = _resolved_json(await asyncio.to_thread(resolve_link, db.read_event, item), embed)
                else:
                    fields = event_json(item, embed=embed)
                chunk = f"event: event\nid: {item.log_position}\ndata: {json.dumps(fields)}\n\n"
            await response.write(chunk.encode())
    except StreamDeleted as exc:
        await response.write(f"event: error\ndata: {json.dumps({'error': str(exc)})}\n\n".encode())
    except (ConnectionResetError, asyncio.CancelledError):
        pass
    return response


async def subscribe_stream(request: web.Request) -> web.StreamResponse:
    stream = request.match_info["stream"]
    services = get_services(request)
    if stream == ALL:
        check_access(request, ALL, "read")
        after = request.query.get("after")
        return await _sse(
            request,
            subscribe_to_all(
                database(request),
                services.database.notifier,
                after=parse_position(after) if after else None,
                from_end=request.query.get("from") == "end",
            ),
        )
    check_access(request, stream, "read")
    after = request.query.get("after")
    if after is not None and not is_number(after):
        raise bad_request("'after' must be an event number.")
    return await _sse(
        request,
        subscribe_to_stream(
            database(request),
            services.database.notifier,
            stream,
            after=int(after) if after is not None else None,
            from_end=request.query.get("from") == "end",
        ),
    )


def setup(app: web.Application) -> None:
    r = app.router
    r.add_post("/streams/{stream}", append)
    r.add_post("/streams/{stream}/incoming/{guid}", append_incoming)
    r.add_delete("/streams/{stream}", delete)
    r.add_get("/streams/{stream}", read_stream_head)
    r.add_get("/streams/{stream}/metadata", get_metadata)
    r.add_post("/streams/{stream}/metadata", set_metadata)
    r.add_get("/streams/{stream}/{start}/{direction:forward|backward}/{count}", read_stream_page)
    r.add_get("/streams/{stream}/{number}", read_event)
    r.add_get("/subscriptions/streams/{stream}", subscribe_stream)
