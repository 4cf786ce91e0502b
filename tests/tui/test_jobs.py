"""Pilot tests of the dashboard's jobs beyond single calls, against fake nodes: cycle now (C), the demo
load (d), the followers-first cluster scavenge (F), and the keys and dialogs of the local node jobs
(o, u, B) with a local cluster's own files. The jobs on real node processes: test_local_cluster.py."""

from __future__ import annotations

import json

from textual.widgets import Input, Static

from evdb.clock import ManualClock
from evdb.cluster.launcher import LocalCluster
from tests.tui.fake_node import FakeNode
from tests.tui.pilot import cluster_app, notices, ready, text_of, until
from tui.app import CHANGING_ACTIONS, LOCAL_JOBS, DashboardApp
from tui.dialogs import ConfirmCall, HelpScreen, RestoreDialog
from tui.jobs import DEMO_EVENTS
from tui.state import RoutineState, RoutineStep


def shown_request(app: DashboardApp) -> str:
    return str(app.screen.query_one("#request", Static).content)


def three() -> tuple[FakeNode, FakeNode, FakeNode]:
    return (
        FakeNode(port=2113, state="Leader"),
        FakeNode(port=2114, state="Follower"),
        FakeNode(port=2115, state="Follower"),
    )


# -- cycle now -----------------------------------------------------------------------------------------
def _auto(node: FakeNode, state: str = "Waiting") -> None:
    node.auto_scavenge = {"state": state, "schedule": None, "timeUntilNextCycle": None}
    node.auto_scavenge_progress = {"status": "Idle", "members": [], "done": {}}


async def test_cycle_now_confirms_the_call_then_starts_a_cluster_scavenge():
    nodes = three()
    for node in nodes:
        _auto(node)
    app, cluster = cluster_app(*nodes)
    async with app.run_test(size=(160, 45)) as pilot:
        await ready(app, pilot)
        await pilot.press("C")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmCall)
        assert "POST http://127.0.0.1:2113/auto-scavenge/cycle-now" in shown_request(app)
        await pilot.click("#send")
        await app.workers.wait_for_complete()
        assert cluster.journal == ["POST http://127.0.0.1:2113/auto-scavenge/cycle-now"]
        assert app.state.activity[-1].status == 200
        await pilot.press("3")
        await pilot.pause()
        assert "started cluster scavenge cs-1 on 3 nodes" in text_of(app, "auto-panel")
        await app.poll_all()  # InProgress now: the key says why it cannot act
        await pilot.press("C")
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmCall)
        assert "Cycle now (auto-scavenge): a cluster scavenge is InProgress (as node1 says)" in notices(app)


async def test_cycle_now_shows_the_reason_of_the_nodes_400():
    nodes = three()
    for node in nodes:
        _auto(node)
    reason = "The cluster is not healthy: 2 of 3 cluster members are alive; waiting for every member"
    nodes[0].cycle_now_refusal = reason
    app, _ = cluster_app(*nodes)
    async with app.run_test(size=(160, 45)) as pilot:
        await ready(app, pilot)
        await pilot.press("C")
        await until(pilot, lambda: isinstance(app.screen, ConfirmCall), "the confirmation")
        await pilot.click("#send")
        # (the answer, its notice and the panel each come a message or a worker later: waited for,
        # never one pause hoped to be enough on a busy machine)
        await until(pilot, lambda: app.state.activity and app.state.activity[-1].status == 400, "the 400")
        # the reason in words, not a JSON string
        await until(pilot, lambda: f"→ 400 Bad Request\n{reason}" in notices(app), "the refusal's notice")
        await pilot.press("3")
        await until(
            pilot,
            lambda: f"refused by node1 (400): {reason}" in " ".join(text_of(app, "auto-panel").split()),
            "the auto-scavenge panel's refusal",
        )


async def test_cycle_now_is_refused_where_the_node_lacks_the_extension():
    node = FakeNode(port=2113, state="Leader")
    node.auto_scavenge = {"state": "Waiting", "schedule": None, "timeUntilNextCycle": None}
    app, cluster = cluster_app(node)  # no /auto-scavenge/progress: not evdb's
    async with app.run_test(size=(160, 45)) as pilot:
        await ready(app, pilot)
        await pilot.press("C")
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmCall)
        assert "cycle now is an evdb extension, which node1 does not have" in notices(app)
        assert cluster.journal == []


