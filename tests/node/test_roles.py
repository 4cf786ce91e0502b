"""Every endpoint × {anonymous, wrong password, plain user, ops, admin}.

The endpoint list comes from /openapi.json, so a new endpoint is covered (and must be given a rule
here) as soon as it is documented.
"""

from __future__ import annotations

import json

import httpx

ANONYMOUS, WRONG, USER, OPS, ADMIN = "anonymous", "wrong password", "user", "ops", "admin"
CALLERS = {
    ANONYMOUS: None,
    WRONG: ("admin", "nope"),
    USER: ("carol", "pw"),
    OPS: ("ops", "changeit"),
    ADMIN: ("admin", "changeit"),
}

#: who may call what: the set of callers let in (everyone else gets 401, or 403 where marked)
OPEN = {ANONYMOUS, USER, OPS, ADMIN}
AUTHENTICATED = {USER, OPS, ADMIN}
OPS_OR_ADMIN = {OPS, ADMIN}
ADMIN_ONLY = {ADMIN}
RULES: dict[tuple[str, str], set[str]] = {
    ("GET", "/info"): OPEN,
    ("GET", "/gossip"): OPEN,
    ("GET", "/stats"): OPEN,
    ("GET", "/metrics"): OPEN,
    ("GET", "/ping"): OPEN,
    ("GET", "/openapi.json"): OPEN,
    ("POST", "/admin/shutdown"): OPS_OR_ADMIN,
    ("POST", "/admin/scavenge"): OPS_OR_ADMIN,
    ("GET", "/admin/scavenge/current"): OPS_OR_ADMIN,
    ("DELETE", "/admin/scavenge/current"): OPS_OR_ADMIN,
    ("GET", "/admin/scavenge/last"): OPS_OR_ADMIN,
    ("GET", "/admin/scavenge/progress"): OPS_OR_ADMIN,
    ("DELETE", "/admin/scavenge/{scavengeId}"): OPS_OR_ADMIN,
    ("POST", "/admin/reloadconfig"): OPS_OR_ADMIN,
    ("POST", "/admin/node/resign"): OPS_OR_ADMIN,
    ("POST", "/admin/node/priority/{priority}"): OPS_OR_ADMIN,
    ("GET", "/admin/certificates"): OPS_OR_ADMIN,
    ("POST", "/admin/backup"): ADMIN_ONLY,
    ("GET", "/admin/backup/current"): ADMIN_ONLY,
    # the web Admin UI: the page itself holds no data; its fragments are the data
    ("GET", "/web"): OPEN,
    ("GET", "/web/"): OPEN,
    ("GET", "/web/index.html"): OPEN,
    ("GET", "/web/static/{name}"): OPEN,
    ("GET", "/web/fragments/cluster"): AUTHENTICATED,
    ("GET", "/web/fragments/admin"): OPS_OR_ADMIN,
    ("GET", "/web/fragments/admin/current"): OPS_OR_ADMIN,
    ("GET", "/web/fragments/archive"): OPS_OR_ADMIN,
    ("GET", "/web/fragments/streams"): ADMIN_ONLY,  # it reads $all
    ("GET", "/web/fragments/streams/{stream}"): AUTHENTICATED,
    ("GET", "/web/fragments/subscriptions"): AUTHENTICATED,  # statistics, as GET /subscriptions
    ("GET", "/streams/{stream}"): AUTHENTICATED,
    ("POST", "/streams/{stream}"): AUTHENTICATED,
    ("DELETE", "/streams/{stream}"): AUTHENTICATED,
    ("GET", "/streams/{stream}/{start}/{direction}/{count}"): AUTHENTICATED,
    ("GET", "/streams/{stream}/{number}"): AUTHENTICATED,
    ("GET", "/streams/{stream}/metadata"): AUTHENTICATED,
    ("POST", "/streams/{stream}/metadata"): AUTHENTICATED,
    ("GET", "/subscriptions/streams/{stream}"): AUTHENTICATED,
    # persistent subscriptions, as KurrentDB: listing for any user, managing for ops, reading and
    # acknowledging for those who may read the stream
    ("GET", "/subscriptions"): AUTHENTICATED,
    ("GET", "/subscriptions/{stream}"): AUTHENTICATED,
    ("GET", "/subscriptions/{stream}/{group}/info"): AUTHENTICATED,
    ("PUT", "/subscriptions/{stream}/{group}"): OPS_OR_ADMIN,
    ("POST", "/subscriptions/{stream}/{group}"): OPS_OR_ADMIN,
    ("DELETE", "/subscriptions/{stream}/{group}"): OPS_OR_ADMIN,
    ("POST", "/subscriptions/{stream}/{group}/replayParked"): OPS_OR_ADMIN,
    ("POST", "/subscriptions/{stream}/{group}/truncateParked"): OPS_OR_ADMIN,
    # the parked stream's feed: its $acl is $admins only
    ("GET", "/subscriptions/viewparkedmessages/{stream}/{group}/{event}/backward/{count}"): ADMIN_ONLY,
    ("GET", "/subscriptions/viewparkedmessages/{stream}/{group}/{event}/forward/{count}"): ADMIN_ONLY,
    ("POST", "/subscriptions/restart"): OPS_OR_ADMIN,
    ("GET", "/subscriptions/{stream}/{group}"): AUTHENTICATED,
    ("GET", "/subscriptions/{stream}/{group}/{count}"): AUTHENTICATED,
    ("POST", "/subscriptions/{stream}/{group}/ack"): AUTHENTICATED,
    ("POST", "/subscriptions/{stream}/{group}/ack/{id}"): AUTHENTICATED,
    ("POST", "/subscriptions/{stream}/{group}/nack"): AUTHENTICATED,
    ("POST", "/subscriptions/{stream}/{group}/nack/{id}"): AUTHENTICATED,
    ("GET", "/users"): ADMIN_ONLY,
    ("POST", "/users"): ADMIN_ONLY,
    ("GET", "/users/{login}"): ADMIN_ONLY,
    ("PUT", "/users/{login}"): ADMIN_ONLY,
    ("DELETE", "/users/{login}"): ADMIN_ONLY,
    ("POST", "/users/{login}/command/{command}"): ADMIN_ONLY,
}
SAMPLES = {
    "stream": "roles-s",
    "start": "0",
    "direction": "forward",
    "count": "5",
    "number": "0",
    "scavengeId": "x",
    "login": "nobody-here",
    "command": "enable",
    "priority": "5",
    "group": "roles-g",
    "event": "0",
    "id": "fbf4a1a1-b4a3-4dfe-a01f-ec52c34e16e4",
}
EVENTS = [{"eventId": "fbf4a1a1-b4a3-4dfe-a01f-ec52c34e16e4", "eventType": "E", "data": {}}]


