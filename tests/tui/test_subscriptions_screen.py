"""The dashboard's persistent subscriptions screen (S) on fake nodes: the leader's groups, consumers, lag,
in flight and parked; a follower's answer and the leader's groups beside it; the confirmed replay of
parked messages; stale marking; reading only while the screen is open; SVG snapshots at 80×24."""

from __future__ import annotations

import io

import pytest
from rich.console import Console
from textual.widgets import Button, Static

from evdb.clock import ManualClock
from tests.tui.fake_node import FakeNode, FakeSubscriptions, subscription_group
from tests.tui.pilot import cluster_app, notices, ready, text_of, until
from tui.dialogs import ConfirmCall
from tui.subscriptions import SubscriptionsScreen


def _cluster(evdb: bool = True) -> tuple[FakeNode, FakeNode, FakeNode, FakeSubscriptions]:
    subs = FakeSubscriptions(
        [
            subscription_group("$all", "audit", strategy="Pinned", known=4096, checkpointed=1024),
            subscription_group("orders-1", "workers", parked=2, in_flight=(1, 2)),
            subscription_group("payments", "ledger", known=None, checkpointed=None, status="CatchingUp"),
        ]
    )
    nodes = (
        FakeNode(port=2113, state="Leader", evdb=evdb),
        FakeNode(port=2114, state="Follower", evdb=evdb),
        FakeNode(port=2115, state="Follower", evdb=evdb),
    )
    for node in nodes:
        node.subscriptions = subs
    return (*nodes, subs)


def _resign(nodes: tuple[FakeNode, ...], new_leader: FakeNode) -> None:
    for node in nodes:
        node.state = "Leader" if node is new_leader else "Follower"


async def _open(app, pilot) -> SubscriptionsScreen:
    await ready(app, pilot)
    await pilot.press("S")
    await pilot.pause()
    screen = app.screen
    assert isinstance(screen, SubscriptionsScreen)
    await app.poll_all()
    screen.show()
    await pilot.pause()
    return screen


WIDTH = 116


def _panel(app) -> str:
    """The subscriptions screen's text (under a confirmation too), as 116 columns show it."""
    screen = next(s for s in reversed(app.screen_stack) if isinstance(s, SubscriptionsScreen))
    console = Console(width=WIDTH, record=True, color_system=None, file=io.StringIO())
    console.print(screen.query_one("#subscriptions-panel", Static).content)
    return console.export_text()


async def test_the_leader_s_groups_consumers_lag_and_parked():
    leader, *followers, _subs = _cluster()
    app, _ = cluster_app(leader, *followers)
    async with app.run_test(size=(120, 40)) as pilot:
        await _open(app, pilot)
        text = _panel(app)
        assert "3 groups on node1 (Leader) · 2 parked messages" in text
        rows = {cells[0]: cells for cells in (line.lstrip("▶ ").split() for line in text.splitlines()[2:5])}
        assert rows["$all"][1:8] == ["audit", "Live", "Pinned", "0", "0", "0", "3.0"]  # 3 KiB of the log
        assert " ".join(rows["$all"][9:]) == "C:1024/P:1024 → C:4096/P:4096"
        # consumers, in flight, parked, lag, checkpointed → last known
        assert rows["orders-1"][1:] == [
            "workers",
            "Live",
            "RoundRobin",
            "2",
            "3",
            "2",
            "8",
            "events",
            "12",
            "→",
            "20",
        ]
        assert rows["payments"][1:] == [
            "ledger",
            "CatchingUp",
            "RoundRobin",
            "0",
            "0",
            "0",
            "–",
            "–",
            "→",
            "–",
        ]
        # the chosen group (the first) in detail; ↓ chooses the next
        assert "$all / audit  Pinned" in text and "no consumer is connected" in text
        await pilot.press("down")
        text = _panel(app)
        assert "orders-1 / workers  RoundRobin  ·  Live" in text
        assert "checkpoint 12, last known 20: 8 events behind" in text
        assert "parked 2  (p replays them)" in text
        consumers = [line.split() for line in text.splitlines() if "127.0.0.1:5000" in line]
        assert consumers == [
            ["127.0.0.1:50000", "admin", "1", "9", "0", "10", "worker-1"],
            ["127.0.0.1:50001", "admin", "2", "8", "0", "11", "worker-2"],
        ]


async def test_a_follower_answers_that_the_leader_serves_them_and_the_leader_s_groups_are_shown():
    leader, second, third, _subs = _cluster()
    app, _ = cluster_app(leader, second, third)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await _open(app, pilot)
        await pilot.press("n")  # node2, a follower
        await app.poll_all()
        screen.show()
        text = _panel(app)
        assert (
            "node2 (Follower) does not serve persistent subscriptions: HTTP 503 from /subscriptions: " in text
        )
        assert "Server Is Not Ready" in text
        assert "served by the leader: as node1 (Leader) reports them" in text
        assert "3 groups on node1 (Leader)" in text
        # the leader resigns: node3 leads, and the groups (kept in the log) are its now
        _resign((leader, second, third), third)
        await app.poll_all()
        screen.show()
        text = _panel(app)
        assert "as node3 (Leader) reports them" in text and "3 groups on node3 (Leader)" in text
        # no leader at all: said so, nothing is made up
        _resign((leader, second, third), FakeNode(port=1))
        await app.poll_all()
        screen.show()
        assert "no node leads now" in _panel(app) and "groups on" not in _panel(app)


async def test_a_kurrentdb_follower_forwards_and_its_answer_is_shown():
    leader, second, third, _subs = _cluster(evdb=False)
    app, _ = cluster_app(leader, second, third)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await _open(app, pilot)
        await pilot.press("n")
        screen.show()
        text = _panel(app)
        assert "does not serve" not in text and "3 groups on node2 (Follower)" in text


