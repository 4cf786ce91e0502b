"""Helpers of the Admin UI tests: Chromium's path and flags, node options, event writers."""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from pathlib import Path

from evdb.streams import NewEvent
from tests.node.conftest import node_options as base_node_options

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ADMIN = ("admin", "changeit")
OPS = ("ops", "changeit")
#: the committed screenshots (README) are rewritten only on request: EVDB_UPDATE_SCREENSHOTS=1
SCREENSHOTS = (
    Path(__file__).resolve().parents[2] / "screenshots"
    if os.environ.get("EVDB_UPDATE_SCREENSHOTS") == "1"
    else Path(tempfile.gettempdir()) / "evdb-webui-screenshots"
)
SCREENSHOTS.mkdir(exist_ok=True)


def node_options(root: Path, *extra: str):
    """The node tests' options (tests/node/conftest.py) with a larger memtable."""
    return base_node_options(root, "--max-mem-table-size", "256", *extra)


async def write_orders(db, streams: int, events: int, pad: int = 1500) -> None:
    """``streams`` streams of ``events`` JSON events each (with metadata), in one thread."""

    def write() -> None:
        for s in range(streams):
            stream = f"order-{s}"
            batch = [
                NewEvent(
                    "OrderPlaced",
                    json.dumps({"order": s, "line": i, "pad": "x" * pad}).encode(),
                    metadata=json.dumps({"source": "webui-test", "line": i}).encode(),
                    is_json=True,
                )
                for i in range(events)
            ]
            db.append(stream, batch)

    await asyncio.to_thread(write)


async def delete_streams(db, names: list[str]) -> None:
    def delete() -> None:
        for name in names:
            db.delete_stream(name)

    await asyncio.to_thread(delete)


async def log_in(page, base_url: str, user: str = "admin", password: str = "changeit") -> None:
    await page.goto(f"{base_url}/web/")
    await page.fill("#login-user", user)
    await page.fill("#login-password", password)
    await page.click("#login-submit")