# -- demo load -----------------------------------------------------------------------------------------
async def test_demo_load_writes_through_the_selected_node_and_tells_what_a_scavenge_reclaims():
    nodes = three()
    app, _ = cluster_app(*nodes)
    async with app.run_test(size=(160, 45)) as pilot:
        await ready(app, pilot)
        await pilot.press("n", "d")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmCall)
        shown = shown_request(app)
        assert (
            "$ evdb demo-load --url http://127.0.0.1:2114 --events 20000 --user admin --password •••••"
            in shown
        )
        assert "changeit" not in shown
        await pilot.click("#send")
        await until(pilot, lambda: app.state.activity[-1].outcome == "done", "the demo load to end")
        follower = nodes[1]
        assert sum(follower.written.values()) == DEMO_EVENTS and len(follower.written) == 10
        assert all(stream.startswith("demo-") for stream in follower.written)
        assert {r.method for r in follower.requests if r.url.path.startswith("/streams/")} >= {
            "POST",
            "DELETE",
        }
        assert nodes[0].written == {}  # through the selected node only
        # (its notification says the same, but may have expired by now on a busy machine: the panel keeps it)
        text = " ".join(text_of(app, "scavenge-panel").split())
        assert "Demo data written through node2" in text and "a scavenge should reclaim about" in text
        assert app.state.node().job == ""
        await pilot.press("7")
        await pilot.pause()
        activity = text_of(app, "activity-panel")
        assert "evdb demo-load" in activity and "done" in activity


async def test_a_fresh_node_tells_how_to_get_something_to_scavenge():
    app, _ = cluster_app(*three())
    async with app.run_test(size=(160, 45)) as pilot:
        await ready(app, pilot)
        assert "Nothing to scavenge yet? Press d to write demo data." in text_of(app, "scavenge-panel")


# -- followers first -----------------------------------------------------------------------------------
def _swap_on_resign(leader: FakeNode, successor: FakeNode) -> None:
    def resign() -> None:
        leader.state, successor.state = "Follower", "Leader"

    leader.on_resign = resign


async def test_followers_first_scavenges_each_follower_then_resigns_and_scavenges_the_old_leader():
    nodes = three()
    for node in nodes:
        node.finish_after_reads = 2  # each scavenge is seen running, then ended
    _swap_on_resign(nodes[0], nodes[1])
    app, cluster = cluster_app(*nodes)
    async with app.run_test(size=(160, 45)) as pilot:
        await ready(app, pilot)
        await pilot.press("F")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmCall)
        shown = shown_request(app)
        query = "threads=1&threshold=0&throttlePercent=100&syncOnly=false"
        order = [
            f"1. node2\nPOST http://127.0.0.1:2114/admin/scavenge?{query}",
            f"2. node3\nPOST http://127.0.0.1:2115/admin/scavenge?{query}",
            "3. node1\nPOST http://127.0.0.1:2113/admin/node/resign",
            "4. node1\nthen: GET http://127.0.0.1:2113/gossip until another node leads and node1 follows it",
            f"5. node1\nPOST http://127.0.0.1:2113/admin/scavenge?{query}",
        ]
        positions = [shown.index(step) for step in order]
        assert positions == sorted(positions), shown
        assert (
            "then: GET http://127.0.0.1:2114/admin/scavenge/last until it says that scavenge ended" in shown
        )
        assert "Followers-first cluster scavenge: 5 steps, in this order" in str(
            app.screen.query_one(".title").render()
        )
        await pilot.click("#send")
        await until(
            pilot, lambda: app.state.routine and not app.state.routine.running, "the routine to end", 20
        )
        assert app.state.routine.outcome == "completed", app.state.routine
        assert cluster.journal == [
            f"POST http://127.0.0.1:2114/admin/scavenge?{query}",
            f"POST http://127.0.0.1:2115/admin/scavenge?{query}",
            "POST http://127.0.0.1:2113/admin/node/resign",
            f"POST http://127.0.0.1:2113/admin/scavenge?{query}",
        ]
        assert [s.status for s in app.state.routine.steps] == ["done"] * 5
        assert app.state.routine.steps[3].detail == "node2 leads"
        assert app.state.routine.steps[0].detail == "scavenge sc-new: Success"
        app.render_panels()
        text = text_of(app, "scavenge-panel")
        assert "Followers-first cluster scavenge completed" in text and "✔ 5. Scavenge node1" in text


