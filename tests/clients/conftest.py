"""A real evdb node for KurrentDB's own Python clients.

The node runs on a thread with its own event loop, so the synchronous ``KurrentDBClient`` (which
blocks the calling thread) and the asyncio ``AsyncKurrentDBClient`` (on the test's loop) both talk
to it over real sockets, exactly as they would talk to KurrentDB.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import ssl
import threading
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from evdb.clock import ManualClock
from evdb.node import Node
from evdb.options import load_options
from evdb.tls.certs import DevCertificates, generate_dev_certificates

ADMIN = ("admin", "changeit")


def node_options(db: Path, *extra: str):
    return load_options(
        [
            "--db",
            str(db / "db"),
            "--log",
            str(db / "log"),
            "--http-port",
            "0",
            "--chunk-size",
            "65536",
            "--max-mem-table-size",
            "64",
            "--stats-period-sec",
            "0",
            *extra,
        ],
        {},
    )


class NodeThread:
    """One node on its own thread and event loop; ``run(coro)`` runs a coroutine there."""

    def __init__(self, options: Any, clock: ManualClock | None = None, name: str = "grpc") -> None:
        self.options = options
        self.clock = clock
        self.name = name
        self.loop = asyncio.new_event_loop()
        self.node: Node | None = None
        self._thread = threading.Thread(target=self.loop.run_forever, name=f"node-{name}", daemon=True)

    def start(self) -> NodeThread:
        self._thread.start()

        async def start() -> Node:
            node = Node(self.options, clock=self.clock, name=self.name)
            await node.start()
            return node

        self.node = self.run(start())
        return self

    def run(self, coro: Coroutine, timeout: float = 30) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def call(self, fn, *args: Any, timeout: float = 30) -> Any:
        """Run a plain function on the node's loop thread."""
        future: concurrent.futures.Future = concurrent.futures.Future()

        def go() -> None:
            try:
                future.set_result(fn(*args))
            except BaseException as exc:
                future.set_exception(exc)

        self.loop.call_soon_threadsafe(go)
        return future.result(timeout)

    def stop(self) -> None:
        if self.node is not None:
            self.run(self.node.stop())
            self.node = None
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()

    @property
    def port(self) -> int:
        assert self.node is not None
        return self.node.port


def insecure_node(tmp_path_factory, name: str) -> Iterator[NodeThread]:
    """An insecure node on its own thread, in a fresh folder, for a module's fixture to ``yield from``
    (stopped when the module is done)."""
    thread = NodeThread(node_options(tmp_path_factory.mktemp(name), "--insecure"), name=name).start()
    try:
        yield thread
    finally:
        thread.stop()


@dataclass
class Target:
    """How a client reaches the node: its thread, connection string and CA."""

    node: NodeThread
    uri: str
    ca: str | None
    tls: bool

    def client_uri(self, extra: str = "") -> str:
        return self.uri + extra


@pytest.fixture(scope="session")
def dev_certs(tmp_path_factory) -> DevCertificates:
    return generate_dev_certificates(tmp_path_factory.mktemp("certs"))


def tls_options(path: Path, certs: DevCertificates, *extra: str):
    """A node's options (tests' defaults, database under ``path``) with TLS from ``certs``."""
    return node_options(
        path,
        "--certificate-file",
        str(certs.cert_path),
        "--certificate-private-key-file",
        str(certs.key_path),
        "--trusted-root-certificates-path",
        str(certs.ca_path),
        *extra,
    )


def tls_node_with_user(
    base: Path, name: str, user: tuple[str, str], *extra: str
) -> tuple[NodeThread, DevCertificates]:
    """A TLS node (its own certificates under ``base/certs``) on a thread, with the plain user ``user``
    created (for the refusals); the caller stops it."""
    certs = generate_dev_certificates(base / "certs")
    thread = NodeThread(tls_options(base, certs, *extra), name=name).start()
    try:
        with httpx.Client(
            base_url=f"https://localhost:{thread.port}",
            verify=ssl.create_default_context(cafile=str(certs.ca_path)),
            auth=ADMIN,
            timeout=30,
        ) as http:
            created = http.post(
                "/users", json={"loginName": user[0], "fullName": name, "groups": [], "password": user[1]}
            )
        assert created.status_code == 201, created.text
    except BaseException:
        thread.stop()
        raise
    return thread, certs


def _target(path: Path, tls: bool, certs: DevCertificates, clock: ManualClock | None, *extra: str) -> Target:
    options = tls_options(path, certs, *extra) if tls else node_options(path, "--insecure", *extra)
    thread = NodeThread(options, clock).start()
    user, password = ADMIN
    if tls:
        uri = f"kurrentdb://{user}:{password}@localhost:{thread.port}?tlsCaFile={certs.ca_path}"
    else:
        uri = f"kurrentdb://localhost:{thread.port}?tls=false"
    return Target(thread, uri, str(certs.ca_path) if tls else None, tls)


@pytest.fixture(params=["tls", "insecure"])
def target(request, tmp_path, dev_certs) -> Iterator[Target]:
    """A fresh node, over TLS (Basic credentials) and in insecure mode."""
    t = _target(tmp_path, request.param == "tls", dev_certs, None)
    yield t
    t.node.stop()


@pytest.fixture
def clocked(tmp_path, dev_certs) -> Iterator[tuple[Target, ManualClock]]:
    """An insecure node whose clock the test moves (for $maxAge)."""
    clock = ManualClock()
    t = _target(tmp_path, False, dev_certs, clock)
    yield t, clock
    t.node.stop()
