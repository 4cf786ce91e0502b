"""Persistent subscriptions over HTTP, with KurrentDB's paths, statuses and JSON shapes.

``GET /subscriptions`` (``?offset=&count=`` pages), ``GET /subscriptions/{stream}``,
``GET /subscriptions/{stream}/{group}/info``, ``PUT`` (create), ``POST`` (update) and ``DELETE``
``/subscriptions/{stream}/{group}``, ``POST .../replayParked?stopAt=``, ``POST /subscriptions/restart``,
and the competing-consumer routes: ``GET /subscriptions/{stream}/{group}[/{count}]`` (an atom feed of
messages now in flight), ``POST .../ack/{id}``, ``.../nack/{id}?action=``, ``.../ack?ids=`` and
``.../nack?ids=&action=``, ``POST .../truncateParked?stopAt=`` (drop parked messages without replaying
them), and ``GET /subscriptions/viewparkedmessages/{stream}/{group}/{event}/backward|forward/{count}``
(the parked stream's atom feed, read on this node). Creating, updating and deleting a group to
``$all`` is gRPC only (as KurrentDB). Reading statistics needs an authenticated caller; managing groups
needs ops or admins; reading messages needs read access to the stream.

Only the leader serves the groups: a follower or read-only replica that knows the leader sends every
route but ``viewparkedmessages`` on to it, with the caller's credentials, and answers what the leader
answered (KurrentDB's HttpForwarder); ``500 Error while forwarding request`` when the leader does not
answer. With no leader known, or when the request was already forwarded once, the node answers itself
(503: not ready).
"""

from __future__ import annotations

import uuid
from typing import Any, Literal
from urllib.parse import quote

from aiohttp import web

from evdb.auth import ADMINS, OPS
from evdb.cluster.forwarding import FORWARDED_BY, forward_request
from evdb.cluster.peers import PeerError
from evdb.errors import InvalidInput, PersistentSubscriptionsNotReady
from evdb.http.common import get_principal, get_services, json_response, read_json, unauthorized
from evdb.http.openapi import EXTRA_PATHS, TEXT_CONTENT, json_object, response_object
from evdb.http.streams import _entry, _feed, check_access
from evdb.persistent import ALL, EventSource, GroupSettings
from evdb.persistent.model import group_key, parked_stream
from evdb.persistent.service import PersistentSubscriptionService

__all__ = ["setup"]

COMPETING = "application/vnd.kurrent.competingatom+json"
_NACK = {"park": "Park", "retry": "Retry", "skip": "Skip", "stop": "Stop"}
#: KurrentDB's SubscriptionConfigData defaults (an HTTP create without a field takes these)
_CONFIG_DEFAULTS: dict[str, Any] = {
    "resolvelinktos": False,
    "startfrom": 0,
    "messagetimeoutmilliseconds": 10_000,
    "extrastatistics": False,
    "maxretrycount": 10,
    "livebuffersize": 500,
    "buffersize": 500,
    "readbatchsize": 20,
    "checkpointaftermilliseconds": 1_000,
    "mincheckpointcount": 10,
    "maxcheckpointcount": 500,
    "maxsubscribercount": 10,
}
_ALL_VIA_GRPC = "Persistent subscriptions to $all are only supported over gRPC through gRPC clients"


def _service(request: web.Request) -> PersistentSubscriptionService:
    return get_services(request).persistent


def _base(request: web.Request) -> str:
    return f"{request.scheme}://{request.host}"


def _require_authenticated(request: web.Request) -> str:
    principal = get_principal(request)
    if not principal.is_authenticated:
        raise unauthorized()
    return principal.name


def _require_ops(request: web.Request) -> str:
    principal = get_principal(request)
    if not principal.is_authenticated or not principal.has_any({ADMINS, OPS}):
        raise unauthorized()  # KurrentDB answers 401 for a denied controller action
    return principal.name


