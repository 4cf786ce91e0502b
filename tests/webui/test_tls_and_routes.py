"""The Admin UI in TLS mode (real Chromium over HTTPS), and its routes' rules without a browser:
anonymous page, authenticated parts, the node's access rules and parameter errors, security headers."""

from __future__ import annotations

import httpx
from webui_helpers import ADMIN, OPS, log_in, write_orders

from evdb.node import Node
from evdb.options import load_options
from evdb.tls import create_ca, create_node_certificate


async def test_the_ui_over_tls(tmp_path, page):
    ca_cert, ca_key = create_ca(tmp_path / "ca")
    node_cert, node_key = create_node_certificate(
        ca_cert, ca_key, tmp_path / "node", ip_addresses=["127.0.0.1"]
    )
    options = load_options(
        [
            "--db", str(tmp_path / "db"), "--log", str(tmp_path / "log"), "--http-port", "0",
            "--chunk-size", "65536", "--stats-period-sec", "0",
            "--certificate-file", str(node_cert), "--certificate-private-key-file", str(node_key),
            "--trusted-root-certificates-path", str(ca_cert),
        ],
        {},
    )  # fmt: skip
    async with Node(options, name="tls") as node:
        assert node.http_url.startswith("https://")
        await log_in(page, node.http_url)
        await page.wait_for_selector("#node-role")
        assert "(TLS)" in await page.inner_text("#node")
        await page.click("#nav a[data-section=admin]")
        await page.wait_for_selector("#current-scavenge[data-scavenge-state=idle]")


async def test_page_is_anonymous_and_parts_need_a_login(node):
    async with httpx.AsyncClient(base_url=node.http_url, timeout=30) as anon:
        page = await anon.get("/web/")
        assert page.status_code == 200 and 'id="login"' in page.text
        assert "default-src 'self'" in page.headers["Content-Security-Policy"]
        assert (await anon.get("/web", follow_redirects=False)).headers["Location"] == "/web/"
        script = await anon.get("/web/static/app.js")
        assert script.status_code == 200 and script.headers["Content-Type"].startswith("text/javascript")
        assert (await anon.get("/web/static/../conftest.py")).status_code == 404
        for path in ("/web/fragments/cluster", "/web/fragments/admin", "/web/fragments/streams/orders"):
            refused = await anon.get(path)
            assert refused.status_code == 401 and refused.headers["WWW-Authenticate"].startswith("Basic")
            # the page's own requests get no challenge, so the browser shows the page's login form
            quiet = await anon.get(path, headers={"X-Requested-With": "XMLHttpRequest"})
            assert quiet.status_code == 401 and "WWW-Authenticate" not in quiet.headers
    async with httpx.AsyncClient(base_url=node.http_url, auth=("admin", "wrong"), timeout=30) as wrong:
        assert (await wrong.get("/web/fragments/cluster")).status_code == 401


async def test_parts_follow_the_node_s_access_rules_and_check_parameters(node):
    await write_orders(node.db, streams=3, events=5, pad=10)
    async with httpx.AsyncClient(base_url=node.http_url, auth=ADMIN, timeout=30) as admin:
        created = await admin.post(
            "/users/", json={"loginName": "reader", "fullName": "R", "groups": [], "password": "pw"}
        )
        assert created.status_code == 201
        listing = await admin.get("/web/fragments/streams")
        assert listing.status_code == 200 and "order-2" in listing.text
        page = await admin.get("/web/fragments/streams/order-1?count=2&from=3")
        assert page.status_code == 200
        assert 'data-event-number="3"' in page.text and 'data-event-number="2"' in page.text
        assert 'data-event-number="1"' not in page.text and 'data-event-number="4"' not in page.text
        assert "?from=1&amp;count=2" in page.text and "?from=4&amp;count=2" in page.text  # older, newer
        for query, message in (
            ("from=x", "'x' is not an event number."),
            ("count=0", "count must be between 1 and 200."),
            ("count=201", "count must be between 1 and 200."),
        ):
            bad = await admin.get(f"/web/fragments/streams/order-1?{query}")
            assert (bad.status_code, bad.text) == (400, message)
        bad = await admin.get("/web/fragments/streams?before=zz")
        assert bad.status_code == 400
        missing = await admin.get("/web/fragments/streams/nope")
        assert (missing.status_code, missing.text) == (404, "Event stream 'nope' was not found.")
        deleted = await admin.delete("/streams/order-0", headers={"Kurrent-HardDelete": "true"})
        assert deleted.status_code == 204
        assert (await admin.get("/web/fragments/streams/order-0")).status_code == 410
    async with httpx.AsyncClient(base_url=node.http_url, auth=("reader", "pw"), timeout=30) as reader:
        assert (await reader.get("/web/fragments/cluster")).status_code == 200
        assert (await reader.get("/web/fragments/streams/order-1")).status_code == 200
        for path in ("/web/fragments/admin", "/web/fragments/admin/current", "/web/fragments/streams"):
            refused = await reader.get(path)
            assert (refused.status_code, refused.text) == (403, "Access denied."), path
        assert (await reader.get("/web/fragments/streams/%24scavenges")).status_code == 403
    async with httpx.AsyncClient(base_url=node.http_url, auth=OPS, timeout=30) as ops:
        assert (await ops.get("/web/fragments/admin")).status_code == 200