async def test_followers_first_is_refused_without_a_leader():
    nodes = (FakeNode(port=2113, state="Follower"), FakeNode(port=2114, state="Unknown"))
    app, cluster = cluster_app(*nodes)
    async with app.run_test(size=(160, 45)) as pilot:
        await ready(app, pilot)
        await pilot.press("F")
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmCall)
        assert "Followers-first cluster scavenge: no leader: the cluster is electing one" in notices(app)
        assert cluster.journal == []


async def test_followers_first_is_refused_while_a_node_scavenges_or_is_down():
    nodes = three()
    nodes[2].scavenge_id = "sc-9"
    app, _ = cluster_app(*nodes)
    async with app.run_test(size=(160, 45)) as pilot:
        await ready(app, pilot)
        assert app.why_not("followers_first") == "a scavenge is running on node3"
        nodes[2].scavenge_id = ""
        nodes[2].up = False
        await ready(app, pilot)
        assert app.why_not("followers_first") == "node3 not reachable: every node takes part"


async def test_followers_first_names_a_failure_and_goes_no_further():
    nodes = three()
    for node in nodes:
        node.finish_after_reads = 1
    nodes[2].finish_result = "Errored"
    app, cluster = cluster_app(*nodes)
    async with app.run_test(size=(160, 45)) as pilot:
        await ready(app, pilot)
        await pilot.press("F")
        await pilot.pause()
        await pilot.click("#send")
        await until(pilot, lambda: app.state.routine and not app.state.routine.running, "the routine to end")
        routine = app.state.routine
        assert routine.outcome == (
            "failed at step 2 (Scavenge node3): the scavenge sc-new on node3 ended Errored"
        ), routine
        assert [s.status for s in routine.steps] == ["done", "failed", "not run", "not run", "not run"]
        assert not any("resign" in line for line in cluster.journal)
        # the routine's state ends before the job that ran it says so (a notice, the next step of that job)
        await until(
            pilot, lambda: "Followers-first cluster scavenge failed at step 2" in notices(app), "the notice"
        )


async def test_followers_first_fails_when_no_new_leader_comes():
    nodes = three()
    for node in nodes:
        node.finish_after_reads = 0
    app, cluster = cluster_app(*nodes)  # the resign moves no role
    app.routine_leader_wait = 0.3
    async with app.run_test(size=(160, 45)) as pilot:
        await ready(app, pilot)
        await pilot.press("F")
        await pilot.pause()
        await pilot.click("#send")
        await until(pilot, lambda: app.state.routine and not app.state.routine.running, "the routine to end")
        assert app.state.routine.outcome.startswith(
            "failed at step 4 (Wait for a new leader): no new leader within 0 s after node1 resigned "
            "(node1 is Leader, no other leader)"
        ), app.state.routine
        assert cluster.journal[-1] == "POST http://127.0.0.1:2113/admin/node/resign"


async def test_followers_first_can_be_stopped():
    nodes = three()  # the first follower's scavenge runs until it is stopped
    app, cluster = cluster_app(*nodes)
    async with app.run_test(size=(160, 45)) as pilot:
        await ready(app, pilot)
        await pilot.press("F")
        await pilot.pause()
        await pilot.click("#send")
        await until(pilot, lambda: nodes[1].scavenge_id == "sc-new", "node2's scavenge to start")
        await until(pilot, lambda: app._routine.current_scavenge is not None, "the routine to wait for it")
        await pilot.press("F")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmCall)
        assert "DELETE http://127.0.0.1:2114/admin/scavenge/sc-new" in shown_request(app)
        await pilot.click("#send")
        await until(pilot, lambda: not app.state.routine.running, "the routine to stop")
        await app.workers.wait_for_complete()
        assert app.state.routine.outcome.startswith("stopped at step 1 (Scavenge node2)")
        assert [s.status for s in app.state.routine.steps] == ["stopped"] * 5
        assert cluster.journal[-1] == "DELETE http://127.0.0.1:2114/admin/scavenge/sc-new"
        assert len(cluster.journal) == 2  # the start, the stop: nothing else