async def _on_leader(request: web.Request) -> web.Response | None:
    """None when this node answers the request itself (it leads, knows no leader, or the request was
    forwarded to it already); else the leader's answer to the request, forwarded as it came."""
    services = get_services(request)
    cluster, peers = services.cluster, services.peers
    if cluster is None or peers is None or cluster.is_leader or request.headers.get(FORWARDED_BY):
        return None
    leader = cluster.leader_http_endpoint()
    if leader is None:
        return None
    try:
        answer = await forward_request(
            peers,
            leader,
            method=request.method,
            path=request.raw_path,
            body=await request.read(),
            headers=request.headers,
            sender=f"{services.addresses.advertised_host}:{services.addresses.advertised_port}",
            requested_host=request.host,
        )
    except PeerError as exc:  # names the leader and the reason
        services.logger.warning("Error while forwarding %s %s: %s", request.method, request.path, exc)
        return web.Response(status=500, text="Error while forwarding request")
    response = web.Response(status=answer.status, body=answer.body)
    if answer.content_type:
        response.headers["Content-Type"] = answer.content_type
    return response


def _names(request: web.Request) -> tuple[str, str]:
    return request.match_info["stream"], request.match_info["group"]


def _result(kind: str, result: str, reason: str = "", status: int = 200, **headers: str) -> web.Response:
    """The completion message KurrentDB serialises as the body of a create, update or delete."""
    body = {"correlationId": str(uuid.uuid4()), "reason": reason, "result": result}
    return json_response(body, status, headers=headers or None)


# -- statistics -----------------------------------------------------------------------------------------
def _parked_uri(base: str, stats: dict[str, Any]) -> str:
    return f"{base}/streams/{quote(parked_stream(stats['eventSource'], stats['groupName']), safe=':')}"


def _summary(request: web.Request, stats: dict[str, Any]) -> dict[str, Any]:
    base = _base(request)
    stream, group = quote(stats["eventSource"], safe=""), quote(stats["groupName"], safe="")
    return {
        "links": [{"href": f"{base}/subscriptions/{stream}/{group}/info", "rel": "detail"}],
        "eventStreamId": stats["eventSource"],
        "groupName": stats["groupName"],
        "parkedMessageUri": _parked_uri(base, stats),
        "getMessagesUri": f"{base}/subscriptions/{stream}/{group}/1",
        "status": stats["status"],
        "averageItemsPerSecond": float(stats["averagePerSecond"]),
        "totalItemsProcessed": stats["totalItems"],
        "lastProcessedEventNumber": _number(stats["lastCheckpointedEventPosition"]),
        "lastCheckpointedEventPosition": stats["lastCheckpointedEventPosition"],
        "lastKnownEventNumber": _number(stats["lastKnownEventPosition"]),
        "lastKnownEventPosition": stats["lastKnownEventPosition"],
        "connectionCount": len(stats["connections"]),
        "totalInFlightMessages": stats["totalInFlightMessages"],
    }


def _number(text: str | None) -> int:
    try:
        return int(text) if text is not None else 0
    except ValueError:
        return 0


def _detail(request: web.Request, stats: dict[str, Any]) -> dict[str, Any]:
    base = _base(request)
    stream, group = quote(stats["eventSource"], safe=""), quote(stats["groupName"], safe="")
    strategy = stats["namedConsumerStrategy"]
    return {
        "links": [
            {"href": f"{base}/subscriptions/{stream}/{group}/info", "rel": "detail"},
            {"href": f"{base}/subscriptions/{stream}/{group}/replayParked", "rel": "replayParked"},
        ],
        "config": {
            "resolveLinktos": stats["resolveLinktos"],
            "startFrom": _number(stats["startFrom"]),
            "startPosition": stats["startFrom"],
            "messageTimeoutMilliseconds": stats["messageTimeoutMilliseconds"],
            "extraStatistics": stats["extraStatistics"],
            "maxRetryCount": stats["maxRetryCount"],
            "liveBufferSize": stats["liveBufferSize"],
            "bufferSize": stats["bufferSize"],
            "readBatchSize": stats["readBatchSize"],
            "preferRoundRobin": strategy == "RoundRobin",
            "checkPointAfterMilliseconds": stats["checkPointAfterMilliseconds"],
            "minCheckPointCount": stats["minCheckPointCount"],
            "maxCheckPointCount": stats["maxCheckPointCount"],
            "maxSubscriberCount": stats["maxSubscriberCount"],
            "namedConsumerStrategy": strategy,
        },
        "eventStreamId": stats["eventSource"],
        "groupName": stats["groupName"],
        "status": stats["status"],
        "averageItemsPerSecond": float(stats["averagePerSecond"]),
        "parkedMessageUri": _parked_uri(base, stats),
        "getMessagesUri": f"{base}/subscriptions/{stream}/{group}/1",
        "totalItemsProcessed": stats["totalItems"],
        "countSinceLastMeasurement": stats["countSinceLastMeasurement"],
        "lastProcessedEventNumber": _number(stats["lastCheckpointedEventPosition"]),
        "lastCheckpointedEventPosition": stats["lastCheckpointedEventPosition"],
        "lastKnownEventNumber": _number(stats["lastKnownEventPosition"]),
        "lastKnownEventPosition": stats["lastKnownEventPosition"],
        "readBufferCount": stats["readBufferCount"],
        "liveBufferCount": stats["liveBufferCount"],
        "retryBufferCount": stats["retryBufferCount"],
        "totalInFlightMessages": stats["totalInFlightMessages"],
        "outstandingMessagesCount": stats["outstandingMessagesCount"],
        "connections": [
            {
                "from": c["from"],
                "username": c["username"],
                "averageItemsPerSecond": float(c["averageItemsPerSecond"]),
                "totalItemsProcessed": c["totalItems"],
                "countSinceLastMeasurement": c["countSinceLastMeasurement"],
                "extraStatistics": c["observedMeasurements"],
                "availableSlots": c["availableSlots"],
                "inFlightMessages": c["inFlightMessages"],
                "connectionName": c["connectionName"],
            }
            for c in stats["connections"]
        ],
        "parkedMessageCount": stats["parkedMessageCount"],
    }


