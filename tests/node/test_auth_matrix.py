"""Authentication and authorization matrix: every endpoint in /openapi.json × every kind of caller.

The endpoints come from the node's own OpenAPI document, so an endpoint added later is walked
automatically; it only needs a row in ``EXPECTED`` (the test fails, naming it, when none matches).
Path parameters are filled with samples; stream endpoints are walked once per kind of stream.

The node is licensed, so auto-scavenge is mapped and its endpoints are in the document (an unlicensed
node answers 404 there, as KurrentDB). A refusal (401/403) carries no data: an empty body, or a short
text reason ("Access denied.") with nothing of the resource in it.
"""

from __future__ import annotations

import fnmatch
import json
import uuid
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from evdb.licensing.issuers import issue_demo_license
from evdb.node import Node
from tests.node.conftest import node_options

# -- callers -----------------------------------------------------------------------------------------
ANON, WRONG, UNKNOWN, USER, OPS, ADMIN_ = (
    "anonymous",
    "wrong-password",
    "unknown-user",
    "user",
    "ops",
    "admin",
)
USER_LOGIN, USER_PASSWORD = "matrix-user", "matrix-pw"
CALLERS: dict[str, tuple[str, str] | None] = {
    ANON: None,
    WRONG: ("admin", "not-the-password"),
    UNKNOWN: ("nobody-at-all", "changeit"),
    USER: (USER_LOGIN, USER_PASSWORD),
    OPS: ("ops", "changeit"),
    ADMIN_: ("admin", "changeit"),
}
BAD_CREDENTIALS = (WRONG, UNKNOWN)

# -- expectations ------------------------------------------------------------------------------------
OK = "200"  # exactly 200
ALLOWED = "allowed"  # let through: any answer but 401/403/5xx (404, 400, 409 ... are the handler's own)
R401 = "401"  # refused with 401 (KurrentDB's answer for anonymous, and for legacy admin endpoints)
R403 = "403"  # refused with 403
REFUSED = "401|403"  # refused, either code (KurrentDB's AtomPub and /users use 401; evdb 403)

USER_STREAM, SYSTEM_STREAM, ALL_STREAM = "user stream", "$system stream", "$all"
NO_STREAM = "-"


@dataclass(frozen=True)
class Row:
    endpoint: str  # "METHOD /path" with fnmatch wildcards
    streams: str  # which stream sample the row is about (NO_STREAM when the path has none, "*" any)
    anonymous: str
    user: str
    ops: str
    admin: str