async def test_replay_parked_is_confirmed_shows_the_exact_call_and_goes_to_the_leader():
    leader, second, third, subs = _cluster()
    app, cluster = cluster_app(leader, second, third)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await _open(app, pilot)
        await pilot.press("n")  # a follower is selected: the call goes to the leader, which serves them
        await pilot.press("down")
        screen.show()
        await pilot.press("p")
        await pilot.pause()
        dialog = app.screen
        assert isinstance(dialog, ConfirmCall)
        assert app.focused is dialog.query_one("#cancel", Button)
        request = str(dialog.query_one("#request", Static).content)
        assert request.splitlines()[:3] == [
            "POST http://127.0.0.1:2113/subscriptions/orders-1/workers/replayParked",
            "Authorization: Basic <admin:•••••>",
            "Accept: application/json",
        ]
        await pilot.press("escape")  # cancelled: nothing sent
        await pilot.pause()
        assert subs.replayed == [] and cluster.journal == []
        await pilot.press("p")
        await pilot.pause()
        await pilot.click("#send")
        await app.workers.wait_for_complete()
        assert subs.replayed == [("orders-1", "workers")]
        assert cluster.journal == ["POST http://127.0.0.1:2113/subscriptions/orders-1/workers/replayParked"]
        assert app.state.activity[-1].status == 200
        await app.poll_all()
        screen.show()
        await until(pilot, lambda: "parked 0" in _panel(app), "the parked count at 0")
        assert "0 parked messages" in _panel(app)


@pytest.mark.parametrize(
    ("readonly", "group_index", "reason"),
    [
        (True, 1, "Replay parked: read-only mode"),
        (False, 0, "Replay parked: $all / audit has no parked message (as node1 reports)"),
    ],
)
async def test_replay_that_cannot_act_says_why(readonly, group_index, reason):
    leader, second, third, subs = _cluster()
    app, cluster = cluster_app(leader, second, third, readonly=readonly)
    async with app.run_test(size=(120, 40)) as pilot:
        await _open(app, pilot)
        for _ in range(group_index):
            await pilot.press("down")
        await pilot.press("p")
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmCall)
        assert reason in notices(app)
        assert subs.replayed == [] and cluster.journal == []


async def test_a_failed_read_keeps_the_figures_marked_stale():
    clock = ManualClock()
    leader, second, third, _subs = _cluster()
    app, _ = cluster_app(leader, second, third, clock=clock)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await _open(app, pilot)
        leader.answers[("GET", "/subscriptions")] = (500, "The node is electing a leader")
        clock.advance(7)
        await app.poll_all()
        screen.show()
        text = _panel(app)
        assert "⚠ stale 7s: HTTP 500 from /subscriptions: The node is electing a leader" in text
        assert "3 groups on node1 (Leader)" in text  # the last figures read
        assert "subscriptions stale" in text_of(app, "cluster")  # the cluster table's health says so


async def test_unknown_before_any_good_read_and_not_available_on_a_node_without_them():
    leader, second, third, _subs = _cluster()
    leader.answers[("GET", "/subscriptions")] = (401, "Not authenticated")
    app, _ = cluster_app(leader, second, third)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await _open(app, pilot)
        assert "Persistent subscriptions: unknown: HTTP 401 from /subscriptions: Not authenticated" in _panel(
            app
        )
        del leader.answers[("GET", "/subscriptions")]
        leader.subscriptions = None  # a node without the endpoint (404)
        await app.poll_all()
        screen.show()
        assert "not available on this node (node1 has no /subscriptions)" in _panel(app)


async def test_subscriptions_are_read_only_while_the_screen_is_open():
    leader, second, third, _subs = _cluster()
    app, _ = cluster_app(leader, second, third)

    def reads() -> int:
        return sum(
            1 for n in (leader, second, third) for r in n.requests if r.url.path.startswith("/subscriptions")
        )

    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        assert reads() == 0
        assert any(key == "S" and "Persistent subscriptions" in what for key, what, _ in app.help_rows())
        await _open(app, pilot)
        opened = reads()
        assert opened >= 3 + 3  # every node's list, and the leader's three groups' info
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, SubscriptionsScreen)
        await app.poll_all()
        assert reads() == opened


@pytest.mark.parametrize("follower", [False, True], ids=["leader", "follower"])
def test_snapshot_subscriptions_at_80x24(snap_compare, follower):
    leader, second, third, _subs = _cluster()
    app, _ = cluster_app(leader, second, third, clock=ManualClock())

    async def before(pilot):
        await _open(app, pilot)
        if follower:
            await pilot.press("n")
        await pilot.press("down")
        app.clear_notifications()
        app.screen.show()
        await pilot.pause()

    assert snap_compare(app, terminal_size=(80, 24), run_before=before)


async def test_a_new_leader_not_serving_them_yet_is_unknown_not_a_follower_s_answer():
    leader, second, third, _subs = _cluster()
    app, _ = cluster_app(leader, second, third)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await _open(app, pilot)
        await pilot.press("n", "n")  # node3, a follower: its 503 is its answer, the leader's groups shown
        _resign((leader, second, third), third)
        third.answers[("GET", "/subscriptions")] = (503, "Server Is Not Ready")  # loading them still
        await app.poll_all()
        screen.show()
        text = _panel(app)
        assert "does not serve" not in text and "groups on" not in text
        assert "Persistent subscriptions: unknown: HTTP 503 from /subscriptions: Server Is Not Ready" in text
        del third.answers[("GET", "/subscriptions")]
        await app.poll_all()
        screen.show()
        assert "3 groups on node3 (Leader) · 2 parked messages" in _panel(app)