async def list_all(request: web.Request) -> web.Response:
    _require_authenticated(request)
    if (forwarded := await _on_leader(request)) is not None:
        return forwarded
    stats = _service(request).list()
    query = request.query
    if "offset" not in query and "count" not in query:
        return json_response([_summary(request, s) for s in stats])
    offset_text, count_text = query.get("offset"), query.get("count")
    offset = (
        0
        if offset_text is None
        else (int(offset_text) if offset_text.isascii() and offset_text.isdigit() else -1)
    )
    if offset < 0:
        raise InvalidInput(f'Offset "{offset_text}" must be a non-negative integer')
    if count_text is None or not count_text.isascii() or not count_text.isdigit() or int(count_text) < 1:
        raise InvalidInput(f'Count "{count_text}" must be a positive integer')
    count = int(count_text)
    topics = sorted({s["eventSource"] for s in stats})
    page = set(topics[offset : offset + count])
    base = _base(request)
    links = [
        {"href": f"{base}/subscriptions?offset={offset}&count={count}", "rel": "self"},
        {"href": f"{base}/subscriptions?offset=0&count={count}", "rel": "first"},
    ]
    if offset > 0:
        links.append(
            {"href": f"{base}/subscriptions?offset={max(0, offset - count)}&count={count}", "rel": "previous"}
        )
    if offset + count < len(topics):
        links.append({"href": f"{base}/subscriptions?offset={offset + count}&count={count}", "rel": "next"})
    return json_response(
        {
            "links": links,
            "offset": offset,
            "count": count,
            "total": len(topics),
            "subscriptions": [_summary(request, s) for s in stats if s["eventSource"] in page],
        }
    )


async def list_stream(request: web.Request) -> web.Response:
    _require_authenticated(request)
    if (forwarded := await _on_leader(request)) is not None:
        return forwarded
    stats = _service(request).list(request.match_info["stream"])
    return json_response([_summary(request, s) for s in stats])


async def info(request: web.Request) -> web.Response:
    _require_authenticated(request)
    if (forwarded := await _on_leader(request)) is not None:
        return forwarded
    stream, group = _names(request)
    return json_response(_detail(request, _service(request).info(stream, group)))


# -- management -----------------------------------------------------------------------------------------
def _int(config: dict[str, Any], name: str) -> int:
    value = config[name]
    if isinstance(value, bool) or not isinstance(value, int) or not -(2**31) <= value < 2**31:
        raise InvalidInput(f"{name} must be a 32-bit integer.")
    return value