# -- jobs of the local cluster (o, u, B): the keys and the restore dialog ------------------------------
def _local_cluster(tmp_path, *nodes: FakeNode, options: dict[str, str] | None = None) -> LocalCluster:
    """A local cluster's cluster.json naming the fake nodes as node1, node2, …, none of them running."""
    data = tmp_path / "cluster"
    data.mkdir()
    entries = []
    for i, node in enumerate(nodes, 1):
        folder = data / f"node{i}"
        entries.append(
            {
                "name": f"node{i}",
                "url": node.url,
                "config": str(folder / "node.yaml"),
                "db": str(folder / "db"),
                "log_dir": str(folder / "log"),
                "read_only_replica": False,
                "pid": None,
            }
        )
    info = {"nodes": entries, "ca": None, "user": "admin", "password": "changeit", "options": options or {}}
    (data / "cluster.json").write_text(json.dumps(info))
    return LocalCluster(data)


async def test_node_jobs_act_only_on_a_local_cluster():
    app, cluster = cluster_app(*three())
    async with app.run_test(size=(160, 45)) as pilot:
        await ready(app, pilot)
        for key in ("o", "u", "B"):
            await pilot.press(key)
            await pilot.pause()
            assert app.screen is app.screen_stack[0]
        text = notices(app)
        assert (
            "Stop node (local cluster): only on the local cluster (evdb dashboard without --attach)" in text
        )
        assert "Restore node from a backup (local cluster): only on the local cluster" in text
        assert cluster.journal == []


async def test_node_jobs_are_refused_in_read_only_mode(tmp_path):
    nodes = three()
    app, _ = cluster_app(*nodes, readonly=True, local_cluster=_local_cluster(tmp_path, *nodes))
    async with app.run_test(size=(160, 45)) as pilot:
        await ready(app, pilot)
        for action in CHANGING_ACTIONS:
            assert app.check_action(action, ()) is None, action
        assert {app.why_not(action) for action in LOCAL_JOBS} == {"read-only mode"}


async def test_restore_dialog_checks_the_folder_before_anything_is_done(tmp_path):
    nodes = three()
    local = _local_cluster(tmp_path, *nodes)
    app, cluster = cluster_app(*nodes, local_cluster=local)
    async with app.run_test(size=(160, 45)) as pilot:
        await ready(app, pilot)
        await pilot.press("n")
        assert app.why_not("stop_node") == "node2 is not running"  # its process: the fake answers HTTP
        await pilot.press("o")
        await pilot.pause()
        assert "Stop node (local cluster): node2 is not running" in notices(app)
        await pilot.press("B")
        await pilot.pause()
        dialog = app.screen
        assert isinstance(dialog, RestoreDialog)
        field = dialog.query_one("#backup_folder", Input)
        assert field.value == str(local.data_dir / "backups" / "node2")  # beside the cluster, by default

        async def review(folder: str) -> str:
            field.value = folder
            field.focus()
            await pilot.press("enter")
            await pilot.pause()
            return str(dialog.query_one("#error", Static).content) if app.screen is dialog else ""

        missing = tmp_path / "nowhere"
        assert f"There is no folder {missing}." in await review(str(missing))
        assert "The backup folder must be a non-empty path." in await review("  ")
        folder = tmp_path / "backup"
        folder.mkdir()
        assert "is not an evdb backup (it has no backup.json)" in await review(str(folder))
        (folder / "backup.json").write_text("{}")
        assert "is not a finished backup (no BACKUP-COMPLETE)" in await review(str(folder))
        assert app.screen is dialog and app.focused is field  # the field keeps focus
        (folder / "BACKUP-COMPLETE").write_text("")
        await review(str(folder))
        confirm = app.screen
        assert isinstance(confirm, ConfirmCall)
        assert f"$ evdb cluster restore-node node2 --from {folder} --data {local.data_dir}" in shown_request(
            app
        )
        assert "Restore the node from a backup on node2?" in str(confirm.query_one(".title").render())
        await pilot.press("escape")
        await pilot.pause()
        # the next restore of this node starts from the same folder; unticked start: --no-start
        await pilot.press("B")
        await pilot.pause()
        assert app.screen.query_one("#backup_folder", Input).value == str(folder)
        await pilot.click("#start_node")
        app.screen.query_one("#backup_folder", Input).focus()
        await pilot.press("enter")
        await pilot.pause()
        assert shown_request(app).endswith("--no-start")
        await pilot.press("escape")
        await pilot.pause()
        assert cluster.journal == []
        assert not (tmp_path / "cluster" / "node2" / "db").exists()  # nothing touched


