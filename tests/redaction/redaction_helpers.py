"""Helpers of the redaction tests: an in-process node and its own redaction service, event writers."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os

from evdb.licensing.issuers import issue_demo_license
from evdb.node import Node
from evdb.options import load_options
from evdb.storage.chunk import Chunk, parse_chunk_file_name
from evdb.streams import NewEvent

ADMIN = ("admin", "changeit")
CHUNK_SIZE = 65536
DATA_SIZE = 3000  # about 20 events per chunk


def node_options(db_root, *extra: str, license_key: str | None = None, clock=None):
    if license_key is None:
        license_key = issue_demo_license(clock.time() if clock else 1_700_000_000, days=30)
    return load_options(
        [
            "--db",
            str(db_root / "db"),
            "--log",
            str(db_root / "log"),
            "--insecure",
            "--http-port",
            "0",
            "--chunk-size",
            str(CHUNK_SIZE),
            "--max-mem-table-size",
            "64",
            "--stats-period-sec",
            "0",
            "--enable-unix-socket",
            "true",
            "--license-key",
            license_key,
            "--license-trusted-issuers",
            "demo",
            *extra,
        ],
        {},
    )


class Running:
    """An in-process node and the redaction service it started itself (EnableUnixSocket)."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.db_dir = os.path.abspath(node.options.db)

    @property
    def service(self):
        return self.node.redaction

    @property
    def db(self):
        return self.node.db


@contextlib.asynccontextmanager
async def running_node(db_root, clock, *extra: str, license_key: str | None = None, name: str = "redact"):
    node = Node(node_options(db_root, *extra, license_key=license_key, clock=clock), clock=clock, name=name)
    await node.start()
    try:
        yield Running(node)
    finally:
        await node.stop()


def payload(stream: str, i: int) -> bytes:
    body = {"stream": stream, "i": i, "pad": "x" * DATA_SIZE}
    return json.dumps(body).encode()


async def write_events(db, stream: str, count: int, *, start: int = 0) -> None:
    for i in range(start, start + count):
        event = NewEvent("Ev", payload(stream, i), metadata=b'{"m":%d}' % i, is_json=True)
        await asyncio.to_thread(db.append, stream, [event])


def chunk_files(db_dir: str) -> list[str]:
    return sorted(n for n in os.listdir(db_dir) if parse_chunk_file_name(n))


def verify_all_chunks(db_dir: str) -> None:
    """Every completed chunk file's size and checksum verify (the active one is skipped)."""
    for name in chunk_files(db_dir):
        try:
            Chunk.open(os.path.join(db_dir, name), verify=True)
        except Exception as exc:
            if "not completed" in str(exc):
                continue
            raise


async def wait_scavenge_done(client, timeout: float = 30.0) -> str:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        current = (await client.get("/admin/scavenge/current", headers={"Accept": "application/json"})).json()
        if current["scavengeId"] == "":
            last = (await client.get("/admin/scavenge/last", headers={"Accept": "application/json"})).json()
            return last["scavengeResult"]
        await asyncio.sleep(0.01)
    raise AssertionError("scavenge did not finish")