async def _settings(request: web.Request) -> GroupSettings:
    """The body (KurrentDB's SubscriptionConfigData, field names in any case) with its defaults."""
    body = await read_json(request, empty={})
    if body is None:
        body = {}
    if not isinstance(body, dict):
        raise InvalidInput("The body must be a JSON object.")
    given = {str(k).lower(): v for k, v in body.items()}
    config = {**_CONFIG_DEFAULTS, **given}
    strategy = (
        given.get("namedconsumerstrategy", "RoundRobin") if "namedconsumerstrategy" in given else "RoundRobin"
    )
    if not strategy:
        strategy = "RoundRobin" if given.get("preferroundrobin", True) else "DispatchToSingle"
    if not isinstance(strategy, str):
        raise InvalidInput("namedConsumerStrategy must be a string.")
    start_text = config.get("startposition")
    if start_text is not None:
        if not isinstance(start_text, str) or not start_text.lstrip("-").isdigit():
            raise InvalidInput("startPosition must be an event number.")
        start = int(start_text)
    else:
        start = config["startfrom"]
        if isinstance(start, bool) or not isinstance(start, int):
            raise InvalidInput("startFrom must be an event number.")
    settings = GroupSettings(
        start_from=start,
        resolve_links=bool(config["resolvelinktos"]),
        extra_statistics=bool(config["extrastatistics"]),
        message_timeout_ms=_int(config, "messagetimeoutmilliseconds"),
        max_retry_count=_int(config, "maxretrycount"),
        live_buffer_size=_int(config, "livebuffersize"),
        history_buffer_size=_int(config, "buffersize"),
        read_batch_size=_int(config, "readbatchsize"),
        checkpoint_after_ms=_int(config, "checkpointaftermilliseconds"),
        min_checkpoint_count=_int(config, "mincheckpointcount"),
        max_checkpoint_count=_int(config, "maxcheckpointcount"),
        max_subscriber_count=_int(config, "maxsubscribercount"),
        consumer_strategy=strategy,
    )
    # KurrentDB's HTTP checks, before the group's own rules
    if settings.history_buffer_size <= 0:
        raise InvalidInput(f"Buffer Size ({settings.history_buffer_size}) must be positive")
    if settings.live_buffer_size <= 0:
        raise InvalidInput(f"Live Buffer Size ({settings.live_buffer_size}) must be positive")
    if settings.read_batch_size <= 0:
        raise InvalidInput(f"Read Batch Size ({settings.read_batch_size}) must be positive")
    if settings.history_buffer_size <= settings.read_batch_size:
        raise InvalidInput(
            f"BufferSize ({settings.history_buffer_size}) must be larger than ReadBatchSize ({settings.read_batch_size})"
        )
    return settings


def _stream_only(stream: str, kind: str) -> web.Response | None:
    if not stream:
        return _result(kind, "Fail", "Bad stream name.", 400)
    if stream == ALL:
        return _result(kind, "Fail", _ALL_VIA_GRPC, 400)
    return None


async def _create_or_update(request: web.Request, kind: str, status: int) -> web.Response:
    """PUT (create) and POST (update) of a stream's group: the same checks, settings and answer."""
    user = _require_ops(request)
    if (forwarded := await _on_leader(request)) is not None:
        return forwarded
    stream, group = _names(request)
    refused = _stream_only(stream, kind)
    if refused is not None:
        return refused
    settings = await _settings(request)
    service = _service(request)
    change = service.create if kind == "create" else service.update
    await change(EventSource.of(stream), group, settings, user)
    location = f"{_base(request)}/subscriptions/{quote(stream, safe='')}/{quote(group, safe='')}"
    return _result(kind, "Success", "", status, Location=location)


async def create(request: web.Request) -> web.Response:
    return await _create_or_update(request, "create", 201)


async def update(request: web.Request) -> web.Response:
    return await _create_or_update(request, "update", 200)


async def delete(request: web.Request) -> web.Response:
    user = _require_ops(request)
    if (forwarded := await _on_leader(request)) is not None:
        return forwarded
    stream, group = _names(request)
    refused = _stream_only(stream, "delete")
    if refused is not None:
        return refused
    await _service(request).delete(stream, group, user)
    return _result("delete", "Success")


def _stop_at(request: web.Request, refused: str) -> int | None:
    text = request.query.get("stopAt")
    if text is None:
        return None
    if not text.isascii() or not text.isdigit() or int(text) >= 2**63:
        raise InvalidInput(refused)
    return int(text)


async def replay_parked(request: web.Request) -> web.Response:
    return await _parked_operation(request, "replay", "stopAt should be a properly formed positive long")


