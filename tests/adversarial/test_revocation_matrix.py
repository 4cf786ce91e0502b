"""Revoked credentials, on every node: after each kind of user change made on the leader, no node of the
cluster (leader, follower, read-only replica) accepts the old credentials or the old rights.

A real-process TLS cluster (three members and a read-only replica). For each kind of change a fresh
member of ``$admins`` is created on the leader and signs in on every node first (twice: each node's
credential and header caches hold it). Then the change is made on the leader, and once it is
acknowledged:

- the leader refuses the old credentials (or rights) at once;
- each other node refuses them as soon as it holds the change (its copy of ``$user-<login>`` shows
  the change, read there as admin; it is waited for, bounded): a node that has the event must not
  answer from what it cached before it.

The probes, with the old credentials, on each node: reading ``$users`` (admins only), creating a
member of ``$admins`` (the escalation of issue 33: a deleted admin creating admins through a
follower) and, for a revoked login, appending to a user stream. Every acceptance is collected and the
test fails with the whole matrix, so one run shows every node and probe that let the caller in.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import httpx
import pytest
from waiting import wait_until

from tests.adversarial.conftest import ClusterUnderTest

PASSWORD = "old-secret"
NEW_PASSWORD = "new-secret"
READ_ADMIN_ONLY = "/streams/$users/head/backward/1"
JSON = {"Accept": "application/json"}


@dataclass(frozen=True)
class Change:
    name: str
    #: what the old credentials keep afterwards: "nothing" (refused: 401) or "a plain user" (the
    #: $admins rights are gone, the login still works: admin-only calls are refused, 401 or 403)
    leaves: str
    make: Callable[[ClusterUnderTest, str, str], httpx.Response]


def _as_admin(cluster: ClusterUnderTest, node: str, method: str, path: str, **kwargs) -> httpx.Response:
    with cluster.client(node, cluster.admin) as c:
        return c.request(method, path, **kwargs)


def _current_record(cluster: ClusterUnderTest, node: str, login: str) -> dict:
    response = _as_admin(cluster, node, "GET", f"/streams/$user-{login}/head", headers=JSON)
    assert response.status_code == 200, response.text
    return response.json()


def _direct_disable(cluster: ClusterUnderTest, leader: str, login: str) -> httpx.Response:
    """An admin appends a disabled copy of the user's record to ``$user-<login>`` itself."""
    record = {**_current_record(cluster, leader, login), "disabled": True}
    return _as_admin(
        cluster,
        leader,
        "POST",
        f"/streams/$user-{login}",
        content=json.dumps(record),
        headers={
            "Content-Type": "application/json",
            "Kurrent-EventType": "$UserUpdated",
            "Kurrent-EventId": str(uuid.uuid4()),
        },
    )


def _change_password(cluster: ClusterUnderTest, leader: str, login: str) -> httpx.Response:
    with cluster.client(leader, (login, PASSWORD)) as c:
        return c.post(
            f"/users/{login}/command/change-password",
            json={"currentPassword": PASSWORD, "newPassword": NEW_PASSWORD},
        )


CHANGES = [
    Change(
        "reset-password",
        "nothing",
        lambda c, leader, login: _as_admin(
            c, leader, "POST", f"/users/{login}/command/reset-password", json={"newPassword": NEW_PASSWORD}
        ),
    ),
    Change("change-password", "nothing", _change_password),
    Change(
        "disable",
        "nothing",
        lambda c, leader, login: _as_admin(c, leader, "POST", f"/users/{login}/command/disable"),
    ),
    Change("delete", "nothing", lambda c, leader, login: _as_admin(c, leader, "DELETE", f"/users/{login}")),
    Change(
        "group-removed",
        "a plain user",
        lambda c, leader, login: _as_admin(
            c, leader, "PUT", f"/users/{login}", json={"fullName": login, "groups": []}
        ),
    ),
    Change("direct-$user-write", "nothing", _direct_disable),
    Change(
        "direct-$user-hard-delete",
        "nothing",
        lambda c, leader, login: _as_admin(
            c, leader, "DELETE", f"/streams/$user-{login}", headers={"Kurrent-HardDelete": "true"}
        ),
    ),
]


