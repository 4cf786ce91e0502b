"""The Admin page in real headless Chromium: log in, start a scavenge and watch it finish, stop one
mid-way, see the node's own validation messages, and auto-scavenge (not available, then licensed)."""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
import pytest
from webui_helpers import ADMIN, SCREENSHOTS, delete_streams, log_in, node_options, write_orders

from evdb.licensing.issuers import issue_demo_license
from evdb.node import Node
from evdb.scavenge.run import RunContext

#: what the current-scavenge part shows: state, phase, chunk progress
SHOWN = """() => {
  const part = document.querySelector('#current-scavenge');
  const text = (id) => part.querySelector(id)?.textContent.trim() ?? '';
  return [part.dataset.scavengeState, text('#current-phase'), text('#current-chunks')];
}"""


async def open_admin(page) -> None:
    await page.click("#nav a[data-section=admin]")
    await page.wait_for_selector("#current-scavenge")


async def confirm_dialog(page) -> str:
    """The confirmation dialog is open, starts on Cancel, and names the exact call: returns it."""
    await page.wait_for_selector("#confirm[open]")
    assert await page.evaluate("document.activeElement.id") == "confirm-cancel"
    return await page.inner_text("#confirm-call")


class PhaseGate:
    """Holds the scavenge at the start of each phase until the test has seen the page show it.

    A small scavenge finishes in well under the page's 1 s poll on a fast machine: without the gate,
    whether the page shows two phases would depend on the machine's speed. The hold is bounded.
    """

    def __init__(self) -> None:
        self._seen = threading.Condition()
        self._shown: set[str] = set()
        self.opened = False

    def hold(self, phase: str, stop: threading.Event) -> None:
        """Until the page has shown ``phase``, the gate is opened or the scavenge is stopped (≤ 30 s)."""
        deadline = time.monotonic() + 30
        with self._seen:
            while not (self.opened or phase in self._shown or stop.is_set()):
                if time.monotonic() > deadline:
                    return
                self._seen.wait(0.05)  # a stop sets its own event: look at it every 50 ms

    def shown(self, text: str) -> None:
        """The page shows ``text``: a phase's name, then ``(phase n of m)``."""
        with self._seen:
            self._shown.add(text.split(" (phase ")[0])
            self._seen.notify_all()

    def open(self) -> None:
        with self._seen:
            self.opened = True
            self._seen.notify_all()


@pytest.fixture
def phase_gate(monkeypatch):
    gate = PhaseGate()
    enter = RunContext.enter_phase

    def held(ctx: RunContext, name: str) -> float:
        started = enter(ctx, name)
        gate.hold(name, ctx.stop)
        return started

    monkeypatch.setattr(RunContext, "enter_phase", held)
    yield gate
    gate.open()


async def test_log_in_start_a_scavenge_see_it_progress_and_finish(node, page, phase_gate):
    await write_orders(node.db, streams=40, events=20)
    await delete_streams(node.db, [f"order-{i}" for i in range(0, 40, 2)])

    # wrong password: the node's 401, and the login form stays
    await log_in(page, node.http_url, password="not-it")
    await page.wait_for_selector("#message.error")
    message = await page.inner_text("#message")
    assert "401 Unauthorized" in message and "wrong user name or password" in message
    assert await page.is_visible("#login")

    await log_in(page, node.http_url)
    await page.wait_for_selector("#node-role")
    assert await page.inner_text("#node-role") == "Leader"
    assert "this node" in await page.inner_text("#members")
    await page.screenshot(path=str(SCREENSHOTS / "admin-cluster.png"), full_page=True)

    await open_admin(page)
    assert await page.get_attribute("#current-scavenge", "data-scavenge-state") == "idle"
    assert not await page.is_checked("#syncOnly")
    # no licence on this node: GET /auto-scavenge/enabled is 404, shown as "not available"
    await page.wait_for_selector("#auto-scavenge[data-auto-state=unavailable]")
    assert "not available" in await page.inner_text("#auto-scavenge")

    await page.fill("#throttlePercent", "10")
    await page.click("#start-submit")
    call = await confirm_dialog(page)
    assert call == "POST /admin/scavenge?threads=1&threshold=0&throttlePercent=10&syncOnly=false"
    await page.click("#confirm-send")
    await page.wait_for_selector("#message.ok")
    assert "Scavenge started" in await page.inner_text("#message")

    # watch the page's own polls: the running part shows phases and progress, then the result
    seen: list[tuple[str, str]] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        state, phase, chunks = await page.evaluate(SHOWN)  # one look: the part is replaced as it polls
        if state == "running":
            if (phase, chunks) not in seen:
                seen.append((phase, chunks))
                if len(seen) == 2:
                    await page.screenshot(
                        path=str(SCREENSHOTS / "admin-scavenge-running.png"), full_page=True
                    )
                    phase_gate.open()
            phase_gate.shown(phase)
        elif state == "idle" and seen:
            break
        await asyncio.sleep(0.05)
    assert len(seen) >= 2, f"the page showed no progress while the scavenge ran: {seen}"
    await page.wait_for_selector("#current-scavenge[data-last-result=Success]")
    scavenge_id = await page.get_attribute("#current-scavenge", "data-last-id")
    assert node.scavenge.last() == (scavenge_id, "Success")
    row = page.locator(f"#history tr[data-scavenge-id='{scavenge_id}']")
    await row.wait_for()
    assert await row.get_attribute("data-result") == "Success"
    await page.screenshot(path=str(SCREENSHOTS / "admin-page.png"), full_page=True)


