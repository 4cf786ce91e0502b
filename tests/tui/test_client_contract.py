"""The node port's contract (tests/tui/contract_client.py) run against a real in-process node and against
every fake node the dashboard tests use; and the meta-tests that keep the fakes and the suite complete."""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from evdb.node import Node
from tests.autoscavenge.conftest import options_for
from tests.tui.contract_client import NodeClientContract, World
from tests.tui.fake_node import FakeCluster, FakeMirror, FakeNode, FakeSubscriptions, mirror_status
from tests.tui.test_screens_34 import EndsBetweenReads
from tui.client import ROUTES, HttpNodeClient, NodeClient

ADMIN = ("admin", "changeit")
#: the fake node classes the dashboard tests use, each with its contract run below
FAKE_NODES = (FakeNode, EndsBetweenReads)


# -- the real node: one for the module, served from a thread of its own ---------------------------------
@pytest.fixture(scope="module")
def real_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A licensed evdb node (auto-scavenge on) in its own event loop; its URL."""
    folder = tmp_path_factory.mktemp("contract-node")
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    found: dict[str, object] = {}

    async def serve() -> None:
        stop = asyncio.Event()
        found["stop"] = stop
        try:
            async with Node(options_for(folder, license_at=time.time()), name="contract") as node:
                found["url"] = node.http_url
                ready.set()
                await stop.wait()
        finally:
            ready.set()

    thread = threading.Thread(target=loop.run_until_complete, args=(serve(),), name="contract-node")
    thread.start()
    try:
        assert ready.wait(120), "the contract's node did not start within 120 s"
        assert "url" in found, "the contract's node failed to start (its log is in " + str(folder) + ")"
        yield str(found["url"])
    finally:
        stop = found.get("stop")
        if isinstance(stop, asyncio.Event):
            loop.call_soon_threadsafe(stop.set)
        thread.join(60)
        loop.close()


class TestRealNode(NodeClientContract):
    @pytest.fixture
    async def world(self, real_node: str) -> AsyncIterator[World]:
        http = httpx.AsyncClient(auth=ADMIN)
        plain = httpx.AsyncClient(auth=ADMIN, base_url=real_node, timeout=30)

        async def append(stream: str, count: int) -> None:
            if (
                await plain.get(f"/streams/{stream}/0", headers={"Accept": "application/json"})
            ).status_code == 200:
                return  # written by an earlier clause (the node is the module's)
            for n in range(count):
                written = await plain.post(
                    f"/streams/{stream}",
                    json={"n": n},
                    headers={"Kurrent-EventType": "Counted", "Kurrent-EventId": str(uuid.uuid4())},
                )
                assert written.status_code == 201, written.text

        yield World(HttpNodeClient(http, timeout=30), real_node, append)
        await http.aclose()
        await plain.aclose()


def fake_world(node: FakeNode) -> World:
    """A fake node with every evdb feature the contract reads switched on, as a real licensed node has."""
    node.auto_scavenge = {"state": "NotConfigured", "schedule": None}
    node.auto_scavenge_progress = {"clusterScavengeId": None, "status": "", "members": []}
    node.certificates = {"secure": False, "certificate": None, "ca": None, "lastReload": None}
    node.subscriptions = FakeSubscriptions()
    node.options = [{"name": "ChunkSize", "value": 65536, "restartPending": False}]
    node.backup = {}
    node.finish_after_reads = 1

    async def append(stream: str, count: int) -> None:
        for n in range(count):
            node.append(stream, "Counted", {"n": n})

    client = HttpNodeClient(httpx.AsyncClient(transport=FakeCluster(node).transport()))
    return World(client, node.url, append)


class TestFakeNode(NodeClientContract):
    @pytest.fixture
    def world(self) -> World:
        return fake_world(FakeNode())


class TestEndsBetweenReads(NodeClientContract):
    @pytest.fixture
    def world(self) -> World:
        return fake_world(EndsBetweenReads())


# -- the meta-tests ----------------------------------------------------------------------------------
def _port_methods(cls: type) -> set[str]:
    return {name for name, _ in inspect.getmembers(cls, inspect.isfunction) if not name.startswith("_")}


def test_the_real_client_has_exactly_the_port_s_methods() -> None:
    assert _port_methods(HttpNodeClient) == _port_methods(NodeClient)
    assert set(ROUTES) <= _port_methods(NodeClient)


def test_every_method_of_the_port_has_a_clause() -> None:
    clauses = [name for name in dir(NodeClientContract) if name.startswith("test_")]
    missing = [m for m in _port_methods(NodeClient) if not any(c.startswith(f"test_{m}_") for c in clauses)]
    assert not missing, f"no contract clause for {missing}"


def test_every_fake_node_runs_the_contract() -> None:
    """Each fake node class the tests use has its subclass of the contract here."""
    # by name: pytest may import a test module twice (as tests.tui.x and as x), its fakes with it
    known = {cls.__name__ for cls in (FakeNode, *FakeNode.__subclasses__())}
    covered = {cls.__name__ for cls in FAKE_NODES}
    assert known <= covered, f"fakes without a contract run: {known - covered}"
    runs = {cls.__name__.removeprefix("Test") for cls in NodeClientContract.__subclasses__()}
    assert {"RealNode", *(cls.__name__ for cls in FAKE_NODES)} <= runs


#: the port's reads of a mirror (``--mirror``); every other read is a node's
MIRROR_READS = {"mirror_status"}


SERVED = [
    *((fake, method) for fake in FAKE_NODES for method in sorted(ROUTES) if method not in MIRROR_READS),
    *((FakeMirror, method) for method in sorted(MIRROR_READS)),
]


@pytest.mark.parametrize(("fake", "method"), SERVED, ids=[f"{f.__name__}-{m}" for f, m in SERVED])
def test_every_fake_serves_every_request_the_real_client_makes(fake: type, method: str) -> None:
    """A fake that lacks a request of the port answers its own "no such route", which fails here
    (the real node, or the real mirror's status, serves each of them)."""
    target = FakeMirror(status=mirror_status()) if fake is FakeMirror else fake()
    if isinstance(target, FakeNode):
        fake_world(target)
    route = ROUTES[method]
    fields = {"stream": "s", "start": "head", "direction": "backward", "count": "1", "group": "g"}
    request = httpx.Request(route.method, target.url + route.path.format(**fields))
    answer = target.handle(request)
    assert answer.headers.get("x-fake") != "no-route", f"{fake.__name__} does not serve {method}: {route}"
