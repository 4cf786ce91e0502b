from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import httpx
import pytest

from evdb.clock import ManualClock
from evdb.licensing.issuers import issue_demo_license
from evdb.logs import node_log_files, read_log_lines
from evdb.node import Node
from evdb.options import load_options

ADMIN = ("admin", "changeit")
OPS = ("ops", "changeit")
USER = ("plain-user", "plain-pw")


def options_for(tmp_path, *extra: str, license_at: float | None = None, insecure: bool = True):
    argv = [
        "--db",
        str(tmp_path / "db"),
        "--log",
        str(tmp_path / "log"),
        "--http-port",
        "0",
        "--chunk-size",
        "65536",
        "--stats-period-sec",
        "0",
        "--installation-directory",
        str(tmp_path / "install"),
        *extra,
    ]
    if insecure:
        argv.append("--insecure")
    if license_at is not None:
        argv += ["--license-key", issue_demo_license(license_at), "--license-trusted-issuers", "demo"]
    return load_options(argv, {})


def log_messages(tmp_path, name: str) -> list[str]:
    return [
        line.get("@m", "")
        for path in node_log_files(str(tmp_path / "log"), name)
        for line in read_log_lines(path)
    ]


async def add_plain_user(client: httpx.AsyncClient) -> None:
    created = await client.post(
        "/users",
        json={"loginName": USER[0], "fullName": "Plain", "groups": [], "password": USER[1]},
    )
    assert created.status_code == 201, created.text


@pytest.fixture
async def licensed_node(tmp_path, clock):
    async with Node(options_for(tmp_path, license_at=clock.time()), clock=clock, name="auto") as node:
        yield node


@pytest.fixture
async def clients(licensed_node):
    url = licensed_node.http_url
    out = {
        "anonymous": httpx.AsyncClient(base_url=url, timeout=30),
        "admin": httpx.AsyncClient(base_url=url, auth=ADMIN, timeout=30),
        "ops": httpx.AsyncClient(base_url=url, auth=OPS, timeout=30),
        "user": httpx.AsyncClient(base_url=url, auth=USER, timeout=30),
    }
    await add_plain_user(out["admin"])
    try:
        yield out
    finally:
        for c in out.values():
            await c.aclose()


@contextlib.asynccontextmanager
async def time_moves(clock: ManualClock, step: float = 0.25) -> AsyncIterator[None]:
    """While inside, the node's manual clock moves on by ``step`` every few real milliseconds: a wait the
    node bounds on its own clock (a member waiting up to GossipTimeoutMs for a sign-in lease) ends."""

    async def tick() -> None:
        while True:
            await asyncio.sleep(0.005)
            clock.advance(step)

    ticker = asyncio.create_task(tick())
    try:
        yield
    finally:
        ticker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await ticker