def _user_stream_head(cluster: ClusterUnderTest, node: str, login: str) -> int | str:
    """What ``node`` holds of ``$user-<login>``: its last event number, or 'deleted'."""
    response = _as_admin(cluster, node, "GET", f"/streams/$user-{login}/head/backward/1", headers=JSON)
    if response.status_code in (404, 410):
        return "deleted"
    assert response.status_code == 200, (node, response.status_code, response.text)
    return max(e["eventNumber"] for e in response.json()["entries"])


def _probes(cluster: ClusterUnderTest, node: str, login: str, change: Change) -> dict[str, int]:
    """Each probe's status with the old credentials on ``node``."""
    out: dict[str, int] = {}
    with cluster.client(node, (login, PASSWORD)) as c:
        out["read $users"] = c.get(READ_ADMIN_ONLY, headers=JSON).status_code
        escalated = f"escalated-{login}-{node}"
        out["create an $admins user"] = c.post(
            "/users", json={"loginName": escalated, "password": "x", "groups": ["$admins"]}
        ).status_code
        if change.leaves == "nothing":
            out["append"] = c.post(
                f"/streams/revoked-{login}",
                json={"n": 1},
                headers={"Kurrent-EventType": "Probe", "Kurrent-EventId": str(uuid.uuid4())},
            ).status_code
    return out


def _refused(change: Change, status: int) -> bool:
    return status == 401 if change.leaves == "nothing" else status in (401, 403)


@pytest.mark.slow
@pytest.mark.parametrize("change", CHANGES, ids=[c.name for c in CHANGES])
def test_no_node_accepts_old_credentials_once_the_change_is_acknowledged(cluster, change):
    roles = cluster.by_role()
    leader = roles["leader"]
    login = f"rv-{change.name.replace('$', '')}-{uuid.uuid4().hex[:6]}"
    created = _as_admin(
        cluster,
        leader,
        "POST",
        "/users",
        json={"loginName": login, "password": PASSWORD, "groups": ["$admins"]},
    )
    assert created.status_code == 201, created.text

    def signed_in_everywhere() -> bool:
        for node in roles.values():
            with cluster.client(node, (login, PASSWORD)) as c:
                if c.get(READ_ADMIN_ONLY, headers=JSON).status_code != 200:
                    return False
                assert c.get(READ_ADMIN_ONLY, headers=JSON).status_code == 200  # the header cache too
        return True

    wait_until(signed_in_everywhere, 30, f"{login} signed in as an admin on every node")

    answer = change.make(cluster, leader, login)
    assert answer.status_code in (200, 201, 204), (change.name, answer.status_code, answer.text)
    accepted: list[str] = []
    leader_probes = _probes(cluster, leader, login, change)  # at once: the leader made the change
    accepted += [
        f"leader ({leader}) {probe}: {s}" for probe, s in leader_probes.items() if not _refused(change, s)
    ]
    target = _user_stream_head(cluster, leader, login)
    for role, node in roles.items():
        if role == "leader":
            continue

        def holds_the_change(node: str = node) -> bool:
            held = _user_stream_head(cluster, node, login)
            if isinstance(target, int):
                return isinstance(held, int) and held >= target
            return held == target

        wait_until(holds_the_change, 30, f"{role} {node} to hold the change of $user-{login}")
        accepted += [
            f"{role} ({node}) {probe}: {s}"
            for probe, s in _probes(cluster, node, login, change).items()
            if not _refused(change, s)
        ]
    escalated = [
        u["loginName"]
        for u in _as_admin(cluster, leader, "GET", "/users", headers=JSON).json()["data"]
        if u["loginName"].startswith(f"escalated-{login}")
    ]
    assert not accepted and not escalated, (
        f"after '{change.name}' (the old credentials should keep {change.leaves}), accepted:\n  "
        + "\n  ".join(accepted)
        + (f"\nusers created with them: {escalated}" if escalated else "")
    )
