"""A valid password is never refused (issue 33, point 8): a fresh cluster's nodes answered 401 to
``admin:changeit`` for 1.6-2.7 s after start, until the leader's default users reached them. Until any
user was written to a node's database no credentials can be judged: HTTP answers 503 with Retry-After,
gRPC UNAVAILABLE, so clients try again."""

from __future__ import annotations

import base64
import threading
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
import user_changes
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from evdb.auth import UserStore
from evdb.database import Database
from evdb.errors import UsersNotReady, status_of
from evdb.free_port import free_port
from evdb.grpc.context import call_context
from tests.hash_cost import SUITE_COST

NodeThread, node_options = (
    user_changes.clients_conftest().NodeThread,
    user_changes.clients_conftest().node_options,
)


@pytest.fixture
def users():
    db = Database.open(None)
    yield UserStore(db, hash_cost=SUITE_COST)
    db.close()


def test_no_user_written_yet_is_not_ready_then_passwords_are_judged(users: UserStore):
    with pytest.raises(UsersNotReady):
        users.authenticate("admin", "changeit")
    with pytest.raises(UsersNotReady):
        users.authenticate("nobody", "x")
    assert status_of(UsersNotReady()) == (503, "UNAVAILABLE")
    users.ensure_defaults()
    assert users.authenticate("admin", "changeit") is not None
    assert users.authenticate("admin", "wrong") is None
    assert users.authenticate("nobody", "x") is None


async def test_grpc_answers_unavailable_while_no_user_is_written(users: UserStore):
    header = "Basic " + base64.b64encode(b"admin:changeit").decode()
    node = SimpleNamespace(database=SimpleNamespace(users=users), options=SimpleNamespace(insecure=False))
    call = SimpleNamespace(metadata={"authorization": header})
    with pytest.raises(GRPCError) as refused:
        await call_context(node, call)  # type: ignore[arg-type]
    assert refused.value.status == Status.UNAVAILABLE


def test_a_fresh_cluster_never_answers_401_to_the_default_admin(tmp_path: Path):
    """Every node is asked ``admin:changeit`` from before it starts until it answers 200: never 401,
    and every 503 says when to try again."""
    http = [free_port() for _ in range(3)]
    answers: dict[int, list[tuple[int, str | None]]] = {port: [] for port in http}
    stop = threading.Event()

    def ask(port: int) -> None:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5) as client:
            while not stop.is_set():
                try:
                    r = client.get("/users/admin", auth=user_changes.ADMIN)
                except httpx.TransportError:
                    stop.wait(0.01)
                    continue  # not listening yet
                answers[port].append((r.status_code, r.headers.get("Retry-After")))
                if r.status_code == 200:
                    return
                stop.wait(0.01)  # ask about 100 times a second: the nodes share this process's GIL

    askers = [threading.Thread(target=ask, args=(port,), daemon=True) for port in http]
    for asker in askers:
        asker.start()
    threads = []
    try:
        for i in range(3):
            seeds = ",".join(f"127.0.0.1:{p}" for j, p in enumerate(http) if j != i)
            options = node_options(
                tmp_path / f"node{i}", "--insecure", "--http-ip", "127.0.0.1", "--http-port", str(http[i]),
                "--replication-port", str(free_port()), "--cluster-size", "3", "--gossip-seed", seeds,
                "--gossip-interval-ms", "100",
            )  # fmt: skip
            threads.append(NodeThread(options, name=f"node{i}").start())
        for asker in askers:
            asker.join(60)
    finally:
        stop.set()
        for thread in threads:
            thread.stop()
    for port, seen in answers.items():
        assert seen and seen[-1][0] == 200, (port, seen[-5:])
        assert all(status in (200, 503) for status, _ in seen), (port, sorted({s for s, _ in seen}))
        assert all(retry == "1" for status, retry in seen if status == 503), (port, seen[:5])


def test_a_node_that_shows_any_user_shows_both_default_users():
    """A follower shows a prefix of its leader's log: wherever that prefix ends, it either has no user
    yet (not ready) or signs in both ``admin`` and ``ops`` (their records come before their ``$users``
    events, written in one append)."""
    db = Database.open(None)
    try:
        db.set_read_limit(0)
        UserStore(db, hash_cost=SUITE_COST).ensure_defaults()
        db.set_read_limit(db.committed_position)
        positions = [e.log_position for e in db.read_all_forward(0, 100).events]
        seen = set()
        for position in positions:
            db.set_read_limit(position + 1)  # the log up to and with this record
            store = UserStore(db, hash_cost=SUITE_COST)
            try:
                signed_in = [store.authenticate(login, "changeit") is not None for login in ("admin", "ops")]
            except UsersNotReady:
                seen.add("not ready")
                continue
            assert signed_in == [True, True], position
            seen.add("both")
        assert seen == {"not ready", "both"}
    finally:
        db.close()
