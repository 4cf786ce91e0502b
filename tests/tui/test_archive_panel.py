"""The Archive tab (8): the archive, the archiver's upload lag, the retention policy and per node its local
files against what it reads from the archive only and what the next scavenge frees, from each node's
``GET /stats`` (``es.archive``); stale figures marked; at 200×50 and at 80×24."""

from __future__ import annotations

from typing import Any

import pytest

from evdb.archive.figures import archive_figures
from evdb.clock import ManualClock
from tests.tui.fake_node import FakeNode
from tests.tui.test_truth import flat, named_app, screen_text, text_of

KIB = 1024


def es_archive(**changes: Any) -> dict[str, Any]:
    """A node's ``es.archive`` as evdb/archive/retention.py writes it (64 KiB chunks, 10 archived)."""
    body: dict[str, Any] = {
        "location": "/srv/evdb-archive",
        "retainAtLeast": {"days": 0, "logicalBytes": 128 * KIB},
        "localChunkFiles": 3,
        "localBytes": 3 * 64 * KIB + 300,
        "localLogicalBytes": 150 * KIB,
        "archivedOnlyChunks": 9,
        "archiveCheckpoint": 640 * KIB,
        "archivedLogicalBytes": 640 * KIB,
        "nextScavengeFrees": {"chunkFiles": 1, "bytes": 64 * KIB + 100},
        "readCache": {"bytes": 64 * KIB, "downloads": 2, "hits": 7},
    }
    body.update(changes)
    return body


def archiver_figures(**changes: Any) -> dict[str, Any]:
    figures: dict[str, Any] = {
        "checkpoint": 640 * KIB,
        "pendingChunks": 2,
        "pendingBytes": 128 * KIB,
        "pendingSince": 1_700_000_000.0 - 125,
        "uploaded": 10,
        "kept": 0,
        "failures": 0,
        "lastError": None,
    }
    figures.update(changes)
    return figures


def cluster() -> tuple[FakeNode, ...]:
    nodes = (
        FakeNode(port=2113, state="Leader"),
        FakeNode(port=2114, state="Follower"),
        FakeNode(port=2115, state="ReadOnlyReplica"),
    )
    nodes[0].archive = es_archive()
    nodes[1].archive = es_archive(
        archivedOnlyChunks=0, localChunkFiles=13, nextScavengeFrees={"chunkFiles": 0, "bytes": 0}
    )
    nodes[2].archive = es_archive(archiver=archiver_figures())
    for node in nodes:
        node.answers[("GET", "/info/options")] = (200, '[{"name": "ChunkSize", "value": 65536}]')
    return nodes


def test_the_figures_are_read_leniently_and_only_from_an_archive_body():
    figures = archive_figures({"es": {"archive": es_archive(archiver=archiver_figures())}})
    assert figures is not None and figures.archive_checkpoint == 640 * KIB
    assert figures.archiver is not None and figures.archiver.pending_chunks == 2
    assert (figures.frees_chunk_files, figures.cache_hits, figures.retain_days) == (1, 7, 0)
    down = archive_figures(es_archive(archiveCheckpoint=-1, archiveError="s3://b at x: unreachable"))
    assert down is not None and down.archive_checkpoint is None and down.archive_error
    assert archive_figures({"es": {"writer": {}}}) is None  # the archive is off
    assert archive_figures({"es": {"archive": {"localBytes": "x"}}}) is None  # not the archive's shape
    assert archive_figures([1]) is None
    older = archive_figures({"location": "/a"})  # an older node: unknown figures are None, not 0
    assert older is not None and older.local_bytes is None and older.archiver is None


@pytest.mark.parametrize("size", [(200, 50), (80, 24)])
async def test_the_panel_shows_the_archive_the_archivers_lag_and_each_node(size):
    clock = ManualClock()
    nodes = cluster()
    app = named_app(*nodes, clock=clock)
    async with app.run_test(size=size) as pilot:
        await app.poll_all()
        await app.poll_all()
        await pilot.press("8")
        await pilot.pause()
        text = flat(text_of(app, "archive-panel", size[0] - 4))
        assert "Archive /srv/evdb-archive" in text
        assert "Retention at least 0 days and 128.0 KiB of log kept locally" in text
        assert "Archive checkpoint 655,360 (10 chunks archived)" in text
        assert (
            "Archiver node3: upload lag 2 chunks (128.0 KiB), waiting since 22:11:15 UTC · 10 uploaded"
            in text
        )
        assert "node1 3 files, 192.3 KiB 9 chunks 1 file, 64.1 KiB" in text, text
        assert "node2 13 files, 192.3 KiB 0 chunks 0 files, 0 B" in text
        if size[0] >= 100:
            assert "7 hits, 2 downloads" in text and "columns: widen" not in text
        else:  # the least important columns give way, and the panel says which
            assert "+1 column: widen (read cache)" in text
        shown = screen_text(app)
        assert "8 Archive" in shown and "node3" in shown
        # the archiver catches up; node2's /stats fails: its figures stay, marked stale with the answer
        nodes[2].archive = es_archive(archiver=archiver_figures(pendingChunks=0, pendingBytes=0, uploaded=12))
        nodes[1].answers[("GET", "/stats")] = (500, "boom")
        clock.advance(3)
        for collector in app.collectors.values():
            collector.full_poll_next = True
        await app.poll_all()
        await pilot.pause()
        text = flat(text_of(app, "archive-panel", size[0] - 4))
        assert "Archiver node3: caught up · 12 uploaded" in text
        assert "node2 ⚠ 13 files" in text
        assert "node2: ⚠ stale 3s: HTTP 500 from /stats: boom (last figures shown)" in text, text


async def test_an_archiver_failing_an_unreachable_archive_and_nodes_without_one_say_so():
    nodes = cluster()
    nodes[2].archive = es_archive(archiver=archiver_figures(failures=3, lastError="s3://b at x: 500"))
    nodes[0].archive = es_archive(archiveCheckpoint=-1, archiveError="s3://b at x: unreachable")
    nodes[1].archive = None
    app = named_app(*nodes)
    async with app.run_test(size=(120, 40)) as pilot:
        await app.poll_all()
        await pilot.press("8")
        await pilot.pause()
        text = flat(text_of(app, "archive-panel", 116))
        assert "failing (3 in a row, retrying): s3://b at x: 500" in text
        assert "node1: archive unreachable: s3://b at x: unreachable" in text
        assert "node2 archive off" in text
        for node in nodes:
            node.archive = None
        for collector in app.collectors.values():
            collector.full_poll_next = True
        await app.poll_all()
        await pilot.pause()
        assert "no node reports one (Archive: Enabled is off" in flat(text_of(app, "archive-panel", 116))


async def test_while_the_tab_is_shown_every_poll_reads_the_figures():
    nodes = cluster()
    app = named_app(*nodes, clock=ManualClock())
    async with app.run_test(size=(120, 40)) as pilot:
        await app.poll_all()
        await app.poll_all()  # /stats read at the first poll only (then every 5th)
        await pilot.press("8")
        await pilot.pause()
        nodes[2].archive = es_archive(archiver=archiver_figures(pendingChunks=0, pendingBytes=0, uploaded=12))
        await app.poll_all()  # the third poll: read because the tab is shown
        await pilot.pause()
        assert "Archiver node3: caught up · 12 uploaded" in flat(text_of(app, "archive-panel", 116))
        await pilot.press("1")
        await pilot.pause()
        reads = sum(r.url.path == "/stats" for r in nodes[2].requests)
        await app.poll_all()  # the fourth poll, the tab hidden: not read
        assert sum(r.url.path == "/stats" for r in nodes[2].requests) == reads