async def test_the_local_clusters_node_options_are_shown(tmp_path):
    nodes = three()
    local = _local_cluster(tmp_path, *nodes, options={"EnableUnixSocket": "true", "LogLevel": "Debug"})
    app, _ = cluster_app(*nodes, local_cluster=local)
    async with app.run_test(size=(160, 45)) as pilot:
        await ready(app, pilot)
        assert "node options (--option): EnableUnixSocket=true, LogLevel=Debug" in text_of(app, "cluster")
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        notes = str(app.screen.query_one("#help-notes", Static).content)
        assert f"Local cluster: {local.data_dir}" in notes
        assert "Node options (--option): EnableUnixSocket=true, LogLevel=Debug" in notes
        assert "evdb dashboard --option KEY=VALUE" in notes
        keys = {row[0]: row for row in app.screen.rows}
        assert keys["o"][2] == "node1 is not running" and keys["u"][2] == "available"
        assert keys["B"][2] == "available" and keys["d"][2] == "available"


# -- snapshots of the new dialogs and the routine ------------------------------------------------------
def test_snapshot_restore_dialog(snap_compare, tmp_path):
    nodes = three()
    app, _ = cluster_app(*nodes, local_cluster=_local_cluster(tmp_path, *nodes), clock=ManualClock())

    async def before(pilot):
        await ready(app, pilot)
        await pilot.press("n", "B")
        await pilot.pause()
        field = app.screen.query_one("#backup_folder", Input)
        field.value = "/backups/node2"
        field.focus()
        await pilot.press("enter")
        app.clear_notifications()  # "Node: node2" lasts 2 s: on a loaded machine it was gone, or not
        await pilot.pause()

    assert snap_compare(app, terminal_size=(100, 30), run_before=before)


def test_snapshot_followers_first_confirmation(snap_compare):
    app, _ = cluster_app(*three(), clock=ManualClock())

    async def before(pilot):
        await ready(app, pilot)
        await pilot.press("F")
        await pilot.pause()

    assert snap_compare(app, terminal_size=(100, 30), run_before=before)


def test_snapshot_routine_in_the_scavenge_panel(snap_compare):
    clock = ManualClock()
    app, _ = cluster_app(*three(), clock=clock)

    async def before(pilot):
        await ready(app, pilot)
        app.state.routine = RoutineState(
            [
                RoutineStep("Scavenge node2", "node2", "done", "scavenge 3fa21c0d: Success"),
                RoutineStep(
                    "Scavenge node3", "node3", "failed", "the scavenge 6c1e9a2b on node3 ended Errored"
                ),
                RoutineStep("Resign the leader", "node1", "not run"),
                RoutineStep("Wait for a new leader", "node1", "not run"),
                RoutineStep("Scavenge node1", "node1", "not run"),
            ],
            started_at=clock.time() - 95,
            ended_at=clock.time(),
            outcome="failed at step 2 (Scavenge node3): the scavenge 6c1e9a2b on node3 ended Errored",
        )
        app.state.jobs_version += 1
        app.render_panels()
        await pilot.pause()

    assert snap_compare(app, terminal_size=(100, 30), run_before=before)


def test_snapshot_demo_load_confirmation_at_80x24(snap_compare):
    app, _ = cluster_app(*three(), clock=ManualClock())

    async def before(pilot):
        await ready(app, pilot)
        await pilot.press("n", "d")
        await pilot.pause()
        app.clear_notifications()
        await pilot.pause()

    assert snap_compare(app, terminal_size=(80, 24), run_before=before)