async def truncate_parked(request: web.Request) -> web.Response:
    return await _parked_operation(request, "truncate", "stopAt should be a properly formed positive integer")


async def _parked_operation(
    request: web.Request, kind: Literal["replay", "truncate"], refused: str
) -> web.Response:
    """``POST .../replayParked`` and ``.../truncateParked``: $ops, on the leader, all the parked messages
    or those before ``stopAt`` (``refused``: KurrentDB's words for a bad one, not the same for both)."""
    user = _require_ops(request)
    if (forwarded := await _on_leader(request)) is not None:
        return forwarded
    stream, group = _names(request)
    stop_at = _stop_at(request, refused)
    service = _service(request)
    operation = service.replay_parked if kind == "replay" else service.truncate_parked
    operation(stream, group, stop_at, user)
    return _result(kind, "Success")


# -- viewing parked messages (the parked stream, read here; KurrentDB does not forward these) --------------
def _parked_stream_of(request: web.Request) -> str:
    return parked_stream(request.match_info["stream"], request.match_info["group"])


def _positive_count(text: str) -> int:
    if not text.isascii() or not text.isdigit() or not 0 < int(text) < 2**31:
        raise InvalidInput(f"'{text}' is not valid count. Should be positive integer")
    return int(text)


async def view_parked_backward(request: web.Request) -> web.Response:
    _require_authenticated(request)
    where = request.match_info["event"]
    start = None
    if where != "head":
        if not where.isascii() or not where.isdigit() or int(where) >= 2**63:
            raise InvalidInput(f"'{where}' is not valid event number")
        start = int(where)
    count = _positive_count(request.match_info["count"])
    return await _feed(request, _parked_stream_of(request), start, "backward", count)


async def view_parked_forward(request: web.Request) -> web.Response:
    _require_authenticated(request)
    where = request.match_info["event"]
    if not where.isascii() or not where.isdigit() or int(where) >= 2**63:
        raise InvalidInput(f"'{where}' is not valid event number")
    count = _positive_count(request.match_info["count"])
    return await _feed(request, _parked_stream_of(request), int(where), "forward", count)


async def restart(request: web.Request) -> web.Response:
    _require_ops(request)
    if (forwarded := await _on_leader(request)) is not None:
        return forwarded
    get_services(request).logger.info("Restarting persistent subscriptions: /subscriptions/restart request.")
    try:
        await _service(request).restart()
    except PersistentSubscriptionsNotReady:
        raise web.HTTPBadRequest(
            text="The Persistent Subscriptions subsystem cannot be restarted because it is not started.",
            content_type="text/plain",
        ) from None
    return json_response("Restarting")


# -- competing consumers ----------------------------------------------------------------------------------
async def read_messages(request: web.Request) -> web.Response:
    stream, group = _names(request)
    count_text = request.match_info.get("count")
    count = 1
    if count_text is not None:
        if not count_text.isascii() or not count_text.isdigit() or not 1 <= int(count_text) <= 100:
            raise InvalidInput(f"Message count must be an integer between 1 and 100 'count' ='{count_text}'")
        count = int(count_text)
    check_access(request, stream, "read")  # KurrentDB authorises before anything else
    if (forwarded := await _on_leader(request)) is not None:
        return forwarded
    if stream == ALL:
        raise InvalidInput(_ALL_VIA_GRPC)
    messages = await _service(request).read_next(stream, group, count)
    base = _base(request)
    s, g = quote(stream, safe=""), quote(group, safe="")
    self_uri = f"{base}/subscriptions/{s}/{g}"
    embed = request.query.get("embed")
    links = []
    if messages:
        ids = ",".join(str(uuid.UUID(bytes=m.event_id)) for m, _ in messages)
        links += [
            {"uri": f"{base}/subscriptions/{s}/{g}/ack?ids={ids}", "relation": "ackAll"},
            {"uri": f"{base}/subscriptions/{s}/{g}/nack?ids={ids}", "relation": "nackAll"},
        ]
    links += [
        {"uri": f"{base}/subscriptions/{s}/{g}/{count}", "relation": "previous"},
        {"uri": self_uri, "relation": "self"},
    ]
    entries = []
    for resolved, retry_count in reversed(messages):
        record = resolved.event if resolved.event is not None else resolved.original
        entry = _entry(request, record, embed)
        event_id = uuid.UUID(bytes=resolved.event_id)
        entry["links"] += [
            {"uri": f"{base}/subscriptions/{s}/{g}/ack/{event_id}", "relation": "ack"},
            {"uri": f"{base}/subscriptions/{s}/{g}/nack/{event_id}", "relation": "nack"},
        ]
        entry["retryCount"] = retry_count
        entries.append(entry)
    feed = {
        "title": f"Messages for '{stream}/{group}'",
        "id": self_uri,
        "updated": entries[0]["updated"] if entries else "0001-01-01T00:00:00Z",
        "author": {"name": "evdb"},
        "headOfStream": False,
        "links": links,
        "entries": entries,
    }
    return json_response(feed, content_type=COMPETING)


