"""``GET /openapi.json``: an OpenAPI 3.0 description of every endpoint the node serves."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aiohttp import web

from evdb.http.common import json_response

TEXT_CONTENT = {"text/plain": {"schema": {"type": "string"}}}


def object_schema(
    properties: dict[str, Any] | None = None, required: Sequence[str] = (), **more: Any
) -> dict[str, Any]:
    """The schema of a JSON object: its ``required`` keys (left out when none), its ``properties`` (left out
    when ``None``: any object) and ``more`` keywords after them (``additionalProperties``, ...)."""
    schema: dict[str, Any] = {"type": "object"}
    if required:
        schema["required"] = list(required)
    if properties is not None:
        schema["properties"] = properties
    return {**schema, **more}


def json_object(
    properties: dict[str, Any] | None = None, required: Sequence[str] = (), **more: Any
) -> dict[str, Any]:
    """A request body's or an answer's ``content``: a JSON object (see :func:`object_schema`)."""
    return {"application/json": {"schema": object_schema(properties, required, **more)}}


_JSON_OBJECT = json_object()


def response_object(
    description: str, content: dict | None = None, headers: dict | None = None
) -> dict[str, Any]:
    """An OpenAPI Response Object: its description, and its ``content`` and ``headers`` where it has any."""
    out: dict[str, Any] = {"description": description}
    if content is not None:
        out["content"] = content
    if headers:
        out["headers"] = headers
    return out


_UNAUTH = response_object("Not authenticated, or wrong credentials")
_FORBIDDEN = response_object("Authenticated without the required role", TEXT_CONTENT)
_BAD = response_object("Invalid input; the body says why", TEXT_CONTENT)
_STREAM = {"name": "stream", "in": "path", "required": True, "schema": {"type": "string", "minLength": 1}}
_KH = {
    "Kurrent-ExpectedVersion": {
        "name": "Kurrent-ExpectedVersion",
        "in": "header",
        "required": False,
        "schema": {"type": "integer", "minimum": -4},
        "description": "-2 any, -1 no stream, -4 stream exists, or the exact last event number",
    },
    "Kurrent-HardDelete": {
        "name": "Kurrent-HardDelete",
        "in": "header",
        "required": False,
        "schema": {"type": "string", "enum": ["true", "false"]},
    },
}
_FEED = {
    "application/vnd.kurrent.atom+json": {
        "schema": object_schema(
            {
                "links": {"type": "array", "items": {"type": "object"}},
                "entries": {"type": "array", "items": {"type": "object"}},
                "headOfStream": {"type": "boolean"},
            },
            ["links", "entries"],
        )
    }
}
_EVENTS_BODY = {
    "type": "array",
    "items": object_schema(
        {
            "eventId": {"type": "string", "format": "uuid"},
            "eventType": {"type": "string", "minLength": 1},
            "data": {},
            "metadata": {},
        },
        ["eventId", "eventType"],
    ),
}
_SCAVENGE_ID = {
    **json_object(
        {"scavengeId": {"type": "string"}, "scavengeLink": {"type": "string"}}, ["scavengeId", "scavengeLink"]
    ),
    "text/plain": {"schema": {"type": "string"}},  # without Accept: application/json, as KurrentDB
}


def _stream_reads() -> dict[str, Any]:
    read_responses = {
        "200": response_object("A page of the stream, newest first", _FEED),
        "400": _BAD,
        "401": _UNAUTH,
        "403": _FORBIDDEN,
        "404": response_object("The stream does not exist or was soft-deleted", TEXT_CONTENT),
        "410": response_object("The stream was hard-deleted", TEXT_CONTENT),
    }
    return {
        "/streams/{stream}": {
            "get": {
                "summary": "Read the head of a stream",
                "parameters": [_STREAM],
                "responses": read_responses,
            },
            "post": {
                "summary": "Append events",
                "parameters": [_STREAM, _KH["Kurrent-ExpectedVersion"]],
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/vnd.kurrent.events+json": {"schema": _EVENTS_BODY},
                        "application/vnd.eventstore.events+json": {"schema": _EVENTS_BODY},
                    },
                },
                "responses": {
                    "201": response_object("Written; Location names the first event", _JSON_OBJECT),
                    "400": response_object(
                        "Invalid input or wrong expected version (Kurrent-CurrentVersion)", TEXT_CONTENT
                    ),
                    "401": _UNAUTH,
                    "403": _FORBIDDEN,
                    "405": response_object("$all cannot be written"),
                    "410": response_object("The stream was hard-deleted", TEXT_CONTENT),
                    "413": response_object("The append is larger than MaxAppendSize", TEXT_CONTENT),
                    "415": response_object("Unsupported content type", TEXT_CONTENT),
                },
            },
            "delete": {
                "summary": "Delete a stream (soft, or hard with Kurrent-HardDelete: true)",
                "parameters": [_STREAM, _KH["Kurrent-ExpectedVersion"], _KH["Kurrent-HardDelete"]],
                "responses": {
                    "204": response_object("Deleted"),
                    "400": _BAD,
                    "401": _UNAUTH,
                    "403": _FORBIDDEN,
                    "404": response_object("The stream does not exist", TEXT_CONTENT),
                    "405": response_object("$all cannot be deleted"),
                    "410": response_object("Already hard-deleted", TEXT_CONTENT),
                },
            },
        },
        "/streams/{stream}/{start}/{direction}/{count}": {
            "get": {
                "summary": "Read a page of a stream (or of $all by position)",
                "parameters": [
                    _STREAM,
                    {"name": "start", "in": "path", "required": True, "schema": {"type": "string"}},
                    {
                        "name": "direction",
                        "in": "path",
                        "required": True,
                        "schema": {"type": "string", "enum": ["forward", "backward"]},
                    },
                    {
                        "name": "count",
                        "in": "path",
                        "required": True,
                        "schema": {"type": "integer", "minimum": 1, "maximum": 4096},
                    },
                ],
                "responses": read_responses,
            }
        },
        "/streams/{stream}/{number}": {
            "get": {
                "summary": "Read one event ('head' for the last)",
                "parameters": [
                    _STREAM,
                    {"name": "number", "in": "path", "required": True, "schema": {"type": "string"}},
                ],
                "responses": {**read_responses, "200": response_object("The event's data")},
            }
        },
        "/streams/{stream}/metadata": {
            "get": {
                "summary": "Read stream metadata",
                "parameters": [_STREAM],
                "responses": {
                    "200": response_object("The metadata object", _JSON_OBJECT),
                    "400": _BAD,
                    "401": _UNAUTH,
                    "403": _FORBIDDEN,
                    "410": response_object("The stream was hard-deleted", TEXT_CONTENT),
                },
            },
            "post": {
                "summary": "Write stream metadata",
                "parameters": [_STREAM, _KH["Kurrent-ExpectedVersion"]],
                "requestBody": {
                    "required": True,
                    "content": _JSON_OBJECT,
                },
                "responses": {
                    "201": response_object("Written"),
                    "400": _BAD,
                    "401": _UNAUTH,
                    "403": _FORBIDDEN,
                    "410": response_object("The stream was hard-deleted", TEXT_CONTENT),
                },
            },
        },
        "/subscriptions/streams/{stream}": {
            "get": {
                "summary": "Subscribe (server-sent events): history, then live events",
                "parameters": [
                    _STREAM,
                    {"name": "after", "in": "query", "required": False, "schema": {"type": "string"}},
                    {
                        "name": "from",
                        "in": "query",
                        "required": False,
                        "schema": {"type": "string", "enum": ["end"]},
                    },
                ],
                "responses": {
                    "200": response_object("text/event-stream of event and caught-up messages"),
                    "400": _BAD,
                    "401": _UNAUTH,
                    "403": _FORBIDDEN,
                },
            }
        },
    }


def _plain(summary: str, responses: dict[str, Any], method: str = "get") -> dict[str, Any]:
    return {method: {"summary": summary, "responses": responses}}


def build_document() -> dict[str, Any]:
    paths: dict[str, Any] = {}
    paths.update(_stream_reads())
    paths["/info"] = _plain(
        "Node version, state and features", {"200": response_object("Node information", _JSON_OBJECT)}
    )
    paths["/gossip"] = _plain(
        "Cluster members as this node sees them", {"200": response_object("Members", _JSON_OBJECT)}
    )
    paths["/stats"] = _plain(
        "Process, system and database statistics", {"200": response_object("Statistics", _JSON_OBJECT)}
    )
    paths["/metrics"] = _plain("Prometheus metrics", {"200": response_object("Prometheus text format")})
    paths["/ping"] = _plain("Liveness", {"200": response_object("Pong", _JSON_OBJECT)})
    paths["/openapi.json"] = _plain("This document", {"200": response_object("OpenAPI 3.0", _JSON_OBJECT)})
    paths["/admin/shutdown"] = _plain(
        "Shut the node down", {"200": response_object("Shutting down"), "401": _UNAUTH}, method="post"
    )
    paths["/users"] = {
        "get": {
            "summary": "List users",
            "responses": {"200": response_object("Users", _JSON_OBJECT), "401": _UNAUTH},
        },
        "post": {
            "summary": "Create a user",
            "requestBody": {
                "required": True,
                "content": json_object(
                    {
                        "loginName": {"type": "string"},
                        "fullName": {"type": "string"},
                        "groups": {"type": "array", "items": {"type": "string"}},
                        "password": {"type": "string"},
                    },
                    ["loginName", "password"],
                ),
            },
            "responses": {
                "201": response_object("Created", _JSON_OBJECT),
                "400": _BAD,
                "401": _UNAUTH,
                "409": response_object("Already exists", TEXT_CONTENT),
            },
        },
    }
    login = {"name": "login", "in": "path", "required": True, "schema": {"type": "string"}}
    user_responses = {
        "200": response_object("Done", _JSON_OBJECT),
        "400": _BAD,
        "401": _UNAUTH,
        "403": _FORBIDDEN,
        "404": response_object("No such user", TEXT_CONTENT),
    }
    paths["/users/{login}"] = {
        "get": {"summary": "Read a user", "parameters": [login], "responses": user_responses},
        "put": {
            "summary": "Update a user's full name and groups",
            "parameters": [login],
            "requestBody": {
                "required": True,
                "content": _JSON_OBJECT,
            },
            "responses": user_responses,
        },
        "delete": {"summary": "Delete a user", "parameters": [login], "responses": user_responses},
    }
    paths["/users/{login}/command/{command}"] = {
        "post": {
            "summary": "enable, disable, reset-password or change-password",
            "parameters": [
                login,
                {
                    "name": "command",
                    "in": "path",
                    "required": True,
                    "schema": {
                        "type": "string",
                        "enum": ["enable", "disable", "reset-password", "change-password"],
                    },
                },
            ],
            "requestBody": {
                "required": False,
                "content": _JSON_OBJECT,
            },
            "responses": user_responses,
        }
    }
    for extra in EXTRA_PATHS:
        paths.update(extra)
    from evdb.version import VERSION

    return {
        "openapi": "3.0.3",
        "info": {"title": "evdb node HTTP API", "version": VERSION},
        "components": {"securitySchemes": {"basic": {"type": "http", "scheme": "basic"}}},
        "security": [{"basic": []}, {}],
        "paths": paths,
    }


#: Feature modules (scavenge, auto-scavenge, cluster, ...) append their path objects here.
EXTRA_PATHS: list[dict[str, Any]] = []
SCAVENGE_ID_CONTENT = _SCAVENGE_ID


#: Path objects a route module adds for one application only (a feature this node has enabled).
APP_PATHS: web.AppKey[list[dict[str, Any]]] = web.AppKey("openapi_app_paths", list)


#: answers any operation may get, whatever it does (documented on every one)
_ANY_OPERATION = {
    "401": {
        "description": "Credentials that do not sign in (a wrong password, an unknown or disabled user) are "
        "refused on every operation, those open to anonymous callers included"
    },
    "429": {
        "description": "Too many requests of this client in progress (HttpMaxConcurrentRequestsPerClient)"
    },
    "503": {"description": "The node is not ready: starting, or its database is being reopened"},
}
_DISK_FULL = response_object("The node's disk is full: nothing was written", TEXT_CONTENT)


def _with_common_answers(paths: dict[str, Any]) -> None:
    for path, operations in paths.items():
        for method, operation in operations.items():
            responses = operation.setdefault("responses", {})
            for code, answer in _ANY_OPERATION.items():
                responses.setdefault(code, answer)
            if method in ("post", "put", "delete") and path.startswith("/streams/"):
                responses.setdefault("507", _DISK_FULL)


#: OpenAPI links: what a created resource can be used for next (schemathesis's stateful phase follows
#: them: create a user, a stream, a subscription group, a scavenge, then use it). Each: the operation
#: and answer that create it, how its parameters are read from that exchange, the operations using it.
_LINKS: tuple[tuple[str, str, str, dict[str, str], tuple[tuple[str, str], ...]], ...] = (
    (
        "/users",
        "post",
        "201",
        {"login": "$request.body#/loginName"},
        (
            ("/users/{login}", "get"),
            ("/users/{login}", "put"),
            ("/users/{login}/command/{command}", "post"),
            ("/users/{login}", "delete"),
        ),
    ),
    (
        "/streams/{stream}",
        "post",
        "201",
        {"stream": "$request.path.stream"},
        (
            ("/streams/{stream}", "get"),
            ("/streams/{stream}/{start}/{direction}/{count}", "get"),
            ("/streams/{stream}/metadata", "get"),
            ("/streams/{stream}/metadata", "post"),
            ("/subscriptions/{stream}/{group}", "put"),
            ("/streams/{stream}", "delete"),
        ),
    ),
    (
        "/subscriptions/{stream}/{group}",
        "put",
        "201",
        {"stream": "$request.path.stream", "group": "$request.path.group"},
        (
            ("/subscriptions/{stream}/{group}", "get"),
            ("/subscriptions/{stream}/{group}/info", "get"),
            ("/subscriptions/{stream}/{group}", "post"),
            ("/subscriptions/{stream}/{group}/{count}", "get"),
            ("/subscriptions/{stream}/{group}/ack", "post"),
            ("/subscriptions/{stream}/{group}/nack", "post"),
            ("/subscriptions/{stream}/{group}/replayParked", "post"),
            ("/subscriptions/{stream}/{group}", "delete"),
        ),
    ),
    (
        "/admin/scavenge",
        "post",
        "200",
        {"scavengeId": "$response.body#/scavengeId"},
        (("/admin/scavenge/{scavengeId}", "delete"),),
    ),
)


def _pointer(path: str, method: str) -> str:
    """A JSON pointer to an operation of the document (RFC 6901: '~' as '~0', '/' as '~1')."""
    return "#/paths/" + path.replace("~", "~0").replace("/", "~1") + "/" + method


def _with_links(paths: dict[str, Any]) -> None:
    """Add :data:`_LINKS` where both ends are served (feature paths come and go with the features)."""
    for path, method, status, parameters, targets in _LINKS:
        answer = paths.get(path, {}).get(method, {}).get("responses", {}).get(status)
        if answer is None:
            continue
        for target, target_method in targets:
            if target_method not in paths.get(target, {}):
                continue
            name = target_method + "".join(part.strip("{}").title() for part in target.split("/"))
            answer.setdefault("links", {})[name] = {
                "operationRef": _pointer(target, target_method),
                "parameters": {k: v for k, v in parameters.items() if "{" + k + "}" in target},
            }


async def openapi(request: web.Request) -> web.Response:
    document = build_document()
    for extra in request.app.get(APP_PATHS, []):
        document["paths"].update(extra)
    _with_common_answers(document["paths"])
    _with_links(document["paths"])
    return json_response(document)


def setup(app: web.Application) -> None:
    app.router.add_get("/openapi.json", openapi)
