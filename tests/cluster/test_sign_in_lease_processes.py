"""Sign-in leases in a real local cluster (3 nodes and a read-only replica, TLS, one process each; issue
33's done-when): a follower, then the read-only replica, then the leader is stopped (SIGSTOP) while the
(new) leader changes a user's password. The change is answered within a bounded time (the stopped
member's lease lapses: GossipTimeoutMs, 2 s here; a new leader waits that long after taking office), no
node accepts the old password once it is, and the stopped node, resumed, refuses it from its very first
answer (503 until it holds a new lease and shows the change, then 401), never 200: the old leader too,
which still believes it leads when it resumes (its own lease from its majority has ended).

A CI run caught the old leader answering its queued requests 200: it had cut a diverged tail of its
log, and the sign-ins waiting for a lease were judged by the user store of the database it closed
(tests/test_auth_sign_in_lease.py has that case deterministically)."""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import signal
import time
import uuid

import httpx
import pytest

pytestmark = pytest.mark.slow

OLD, NEW = "lena-old", "lena-new"


def _own_state(client: httpx.Client) -> str | None:
    try:
        return client.get("/gossip", timeout=2).json()["members"][0]["state"]
    except (httpx.HTTPError, ValueError, KeyError, IndexError):
        return None


# the leader last: it moves leadership (the other cases need the cluster as it was)
@pytest.mark.parametrize("role", ["Follower", "ReadOnlyReplica", "Leader"])
def test_a_stopped_member_refuses_a_changed_password_from_its_first_answer(cluster, role):
    login = f"lena-{role.lower()}"

    def _status(client: httpx.Client, password: str) -> int:
        return client.get(f"/users/{login}", auth=(login, password)).status_code

    leader = cluster.leader()
    cluster.wait_until(lambda: sorted(cluster.states().values()).count("Follower") == 2, 30, "two followers")
    names = [n["name"] for n in cluster.nodes()]
    clients = {name: cluster.client(name, timeout=30) for name in names}
    stopped = next(name for name, state in cluster.states().items() if state == role)
    pid = cluster.node(stopped)["pid"]
    try:
        r = clients[leader].post(
            "/users", json={"loginName": login, "password": OLD}, auth=("admin", "changeit")
        )
        assert r.status_code == 201, r.text
        for name, client in clients.items():  # every node signs the user in and caches it
            cluster.wait_until(lambda c=client: _status(c, OLD) == 200, 30, f"{login} signed in on {name}")
        os.kill(pid, signal.SIGSTOP)
        started = time.monotonic()
        if role == "Leader":  # the others elect a new leader, which takes the change
            leader = cluster.wait_until(
                lambda: next((n for n in names if n != stopped and _own_state(clients[n]) == "Leader"), None),
                30,
                "a new leader",
            )
            started = time.monotonic()
        r = clients[leader].post(
            f"/users/{login}/command/reset-password", json={"newPassword": NEW}, auth=("admin", "changeit")
        )
        answered = time.monotonic() - started
        assert r.status_code in (200, 201), r.text
        # bounded: the stopped member's lease (2 s) lapses (a new leader: 2 s after taking office);
        # generous for a loaded machine
        assert answered < 20, f"the change took {answered:.1f} s to be acknowledged"
        for name, client in clients.items():
            if name != stopped:
                status = _status(client, OLD)
                assert status in (401, 503), f"{name} answered {status} to the old password after the change"
        # requests sent while it is stopped wait in its sockets beside the leader's messages: they are
        # its first answers once it resumes; then it is asked again and again until it shows the change
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            queued = [pool.submit(_status, clients[stopped], OLD) for _ in range(4)]
            os.kill(pid, signal.SIGCONT)
            answers = [f.result() for f in queued]
        while _status(clients[stopped], NEW) != 200 and time.monotonic() - started < 60:
            answers.append(_status(clients[stopped], OLD))
        assert set(answers) <= {401, 503}, (
            f"the resumed {role} {stopped} answered {answers} to the old password. "
            f"{cluster.local.stdout_tail(stopped, 40)}"
        )
        assert _status(clients[stopped], NEW) == 200
        assert _status(clients[stopped], OLD) == 401
        print(f"the change was acknowledged {answered:.2f} s after it was sent, with {stopped} stopped")
    finally:
        os.kill(pid, signal.SIGCONT)
        for client in clients.values():
            client.close()