async def test_stop_a_scavenge_mid_way(node, page, phase_gate):
    await write_orders(node.db, streams=40, events=20)
    await delete_streams(node.db, [f"order-{i}" for i in range(0, 40, 2)])
    await log_in(page, node.http_url)
    await open_admin(page)
    # the gate holds the scavenge at its first phase: it is still running when stopped
    await page.click("#start-submit")
    await confirm_dialog(page)
    await page.click("#confirm-send")
    await page.wait_for_selector("#current-scavenge[data-scavenge-state=running]")
    scavenge_id = await page.get_attribute("#current-scavenge", "data-scavenge-id")
    assert node.scavenge.current_id() == scavenge_id

    # Cancel sends nothing
    await page.click("#stop-scavenge")
    assert await confirm_dialog(page) == f"DELETE /admin/scavenge/{scavenge_id}"
    await page.click("#confirm-cancel")
    await page.wait_for_selector("#confirm:not([open])", state="hidden")
    assert node.scavenge.current_id() == scavenge_id

    await page.click("#stop-scavenge")
    await confirm_dialog(page)
    await page.click("#confirm-send")
    # the start's message is still shown (also .ok) until the stop's answer replaces it
    await page.wait_for_selector(f"#message.ok:has-text('Stopped scavenge {scavenge_id}')")
    assert await page.inner_text("#message") == f"Stopped scavenge {scavenge_id}."
    await page.wait_for_selector("#current-scavenge[data-last-result=Stopped]")
    assert node.scavenge.current_id() is None
    assert node.scavenge.last() == (scavenge_id, "Stopped")
    row = page.locator(f"#history tr[data-scavenge-id='{scavenge_id}']")
    await row.wait_for()
    assert await row.get_attribute("data-result") == "Stopped"


async def test_invalid_start_options_show_the_node_s_message(node, page):
    await log_in(page, node.http_url, "ops", "changeit")
    await open_admin(page)
    for fields, expected in (
        (
            {"threads": "2", "throttlePercent": "50"},
            "throttlePercent must be 100 for a multi-threaded scavenge",
        ),
        ({"threads": "1", "throttlePercent": "0"}, "throttlePercent must be between 1 and 100 inclusive"),
        ({"threads": "two", "throttlePercent": "100"}, "threads must be a 1 or above"),
    ):
        for name, value in fields.items():
            await page.fill(f"#{name}", value)
        await page.click("#start-submit")
        await confirm_dialog(page)
        await page.click("#confirm-send")
        await page.wait_for_selector("#message.error")
        message = await page.inner_text("#message")
        assert "400 Bad Request" in message and expected in message, message
        assert await page.inner_text("#message pre") == expected  # the body, as the node sent it
        await page.evaluate("document.querySelector('#message').className = ''")
    assert node.scavenge.current_id() is None and node.scavenge.last() is None


async def test_a_plain_user_sees_the_node_s_refusal(node, page):
    async with httpx.AsyncClient(base_url=node.http_url, auth=ADMIN) as client:
        created = await client.post(
            "/users/", json={"loginName": "reader", "fullName": "R", "groups": [], "password": "pw"}
        )
        assert created.status_code == 201
    await log_in(page, node.http_url, "reader", "pw")
    await page.wait_for_selector("#node-role")
    await page.click("#nav a[data-section=admin]")
    await page.wait_for_selector("#node-error")
    assert await page.inner_text("#node-error h2") == "GET /web/fragments/admin → 403 Forbidden"
    assert await page.inner_text("#node-error pre") == "Access denied."


async def test_auto_scavenge_state_countdown_pause_and_resume(tmp_path, page):
    licence = issue_demo_license(time.time())
    options = node_options(tmp_path, "--license-key", licence, "--license-trusted-issuers", "demo")
    async with Node(options, name="auto") as node:
        async with httpx.AsyncClient(base_url=node.http_url, auth=ADMIN, timeout=30) as client:
            configured = await client.post("/auto-scavenge/configure", json={"schedule": "0 3 * * *"})
            assert configured.status_code == 200, configured.text
        await log_in(page, node.http_url)
        await open_admin(page)
        await page.wait_for_selector("#auto-scavenge[data-auto-state=Waiting]")
        assert await page.inner_text("#auto-schedule") == "0 3 * * *"
        first = await page.inner_text("#auto-countdown")
        await page.wait_for_function(
            "first => document.querySelector('#auto-countdown').textContent !== first", arg=first
        )
        await page.click("#auto-pause")
        assert await confirm_dialog(page) == "POST /auto-scavenge/pause"
        await page.click("#confirm-send")
        await page.wait_for_selector("#auto-scavenge[data-auto-state=Paused]")
        await page.click("#auto-resume")
        assert await confirm_dialog(page) == "POST /auto-scavenge/resume"
        await page.click("#confirm-send")
        await page.wait_for_selector("#auto-scavenge[data-auto-state=Waiting]")
        async with httpx.AsyncClient(base_url=node.http_url, auth=ADMIN, timeout=30) as client:
            status = (await client.get("/auto-scavenge/status")).json()
        assert status["state"] == "Waiting"
