"""Every kind of user change made on a cluster's leader, and what each node answers the old credentials
afterwards (issue 33, point 1): shared by the cluster in this process
(tests/test_auth_revocation_cluster.py) and the real one (tests/cluster/test_user_revocation.py).

Each user signs in on every node first (so every node caches the sign-in); then the leader changes it;
once the change is acknowledged, every node refuses the old credentials (401, or 503 while it holds no
sign-in lease or has not caught up: evdb/cluster/lease.py), before and after it shows the record;
dave (deleted) and frank (removed from $admins), both admins before, create no user through any node."""

from __future__ import annotations

import importlib.util
import json
import sys
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
from waiting import wait_until

from evdb.auth import hash_password
from tests.hash_cost import SUITE_COST

ADMIN = ("admin", "changeit")


def clients_conftest() -> Any:
    """tests/clients/conftest.py (NodeThread: a node on its own thread), loaded once under its own name."""
    if "clients_conftest" not in sys.modules:
        path = Path(__file__).resolve().parent / "clients" / "conftest.py"
        spec = importlib.util.spec_from_file_location("clients_conftest", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["clients_conftest"] = module
        spec.loader.exec_module(module)
    return sys.modules["clients_conftest"]


#: login -> its password before the change
USERS = {"bob": "bob-pw", "carl": "carl-pw", "dave": "dave-pw", "frank": "frank-pw", "gina": "gina-pw"}


def _signed_in(client: httpx.Client, login: str, password: str) -> int:
    return client.get(f"/users/{login}", auth=(login, password)).status_code


def _user_stream_head(client: httpx.Client, login: str) -> int | None:
    """The last event number of ``$user-<login>`` this node shows (-2 when it shows it deleted; None
    while it cannot judge credentials: 503)."""
    r = client.get(
        f"/streams/{quote('$user-' + login, safe='')}/head/backward/1",
        auth=ADMIN,
        headers={"Accept": "application/json"},
    )
    if r.status_code == 410:
        return -2
    if r.status_code == 404:
        return -1
    if r.status_code == 503:
        return None
    r.raise_for_status()
    return max(e["eventNumber"] for e in r.json()["entries"])


def run(clients: dict[str, httpx.Client], leader: str, timeout: float = 30.0) -> None:
    lead = clients[leader]
    followers = [name for name in clients if name != leader]
    for login, password in USERS.items():
        groups = ["$admins"] if login in ("dave", "frank") else ["staff"]
        r = lead.post("/users", json={"loginName": login, "password": password, "groups": groups}, auth=ADMIN)
        assert r.status_code == 201, r.text
    for name, client in clients.items():  # every node signs every user in (and caches it)
        for login, password in USERS.items():
            wait_until(
                lambda c=client, u=login, p=password: _signed_in(c, u, p) == 200,  # type: ignore[misc]
                timeout,
                f"{login} signed in on {name}",
            )
    # frank, an admin, creates a user through a follower (the write goes on to the leader)
    r = clients[followers[0]].post(
        "/users", json={"loginName": "frank-made-1", "password": "x"}, auth=("frank", USERS["frank"])
    )
    assert r.status_code == 201, r.text

    salt, digest = hash_password("gina-new", cost=SUITE_COST)
    gina_record = {"loginName": "gina", "fullName": "", "groups": ["staff"], "salt": salt, "hash": digest}
    gina_record["scrypt"] = SUITE_COST.to_record()
    changes = {  # login: (the change on the leader, the head of $user-<login> it leaves)
        "bob": (lambda: lead.post("/users/bob/command/reset-password", json={"newPassword": "b2"}, auth=ADMIN), 1),
        "carl": (lambda: lead.post("/users/carl/command/disable", auth=ADMIN), 1),
        "dave": (lambda: lead.delete("/users/dave", auth=ADMIN), -2),
        "frank": (lambda: lead.put("/users/frank", json={"fullName": "", "groups": []}, auth=ADMIN), 1),
        "gina": (  # a raw append of a user record: a password change not made through /users
            lambda: lead.post(
                f"/streams/{quote('$user-gina', safe='')}",
                content=json.dumps(gina_record),
                headers={"Content-Type": "application/json", "Kurrent-EventType": "$PasswordChanged",
                         "Kurrent-EventId": str(uuid.uuid4())},
                auth=ADMIN,
            ),
            1,
        ),
    }  # fmt: skip
    for login, (change, head) in changes.items():
        answer = change()
        assert answer.status_code in (200, 201), (login, answer.status_code, answer.text)
        # acknowledged: every node refuses at once (issue 33's done-when), and goes on once it shows it
        for name, client in clients.items():
            assert not _old_access(client, login), f"{login}: the old access on {name} once acknowledged"
        for name in followers:
            client = clients[name]
            wait_until(
                lambda c=client, u=login, h=head: _user_stream_head(c, u) == h,  # type: ignore[misc]
                timeout,
                f"{name} to show the change of {login}",
            )
            assert not _old_access(client, login), f"{login}: the old access on {name}"
    assert _signed_in(lead, "bob", "b2") == 200 and _signed_in(lead, "gina", "gina-new") == 200
    _acl_change(clients, leader, timeout)
    # neither the deleted admin nor the demoted one creates a user through any node
    for name, client in clients.items():
        for login in ("dave", "frank"):
            made = {"loginName": f"{login}-made-{uuid.uuid4().hex[:8]}", "password": "x"}
            r = client.post("/users", json=made, auth=(login, USERS[login]))
            assert r.status_code == 401, (name, login, r.status_code, r.text)


def _old_access(client: httpx.Client, login: str) -> bool:
    """Whether this node still grants ``login`` what it had before its change: signing in with its old
    password, and for frank (removed from $admins) creating a user."""
    if login != "frank":
        status = _signed_in(client, login, USERS[login])
        assert status in (200, 401, 503), (login, status)
        return status == 200
    made = {"loginName": f"frank-made-{uuid.uuid4().hex[:8]}", "password": "x"}
    r = client.post("/users", json=made, auth=("frank", USERS["frank"]))
    # KurrentDB's /users: 401 when not an admin
    assert r.status_code in (201, 401, 503), (r.status_code, r.text)
    return r.status_code == 201


def _acl_change(clients: dict[str, httpx.Client], leader: str, timeout: float) -> None:
    """A stream's ``$acl`` set on the leader: bob, who read the stream on every node, is refused on each
    as soon as it shows the new metadata (no node keeps a stream's access rules)."""
    stream = f"acl-{uuid.uuid4().hex[:8]}"
    bob = ("bob", "b2")
    lead = clients[leader]
    r = lead.post(
        f"/streams/{stream}",
        json={"n": 1},
        headers={"Kurrent-EventType": "T", "Kurrent-EventId": str(uuid.uuid4())},
        auth=ADMIN,
    )
    assert r.status_code == 201, r.text
    read = f"/streams/{stream}/0/forward/1"
    for name, client in clients.items():
        wait_until(
            lambda c=client: c.get(read, auth=bob, headers={"Accept": "application/json"}).status_code == 200,  # type: ignore[misc]
            timeout,
            f"bob reading {stream} on {name}",
        )
    r = lead.post(
        f"/streams/{stream}/metadata",
        content=json.dumps({"$acl": {"$r": "$admins"}}),
        headers={"Content-Type": "application/json", "Kurrent-EventId": str(uuid.uuid4())},
        auth=ADMIN,
    )
    assert r.status_code == 201, r.text
    for name, client in clients.items():
        wait_until(
            lambda c=client: c.get(f"/streams/{stream}/metadata", auth=ADMIN).json().get("$acl"),  # type: ignore[misc]
            timeout,
            f"{name} to show the metadata of {stream}",
        )
        status = client.get(read, auth=bob, headers={"Accept": "application/json"}).status_code
        assert status == 401, (name, status)
