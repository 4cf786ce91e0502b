"""A cluster member judges credentials only under its sign-in lease (evdb/cluster/lease.py; the
UserStore's side, UserStore.admit_with): while the member's admission says no, a remembered header or
cached credentials are not used, a sign-in waits for it (bounded) and then answers UsersNotReady (HTTP
503 with Retry-After, gRPC UNAVAILABLE); a user record committed but not yet shown is reported to it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import pytest

from evdb.auth import UserStore
from evdb.database import Database
from evdb.errors import UsersNotReady, status_of
from tests.hash_cost import SUITE_COST


class Admission:
    def __init__(self) -> None:
        self.open = True
        self.unseen: list[bool] = []
        self.waits = 0

    def admits_sign_in(self, unseen_user_records: bool) -> bool:
        self.unseen.append(unseen_user_records)
        return self.open

    async def wait_sign_in(self, ready: Callable[[], bool]) -> bool:
        self.waits += 1
        return ready()


@pytest.fixture
def users():
    db = Database.open(None)
    store = UserStore(db, hash_cost=SUITE_COST)
    store.ensure_defaults()
    yield store
    db.close()


def test_without_a_lease_nothing_cached_is_used_and_a_sign_in_is_not_ready(users: UserStore):
    admission = Admission()
    users.admit_with(admission)
    header = "Basic YWRtaW46Y2hhbmdlaXQ="  # admin:changeit
    assert asyncio.run(users.sign_in_header(header, "admin", "changeit")) is not None
    assert users.by_header(header) is not None and users.principal_now(header) is not None
    admission.open = False
    assert users.by_header(header) is None and users.principal_now(header) is None
    with pytest.raises(UsersNotReady) as refused:
        asyncio.run(users.sign_in_header(header, "admin", "changeit"))
    assert admission.waits == 1  # it waited for the lease first
    assert status_of(refused.value)[0] == 503 and "lease" in str(refused.value)
    with pytest.raises(UsersNotReady):
        users.authenticate("admin", "changeit")
    admission.open = True
    assert users.by_header(header) is not None


def test_the_admission_hears_of_user_records_not_yet_shown(users: UserStore):
    admission = Admission()
    users.admit_with(admission)
    users.authenticate("admin", "changeit")
    assert admission.unseen[-1] is False
    users.changing(frozenset({"$user-admin"}))  # committed, readers do not see it yet
    users.authenticate("admin", "changeit")
    assert admission.unseen[-1] is True
    users.changed(frozenset({"$user-admin"}))
    users.authenticate("admin", "changeit")
    assert admission.unseen[-1] is False


async def test_public_routes_answer_a_member_without_a_lease_as_to_an_anonymous_caller(users: UserStore):
    """A CI run killed a cluster's leader and for 30 s `LocalCluster.status()` showed every surviving
    node as "Unreachable (JSONDecodeError)": it sends credentials everywhere, and with no leader no
    member holds a sign-in lease, so even ``/gossip`` answered 503. Routes that need no authority
    (``/gossip``, ``/ping``, ``/info``, ``/health/live``, and gRPC's Gossip.Read) serve such a caller as
    an anonymous one; everything else still waits for the lease and answers 503."""
    from types import SimpleNamespace

    from aiohttp import web
    from aiohttp.test_utils import TestClient, TestServer
    from grpclib.const import Status
    from grpclib.exceptions import GRPCError

    from evdb.grpc.context import call_context
    from evdb.http.app import auth_middleware, error_middleware
    from evdb.http.common import PRINCIPAL, SERVICES

    admission = Admission()
    users.admit_with(admission)
    admission.open = False
    services = SimpleNamespace(
        options=SimpleNamespace(user_certificates_enabled=False, insecure=False),
        database=SimpleNamespace(users=users, db=object(), generation=0),
        metrics=SimpleNamespace(observe_http=lambda *args: None),
        logger=logging.getLogger("tests.auth"),
    )

    async def who(request: web.Request) -> web.Response:
        return web.json_response({"login": request[PRINCIPAL].name})

    app = web.Application(middlewares=[error_middleware, auth_middleware])
    app[SERVICES] = services  # type: ignore[assignment,misc]
    app.router.add_get("/gossip", who)
    app.router.add_get("/streams/x", who)
    header = {"Authorization": "Basic YWRtaW46Y2hhbmdlaXQ="}  # admin:changeit
    async with TestClient(TestServer(app)) as client:
        public = await client.get("/gossip", headers=header)
        assert public.status == 200, await public.text()
        assert (await public.json()) == {"login": ""}
        protected = await client.get("/streams/x", headers=header)
        assert protected.status == 503
        admission.open = True
        judged = await client.get("/gossip", headers=header)
        assert judged.status == 200 and (await judged.json()) == {"login": "admin"}
        wrong = await client.get("/gossip", headers={"Authorization": "Basic YWRtaW46d3Jvbmc="})
        assert wrong.status == 401  # judged again: wrong credentials are refused everywhere
    admission.open = False
    call = SimpleNamespace(metadata={"authorization": header["Authorization"]})
    context = await call_context(services, call, public=True)  # type: ignore[arg-type]
    assert context.principal.name == ""
    with pytest.raises(GRPCError) as refused:
        await call_context(services, call)  # type: ignore[arg-type]
    assert refused.value.status == Status.UNAVAILABLE


class HeldAdmission(Admission):
    """An admission whose wait lasts until ``ready()`` (the real one's, bounded there): a sign-in
    waits in it while ``open`` is False; ``waiting`` is set once one does."""

    def __init__(self) -> None:
        super().__init__()
        self.waiting = asyncio.Event()

    async def wait_sign_in(self, ready: Callable[[], bool]) -> bool:
        self.waits += 1
        self.waiting.set()
        while not ready():
            await asyncio.sleep(0.001)
        return True


async def test_a_sign_in_waiting_while_its_database_is_closed_and_reopened_answers_reopening_not_its_cache():
    """A CI run: the old leader of a real cluster, SIGSTOPped while the new leader reset a user's
    password, answered the old password 200 when it resumed. It had cut its diverged log and reopened its
    database (Node.truncate_and_reopen), which makes a new UserStore; the sign-ins that waited for a lease
    held the old store, whose cache still had the old password and heard of no user record since: the
    lease came, from the new database's records, and the old store answered from its cache. A store
    whose database is closed judges nothing: a waiting sign-in answers the reopening (503, try again)."""
    from evdb.errors import DatabaseReopening

    db = Database.open(None)
    users = UserStore(db, hash_cost=SUITE_COST)
    users.ensure_defaults()
    admission = HeldAdmission()
    users.admit_with(admission)
    header = "Basic YWRtaW46Y2hhbmdlaXQ="  # admin:changeit
    assert await users.sign_in_header(header, "admin", "changeit") is not None  # cached
    admission.open = False  # the old leader's own lease has lapsed
    waiting = asyncio.create_task(users.sign_in_header(header, "admin", "changeit"))
    await asyncio.wait_for(admission.waiting.wait(), 5)
    db.close()  # the follower cuts its log and reopens: the node's new store reads the new database
    admission.open = True  # the new database shows the leader's last security write: a lease
    with pytest.raises(DatabaseReopening) as refused:
        await asyncio.wait_for(waiting, 5)
    assert status_of(refused.value)[0] == 503
    assert users.by_header(header) is None and users.principal_now(header) is None
    assert not users.may_judge_now()
    with pytest.raises(DatabaseReopening):
        users.authenticate("admin", "changeit")
    with pytest.raises(DatabaseReopening):
        await users.sign_in("admin", "changeit")


def test_a_single_nodes_store_judges_nothing_once_its_database_is_closed():
    db = Database.open(None)
    users = UserStore(db, hash_cost=SUITE_COST)
    users.ensure_defaults()
    header = "Basic YWRtaW46Y2hhbmdlaXQ="  # admin:changeit
    assert asyncio.run(users.sign_in_header(header, "admin", "changeit")) is not None
    assert users.by_header(header) is not None
    db.close()
    assert users.by_header(header) is None and users.principal_now(header) is None
    assert users.cached("admin", "changeit") is None