def _ids(texts: list[str]) -> list[bytes]:
    try:
        return [uuid.UUID(t).bytes for t in texts]
    except ValueError:
        raise InvalidInput("messageid should be a properly formed guid") from None


def _key_for_ack(request: web.Request) -> str:
    stream, group = _names(request)
    check_access(request, stream, "read")
    return group_key(stream, group)


async def ack_one(request: web.Request) -> web.Response:
    key = _key_for_ack(request)
    if (forwarded := await _on_leader(request)) is not None:
        return forwarded
    _service(request).ack(key, _ids([request.match_info["id"]]))
    return web.Response(status=202)


async def ack_many(request: web.Request) -> web.Response:
    key = _key_for_ack(request)
    if (forwarded := await _on_leader(request)) is not None:
        return forwarded
    _service(request).ack(key, _ids(request.query.get("ids", "").split(",")))
    return web.Response(status=202)


async def nack_one(request: web.Request) -> web.Response:
    key = _key_for_ack(request)
    if (forwarded := await _on_leader(request)) is not None:
        return forwarded
    action = _NACK.get(request.query.get("action", "").lower(), "Unknown")
    _service(request).nack(key, _ids([request.match_info["id"]]), action, "Nacked from HTTP")
    return web.Response(status=202)


async def nack_many(request: web.Request) -> web.Response:
    key = _key_for_ack(request)
    if (forwarded := await _on_leader(request)) is not None:
        return forwarded
    action = _NACK.get(request.query.get("action", "").lower(), "Unknown")
    _service(request).nack(key, _ids(request.query.get("ids", "").split(",")), action, "Nacked from HTTP")
    return web.Response(status=202)