# Wrong password or unknown user: 401 with `WWW-Authenticate: Basic ...` on every endpoint (not in the
# table). First matching row wins.
EXPECTED: tuple[Row, ...] = (
    #   endpoint                             streams        anonymous user     ops      admin
    Row("GET /info", NO_STREAM, OK, OK, OK, OK),
    Row("GET /gossip", NO_STREAM, OK, OK, OK, OK),
    Row("GET /ping", NO_STREAM, OK, OK, OK, OK),
    Row("GET /metrics", NO_STREAM, OK, OK, OK, OK),
    Row("GET /openapi.json", NO_STREAM, OK, OK, OK, OK),
    Row("GET /stats", NO_STREAM, OK, OK, OK, OK),
    # the Admin UI (evdb/webui): the page and its files hold no data; its parts follow the node's rules
    Row("GET /web", NO_STREAM, ALLOWED, ALLOWED, ALLOWED, ALLOWED),
    Row("GET /web/", NO_STREAM, OK, OK, OK, OK),
    Row("GET /web/index.html", NO_STREAM, OK, OK, OK, OK),
    Row("GET /web/static/*", NO_STREAM, OK, OK, OK, OK),
    Row("GET /web/fragments/cluster", NO_STREAM, R401, OK, OK, OK),
    Row("GET /web/fragments/admin*", NO_STREAM, R401, R403, OK, OK),
    Row("GET /web/fragments/streams", NO_STREAM, R401, R403, R403, OK),
    Row("GET /web/fragments/streams/*", USER_STREAM, R401, ALLOWED, ALLOWED, ALLOWED),
    Row("GET /web/fragments/streams/*", SYSTEM_STREAM, R401, REFUSED, REFUSED, ALLOWED),
    Row("GET /web/fragments/streams/*", ALL_STREAM, R401, REFUSED, REFUSED, ALLOWED),
    Row("GET /web/fragments/subscriptions", NO_STREAM, R401, OK, OK, OK),
    Row("GET /web/fragments/archive", NO_STREAM, R401, R403, OK, OK),
    # evdb's node-run backups write into folders on the node's host: admins only, 403 otherwise
    Row("* /admin/backup*", NO_STREAM, R401, R403, R403, ALLOWED),
    # certificate reload (KurrentDB's) and the certificate state (evdb's): $ops/$admins, legacy 401
    Row("POST /admin/reloadconfig", NO_STREAM, R401, R401, ALLOWED, ALLOWED),
    Row("GET /admin/certificates", NO_STREAM, R401, R401, OK, OK),
    # legacy admin endpoints: 401 (never 403) without the $ops/$admins role
    Row("* /admin/*", NO_STREAM, R401, R401, ALLOWED, ALLOWED),
    # auto-scavenge: reads need any user; commands need $ops/$admins, 403 when the role is missing
    Row("GET /auto-scavenge/*", NO_STREAM, R401, ALLOWED, ALLOWED, ALLOWED),
    Row("* /auto-scavenge/*", NO_STREAM, R401, R403, ALLOWED, ALLOWED),
    # streams: user streams need any authenticated user; $-streams (and $all) are for admins by default
    Row("* /streams/*", USER_STREAM, R401, ALLOWED, ALLOWED, ALLOWED),
    Row("* /streams/*", SYSTEM_STREAM, R401, REFUSED, REFUSED, ALLOWED),
    Row("GET /streams/*", ALL_STREAM, R401, REFUSED, REFUSED, ALLOWED),
    # evdb's live subscription to a stream (server-sent events): the stream's read rights
    Row("GET /subscriptions/streams/*", USER_STREAM, R401, ALLOWED, ALLOWED, ALLOWED),
    Row("GET /subscriptions/streams/*", SYSTEM_STREAM, R401, REFUSED, REFUSED, ALLOWED),
    Row("GET /subscriptions/streams/*", ALL_STREAM, R401, REFUSED, REFUSED, ALLOWED),
    # persistent subscriptions, as KurrentDB: listing and statistics for any user whatever the stream;
    # managing for $ops/$admins (401 otherwise); reading and acknowledging with the stream's read rights
    Row("GET /subscriptions", NO_STREAM, R401, ALLOWED, ALLOWED, ALLOWED),
    Row("POST /subscriptions/restart", NO_STREAM, R401, R401, ALLOWED, ALLOWED),
    Row("GET /subscriptions/{stream}", "*", R401, ALLOWED, ALLOWED, ALLOWED),
    Row("GET /subscriptions/{stream}/{group}/info", "*", R401, ALLOWED, ALLOWED, ALLOWED),
    Row("PUT /subscriptions/{stream}/{group}", "*", R401, R401, ALLOWED, ALLOWED),
    Row("POST /subscriptions/{stream}/{group}", "*", R401, R401, ALLOWED, ALLOWED),
    Row("DELETE /subscriptions/{stream}/{group}", "*", R401, R401, ALLOWED, ALLOWED),
    Row("POST /subscriptions/{stream}/{group}/replayParked", "*", R401, R401, ALLOWED, ALLOWED),
    Row("POST /subscriptions/{stream}/{group}/truncateParked", "*", R401, R401, ALLOWED, ALLOWED),
    # the parked messages' feed: any user may ask (statistics), then the parked stream's own rights
    # decide ($admins only: KurrentDB's parker writes that $acl)
    Row("GET /subscriptions/viewparkedmessages/*", "*", R401, REFUSED, REFUSED, ALLOWED),
    Row("* /subscriptions/{stream}/{group}*", USER_STREAM, R401, ALLOWED, ALLOWED, ALLOWED),
    Row("* /subscriptions/{stream}/{group}*", SYSTEM_STREAM, R401, REFUSED, REFUSED, ALLOWED),
    Row("* /subscriptions/{stream}/{group}*", ALL_STREAM, R401, REFUSED, REFUSED, ALLOWED),
    # user management: admins only (for another user's account)
    Row("* /users", NO_STREAM, R401, REFUSED, REFUSED, ALLOWED),
    Row("* /users/*", NO_STREAM, R401, REFUSED, REFUSED, ALLOWED),
)

#: endpoints that must never be let through in a test (they would stop the node, or leave it without a
#: leader for the calls after them): refusals only
REFUSALS_ONLY = {"POST /admin/shutdown", "POST /admin/node/resign"}

