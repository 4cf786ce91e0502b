"""The stream browser in real headless Chromium: streams, a stream's events newest first and paged, a
redacted event (redacted with the node's own redaction service) labelled, and the node's errors."""

from __future__ import annotations

import asyncio
import json
import os
import time

from webui_helpers import SCREENSHOTS, log_in, node_options

from evdb.licensing.issuers import issue_demo_license
from evdb.node import Node
from evdb.redaction.tool import main as redact_main
from evdb.streams import NewEvent

STREAM = "customer-42"


async def write_customer(db, count: int) -> None:
    def write() -> None:
        for i in range(count):
            data = {"customer": 42, "step": i, "email": f"person{i}@example.com"}
            event = NewEvent(
                "CustomerUpdated" if i else "CustomerRegistered",
                json.dumps(data).encode(),
                metadata=json.dumps({"correlationId": f"c-{i}"}).encode(),
                is_json=True,
            )
            db.append(STREAM, [event])
        # enough after them to fill the first chunk: only completed chunks can be redacted
        for i in range(40):
            order = {"order": i, "customer": 42, "notes": "n" * 2000}
            db.append("orders", [NewEvent("OrderPlaced", json.dumps(order).encode(), is_json=True)])
        db.append("audit", [NewEvent("Audited", b"plain text, not JSON")])

    await asyncio.to_thread(write)


async def test_browse_to_a_redacted_event_and_see_the_label(tmp_path, page):
    options = node_options(
        tmp_path, "--enable-unix-socket", "true", "--license-key", issue_demo_license(time.time()),
        "--license-trusted-issuers", "demo",
    )  # fmt: skip
    async with Node(options, name="browse") as node:
        await write_customer(node.db, 30)
        original = node.db.read_event(STREAM, 3)
        db_dir = os.path.abspath(options.db)
        assert await asyncio.to_thread(redact_main, ["--db", db_dir, "--events", f"3@{STREAM}"]) == 0
        redacted = node.db.read_event(STREAM, 3)
        assert redacted.is_redacted and redacted.data == b"\xff" * len(original.data)

        await log_in(page, node.http_url)
        await page.wait_for_selector("#node-role")
        await page.click("#nav a[data-section=streams]")
        await page.wait_for_selector("#streams tr.stream-row")
        names = await page.locator("#streams tr.stream-row td:first-child").all_inner_texts()
        assert names[:3] == ["audit", "orders", STREAM]  # by their newest event
        await page.screenshot(path=str(SCREENSHOTS / "stream-browser-list.png"), full_page=True)

        await page.click(f"#streams a:text-is('{STREAM}')")
        await page.wait_for_selector(f"#stream[data-stream='{STREAM}']")
        numbers = await page.locator("#stream tr.event td:first-child").all_inner_texts()
        assert numbers == [str(n) for n in range(29, 9, -1)]  # newest first, 20 a page
        assert await page.locator("#stream tr.event[data-redacted=true]").count() == 0

        await page.click("#stream a.older")
        await page.wait_for_selector("#stream tr.event[data-event-number='0']")
        numbers = await page.locator("#stream tr.event td:first-child").all_inner_texts()
        assert numbers == [str(n) for n in range(9, -1, -1)]
        row = page.locator("#stream tr.event[data-event-number='3']")
        assert await row.get_attribute("data-redacted") == "true"
        assert await row.locator(".label-redacted").inner_text() == "redacted"
        cells = await row.locator("td").all_inner_texts()
        assert cells[1].startswith("CustomerUpdated")
        assert cells[2] == str(original.log_position)
        assert cells[4] == f"[redacted: {len(original.data)} bytes]"
        assert json.loads(cells[5]) == {"correlationId": "c-3"}  # metadata is untouched
        assert "////" not in cells[4] and "ÿ" not in cells[4]  # no 0xFF noise, raw or base64
        neighbour = page.locator("#stream tr.event[data-event-number='4']")
        assert await neighbour.get_attribute("data-redacted") == "false"
        assert (
            json.loads((await neighbour.locator("td").all_inner_texts())[4])["email"] == "person4@example.com"
        )
        assert await page.locator("#stream .label-redacted").count() == 1
        await row.scroll_into_view_if_needed()
        await page.screenshot(path=str(SCREENSHOTS / "stream-browser.png"), full_page=True)

        # the same label in $all
        await page.goto(f"{node.http_url}/web/#/streams/%24all?count=200")
        await page.wait_for_selector("#stream[data-stream='$all'] tr.event")
        in_all = page.locator("#stream tr.event[data-redacted=true]")
        assert await in_all.count() == 1
        assert (await in_all.locator("td").all_inner_texts())[0] == STREAM

        # errors as the node sent them
        await page.fill("#open-stream-name", "no-such-stream")
        await page.press("#open-stream-name", "Enter")
        await page.wait_for_selector("#node-error")
        assert (
            await page.inner_text("#node-error h2")
            == "GET /web/fragments/streams/no-such-stream → 404 Not Found"
        )
        assert await page.inner_text("#node-error pre") == "Event stream 'no-such-stream' was not found."