# -- OpenAPI ----------------------------------------------------------------------------------------------
def _doc() -> dict[str, Any]:
    any_object = json_object()
    json_array = {"application/json": {"schema": {"type": "array", "items": {"type": "object"}}}}
    stream = {"name": "stream", "in": "path", "required": True, "schema": {"type": "string", "minLength": 1}}
    group = {"name": "group", "in": "path", "required": True, "schema": {"type": "string", "minLength": 1}}
    unauth = response_object("Not authenticated, or without the required role")
    bad = response_object("Invalid input; the body says why", {**TEXT_CONTENT, **any_object})
    missing = response_object("No such subscription group", TEXT_CONTENT)
    stop_at = {
        "name": "stopAt",
        "in": "query",
        "required": False,
        "schema": {"type": "integer", "minimum": 0},
    }

    def parked_action(summary: str, answer: str) -> dict[str, Any]:
        return {
            "post": {
                "summary": summary,
                "parameters": [stream, group, stop_at],
                "responses": {
                    "200": response_object(answer, any_object),
                    "400": bad,
                    "401": unauth,
                    "404": missing,
                },
            }
        }

    config_body = {
        "required": False,
        "content": json_object(
            {
                "resolveLinktos": {"type": "boolean"},
                "startFrom": {"type": "integer"},
                "messageTimeoutMilliseconds": {"type": "integer", "minimum": 0, "maximum": 2**31 - 1},
                "extraStatistics": {"type": "boolean"},
                "maxRetryCount": {"type": "integer", "minimum": 0, "maximum": 2**31 - 1},
                "liveBufferSize": {"type": "integer", "minimum": 1, "maximum": 2**31 - 1},
                "bufferSize": {"type": "integer", "minimum": 1, "maximum": 2**31 - 1},
                "readBatchSize": {"type": "integer", "minimum": 1, "maximum": 2**31 - 1},
                "checkPointAfterMilliseconds": {
                    "type": "integer",
                    "minimum": 0,
                    "maximum": 2**31 - 1,
                },
                "minCheckPointCount": {"type": "integer", "minimum": 0, "maximum": 2**31 - 1},
                "maxCheckPointCount": {"type": "integer", "minimum": 0, "maximum": 2**31 - 1},
                "maxSubscriberCount": {"type": "integer", "minimum": 0, "maximum": 2**31 - 1},
                "namedConsumerStrategy": {
                    "type": "string",
                    "enum": ["RoundRobin", "DispatchToSingle", "Pinned", "PinnedByCorrelation"],
                },
            }
        ),
    }
    message_id = {
        "name": "id",
        "in": "path",
        "required": True,
        "schema": {"type": "string", "format": "uuid"},
    }
    action = {
        "name": "action",
        "in": "query",
        "required": False,
        "schema": {"type": "string", "enum": ["park", "retry", "skip", "stop"]},
    }
    ids = {"name": "ids", "in": "query", "required": True, "schema": {"type": "string"}}
    accepted = {
        "202": response_object("Accepted"),
        "400": bad,
        "401": unauth,
        "403": response_object("No read access", TEXT_CONTENT),
    }
    feed = {
        "200": response_object(
            "Messages now in flight (competing-consumer atom feed)",
            {COMPETING: {"schema": {"type": "object"}}},
        ),
        "400": bad,
        "401": unauth,
        "403": response_object("No read access", TEXT_CONTENT),
        "404": missing,
    }
    count = {
        "name": "count",
        "in": "path",
        "required": True,
        "schema": {"type": "integer", "minimum": 1, "maximum": 100},
    }
    parked_event = {
        "name": "event",
        "in": "path",
        "required": True,
        "schema": {"oneOf": [{"type": "string", "enum": ["head"]}, {"type": "integer", "minimum": 0}]},
    }
    parked_number = {
        "name": "event",
        "in": "path",
        "required": True,
        "schema": {"type": "integer", "minimum": 0},
    }
    positive_count = {
        "name": "count",
        "in": "path",
        "required": True,
        "schema": {"type": "integer", "minimum": 1, "maximum": 2**31 - 1},
    }
    embed = {
        "name": "embed",
        "in": "query",
        "required": False,
        "schema": {"type": "string", "enum": ["none", "content", "rich", "body", "pretty", "tryharder"]},
    }
    parked_feed = {
        "200": response_object(
            "The parked stream's atom feed",
            {"application/vnd.kurrent.atom+json": {"schema": {"type": "object"}}},
        ),
        "400": bad,
        "401": unauth,
        "403": response_object("No read access to the parked stream", TEXT_CONTENT),
        "404": response_object("No parked stream", TEXT_CONTENT),
    }
    return {
        "/subscriptions": {
            "get": {
                "summary": "Every persistent subscription group (paged with offset and count)",
                "parameters": [
                    {
                        "name": "offset",
                        "in": "query",
                        "required": False,
                        "schema": {"type": "integer", "minimum": 0},
                    },
                    {
                        "name": "count",
                        "in": "query",
                        "required": False,
                        "schema": {"type": "integer", "minimum": 1},
                    },
                ],
                "responses": {
                    "200": response_object("Groups", {"application/json": {}}),
                    "400": bad,
                    "401": unauth,
                },
            }
        },
        "/subscriptions/restart": {
            "post": {
                "summary": "Restart the persistent subscriptions",
                "responses": {
                    "200": response_object(
                        "Restarting", {"application/json": {"schema": {"type": "string"}}}
                    ),
                    "400": bad,
                    "401": unauth,
                },
            }
        },
        "/subscriptions/{stream}": {
            "get": {
                "summary": "The groups of one stream",
                "parameters": [stream],
                "responses": {"200": response_object("Groups", json_array), "401": unauth, "404": missing},
            }
        },
        "/subscriptions/{stream}/{group}": {
            "put": {
                "summary": "Create a group on a stream",
                "parameters": [stream, group],
                "requestBody": config_body,
                "responses": {
                    "201": response_object("Created", any_object),
                    "400": bad,
                    "401": unauth,
                    "409": response_object("Exists", TEXT_CONTENT),
                },
            },
            "post": {
                "summary": "Update a group",
                "parameters": [stream, group],
                "requestBody": config_body,
                "responses": {
                    "200": response_object("Updated", any_object),
                    "400": bad,
                    "401": unauth,
                    "404": missing,
                },
            },
            "delete": {
                "summary": "Delete a group",
                "parameters": [stream, group],
                "responses": {
                    "200": response_object("Deleted", any_object),
                    "400": bad,
                    "401": unauth,
                    "404": missing,
                },
            },
            "get": {"summary": "Read the next message", "parameters": [stream, group], "responses": feed},
        },
        "/subscriptions/{stream}/{group}/info": {
            "get": {
                "summary": "A group's statistics, settings and connections",
                "parameters": [stream, group],
                "responses": {"200": response_object("The group", any_object), "401": unauth, "404": missing},
            }
        },
        "/subscriptions/{stream}/{group}/replayParked": parked_action(
            "Replay the parked messages (all, or those before stopAt)", "Replaying"
        ),
        "/subscriptions/{stream}/{group}/truncateParked": parked_action(
            "Drop the parked messages without replaying them (all, or those before stopAt)", "Truncating"
        ),
        "/subscriptions/viewparkedmessages/{stream}/{group}/{event}/backward/{count}": {
            "get": {
                "summary": "A page of a group's parked messages, newest first (the parked stream's feed)",
                "parameters": [stream, group, parked_event, positive_count, embed],
                "responses": parked_feed,
            }
        },
        "/subscriptions/viewparkedmessages/{stream}/{group}/{event}/forward/{count}": {
            "get": {
                "summary": "A page of a group's parked messages, oldest first (the parked stream's feed)",
                "parameters": [stream, group, parked_number, positive_count, embed],
                "responses": parked_feed,
            }
        },
        "/subscriptions/{stream}/{group}/{count}": {
            "get": {
                "summary": "Read the next messages",
                "parameters": [stream, group, count],
                "responses": feed,
            }
        },
        "/subscriptions/{stream}/{group}/ack/{id}": {
            "post": {
                "summary": "Acknowledge a message",
                "parameters": [stream, group, message_id],
                "responses": accepted,
            }
        },
        "/subscriptions/{stream}/{group}/nack/{id}": {
            "post": {
                "summary": "Refuse a message (park, retry, skip or stop)",
                "parameters": [stream, group, message_id, action],
                "responses": accepted,
            }
        },
        "/subscriptions/{stream}/{group}/ack": {
            "post": {
                "summary": "Acknowledge messages",
                "parameters": [stream, group, ids],
                "responses": accepted,
            }
        },
        "/subscriptions/{stream}/{group}/nack": {
            "post": {
                "summary": "Refuse messages",
                "parameters": [stream, group, ids, action],
                "responses": accepted,
            }
        },
    }