STREAM_SAMPLES = {USER_STREAM: "auth-matrix", SYSTEM_STREAM: "$auth-matrix", ALL_STREAM: "$all"}
SAMPLES = {  # path parameters other than {stream}
    "start": "0",
    "number": "0",
    "count": "5",
    "scavengeId": "no-such-scavenge",
    "login": "nobody-here",  # a user that is not the caller: admin rights are needed
    "command": "enable",
    "group": "matrix-group",
    "event": "0",
    "id": str(uuid.uuid4()),
}
EVENTS = [{"eventId": str(uuid.uuid4()), "eventType": "MatrixEvent", "data": {"n": 1}}]
SEED_MARKER = "matrix-seed-7f3a"  # in every seeded event: a refusal's body must never hold it

#: endpoints that landed after the matrix was first written; the walk must reach each of them
NEWER_ENDPOINTS = {
    "GET /auto-scavenge/enabled",
    "GET /auto-scavenge/status",
    "GET /auto-scavenge/progress",
    "POST /auto-scavenge/pause",
    "POST /auto-scavenge/resume",
    "POST /auto-scavenge/configure",
    "POST /admin/backup",
    "GET /admin/backup/current",
    "POST /admin/reloadconfig",
    "GET /admin/certificates",
    "GET /web/",
    "GET /web/fragments/cluster",
    "GET /web/fragments/admin",
    "GET /web/fragments/streams",
    "GET /web/fragments/streams/{stream}",
}


@dataclass(frozen=True)
class Call:
    method: str
    template: str
    stream_kind: str
    url: str
    body: bytes | None
    content_type: str | None

    @property
    def endpoint(self) -> str:
        return f"{self.method} {self.template}"

    def __str__(self) -> str:
        suffix = f" [{self.stream_kind}]" if self.stream_kind != NO_STREAM else ""
        return f"{self.method} {self.url}{suffix}"


def rule_for(method: str, template: str, stream_kind: str) -> Row | None:
    endpoint = f"{method} {template}"
    for row in EXPECTED:
        if row.streams in (stream_kind, "*") and fnmatch.fnmatchcase(endpoint, row.endpoint):
            return row
    return None


def _param_value(param: dict[str, Any]) -> str:
    name = param["name"]
    if name in SAMPLES:
        return SAMPLES[name]
    schema = param.get("schema", {})
    if schema.get("enum"):
        return str(schema["enum"][0])
    if schema.get("type") == "integer":
        return str(max(1, schema.get("minimum", 1)))
    return "sample"


def _body(operation: dict[str, Any]) -> tuple[bytes | None, str | None]:
    content = operation.get("requestBody", {}).get("content", {})
    if not content:
        return None, None
    content_type = next(iter(content))
    if "events+json" in content_type:
        return json.dumps(EVENTS).encode(), content_type
    return b"{}", content_type


def calls_from(spec: dict[str, Any]) -> list[Call]:
    """Every (method, path) of the document, once per stream kind for the stream endpoints."""
    calls = []
    for template, item in spec["paths"].items():
        shared = item.get("parameters", [])
        for method, operation in item.items():
            if method not in ("get", "put", "post", "delete", "patch", "head", "options"):
                continue
            params = shared + operation.get("parameters", [])
            path_params = [p for p in params if p.get("in") == "path"]
            kinds = [NO_STREAM]
            if any(p["name"] == "stream" for p in path_params):
                kinds = [USER_STREAM, SYSTEM_STREAM] + ([ALL_STREAM] if method == "get" else [])
            body, content_type = _body(operation)
            for kind in kinds:
                url = template
                for p in path_params:
                    value = STREAM_SAMPLES[kind] if p["name"] == "stream" else _param_value(p)
                    url = url.replace("{" + p["name"] + "}", value)
                calls.append(Call(method.upper(), template, kind, url, body, content_type))
    return calls


async def send(client: httpx.AsyncClient, call: Call) -> httpx.Response:
    headers = {"Accept": "application/json"}
    if call.content_type:
        headers["Content-Type"] = call.content_type
    request = client.build_request(call.method, call.url, content=call.body, headers=headers)
    # stream=True: an allowed subscription stays open; the status line is all this test needs
    response = await client.send(request, stream=True)
    try:
        if not response.headers.get("Content-Type", "").startswith("text/event-stream"):
            await response.aread()
    finally:
        await response.aclose()
    return response


def check(expected: str, response: httpx.Response) -> str | None:
    """None when the answer fits the expectation, else what is wrong."""
    status = response.status_code
    fits = {
        OK: status == 200,
        ALLOWED: status not in (401, 403) and status < 500,
        R401: status == 401,
        R403: status == 403,
        REFUSED: status in (401, 403),
    }[expected]
    if not fits:
        return f"expected {expected}, got {status} {response.text[:120]!r}"
    return refusal_body_problem(response)


