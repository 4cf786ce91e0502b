"""The dashboard on a real local cluster, as ``evdb dashboard`` launches it (TLS, three node processes,
the user's defaults): the newcomer's path from a fresh cluster to a finished scavenge on a follower,
counted in keystrokes and timed, and the node jobs (stop, start; restore refused while the node runs).
The restore itself and the followers-first routine on real nodes: scenarios/followers-first-restore.yaml."""

from __future__ import annotations

import argparse
import time

import pytest
from textual.widgets import Static

from evdb.cluster.launcher import LocalCluster
from evdb.dashboard_cli import prepare, register_cli
from tests.tui.pilot import text_of, until
from tui.app import DashboardApp
from tui.dialogs import ConfirmCall, ScavengeDialog

pytestmark = pytest.mark.slow

#: the goals of issue 22 for a newcomer: a scavenge on a follower of a fresh local cluster, after demo
#: data, watched to its end
KEYSTROKE_GOAL = 12
SECONDS_GOAL = 120.0


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("dashboard") / "local-cluster"
    try:
        yield folder
    finally:
        cluster = LocalCluster(folder)
        if cluster.exists():
            cluster.down(timeout=10, log=lambda _: None)


def dashboard(data_dir) -> tuple[DashboardApp, LocalCluster]:
    """What ``evdb dashboard --data DIR`` does before its screen opens (the README's first command,
    with the folder of this test instead of the user's)."""
    parser = argparse.ArgumentParser()
    register_cli(parser.add_subparsers())
    prepared = prepare(parser.parse_args(["dashboard", "--data", str(data_dir)]))
    assert not isinstance(prepared, int), f"evdb dashboard exited {prepared}"
    app, cluster = prepared
    assert cluster is not None
    return app, cluster


def settled(app: DashboardApp) -> bool:
    nodes = app.state.ordered()
    return (
        len(nodes) == 3
        and all(n.reachable for n in nodes)
        and sorted(n.role for n in nodes) == ["Follower", "Follower", "Leader"]
    )


async def test_a_newcomer_scavenges_a_follower_after_a_demo_load_in_few_keys(data_dir, capsys):
    started = time.monotonic()
    app, _ = dashboard(data_dir)  # a fresh local cluster: created, started, a leader elected
    launched = time.monotonic() - started
    keys: list[str] = []
    async with app.run_test(size=(120, 36)) as pilot:

        async def press(*names: str) -> None:
            keys.extend(names)
            await pilot.press(*names)
            await pilot.pause()

        await until(pilot, lambda: settled(app), "every node polled, one leading", 30)
        assert "Nothing to scavenge yet? Press d to write demo data." in text_of(app, "scavenge-panel")
        await press("d")
        assert isinstance(app.screen, ConfirmCall)
        await press("tab", "enter")  # Cancel has the focus: tab to Send
        await until(pilot, lambda: app.state.demo is not None, "the demo load", 60)
        if app.state.node().role != "Follower":  # three nodes, one leader: the next one follows
            await press("n")
        node = app.state.node()
        assert node.role == "Follower"
        await press("s")
        assert isinstance(app.screen, ScavengeDialog)
        await press("enter")  # the dialog's defaults
        assert isinstance(app.screen, ConfirmCall)
        await press("tab", "enter")
        sc = node.scavenge
        await until(
            pilot,
            lambda: sc.shown_id and not sc.running and sc.result == "Success" and not sc.starting_id,
            "the scavenge to finish",
            90,
        )
        # what the operator sees: the panel once the poll that read the end has finished
        await until(pilot, lambda: "Last run: Completed" in text_of(app, "scavenge-panel"), "the panel", 10)
        panel = text_of(app, "scavenge-panel")
        took = time.monotonic() - started
    assert "Last run: Completed" in panel and "✔ Cleaning" in panel
    assert sc.bytes_reclaimed > 0, panel  # the demo data gave it something to reclaim
    assert len(keys) < KEYSTROKE_GOAL, keys
    assert took < SECONDS_GOAL
    with capsys.disabled():
        print(
            f"\nnewcomer path: {len(keys)} keystrokes ({' '.join(keys)}); {took:.1f} s from evdb dashboard "
            f"on a fresh cluster to the finished scavenge (launch {launched:.1f} s); "
            f"reclaimed {sc.bytes_reclaimed:,} bytes"
        )


async def test_stop_and_start_a_node_from_the_keys_and_restore_is_refused_while_it_runs(data_dir):
    app, cluster = dashboard(data_dir)
    async with app.run_test(size=(120, 36)) as pilot:
        await until(pilot, lambda: settled(app), "every node polled, one leading", 60)
        while app.state.node().role != "Follower":
            await pilot.press("n")
        node = app.state.node()
        name = node.name
        pid = cluster.info()["nodes"][int(name.removeprefix("node")) - 1]["pid"]
        await pilot.press("B")
        await pilot.pause()
        assert app.screen is app.screen_stack[0]  # refused: no dialog
        refusal = (
            f"Restore node from a backup (local cluster): {name} is running (pid {pid}): stop it first (o)"
        )
        assert refusal in [n.message for n in app._notifications]

        await pilot.press("o")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmCall)
        shown = str(app.screen.query_one("#request", Static).content)
        assert shown == f"$ evdb cluster stop-node {name} --data {cluster.data_dir}"
        await pilot.press("tab", "enter")
        await until(pilot, lambda: app.state.activity[-1].outcome == "done", f"{name} to stop", 30)
        assert not cluster.is_running(name)
        assert f"Stopped {name}" in app.state.activity[-1].body
        await until(pilot, lambda: node.reachable is False, f"the dashboard to see {name} down", 10)
        assert app.why_not("start_node") is None and app.why_not("stop_node") == f"{name} is not running"

        await pilot.press("u")
        await pilot.pause()
        assert f"$ evdb cluster start-node {name} --data {cluster.data_dir}" in str(
            app.screen.query_one("#request", Static).content
        )
        await pilot.press("tab", "enter")
        await until(pilot, lambda: app.state.activity[-1].outcome == "done", f"{name} to start", 70)
        assert app.state.activity[-1].body.endswith(f"{name} is Follower"), app.state.activity[-1]
        await until(pilot, lambda: node.reachable and node.role == "Follower", f"{name} to follow again", 60)
        assert node.pid == cluster.info()["nodes"][int(name.removeprefix("node")) - 1]["pid"] != pid