def _request(method: str, template: str) -> dict:
    url = template
    for name, value in SAMPLES.items():
        url = url.replace("{" + name + "}", value)
    kwargs: dict = {"method": method, "url": url}
    if method in ("POST", "PUT"):
        if template == "/streams/{stream}":
            kwargs.update(
                content=json.dumps(EVENTS), headers={"Content-Type": "application/vnd.kurrent.events+json"}
            )
        else:
            kwargs.update(json={})
    return kwargs


async def test_every_documented_endpoint_has_a_rule(client):
    spec = (await client.get("/openapi.json")).json()
    documented = {(m.upper(), p) for p, ops in spec["paths"].items() for m in ops}
    assert documented == set(RULES), (
        f"endpoints without a rule: {documented - set(RULES)}; stale rules: {set(RULES) - documented}"
    )


async def test_access(node, client):
    await client.post("/users", json={"loginName": "carol", "fullName": "", "groups": [], "password": "pw"})
    clients = {
        caller: httpx.AsyncClient(base_url=node.http_url, auth=auth, timeout=30)
        for caller, auth in CALLERS.items()
    }
    try:
        for method, path in sorted(RULES):
            await _check(clients, method, path)
    finally:
        for c in clients.values():
            await c.aclose()


async def _check(clients: dict[str, httpx.AsyncClient], method: str, path: str) -> None:
    allowed = RULES[(method, path)]
    for caller in CALLERS:
        if path == "/admin/shutdown" and caller in allowed:
            continue  # it would stop the node
        if path == "/subscriptions/streams/{stream}" and caller in allowed:
            continue  # an open stream: covered by the streaming tests
        r = await clients[caller].request(**_request(method, path))
        if caller == WRONG:
            assert r.status_code == 401 and r.headers["WWW-Authenticate"].startswith("Basic"), (method, path)
        elif caller in allowed:
            assert r.status_code not in (401, 403), (method, path, caller, r.status_code, r.text)
        elif path.startswith("/users") and caller != ANONYMOUS:
            assert r.status_code in (401, 403), (method, path, caller, r.status_code)
        elif path.startswith(("/admin/backup", "/web/")) and caller != ANONYMOUS:
            assert r.status_code == 403, (method, path, caller, r.status_code)
        else:
            assert r.status_code == 401, (method, path, caller, r.status_code, r.text)


async def test_system_streams_are_for_admins_unless_their_acl_says_otherwise(node, client):
    await client.post("/users", json={"loginName": "carol", "fullName": "", "groups": [], "password": "pw"})
    async with httpx.AsyncClient(base_url=node.http_url, auth=("carol", "pw")) as carol:
        # KurrentDB answers 401 for a denied controller action (its authorization middleware)
        assert (await carol.get("/streams/$scavengePoints")).status_code == 401
        assert (await carol.get("/streams/$all")).status_code == 401
    await client.post("/streams/private/metadata", json={"$acl": {"$r": "$admins", "$w": "$admins"}})
    async with httpx.AsyncClient(base_url=node.http_url, auth=("carol", "pw")) as carol:
        r = await carol.post(
            "/streams/private",
            content=json.dumps(EVENTS),
            headers={"Content-Type": "application/vnd.kurrent.events+json"},
        )
        assert r.status_code == 401
    await client.post("/streams/public/metadata", json={"$acl": {"$r": "$all"}})
    await client.post(
        "/streams/public",
        content=json.dumps(EVENTS),
        headers={"Content-Type": "application/vnd.kurrent.events+json"},
    )
    async with httpx.AsyncClient(base_url=node.http_url) as anonymous:
        assert (await anonymous.get("/streams/public")).status_code == 200
