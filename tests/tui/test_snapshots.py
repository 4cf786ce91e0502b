"""SVG snapshots of the panels in representative states (pytest-textual-snapshot)."""

from __future__ import annotations

import json

import pytest

from evdb.clock import ManualClock
from tests.tui.conftest import PROGRESS, make_app
from tests.tui.fake_node import FakeMirror, FakeNode, mirror_status
from tests.tui.pilot import notices, until
from tui.state import CertificateState


def _cluster(running: bool) -> tuple[FakeNode, FakeNode]:
    leader = FakeNode(port=2113, state="Leader")
    follower = FakeNode(port=2114, state="Follower")
    leader.append(
        "$scavenges-old-1",
        "$scavengeCompleted",
        {"scavengeId": "old-1", "result": "Success", "timeTaken": "00:00:03.5000000", "spaceSaved": 1024},
    )
    leader.append("$scavenges", "$>", "0@$scavenges-old-1")
    if running:
        leader.scavenge_id = "sc-1"
        leader.progress = PROGRESS
    return leader, follower


@pytest.mark.parametrize(
    ("name", "running", "keys", "readonly"),
    [
        ("scavenge-running", True, (), False),
        ("chunks", True, ("2",), False),
        ("idle-readonly", False, (), True),
    ],
)
def test_panel_snapshots(snap_compare, name, running, keys, readonly):
    app = make_app(*_cluster(running), readonly=readonly)

    async def before(pilot):
        await app.poll_all()
        await app.poll_all()
        for key in keys:
            await pilot.press(key)
        await pilot.pause()

    assert snap_compare(app, terminal_size=(150, 40), run_before=before)


def _extended_cluster() -> tuple[FakeNode, FakeNode, FakeNode, FakeMirror]:
    """Three nodes mid auto-scavenge cycle, with evdb's /admin/certificates, and a mirror."""
    from tests.tui.test_cycle_certs_mirror import NOW, certificates_body, iso, progress_body

    nodes = (
        FakeNode(port=2113, state="Leader"),
        FakeNode(port=2114, state="Follower"),
        FakeNode(port=2115, state="Follower"),
    )
    for node in nodes:
        node.auto_scavenge = {
            "state": "InProgress",
            "schedule": "0 6 * * 6",
            "timeUntilNextCycle": "00:00:00.0000000",
        }
        node.auto_scavenge_progress = progress_body()
        node.certificates = certificates_body()
    nodes[2].certificates = certificates_body(
        time=iso(NOW - 60), trigger="SIGHUP", result="Failed", error="The private key file does not exist."
    )
    mirror = FakeMirror(
        status=mirror_status(
            state="catching-up",
            lagBytes=3 * 1024 * 1024,
            lagSeconds=1.5,
            caughtUp=False,
            eventsPerSecond=812.5,
            updated=iso(NOW - 1),
        )
    )
    return (*nodes, mirror)


@pytest.mark.parametrize(("name", "keys"), [("auto-scavenge-cycle", ("3",)), ("certificates", ("5",))])
def test_extension_panel_snapshots(snap_compare, name, keys):
    *nodes, mirror = _extended_cluster()
    app = make_app(*nodes, fake_mirrors=(mirror,), mirrors=[mirror.url], clock=ManualClock())

    async def before(pilot):
        await app.poll_all()
        await app.poll_all()
        for key in keys:
            await pilot.press(key)
        await pilot.pause()

    assert snap_compare(app, terminal_size=(150, 40), run_before=before)


# -- every panel, at 80×24, 100×30 and 200×55, in a normal and an error state -------------------------
SIZES = {"80x24": (80, 24), "100x30": (100, 30), "200x55": (200, 55)}
#: the key that shows each panel (e: the event browser)
PANELS = {
    "scavenge": "1",
    "chunks": "2",
    "auto": "3",
    "backup": "4",
    "certs": "5",
    "logs": "6",
    "activity": "7",
    "archive": "8",
    "events": "e",
}


