"""SVG snapshots of the panels in representative states (pytest-textual-snapshot)."""

from __future__ import annotations

import pytest

from tests.tui.conftest import PROGRESS, make_app
from tests.tui.fake_node import FakeNode


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