def refusal_body_problem(response: httpx.Response) -> str | None:
    """None unless a refusal (401/403) carries data: only an empty body or a short reason may come."""
    if response.status_code not in (401, 403):
        return None
    body = response.content
    if not body:
        return None
    text = body.decode("utf-8", "replace")
    if (
        len(body) > 100
        or SEED_MARKER in text
        or text.lstrip()[:1] in ("{", "[", "<")
        or not response.headers.get("Content-Type", "").startswith("text/plain")
    ):
        return f"a {response.status_code} refusal carries data: {response.headers.get('Content-Type')} {text[:120]!r}"
    return None


# -- fixtures ----------------------------------------------------------------------------------------
@pytest.fixture
async def node(tmp_path, clock):
    """A licensed node (auto-scavenge mapped), otherwise the node of tests/node/conftest.py."""
    options = node_options(
        tmp_path,
        "--license-key", issue_demo_license(clock.time()), "--license-trusted-issuers", "demo",
        "--installation-directory", str(tmp_path / "install"),
    )  # fmt: skip
    async with Node(options, clock=clock, name="matrix") as n:
        yield n


@pytest.fixture
async def clients(node: Node, client: httpx.AsyncClient):
    created = await client.post(
        "/users",
        json={"loginName": USER_LOGIN, "fullName": "Matrix User", "groups": [], "password": USER_PASSWORD},
    )
    assert created.status_code == 201, created.text
    for stream in (STREAM_SAMPLES[USER_STREAM], STREAM_SAMPLES[SYSTEM_STREAM]):  # something to read
        seeded = await client.post(
            f"/streams/{stream}",
            content=json.dumps(
                [{"eventId": str(uuid.uuid4()), "eventType": "Seed", "data": {"marker": SEED_MARKER}}]
            ),
            headers={"Content-Type": "application/vnd.kurrent.events+json"},
        )
        assert seeded.status_code == 201, seeded.text
    out = {
        caller: httpx.AsyncClient(base_url=node.http_url, auth=auth, timeout=30)
        for caller, auth in CALLERS.items()
    }
    try:
        yield out
    finally:
        for c in out.values():
            await c.aclose()


async def _calls(client: httpx.AsyncClient) -> list[Call]:
    response = await client.get("/openapi.json")
    assert response.status_code == 200
    calls = calls_from(response.json())
    assert len(calls) >= 20, "the OpenAPI document lists too few endpoints to be the node's"
    return calls


# -- tests -------------------------------------------------------------------------------------------
async def test_every_served_endpoint_has_an_expected_rule(client):
    missing = sorted(
        {str(c) for c in await _calls(client) if rule_for(c.method, c.template, c.stream_kind) is None}
    )
    assert not missing, f"add a row to EXPECTED for: {missing}"


async def test_the_walk_reaches_the_newer_endpoints(clients):
    """Auto-scavenge, backup over HTTP, reload and certificates, the Admin UI: each is in the document
    (so every test here walks it) and has a rule of its own kind."""
    endpoints = {c.endpoint for c in await _calls(clients[ADMIN_])}
    assert endpoints >= NEWER_ENDPOINTS, f"not walked: {sorted(NEWER_ENDPOINTS - endpoints)}"


async def test_bad_credentials_are_401_with_a_basic_challenge_on_every_endpoint(clients):
    calls = await _calls(clients[ADMIN_])
    problems = []
    for call in calls:
        for caller in BAD_CREDENTIALS:
            response = await send(clients[caller], call)
            challenge = response.headers.get("WWW-Authenticate", "")
            if response.status_code != 401 or not challenge.startswith("Basic "):
                problems.append(f"{caller}: {call} -> {response.status_code}, WWW-Authenticate={challenge!r}")
            elif response.content:
                problems.append(f"{caller}: {call} -> 401 with a body {response.text[:120]!r}")
    assert not problems, "\n".join(problems)


async def test_each_caller_gets_the_expected_answer_on_every_endpoint(clients):
    calls = await _calls(clients[ADMIN_])
    problems = []
    walked = 0
    for call in calls:
        row = rule_for(call.method, call.template, call.stream_kind)
        if row is None:
            continue  # reported by test_every_served_endpoint_has_an_expected_rule
        for caller, expected in (
            (ANON, row.anonymous),
            (USER, row.user),
            (OPS, row.ops),
            (ADMIN_, row.admin),
        ):
            if call.endpoint in REFUSALS_ONLY and expected not in (R401, R403, REFUSED):
                continue
            response = await send(clients[caller], call)
            walked += 1
            if (problem := check(expected, response)) is not None:
                problems.append(f"{caller}: {call}: {problem}")
    assert not problems, "\n".join(problems)
    assert walked >= 4 * 20