def _world(error: bool, log_dir) -> tuple[FakeNode, FakeNode, FakeNode]:
    """A local cluster of three named nodes, node1 leading and doing every job: a scavenge to a new
    point, a backup, an auto-scavenge cycle; history of two nodes; events to browse."""
    from tests.tui.test_cycle_certs_mirror import certificates_body, progress_body
    from tests.tui.test_truth import _run, finished_backup

    nodes = (
        FakeNode(port=2113, state="Leader", writer_checkpoint=268436927),
        FakeNode(port=2114, state="Follower", writer_checkpoint=268436927),
        FakeNode(port=2115, state="Follower", writer_checkpoint=268000000),
    )
    for node in nodes:
        _run(node, "3fa21c0d-9e8b-4a65-8c1b-2d3e4f5a6b7c", "127.0.0.1:2114")
        _run(node, "6c1e9a2b-44d0-4e8f-9b3a-0f1e2d3c4b5a", "127.0.0.1:2113", result="Stopped")
        node.auto_scavenge = {"state": "InProgress", "schedule": "0 6 * * 6", "timeUntilNextCycle": None}
        node.auto_scavenge_progress = progress_body()
        node.certificates = certificates_body()
    from tests.tui.test_archive_panel import archiver_figures, es_archive

    nodes[0].archive, nodes[1].archive = es_archive(), es_archive(archivedOnlyChunks=0, localChunkFiles=13)
    nodes[2].archive = es_archive(archiver=archiver_figures())
    leader = nodes[0]
    if error:  # node1's calls to node3 are refused: node3 presents a certificate of another CA
        leader.certificates["peerErrors"] = [
            {
                "peer": "127.0.0.1:2115",
                "reason": "certificate validation error: the other node's certificate does not chain to a "
                "trusted root of this node",
                "certificate": True,
                "since": "2023-11-14T22:12:50+00:00",
                "failures": 12,
            }
        ]
    for i in range(25):
        leader.append("orders-1", "OrderPlaced", {"order": i, "total": 10 * i})
    leader.scavenge_id = "sc-1"
    point = {"number": 4, "position": 268436927, "effectiveNow": 0, "threshold": 4, "origin": "new"}
    leader.progress = {**PROGRESS, "scavengePoint": point}
    leader.backup = finished_backup(
        state="running",
        seconds=None,
        elapsedSeconds=4.0,
        step=4,
        part="full",
        stepName="copy the chunk files",
    )
    leader.backup.update(
        filesDone=1, filesTotal=3, bytesDone=1 << 20, bytesTotal=3 << 20, bytesPerSecond=1 << 19
    )
    del leader.backup["seconds"], leader.backup["chaser"]
    lines = [
        {"@t": "2023-11-14T22:13:01.000000Z", "@l": "Information", "@m": "SCAVENGING: Scavenge Started."},
        {"@t": "2023-11-14T22:13:05.000000Z", "@l": "Information", "@m": "Reloading the configuration"},
    ]
    if error:
        lines.append(
            {"@t": "2023-11-14T22:13:09.000000Z", "@l": "Error", "@m": "certificate chain validation failed"}
        )
    (log_dir / "log-20231114.json").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return nodes


def _break(nodes: tuple[FakeNode, FakeNode, FakeNode]) -> None:
    """After a good poll: node1 answers 500 where a leader is needed, its backup failed, node2 is in an
    election, node3 is down."""
    leader, second, third = nodes
    leader.answers[("GET", "/admin/scavenge/progress")] = (500, "The node is electing a leader")
    leader.answers[("GET", "/auto-scavenge/status")] = (500, '{"detail": "No leader node was found"}')
    leader.answers[("POST", "/admin/reloadconfig")] = (500, "could not load the certificate /certs/node.crt")
    leader.backup = {
        **leader.backup,
        "state": "failed",
        "elapsedSeconds": 5.0,
        "error": "A scavenge (sc-1) is running on the source node; a file-copy backup must not overlap it. "
        "Stop it first, or give --stop-scavenge to stop it and start it again after the backup.",
    }
    second.state = "Unknown"
    second.answers[("GET", "/stats")] = (500, "The node is reopening its database")
    third.up = False


@pytest.mark.parametrize("panel", list(PANELS))
@pytest.mark.parametrize("state", ["normal", "error"])
@pytest.mark.parametrize("size", list(SIZES))
def test_every_panel(snap_compare, tmp_path, size, state, panel):
    from tests.tui.test_truth import named_app

    clock = ManualClock()
    log_dir = tmp_path / "node1"
    log_dir.mkdir()
    nodes = _world(state == "error", log_dir)
    app = named_app(*nodes, clock=clock, log_dirs=[str(log_dir)])

    async def before(pilot):
        await app.poll_all()
        for i, node in enumerate(app.state.ordered()):  # what their TLS handshakes showed
            node.certificate = CertificateState(
                subject=f"CN=eventstoredb-node,O=evdb,OU=node{i + 1}",
                issuer="CN=evdb CA" if i < 2 or state == "normal" else "CN=other CA",
                not_after=clock.time() + (400 if i < 2 else 20) * 86400,
                verified=i < 2 or state == "normal",
                error=None if i < 2 or state == "normal" else "unable to get local issuer certificate",
                read_at=clock.time(),
            )
        app.render_panels(force=True)
        if state == "error":
            _break(nodes)
            clock.advance(9)
            await app.poll_all()
        app.tick()
        await pilot.pause()  # a notice is a message: handled before it is cleared
        app.clear_notifications()  # the toasts (a backup's end) are tested in test_truth.py
        if panel == "activity":
            await pilot.press("l")
            await pilot.pause()
            await pilot.click("#send")
            # the dialog's answer reaches the app a message later (only then is the call's worker started)
            # and a notice is a message too: on a busy machine the notices were cleared before the call's
            # came, which then showed in the screenshot
            await until(pilot, lambda: notices(app), "the reload's notice")
            await app.workers.wait_for_complete()
            await pilot.pause()
            app.clear_notifications()
        await pilot.press(PANELS[panel])
        await pilot.pause()
        if panel == "events":
            name = app.screen.query_one("#stream-name")
            stream = "no-such-stream" if state == "error" else "orders-1"
            name.value = stream
            name.focus()
            await pilot.press("enter")
            # the read's answer comes in a worker: on a busy machine one pause was not enough
            screen = app.screen
            await until(
                pilot,
                lambda: getattr(screen, "page", None) is not None and screen.page.stream == stream,
                "the events page's answer",
            )
            await pilot.pause()
        await pilot.pause()

    assert snap_compare(app, terminal_size=SIZES[size], run_before=before)
