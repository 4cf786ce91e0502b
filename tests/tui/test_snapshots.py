"""SVG snapshots of the panels in representative states (pytest-textual-snapshot)."""

from __future__ import annotations

import pytest

from evdb.clock import ManualClock
from tests.tui.conftest import PROGRESS, make_app
from tests.tui.fake_node import FakeMirror, FakeNode, mirror_status


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