async def test_anonymous_refusals_carry_a_basic_challenge(clients):
    """A 401 for a missing login asks for Basic credentials, so browsers and clients can prompt."""
    calls = await _calls(clients[ADMIN_])
    problems = []
    for call in calls:
        row = rule_for(call.method, call.template, call.stream_kind)
        if row is None or row.anonymous != R401:
            continue
        response = await send(clients[ANON], call)
        if not response.headers.get("WWW-Authenticate", "").startswith("Basic "):
            problems.append(f"{call} -> {response.status_code} {dict(response.headers)}")
    assert not problems, "\n".join(problems)


async def test_shutdown_is_refused_and_the_node_keeps_running(node, clients):
    for caller in (ANON, WRONG, UNKNOWN, USER):
        response = await clients[caller].post("/admin/shutdown")
        assert response.status_code == 401, (caller, response.status_code)
    assert not node.shutdown_requested.is_set()
    assert (await clients[ANON].get("/ping")).status_code == 200


async def test_a_user_reads_their_own_account_but_no_one_else_s(clients):
    own = await clients[USER].get(f"/users/{USER_LOGIN}")
    assert own.status_code == 200, own.text
    assert own.json()["data"]["loginName"] == USER_LOGIN
    other = await clients[USER].get("/users/admin")
    assert other.status_code in (401, 403)
    assert (await clients[ADMIN_].get(f"/users/{USER_LOGIN}")).status_code == 200


async def test_a_disabled_user_is_treated_as_bad_credentials(node, clients):
    assert (await clients[USER].get("/streams/auth-matrix")).status_code == 200
    disabled = await clients[ADMIN_].post(f"/users/{USER_LOGIN}/command/disable")
    assert disabled.status_code == 200, disabled.text
    response = await clients[USER].get("/streams/auth-matrix")
    assert response.status_code == 401
    assert response.headers.get("WWW-Authenticate", "").startswith("Basic ")


async def test_a_user_in_the_ops_group_gets_ops_rights(node, clients):
    created = await clients[ADMIN_].post(
        "/users", json={"loginName": "matrix-ops", "fullName": "", "groups": ["$ops"], "password": "pw"}
    )
    assert created.status_code == 201, created.text
    async with httpx.AsyncClient(base_url=node.http_url, auth=("matrix-ops", "pw"), timeout=30) as c:
        assert (await c.get("/admin/scavenge/current")).status_code == 200
        assert (await c.get("/users")).status_code in (401, 403)
        assert (await c.get("/streams/$auth-matrix")).status_code in (401, 403)


async def test_admin_refusals_have_an_empty_body(clients):
    """Reference: 'Unauthenticated: 401, empty body' (evdb once sent aiohttp's '401: Unauthorized')."""
    calls = [c for c in await _calls(clients[ADMIN_]) if c.template.startswith("/admin/")]
    assert calls
    bodies = {}
    for call in calls:
        response = await send(clients[ANON], call)
        assert response.status_code == 401
        if response.content:
            bodies[str(call)] = response.text
    assert not bodies, bodies


async def test_a_reset_password_or_deleted_user_no_longer_gets_in(node, clients):
    assert (await clients[USER].get("/streams/auth-matrix")).status_code == 200  # now in the login cache
    reset = await clients[ADMIN_].post(
        f"/users/{USER_LOGIN}/command/reset-password", json={"newPassword": "new"}
    )
    assert reset.status_code == 200, reset.text
    assert (await clients[USER].get("/streams/auth-matrix")).status_code == 401
    async with httpx.AsyncClient(base_url=node.http_url, auth=(USER_LOGIN, "new"), timeout=30) as renewed:
        assert (await renewed.get("/streams/auth-matrix")).status_code == 200
        deleted = await clients[ADMIN_].delete(f"/users/{USER_LOGIN}")
        assert deleted.status_code == 200, deleted.text
        assert (await renewed.get("/streams/auth-matrix")).status_code == 401


@pytest.mark.parametrize(
    "authorization",
    ["Basic", "Basic !!!not-base64!!!", "Basic YWRtaW4=", "Bearer abc.def.ghi", "Basic " + "x" * 10],
    ids=["empty", "not-base64", "no-colon", "bearer", "garbage"],
)
async def test_a_malformed_authorization_header_is_401_with_a_challenge(anon, authorization):
    for path in ("/info", "/streams/auth-matrix", "/admin/scavenge/current"):
        response = await anon.get(path, headers={"Authorization": authorization})
        assert response.status_code == 401, (path, response.status_code)
        assert response.headers.get("WWW-Authenticate", "").startswith("Basic ")
