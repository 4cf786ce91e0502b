"""The dashboard against a real in-process node: start a scavenge from the keyboard, see it complete."""

from __future__ import annotations

import asyncio
import time
import uuid

import httpx
from rich.console import Console
from textual.widgets import Static

from evdb.node import Node
from tests.node.conftest import ADMIN, node_options
from tui.app import Connection, DashboardApp, NodeSpec


async def test_start_scavenge_from_the_keyboard_and_see_it_complete(tmp_path, clock):
    async with Node(node_options(tmp_path), clock=clock, name="dash") as node:
        async with httpx.AsyncClient(base_url=node.http_url, auth=ADMIN, timeout=30) as c:
            for i in range(30):
                r = await c.post(
                    "/streams/orders",
                    json={"n": i, "pad": "x" * 2000},
                    headers={"Kurrent-EventType": "OrderPlaced", "Kurrent-EventId": str(uuid.uuid4())},
                )
                assert r.status_code == 201
            assert (await c.delete("/streams/orders")).status_code == 204
        app = DashboardApp(
            [NodeSpec(node.http_url, "dash", log_dir=str(tmp_path / "log"))],
            connection=Connection(*ADMIN),
            start_collectors=False,
        )
        async with app.run_test(size=(160, 45)) as pilot:
            await app.poll_all()
            await pilot.press("s")
            await pilot.pause()
            app.screen.query("Input").first().focus()
            await pilot.press("enter")
            await pilot.pause()
            await pilot.click("#send")
            await app.workers.wait_for_complete()
            assert app.state.activity[-1].status == 200
            deadline = time.monotonic() + 30
            sc = app.state.node().scavenge
            while time.monotonic() < deadline:
                await app.poll_all()
                if not sc.running and sc.result == "Success" and sc.history:
                    break
                await asyncio.sleep(0.05)
            assert sc.result == "Success", sc
            assert sc.history[0].result == "Success"
            assert sc.bytes_reclaimed > 0 and any(c.executed for c in sc.chunks)
            await pilot.press("2")
            await pilot.pause()
            app.tick()
            await pilot.press("6")
            await pilot.pause()
            assert any("Scavenge" in line.message for line in app.logbook.lines)


async def test_reload_from_the_keyboard_shows_in_the_certificates_panel(tmp_path, clock):
    """evdb's /admin/certificates as the real node answers it: the last reload appears after `l`."""
    async with Node(node_options(tmp_path), clock=clock, name="dash") as node:
        app = DashboardApp(
            [NodeSpec(node.http_url, "dash")], connection=Connection(*ADMIN), start_collectors=False
        )
        async with app.run_test(size=(160, 45)) as pilot:
            await app.poll_all()
            info = app.state.node().certificates
            assert info is not None and info.available and info.error is None
            assert info.secure is False and info.reload_at is None
            await pilot.press("l")
            await pilot.pause()
            await pilot.click("#send")
            await app.workers.wait_for_complete()
            assert app.state.activity[-1].status == 200
            await app.poll_all()  # the poll after a call reads the certificates again
            info = app.state.node().certificates
            assert info.reload_result == "Success" and info.reload_trigger == "/admin/reloadconfig"
            assert info.reload_at is not None
            await pilot.press("5")
            await pilot.pause()
            console = Console(width=200, record=True, color_system=None)
            console.print(app.query_one("#certs-panel", Static).content)
            assert "via POST /admin/reloadconfig" in console.export_text()