def setup(app: web.Application) -> None:
    r = app.router
    r.add_get("/subscriptions", list_all)
    r.add_post("/subscriptions/restart", restart)
    r.add_get("/subscriptions/{stream}", list_stream)
    r.add_get("/subscriptions/{stream}/{group}/info", info)
    r.add_post("/subscriptions/{stream}/{group}/replayParked", replay_parked)
    r.add_post("/subscriptions/{stream}/{group}/truncateParked", truncate_parked)
    r.add_get(
        "/subscriptions/viewparkedmessages/{stream}/{group}/{event}/backward/{count}", view_parked_backward
    )
    r.add_get(
        "/subscriptions/viewparkedmessages/{stream}/{group}/{event}/forward/{count}", view_parked_forward
    )
    r.add_post("/subscriptions/{stream}/{group}/ack/{id}", ack_one)
    r.add_post("/subscriptions/{stream}/{group}/nack/{id}", nack_one)
    r.add_post("/subscriptions/{stream}/{group}/ack", ack_many)
    r.add_post("/subscriptions/{stream}/{group}/nack", nack_many)
    r.add_put("/subscriptions/{stream}/{group}", create)
    r.add_post("/subscriptions/{stream}/{group}", update)
    r.add_delete("/subscriptions/{stream}/{group}", delete)
    r.add_get("/subscriptions/{stream}/{group}", read_messages)
    r.add_get("/subscriptions/{stream}/{group}/{count}", read_messages)


EXTRA_PATHS.append(_doc())
