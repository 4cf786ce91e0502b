from __future__ import annotations

import httpx
import pytest

from evdb.node import Node
from evdb.options import load_options

ADMIN = ("admin", "changeit")
OPS = ("ops", "changeit")


def node_options(tmp_path, *extra: str):
    return load_options(
        [
            "--db",
            str(tmp_path / "db"),
            "--log",
            str(tmp_path / "log"),
            "--insecure",
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


@pytest.fixture
async def node(tmp_path, clock):
    async with Node(node_options(tmp_path), clock=clock, name="test") as n:
        yield n


@pytest.fixture
async def client(node):
    async with httpx.AsyncClient(base_url=node.http_url, auth=ADMIN, timeout=30) as c:
        yield c


@pytest.fixture
async def anon(node):
    async with httpx.AsyncClient(base_url=node.http_url, timeout=30) as c:
        yield c


@pytest.fixture
async def unmerged_client(tmp_path, clock):
    """Admin client of a node with DisableScavengeMerging (chunks stay apart, as in the reference's facts)."""
    options = node_options(tmp_path, "--disable-scavenge-merging")
    async with (
        Node(options, clock=clock, name="nomerge") as n,
        httpx.AsyncClient(base_url=n.http_url, auth=ADMIN, timeout=30) as c,
    ):
        yield c
