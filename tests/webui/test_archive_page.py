"""The Admin UI's Archive page (issue 37): the archive, its retention policy and checkpoint, the archiver's
upload lag and each member's local chunk files against its archive-only chunks, from the same shaping as
the dashboard's Archive tab (evdb/archive/figures.py); in real Chromium, and its access rule."""

from __future__ import annotations

import logging
import time

import httpx
from webui_helpers import ADMIN, OPS, SCREENSHOTS, log_in, node_options, write_orders

from evdb.archive.archiver import Archiver, DatabaseChunks
from evdb.archive.filesystem import FileSystemStore
from evdb.licensing.issuers import issue_demo_license
from evdb.node import Node
from evdb.webui import views
from evdb.webui.routes import _human_bytes

CHUNK = 65536


def _archived_node(tmp_path) -> Node:
    (tmp_path / "archive").mkdir()
    (tmp_path / "node.yaml").write_text(
        f"Archive: {{Enabled: true, StorageType: FileSystem, FileSystem: {{Path: {tmp_path / 'archive'}}}, "
        "RetainAtLeast: {Days: 0, LogicalBytes: 65536}}\n"
    )
    options = node_options(
        tmp_path, "--license-key", issue_demo_license(time.time()), "--license-trusted-issuers", "demo",
        "--config", str(tmp_path / "node.yaml"),
    )  # fmt: skip
    return Node(options, name="archived")


async def _upload(node: Node, tmp_path) -> Archiver:
    """The node's completed chunks uploaded by an archiver beside it (in-process: a one-node cluster has
    no read-only replica to be its archiver)."""
    import asyncio

    archiver = Archiver(
        FileSystemStore(str(tmp_path / "archive")),
        DatabaseChunks(lambda: node.db, CHUNK),
        name="archiver",
        logger=logging.getLogger("test.webui.archive"),
    )

    def drain() -> None:
        while archiver.step():
            pass

    await asyncio.to_thread(drain)
    return archiver


async def test_the_archive_page_shows_the_archive_and_this_node_in_chromium(tmp_path, page):
    async with _archived_node(tmp_path) as node:
        for _ in range(6):  # about 3 chunks of 64 KiB, in appends smaller than a chunk
            await write_orders(node.db, streams=2, events=10, pad=1500)
        archiver = await _upload(node, tmp_path)
        assert archiver.checkpoint >= 2 * CHUNK
        async with httpx.AsyncClient(base_url=node.http_url, timeout=30) as http:
            answer = await http.get("/web/fragments/archive", auth=ADMIN)
            assert answer.status_code == 200, answer.text
            html = answer.text
            assert str(tmp_path / "archive") in html
            assert "at least 0 days and 64.0 KiB of log kept locally" in html
            assert f"{archiver.checkpoint:,}" in html and "this node" in html
            assert "no member reports one" in html  # the archiver runs on a read-only replica
            assert (await http.get("/web/fragments/archive", auth=OPS)).status_code == 200
            created = await http.post(
                "/users/",
                auth=ADMIN,
                json={"loginName": "reader", "fullName": "R", "groups": [], "password": "pw"},
            )
            assert created.status_code == 201, created.text
            assert (await http.get("/web/fragments/archive", auth=("reader", "pw"))).status_code == 403
        await log_in(page, node.http_url)
        await page.click("#nav a[data-section=archive]")
        await page.wait_for_selector("#archive-location")
        assert await page.inner_text("#archive-location") == str(tmp_path / "archive")
        row = await page.inner_text("tr.archive-row.self")
        assert "this node" in row and "0 chunks" in row and "hits" in row, row
        await page.wait_for_timeout(1200)  # a poll replaced the figures: still there, no script error
        assert (
            await page.inner_text("#archive-retention") == "at least 0 days and 64.0 KiB of log kept locally"
        )
        await page.screenshot(path=str(SCREENSHOTS / "admin-archive.png"), full_page=True)


async def test_a_node_without_the_archive_says_so(node):
    async with httpx.AsyncClient(base_url=node.http_url, auth=ADMIN, timeout=30) as http:
        answer = await http.get("/web/fragments/archive")
    assert answer.status_code == 200
    assert "No member reports an archive" in answer.text
    assert "archive off on this node" in answer.text


def test_the_page_takes_the_archivers_figures_and_the_furthest_checkpoint_from_any_member():
    archive = {
        "location": "s3://b (eu-west-1)",
        "retainAtLeast": {"days": 30, "logicalBytes": 1 << 20},
        "archiveCheckpoint": 3 * CHUNK,
    }
    replica = {
        **archive,
        "archiveCheckpoint": 5 * CHUNK,
        "archiver": {
            "checkpoint": 5 * CHUNK,
            "pendingChunks": 1,
            "pendingBytes": CHUNK,
            "pendingSince": 1000.0,
        },
    }
    rows = [
        views.archive_row("node1", "Leader", True, {"es": {"archive": archive}}),
        views.archive_row("127.0.0.1:2114", "Follower", False, None, "GET /stats on 127.0.0.1:2114: refused"),
        views.archive_row("127.0.0.1:2115", "ReadOnlyReplica", False, {"es": {"archive": replica}}),
    ]
    page = views.archive_page(rows, _human_bytes, now=1000.0 + 185)
    assert page.shown is rows[0].figures and page.archive_checkpoint == 5 * CHUNK
    assert page.archiver is rows[2] and page.retention == "at least 30 days and 1.0 MiB of log kept locally"
    assert rows[1].problem.endswith("refused") and rows[1].figures is None
    assert page.upload_lag == "upload lag 1 chunk (64.0 KiB), waiting since 00:16:40 UTC"
