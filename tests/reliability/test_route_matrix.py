"""Every route the HTTP app serves is walked by an authorization matrix.

tests/node/test_auth_matrix.py walks every operation of /openapi.json with six kinds of caller. This
test closes the gap around it: the routes come from the aiohttp router itself, and each one must be
either in /openapi.json (so that matrix walks it) or have a row here, which this test walks with
{anonymous, wrong password, plain user, ops, admin}. A new route that is neither fails the test,
naming it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest

from evdb.node import Node
from evdb.options import load_options
from tests.clients.conftest import NodeThread

ANON, WRONG, USER, OPS, ADMIN = "anonymous", "wrong password", "user", "ops", "admin"
CALLERS = {
    ANON: None,
    WRONG: ("admin", "not-the-password"),
    USER: ("plain-user", "plain-pw"),
    OPS: ("ops", "changeit"),
    ADMIN: ("admin", "changeit"),
}
ALLOWED = "allowed"  # any answer but 401, 403 or 5xx

#: routes the router serves that /openapi.json does not describe: (method, path) -> caller -> answer,
#: and the sample request (path, body)
UNDOCUMENTED: dict[tuple[str, str], tuple[dict[str, str], str]] = {
    ("POST", "/admin/node/priority/{}"): (
        {ANON: "401", WRONG: "401", USER: "401", OPS: ALLOWED, ADMIN: ALLOWED},
        "/admin/node/priority/3",
    ),
    ("GET", "/info/options"): (
        {ANON: "401", WRONG: "401", USER: "401", OPS: ALLOWED, ADMIN: ALLOWED},
        "/info/options",
    ),
    ("POST", "/admin/node/resign"): (
        {ANON: "401", WRONG: "401", USER: "401", OPS: ALLOWED, ADMIN: ALLOWED},
        "/admin/node/resign",
    ),
    ("POST", "/admin/mergeindexes"): (
        {ANON: "401", WRONG: "401", USER: "401", OPS: ALLOWED, ADMIN: ALLOWED},
        "/admin/mergeindexes",
    ),
    # KurrentDB's logs endpoint needs a licence with LOGS_ENDPOINT: this node has none, so no endpoint
    ("GET", "/admin/logs"): (
        {ANON: "404", WRONG: "401", USER: "404", OPS: "404", ADMIN: "404"},
        "/admin/logs",
    ),
    ("GET", "/admin/logs/{}"): (
        {ANON: "404", WRONG: "401", USER: "404", OPS: "404", ADMIN: "404"},
        "/admin/logs/log-20240101.json",
    ),
    ("POST", "/streams/{}/incoming/{}"): (  # KurrentDB's 307 target of a single event without an id
        {ANON: "401", WRONG: "401", USER: ALLOWED, OPS: ALLOWED, ADMIN: ALLOWED},
        "/streams/matrix-s/incoming/0b6a4f39-8d0c-4c54-9a51-5d2f3e0f6a11",
    ),
}


def normal(path: str) -> str:
    """``/admin/scavenge/{scavenge_id}`` and ``/admin/scavenge/{scavengeId}/`` are one route."""
    path = re.sub(r"\{[^}]*\}", "{}", path)
    return path.rstrip("/") or "/"


@pytest.fixture(scope="module")
def node(tmp_path_factory) -> Iterator[Node]:
    """One single node for the module, on its own thread (no request here changes what another sees:
    a single node's resign and priority are no-ops, the rest read or append)."""
    tmp_path = tmp_path_factory.mktemp("routes")
    options = load_options(
        [
            "--db", str(tmp_path / "db"), "--log", str(tmp_path / "log"), "--insecure", "--http-port", "0",
            "--chunk-size", "65536", "--stats-period-sec", "0",
        ],
        {},
    )  # fmt: skip
    running = NodeThread(options, name="routes").start()
    try:
        assert running.node is not None
        with httpx.Client(base_url=running.node.http_url, auth=CALLERS[ADMIN], timeout=30) as c:
            r = c.post("/users/", json={"loginName": "plain-user", "fullName": "P", "groups": [],
                                        "password": "plain-pw"})  # fmt: skip
            assert r.status_code == 201
        yield running.node
    finally:
        running.stop()


def _routes(node) -> set[tuple[str, str]]:
    out = set()
    for route in node._runner.app.router.routes():
        if route.method in ("HEAD", "OPTIONS", "*"):
            continue
        info = route.resource.get_info() if route.resource is not None else {}
        path = info.get("path") or info.get("formatter") or info.get("prefix")
        if path:
            out.add((route.method, normal(path)))
    return out


async def test_every_route_is_in_openapi_or_in_this_matrix(node):
    async with httpx.AsyncClient(base_url=node.http_url, timeout=30) as c:
        doc = (await c.get("/openapi.json")).json()
    documented = {
        (method.upper(), normal(path))
        for path, operations in doc["paths"].items()
        for method in operations
        if method.lower() in ("get", "post", "put", "delete", "patch")
    }
    missing = sorted(_routes(node) - documented - set(UNDOCUMENTED))
    assert not missing, (
        f"routes with no authorization rule (add them to /openapi.json or UNDOCUMENTED): {missing}"
    )
    stale = sorted(set(UNDOCUMENTED) - _routes(node))
    assert not stale, f"UNDOCUMENTED names routes that are no longer served: {stale}"


@pytest.mark.parametrize("route", sorted(UNDOCUMENTED), ids=lambda r: f"{r[0]} {r[1]}")
async def test_undocumented_routes_answer_each_caller_as_expected(node, route):
    expected, sample = UNDOCUMENTED[route]
    for caller in (ANON, WRONG, USER, OPS, ADMIN):
        async with httpx.AsyncClient(base_url=node.http_url, auth=CALLERS[caller], timeout=30) as c:
            r = await c.request(route[0], sample)
        want = expected[caller]
        if want == ALLOWED:
            assert r.status_code not in (401, 403) and r.status_code < 500, (caller, r.status_code, r.text)
        else:
            assert r.status_code == int(want), (caller, r.status_code, r.text)
            assert len(r.content) < 200 and b"{" not in r.content, f"a refusal carries data: {r.content!r}"
            if want == "401":
                assert r.headers.get("WWW-Authenticate", "").startswith("Basic")
