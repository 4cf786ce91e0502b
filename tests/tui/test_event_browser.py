"""The dashboard's event browser (key ``e``) against a real in-process node: pick a stream, page
through its events, see a redacted event (redacted by the node's redaction service) labelled."""

from __future__ import annotations

import asyncio
import json
import os
import time

from rich.console import Console
from textual.widgets import DataTable, Input, OptionList, Static

from evdb.licensing.issuers import issue_demo_license
from evdb.node import Node
from evdb.redaction.tool import main as redact_main
from evdb.streams import NewEvent
from tests.node.conftest import ADMIN, node_options
from tui.app import Connection, DashboardApp, NodeSpec
from tui.event_browser import EventBrowser


def text_of(widget: Static) -> str:
    console = Console(width=200, record=True, color_system=None)
    console.print(widget.content)
    return console.export_text()


async def until(pilot, predicate, what: str, timeout: float = 15.0) -> None:
    """Let the app run until ``predicate()`` holds (reads go to a real node over HTTP)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await pilot.pause(0.02)


def write(db) -> None:
    for i in range(25):
        data = json.dumps({"customer": 7, "step": i}).encode()
        db.append("customer-7", [NewEvent("CustomerUpdated", data, metadata=b'{"by":"test"}', is_json=True)])
    for i in range(40):  # fill the first chunk: only completed chunks can be redacted
        db.append(
            "orders",
            [NewEvent("OrderPlaced", json.dumps({"n": i, "pad": "p" * 2000}).encode(), is_json=True)],
        )


async def test_pick_a_stream_page_its_events_and_see_the_redacted_label(tmp_path):
    options = node_options(
        tmp_path, "--enable-unix-socket", "true", "--license-key", issue_demo_license(time.time()),
        "--license-trusted-issuers", "demo",
    )  # fmt: skip
    async with Node(options, name="browse") as node:
        await asyncio.to_thread(write, node.db)
        db_dir = os.path.abspath(options.db)
        assert await asyncio.to_thread(redact_main, ["--db", db_dir, "--events", "2@customer-7"]) == 0
        app = DashboardApp(
            [NodeSpec(node.http_url, "browse")], connection=Connection(*ADMIN), start_collectors=False
        )
        async with app.run_test(size=(160, 45)) as pilot:
            await app.poll_all()
            await pilot.press("e")
            await until(pilot, lambda: isinstance(app.screen, EventBrowser), "the event browser")
            screen = app.screen
            assert isinstance(screen, EventBrowser)
            options_list = screen.query_one("#stream-list", OptionList)
            await until(pilot, lambda: options_list.option_count > 0, "the stream list")
            names = [
                str(options_list.get_option_at_index(i).prompt) for i in range(options_list.option_count)
            ]
            assert names[:2] == ["orders", "customer-7"]  # newest event first, read from $all

            options_list.focus()
            options_list.highlighted = 1
            await pilot.press("enter")
            table = screen.query_one("#events", DataTable)
            await until(pilot, lambda: table.row_count == 20, "the first page")
            numbers = [int(table.get_row_at(i)[0]) for i in range(table.row_count)]
            assert numbers == list(range(24, 4, -1))  # newest first, 20 a page
            assert screen.page is not None and screen.page.newer_from is None

            await pilot.press("right_square_bracket")  # ] older page
            await until(pilot, lambda: table.row_count == 5, "the older page")
            numbers = [int(table.get_row_at(i)[0]) for i in range(table.row_count)]
            assert numbers == [4, 3, 2, 1, 0]
            assert screen.page.older_from is None and screen.page.newer_from is not None
            redacted = [e for e in screen.page.events if e.is_redacted]
            assert [e.number for e in redacted] == [2]
            row = table.get_row("2")
            assert "redacted" in str(row[1])
            assert str(row[4]).startswith("[redacted: ") and "bytes]" in str(row[4])
            assert "ÿ" not in str(row[4]) and "////" not in str(row[4])
            assert all("redacted" not in str(table.get_row(str(n))[1]) for n in (0, 1, 3, 4))

            table.move_cursor(row=2)  # the redacted event: its detail shows the label, not its bytes
            await pilot.pause()
            detail = text_of(screen.query_one("#detail", Static))
            assert "redacted" in detail and '"by": "test"' in detail and "////" not in detail

            await pilot.press("left_square_bracket")  # [ back to the newer page
            await until(pilot, lambda: table.row_count == 20, "the newer page")
            assert int(table.get_row_at(0)[0]) == 24

            # the node's error, as it sent it
            name = screen.query_one("#stream-name", Input)
            name.focus()
            name.value = "no-such-stream"
            await pilot.press("enter")
            await until(pilot, lambda: screen.page is not None and screen.page.error is not None, "the error")
            status = text_of(screen.query_one("#status", Static))
            assert "GET /streams/no-such-stream/head/backward/20?embed=body → 404 Not Found" in status
            assert table.row_count == 0

            await pilot.press("escape")
            await until(pilot, lambda: not isinstance(app.screen, EventBrowser), "the dashboard again")
            assert not isinstance(app.screen, EventBrowser)