def _writer_checkpoint(client: httpx.Client) -> int:
    return int(client.get("/gossip", timeout=2).json()["members"][0]["writerCheckpoint"])


def test_a_resumed_leader_that_cuts_a_diverged_tail_refuses_the_old_password(cluster):
    """The CI failure's case, made on purpose: the old leader holds a write no other member has, so
    when it resumes and follows the new leader it cuts its log and reopens its database. The sign-ins
    it took while stopped wait for a lease meanwhile; they must not be judged by the user store of the
    database it closed (its cache still had the old password: they answered 200)."""
    login = "lena-diverged"

    def _status(client: httpx.Client, password: str) -> int:
        return client.get(f"/users/{login}", auth=(login, password)).status_code

    leader = cluster.leader()
    cluster.wait_until(lambda: sorted(cluster.states().values()).count("Follower") == 2, 30, "two followers")
    followers = [name for name, state in cluster.states().items() if state == "Follower"]
    clients = {n["name"]: cluster.client(n["name"], timeout=30) for n in cluster.nodes()}
    pids = {name: cluster.node(name)["pid"] for name in [leader, *followers]}
    try:
        r = clients[leader].post(
            "/users", json={"loginName": login, "password": OLD}, auth=("admin", "changeit")
        )
        assert r.status_code == 201, r.text
        cluster.wait_until(lambda: _status(clients[leader], OLD) == 200, 30, f"{login} signed in on {leader}")
        for name in followers:
            os.kill(pids[name], signal.SIGSTOP)
        # a write only the leader takes: no follower acknowledges it, so it is never committed
        before = _writer_checkpoint(clients[leader])
        with contextlib.suppress(httpx.TimeoutException):
            clients[leader].post(
                "/streams/diverged",
                json={"n": 1},
                headers={"Kurrent-EventType": "TestEvent", "Kurrent-EventId": str(uuid.uuid4())},
                auth=("admin", "changeit"),
                timeout=1,
            )
        cluster.wait_until(lambda: _writer_checkpoint(clients[leader]) > before, 10, "the leader's own write")
        os.kill(pids[leader], signal.SIGSTOP)
        # the followers restart (a kill drops the record waiting in their sockets) and elect a leader
        for name in followers:
            os.kill(pids[name], signal.SIGKILL)
            cluster.local.stop_node(name, timeout=1, log=lambda *_: None)
            cluster.local.start_node(name)
        for name in followers:
            clients[name].close()
            clients[name] = cluster.client(name, timeout=30)
        new_leader = cluster.wait_until(
            lambda: next((n for n in followers if _own_state(clients[n]) == "Leader"), None),
            60,
            "a new leader",
        )
        r = clients[new_leader].post(
            f"/users/{login}/command/reset-password", json={"newPassword": NEW}, auth=("admin", "changeit")
        )
        assert r.status_code in (200, 201), r.text
        started = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            queued = [pool.submit(_status, clients[leader], OLD) for _ in range(4)]
            os.kill(pids[leader], signal.SIGCONT)
            answers = [f.result() for f in queued]
        while _status(clients[leader], NEW) != 200 and time.monotonic() - started < 60:
            answers.append(_status(clients[leader], OLD))
        log = cluster.local.stdout_tail(leader, 40)
        assert "Truncating the log" in cluster.local.stdout_tail(leader, 1000), (
            f"the old leader did not cut its log: {log}"
        )
        assert set(answers) <= {401, 503}, (
            f"the resumed leader {leader} answered {answers} to the old password. {log}"
        )
        assert _status(clients[leader], OLD) == 401
    finally:
        for pid in pids.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        for client in clients.values():
            client.close()
