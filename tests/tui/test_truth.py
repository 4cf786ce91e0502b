"""Issue 22: the dashboard tells the truth at every moment, in any terminal.

Scavenge phases, chunk counts, estimates, the scavenge point, the started scavenge right after Send;
history per node; finished jobs; errors kept as stale last-known state; elections and isolated nodes;
dialogs that check the state first; notices for keys that cannot act; terminal sizes; readable numbers;
the event browser's jump and stream list."""

from __future__ import annotations

import io
import os

import httpx
import pytest
from rich.console import Console
from textual.widgets import Checkbox, DataTable, Input, OptionList, Static

from evdb.clock import ManualClock
from tests.tui.conftest import PROGRESS, make_app
from tests.tui.fake_node import FakeCluster, FakeNode
from tests.tui.pilot import notices, ready, submit, text_of
from tests.tui.test_cycle_certs_mirror import NOW, certificates_body, iso, progress_body
from tui.app import Connection, DashboardApp, NodeSpec
from tui.collector import NodeCollector
from tui.dialogs import BackupDialog, ConfirmCall
from tui.event_browser import EventBrowser
from tui.panels import render_scavenge
from tui.state import SCAVENGE_PHASES, DashboardState, NodeState

#: the node's phases after Beginning, in order (evdb/scavenge/scavenger.py STAGES)
NODE_PHASES = (
    "Accumulation",
    "Calculation",
    "Chunk execution",
    "Chunk merging",
    "Index execution",
    "Cleaning",
)


def plain(renderable, width: int = 160) -> str:
    console = Console(width=width, record=True, color_system=None, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


def flat(text: str) -> str:
    """Every run of whitespace made one space: wrapped lines read as one."""
    return " ".join(text.split())


def screen_text(app: DashboardApp) -> str:
    """Everything visible in the terminal, as text (what a screenshot shows)."""
    width, height = app.size
    console = Console(width=width, height=height, file=io.StringIO(), record=True, color_system=None)
    console.print(app.screen._compositor.render_update(full=True, screen_stack=app._background_screens))
    return console.export_text()


def row_of(text: str, label: str) -> str:
    """The cluster table's row of the node labelled ``label`` (after the selection marker)."""
    return next(line for line in text.splitlines() if label in line.split()[:2])


def collector_for(*nodes: FakeNode, clock: ManualClock) -> NodeCollector:
    client = httpx.AsyncClient(transport=FakeCluster(*nodes).transport())
    return NodeCollector(NodeState(url=nodes[0].url), client, clock)


def progress(**changes) -> dict:
    body = {
        "scavengeId": "sc-1",
        "phase": "Chunk execution",
        "phaseElapsedSeconds": 2.0,
        "elapsedSeconds": 12.0,
        "threads": 1,
        "threshold": 0,
        "throttlePercent": 100,
        "chunksTotal": 0,
        "chunksDone": 0,
        "chunks": [],
        "chunkWeights": {},
        "bytesReclaimed": 0,
        "recordsRemoved": 0,
    }
    body.update(changes)
    return body


def reports(count: int, merged: int = 0) -> list[dict]:
    rows = [
        {
            "chunkStartNumber": i,
            "chunkEndNumber": i,
            "weight": 4.0,
            "executed": i % 2 == 0,
            "merged": False,
            "sizeBefore": 1 << 20,
            "sizeAfter": 1 << 19,
        }
        for i in range(count)
    ]
    rows += [
        {
            "chunkStartNumber": 2 * i,
            "chunkEndNumber": 2 * i + 1,
            "weight": 0.0,
            "executed": True,
            "merged": True,
            "sizeBefore": 1 << 20,
            "sizeAfter": 1 << 19,
        }
        for i in range(merged)
    ]
    return rows


class Watch:
    """One fake node, its collector and the scavenge panel's text after each poll."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.node = FakeNode(port=2113)
        self.collector = collector_for(self.node, clock=clock)
        self.state = DashboardState(nodes={self.node.url: self.collector.state}, selected=self.node.url)

    async def running(self, body: dict, width: int = 160) -> str:
        self.node.scavenge_id = body["scavengeId"]
        self.node.progress = body
        return await self.text(width)

    async def finished(self, body: dict, width: int = 160) -> str:
        self.node.scavenge_id = ""
        self.node.progress = None
        self.node.last = body
        return await self.text(width)

    async def text(self, width: int = 160) -> str:
        await self.collector.poll_once()
        node = self.collector.state
        return plain(render_scavenge(node, state=self.state, now=self.clock.time(), width=width), width)


# -- scavenge panel ------------------------------------------------------------------------------------
def test_the_dashboard_knows_the_nodes_phases():
    from evdb.scavenge.scavenger import STAGES

    assert ("Beginning", *(phase for _, phase in STAGES)) == SCAVENGE_PHASES
    assert SCAVENGE_PHASES[1:] == NODE_PHASES


@pytest.mark.parametrize("phase", NODE_PHASES)
async def test_the_phase_line_follows_every_phase_the_node_reports(clock, phase):
    text = await Watch(clock).running(progress(phase=phase))
    index = SCAVENGE_PHASES.index(phase)
    for earlier in SCAVENGE_PHASES[:index]:
        assert f"✔ {earlier}" in text, (earlier, text)
    assert f"● {phase}" in text
    for later in SCAVENGE_PHASES[index + 1 :]:
        assert f"○ {later}" in text, (later, text)


async def test_the_phase_line_after_a_stop_shows_where_it_stopped(clock):
    body = progress(chunksTotal=107, chunksDone=98, chunks=reports(49), result="Stopped")
    text = await Watch(clock).finished(body)
    assert "Last run: Stopped" in text
    assert "✔ Calculation" in text and "■ Chunk execution" in text and "○ Cleaning" in text
    assert "49 of 58" in text  # how far it got, not "–"


async def test_chunk_counts_are_the_nodes_own_chunks_not_two_phases_added_up(clock):
    # a 58-chunk database: accumulation counted 49 new chunks, execution adds its 58 to them
    text = await Watch(clock).running(progress(chunksTotal=107, chunksDone=98, chunks=reports(49)))
    assert "49 of 58" in text
    assert "98 of 107" not in text


async def test_a_one_chunk_database_counts_one_chunk_throughout(clock):
    watch = Watch(clock)
    steps = [
        (progress(phase="Accumulation", chunksTotal=1, chunksDone=0), "0 of 1"),
        (progress(phase="Accumulation", chunksTotal=1, chunksDone=1), "1 of 1"),
        (progress(phase="Chunk execution", chunksTotal=2, chunksDone=1), "0 of 1"),
        (progress(phase="Chunk execution", chunksTotal=2, chunksDone=2, chunks=reports(1)), "1 of 1"),
        (progress(phase="Cleaning", chunksTotal=2, chunksDone=2, chunks=reports(1)), "1 of 1"),
    ]
    for body, shown in steps:
        text = await watch.running(body)
        assert shown in text, (body["phase"], text)
        assert "of 2" not in text
    text = await watch.finished({**steps[-1][0], "result": "Success"})
    assert "Last run: Completed" in text and "1 of 1" in text and "of 2" not in text
    assert all(f"✔ {phase}" in text for phase in SCAVENGE_PHASES)


async def test_the_estimate_waits_for_a_rate(clock):
    watch = Watch(clock)
    stuck = progress(chunksTotal=4, chunksDone=0, elapsedSeconds=100.0, phaseElapsedSeconds=50.0)
    text = flat(await watch.running(stuck))
    assert "estimate – (no rate yet" in text
    moving = progress(chunksTotal=4, chunksDone=1, chunks=reports(1), phaseElapsedSeconds=10.0)
    text = flat(await watch.running(moving))
    assert "estimate 00:30 left in this phase" in text  # 1 of 4 in 10 s: 3 more take 30 s


async def test_the_scavenge_point_is_on_screen(clock):
    watch = Watch(clock)
    point = {"number": 0, "position": 268436927, "effectiveNow": 0, "threshold": 0, "origin": "reused"}
    text = flat(await watch.running(progress(scavengePoint=point)))
    assert "scavenge point #0 at position 268,436,927" in text
    assert "reused: written before this run" in text
    text = flat(await watch.running(progress(scavengePoint={**point, "number": 3, "origin": "new"})))
    assert "scavenge point #3" in text and "new: written by this run" in text
    text = flat(await watch.running(progress(scavengePoint={**point, "origin": "resumed"})))
    assert "resumed: the point of the stopped run this one continues" in text


async def test_send_shows_the_started_scavenge_at_once(leader):
    app = make_app(leader)
    async with app.run_test(size=(160, 45)) as pilot:
        await ready(app, pilot)
        assert "No scavenge is running" in text_of(app, "scavenge-panel")
        await pilot.press("s")
        await submit(app, pilot)
        await pilot.click("#send")
        await app.workers.wait_for_complete()
        await pilot.pause()
        # no poll yet: what the POST answered is shown, and s knows a scavenge runs
        text = text_of(app, "scavenge-panel")
        assert "Starting scavenge sc-new" in text and "No scavenge is running" not in text
        assert app.check_action("start_scavenge", ()) is None
        await app.poll_all()
        text = text_of(app, "scavenge-panel")
        assert "Running" in text and "sc-new" in text and "Starting scavenge" not in text


async def test_a_poll_already_under_way_does_not_undo_the_started_scavenge(leader):
    """A poll that began before the answer to Send does not count as the node's confirmation."""
    import asyncio

    gate = asyncio.Event()
    cluster = FakeCluster(leader)
    plain_transport = cluster.transport()

    class Held(httpx.AsyncBaseTransport):
        hold = False

        async def handle_async_request(self, request):
            if self.hold and request.url.path == "/admin/scavenge/progress":
                await gate.wait()
            return await plain_transport.handle_async_request(request)

    transport = Held()
    app = DashboardApp(
        [NodeSpec(leader.url)], connection=Connection(transport=transport), start_collectors=False
    )
    async with app.run_test(size=(160, 45)) as pilot:
        await ready(app, pilot)
        transport.hold = True
        stale_poll = asyncio.ensure_future(app.collectors[leader.url].poll_once())
        await pilot.pause()
        leader.answers[("GET", "/admin/scavenge/progress")] = (200, '{"running": false, "last": null}')
        transport.hold = False
        await pilot.press("s")
        await submit(app, pilot)
        await pilot.click("#send")
        await app.workers.wait_for_complete()
        gate.set()
        await stale_poll
        app.render_panels()
        assert "Starting scavenge sc-new" in text_of(app, "scavenge-panel")


# -- history -------------------------------------------------------------------------------------------
def _run(node: FakeNode, scavenge_id: str, endpoint: str, result: str = "Success") -> None:
    """A run as evdb records it: its own stream, linked (not resolved) from $scavenges."""
    stream = f"$scavenges-{scavenge_id}"
    node.append(stream, "$scavengeStarted", {"scavengeId": scavenge_id, "nodeEndpoint": endpoint})
    node.append("$scavenges", "$>", f"0@{stream}")
    node.append(
        stream,
        "$scavengeCompleted",
        {
            "scavengeId": scavenge_id,
            "nodeEndpoint": endpoint,
            "result": result,
            "timeTaken": "00:00:03.5000000",
            "spaceSaved": 2048,
        },
    )
    node.append("$scavenges", "$>", f"1@{stream}")


async def test_history_is_the_selected_nodes_with_a_node_column_when_showing_all():
    leader, follower = FakeNode(port=2113), FakeNode(port=2114, state="Follower")
    for node in (leader, follower):  # $scavenges replicates: every node has every run
        _run(node, "leader-run-1", "127.0.0.1:2113")
        _run(node, "follower-run-1", "127.0.0.1:2114", result="Stopped")
    app = make_app(leader, follower)
    async with app.run_test(size=(160, 45)) as pilot:
        await ready(app, pilot)
        await pilot.press("n")
        await app.poll_all()
        await pilot.pause()
        text = text_of(app, "scavenge-panel")
        assert "follower-run-1" in text and "leader-run-1" not in text
        await pilot.press("a")  # every node's runs, with a node column
        await pilot.pause()
        text = text_of(app, "scavenge-panel")
        assert "follower-run-1" in text and "leader-run-1" in text
        row = next(line for line in text.splitlines() if "leader-run-1" in line)
        assert "127.0.0.1:2113" in row
        await pilot.press("a")
        await pilot.pause()
        assert "leader-run-1" not in text_of(app, "scavenge-panel")


# -- finished jobs -------------------------------------------------------------------------------------
async def test_a_finished_auto_scavenge_cycle_leaves_a_summary():
    clock = ManualClock()
    nodes = (
        FakeNode(port=2113, state="Leader"),
        FakeNode(port=2114, state="Follower"),
        FakeNode(port=2115, state="Follower"),
    )
    for node in nodes:
        node.auto_scavenge = {"state": "InProgress", "schedule": "0 6 * * 6", "timeUntilNextCycle": None}
        node.auto_scavenge_progress = progress_body()
        _run(node, "sc-77", "127.0.0.1:2114")
    app = make_app(*nodes, clock=clock)
    async with app.run_test(size=(160, 45)) as pilot:
        await ready(app, pilot)
        await pilot.press("3")
        clock.advance(60)
        for node in nodes:  # the cycle ended between two polls
            node.auto_scavenge = {
                "state": "Waiting",
                "schedule": "0 6 * * 6",
                "timeUntilNextCycle": "2.00:00:00",
            }
            node.auto_scavenge_progress = progress_body(
                clusterScavengeId=None,
                startedAt=None,
                members=[],
                done={},
                designatedNode=None,
                nodeScavengeId=None,
                status="Waiting",
                lastCompletedAt=iso(NOW + 55),
            )
        await app.poll_all()
        await pilot.pause()
        text = flat(text_of(app, "auto-panel"))
        assert "Last cluster scavenge cycle-1 finished 2023-11-14 22:14:15" in text
        assert "took 02:55" in text
        # the role each was scavenged in where the dashboard saw it designated, else its role now
        assert "127.0.0.1:2115 Follower now Completed" in text
        assert "127.0.0.1:2114 Follower Completed" in text  # its result from its scavenge's history
        assert "127.0.0.1:2113 Leader now result not seen" in text


async def test_the_last_cycle_is_named_when_the_dashboard_starts_after_it():
    clock = ManualClock()
    leader = FakeNode(port=2113)
    leader.auto_scavenge = {"state": "Waiting", "schedule": "0 6 * * 6", "timeUntilNextCycle": "1.00:00:00"}
    leader.auto_scavenge_progress = progress_body(
        clusterScavengeId=None, startedAt=None, members=[], done={}, designatedNode=None,
        nodeScavengeId=None, status="Waiting", lastCompletedAt=iso(NOW - 600),
    )  # fmt: skip
    app = make_app(leader, clock=clock)
    async with app.run_test(size=(160, 45)) as pilot:
        await ready(app, pilot)
        await pilot.press("3")
        await pilot.pause()
        assert "Last cluster scavenge finished 2023-11-14 22:03:20 (10m 00s ago)" in flat(
            text_of(app, "auto-panel")
        )


def finished_backup(**changes) -> dict:
    """``GET /admin/backup/current`` after a full backup (BackupJob.describe, evdb/http/backup.py)."""
    body = {
        "backupId": "b-1",
        "destination": "/backups/node1",
        "startedAt": NOW - 60,
        "operation": "full",
        "state": "completed",
        "elapsedSeconds": 60.0,  # the node's clock runs on after the end
        "filesCopied": 12,
        "filesSkipped": 3,
        "filesRemoved": 0,
        "bytesCopied": 50 * 1024 * 1024,
        "bytesPerSecond": 873813,  # the node divides by the time since the start: falls after the end
        "part": "backup",
        "step": 0,
        "stepName": "finish: check no scavenge ran, write the manifest and the marker",
        "filesDone": 0,
        "filesTotal": 0,
        "bytesDone": 0,
        "bytesTotal": 0,
        "chaser": 123456789,
        "seconds": 12.5,
        "kind": "full",
    }
    body.update(changes)
    return body


async def test_a_finished_backup_shows_a_summary_with_its_final_speed():
    clock = ManualClock()
    leader = FakeNode(port=2113)
    leader.backup = finished_backup()
    app = make_app(leader, clock=clock)
    async with app.run_test(size=(160, 45)) as pilot:
        await ready(app, pilot)
        await pilot.press("4")
        await pilot.pause()
        text = flat(text_of(app, "backup-panel"))
        assert "full backup" in text and "folder /backups/node1" in text
        assert "completed" in text and "finished 2023-11-14 22:12:32" in text and "took 00:12" in text
        assert "12 files copied, 3 skipped, 50.0 MiB" in text
        assert "4.0 MiB/s (average)" in text
        assert "step 0" not in text and "0 of 0" not in text and "0 B of 0 B" not in text
        leader.backup = finished_backup(elapsedSeconds=600.0, bytesPerSecond=87381)
        clock.advance(540)
        await app.poll_all()
        await pilot.pause()
        text = flat(text_of(app, "backup-panel"))
        assert "4.0 MiB/s (average)" in text and "85.3 KiB/s" not in text  # frozen at its final value


async def test_a_failed_backup_keeps_the_speed_it_had_when_it_ended():
    """A failed backup has no duration of its own: its speed and time are those seen when it ended."""
    clock = ManualClock()
    leader = FakeNode(port=2113)
    leader.backup = finished_backup(state="running", seconds=None, chaser=None, elapsedSeconds=10.0)
    leader.backup.update(step=4, part="full", stepName="copy the chunk files", filesDone=1, filesTotal=3)
    leader.backup.update(bytesDone=1 << 20, bytesTotal=3 << 20, bytesPerSecond=1 << 20)
    del leader.backup["seconds"], leader.backup["chaser"]
    app = make_app(leader, clock=clock)
    async with app.run_test(size=(160, 45)) as pilot:
        await ready(app, pilot)
        await pilot.press("4")
        await pilot.pause()
        text = flat(text_of(app, "backup-panel"))
        assert "step 4 (full): copy the chunk files" in text and "files 1 of 3" in text
        failed = {**leader.backup, "state": "failed", "error": "disk full", "elapsedSeconds": 11.0}
        leader.backup = failed
        await app.poll_all()
        leader.backup = {**failed, "elapsedSeconds": 500.0, "bytesPerSecond": 1000}
        clock.advance(489)
        await app.poll_all()
        await pilot.pause()
        text = flat(text_of(app, "backup-panel"))
        assert "failed" in text and "disk full" in text and "took 00:11" in text
        assert "1000 B/s" not in text


async def test_a_backup_that_fails_after_202_is_told_without_a_command_line_flag(leader):
    leader.backup = {}
    app = make_app(leader)
    async with app.run_test(size=(160, 45)) as pilot:
        await ready(app, pilot)
        await pilot.press("b")
        app.screen.query_one("#destination", Input).value = "/backups/n1"
        await submit(app, pilot)
        await pilot.click("#send")
        await app.workers.wait_for_complete()
        await app.poll_all()
        leader.backup = {
            "operation": "full",
            "state": "failed",
            "destination": "/backups/n1",
            "error": "A scavenge (sc-9) is running on the source node; a file-copy backup must not overlap "
            "it. Stop it first, or give --stop-scavenge to stop it and start it again after the backup.",
            "exitCode": 3,
        }
        await app.poll_all()
        await pilot.pause()
        told = notices(app)
        assert "backup failed" in told.lower() and "sc-9" in told
        await pilot.press("4")
        await pilot.pause()
        panel = text_of(app, "backup-panel")
        for text in (told, panel):
            assert "--stop-scavenge" not in text
            assert "stop it and resume it after the backup" in flat(text)


# -- errors --------------------------------------------------------------------------------------------
async def test_a_500_mid_poll_keeps_the_auto_scavenge_state_marked_stale():
    clock = ManualClock()
    leader = FakeNode(port=2113)
    leader.auto_scavenge = {"state": "Waiting", "schedule": "0 6 * * 6", "timeUntilNextCycle": "01:00:00"}
    app = make_app(leader, clock=clock)
    async with app.run_test(size=(160, 45)) as pilot:
        await ready(app, pilot)
        await pilot.press("3")
        leader.answers[("GET", "/auto-scavenge/status")] = (500, '{"detail": "No leader node was found"}')
        clock.advance(12)
        await app.poll_all()
        await pilot.pause()
        text = flat(text_of(app, "auto-panel"))
        assert "state Waiting" in text and "schedule 0 6 * * 6" in text
        assert "stale" in text and "12s" in text
        assert 'HTTP 500 from /auto-scavenge/status: {"detail": "No leader node was found"}' in text
        assert "state HTTP 500" not in text and "not set" not in text
        del leader.answers[("GET", "/auto-scavenge/status")]
        await app.poll_all()
        await pilot.pause()
        text = flat(text_of(app, "auto-panel"))
        assert "stale" not in text and "HTTP 500" not in text


async def test_an_auto_scavenge_status_never_read_is_unknown_not_unset():
    leader = FakeNode(port=2113)
    leader.auto_scavenge = {"state": "Waiting", "schedule": "0 6 * * 6", "timeUntilNextCycle": "01:00:00"}
    leader.answers[("GET", "/auto-scavenge/status")] = (503, "Database reopening")
    app = make_app(leader, clock=ManualClock())
    async with app.run_test(size=(160, 45)) as pilot:
        await ready(app, pilot)
        await pilot.press("3")
        await pilot.pause()
        text = flat(text_of(app, "auto-panel"))
        assert "not set" not in text and "state HTTP" not in text
        assert (
            "schedule unknown" in text and "HTTP 503 from /auto-scavenge/status: Database reopening" in text
        )


async def test_a_500_mid_poll_keeps_the_scavenge_figures_marked_stale(leader):
    clock = ManualClock()
    leader.scavenge_id = "sc-1"
    leader.progress = PROGRESS
    app = make_app(leader, clock=clock)
    async with app.run_test(size=(160, 45)) as pilot:
        await ready(app, pilot)
        leader.answers[("GET", "/admin/scavenge/progress")] = (500, "The node is electing a leader")
        clock.advance(7)
        await app.poll_all()
        await pilot.pause()
        text = flat(text_of(app, "scavenge-panel"))
        assert "Running" in text and "sc-1" in text and "2 of 4" in text
        assert "stale 7s" in text
        assert "HTTP 500 from /admin/scavenge/progress: The node is electing a leader" in text


async def test_a_node_in_an_election_shows_its_real_state():
    node = FakeNode(port=2113, state="Unknown")
    app = make_app(node)
    async with app.run_test(size=(160, 45)) as pilot:
        await ready(app, pilot)
        row = row_of(text_of(app, "cluster"), "127.0.0.1:2113")
        assert "Unknown" in row and "electing: no leader known" in row
        assert " ok" not in row


async def test_an_isolated_node_is_not_ok():
    a, b, c = (
        FakeNode(port=2113),
        FakeNode(port=2114, state="Follower"),
        FakeNode(port=2115, state="Follower"),
    )
    app = make_app(a, b, c, discover=True)
    a.sees_alive = {2114: False, 2115: False}  # a sees nobody: partitioned away
    async with app.run_test(size=(160, 45)) as pilot:
        await ready(app, pilot)
        text = text_of(app, "cluster")
        assert "isolated: sees 1 of 3 members alive" in row_of(text, "127.0.0.1:2113")
        assert " ok" not in row_of(text, "127.0.0.1:2113")
        assert " ok" in row_of(text, "127.0.0.1:2114")  # the other two are the majority


async def test_a_node_outside_the_clusters_majority_is_not_ok():
    a, b, c = (
        FakeNode(port=2113),
        FakeNode(port=2114, state="Follower"),
        FakeNode(port=2115, state="Follower"),
    )
    a.sees_alive = {2115: False}
    b.sees_alive = {2115: False}  # the leader and b have lost c; c still believes it is a follower
    app = make_app(a, b, c, discover=True)
    async with app.run_test(size=(160, 45)) as pilot:
        await ready(app, pilot)
        row = row_of(text_of(app, "cluster"), "127.0.0.1:2115")
        assert "not in the majority: 2 of 3 members see it dead" in row
        assert " ok" not in row


# -- dialogs -------------------------------------------------------------------------------------------
async def test_the_backup_dialog_warns_of_a_running_scavenge_and_offers_to_stop_and_resume_it(leader):
    leader.scavenge_id = "sc-1"
    leader.progress = PROGRESS
    leader.backup = {}
    app = make_app(leader)
    async with app.run_test(size=(160, 45)) as pilot:
        await ready(app, pilot)
        await pilot.press("b")
        dialog = app.screen
        assert isinstance(dialog, BackupDialog)
        warning = flat(str(dialog.query_one("#scavenge-warning", Static).content))
        assert "A scavenge (sc-1) is running on 127.0.0.1:2113" in warning
        box = dialog.query_one("#stop_scavenge", Checkbox)
        assert box.value is True
        assert "stop it and resume it after the backup" in str(box.label)
        assert "[x]" in str(box.render())
        dialog.query_one("#destination", Input).value = "/backups/n1"
        await submit(app, pilot)
        confirm = app.screen
        assert isinstance(confirm, ConfirmCall)
        shown = flat(screen_text(app))
        assert '"stopScavenge": true' in shown
        assert "stops scavenge sc-1 first and starts it again after the backup" in shown
        assert "--stop-scavenge" not in shown


async def test_tick_boxes_are_drawn_ticked_or_not(leader):
    leader.backup = {}
    app = make_app(leader)
    async with app.run_test(size=(160, 45)) as pilot:
        await ready(app, pilot)
        await pilot.press("b")
        box = app.screen.query_one("#differential", Checkbox)
        assert box.value is False and str(box.render()).startswith("[ ]")
        box.toggle()
        await pilot.pause()
        assert str(box.render()).startswith("[x]")
        assert "[x] differential" in screen_text(app)


async def test_a_key_that_cannot_act_now_says_why(leader, follower):
    app = make_app(leader, follower)
    async with app.run_test(size=(160, 45)) as pilot:
        await ready(app, pilot)
        await pilot.press("x")
        await pilot.pause()
        assert "no scavenge is running on 127.0.0.1:2113" in notices(app)
        await pilot.press("n", "r")
        await pilot.pause()
        assert "127.0.0.1:2114 is not the leader" in notices(app)
        await pilot.press("p")
        await pilot.pause()
        assert "auto-scavenge is not available on 127.0.0.1:2114" in notices(app)
        assert leader.changes() == [] and follower.changes() == []


# -- terminal size -------------------------------------------------------------------------------------
def named_app(*nodes: FakeNode, clock: ManualClock | None = None, **kwargs) -> DashboardApp:
    """The launched local cluster: node1.. by name, attached without discovery."""
    cluster = FakeCluster(*nodes)
    return DashboardApp(
        [NodeSpec(n.url, f"node{i}") for i, n in enumerate(nodes, 1)],
        connection=Connection("admin", "changeit", transport=cluster.transport()),
        start_collectors=False,
        discover=False,
        clock=clock or ManualClock(),
        **kwargs,
    )


def three_named() -> tuple[FakeNode, FakeNode, FakeNode]:
    nodes = (
        FakeNode(port=2113, state="Leader", writer_checkpoint=268436927),
        FakeNode(port=2114, state="Follower", writer_checkpoint=268436927),
        FakeNode(port=2115, state="Follower", writer_checkpoint=268000000),
    )
    for node in nodes:
        _run(node, "3fa21c0d-9e8b-4a65-8c1b-2d3e4f5a6b7c", "127.0.0.1:2113")
        node.certificates = certificates_body()
    return nodes


@pytest.mark.parametrize("size", [(80, 24), (100, 30), (200, 55)])
async def test_every_size_shows_whole_names_the_marker_and_the_help_and_quit_keys(size):
    app = named_app(*three_named())
    async with app.run_test(size=size) as pilot:
        await ready(app, pilot)
        text = screen_text(app)
        for name in ("node1", "node2", "node3"):
            assert name in text, text
        assert "nod…" not in text
        assert "▶" in text
        bottom = "\n".join(text.splitlines()[-3:])
        assert "? Help" in bottom and "q Quit" in bottom, bottom
        await pilot.press("question_mark")
        await pilot.pause()
        assert "Keys" in screen_text(app)


@pytest.mark.parametrize("size", [(80, 24), (100, 30)])
async def test_history_shortens_ids_before_results(size):
    nodes = three_named()
    for node in nodes:  # a run of every node, in every node's $scavenges: the widest table
        _run(node, "9b1d2e3f-0a4b-4c5d-8e6f-7a8b9c0d1e2f", "127.0.0.1:2114")
    app = named_app(*nodes)
    async with app.run_test(size=size) as pilot:
        await ready(app, pilot)
        await pilot.press("a")
        await pilot.pause()
        text = screen_text(app)
        row = next(line for line in text.splitlines() if "3fa21c0d" in line)
        assert "Completed" in row and "node1" in row and "3.5 s" in row and "2.0 KiB" in row
        if size[0] == 80:
            assert "3fa21c0d-9e8b-4a65-8c1b-2d3e4f5a6b7c" not in row and "…" in row


async def test_at_100_columns_the_certificate_subject_and_errors_are_visible(tmp_path):
    folder = tmp_path / "node1"
    folder.mkdir()
    (folder / "log-20240501.json").write_text(
        '{"@t": "2024-05-01T12:00:02.000000Z", "@l": "Error", "@m": "certificate chain validation failed"}\n'
    )
    nodes = three_named()
    nodes[0].certificates = {
        **certificates_body(),
        "peerErrors": [
            {"peer": "127.0.0.1:2115", "reason": "certificate validation error", "certificate": True}
        ],
    }
    app = named_app(*nodes, log_dirs=[str(folder)])
    async with app.run_test(size=(100, 30)) as pilot:
        await ready(app, pilot)
        app.collectors[nodes[0].url].state.certificate = _certificate()
        app.tick()
        await pilot.press("5")
        await pilot.pause()
        text = screen_text(app)
        assert "CN=eventstoredb-node,O=evdb" in text
        assert "certificate chain validation failed" in text
        assert "node1 → 127.0.0.1:2115: certificate validation error" in text


def _certificate():
    from tui.state import CertificateState

    return CertificateState(
        subject="CN=eventstoredb-node,O=evdb",
        issuer="CN=evdb CA",
        not_after=NOW + 365 * 86400,
        verified=True,
        read_at=NOW,
    )


# -- numbers and names ---------------------------------------------------------------------------------
async def test_positions_have_thousands_separators():
    app = named_app(*three_named())
    async with app.run_test(size=(200, 55)) as pilot:
        await ready(app, pilot)
        text = text_of(app, "cluster")
        assert "268,436,927" in text and "268436927" not in text
        assert "426.7 KiB" in text  # node3's lag behind the leader: a size


async def test_the_rolling_reload_lists_node_names():
    app = named_app(*three_named())
    async with app.run_test(size=(160, 45)) as pilot:
        await ready(app, pilot)
        await pilot.press("R")
        await pilot.pause()
        shown = flat(screen_text(app))
        assert "on 3 nodes, in this order: node2, node3, node1" in shown


def test_the_launcher_says_attaching_to_a_running_cluster(tmp_path):
    import json

    from evdb.cluster.launcher import LocalCluster
    from tui.launch import launch_message

    cluster = LocalCluster(tmp_path / "cluster")
    assert launch_message(cluster).startswith("Starting the local cluster in ")
    (tmp_path / "cluster").mkdir()
    nodes = [
        {"name": f"node{i}", "url": f"http://127.0.0.1:{2112 + i}", "pid": os.getpid()} for i in (1, 2, 3)
    ]
    (tmp_path / "cluster" / "cluster.json").write_text(json.dumps({"nodes": nodes}))
    assert launch_message(cluster).startswith("Attaching to the local cluster in ")
    nodes[2]["pid"] = 2**22 + 12345  # not a live process
    (tmp_path / "cluster" / "cluster.json").write_text(json.dumps({"nodes": nodes}))
    assert launch_message(cluster).startswith("Starting node3 of the local cluster in ")


# -- event browser -------------------------------------------------------------------------------------
def browsing_node() -> FakeNode:
    node = FakeNode(port=2113)
    for i in range(30):
        node.append("orders-with-a-rather-long-stream-name-1", "OrderPlaced", {"n": i})
    node.append("$scavenges-x", "$scavengeStarted", {"scavengeId": "x"})
    node.append("$$orders", "$metadata", {"$maxCount": 5})
    node.append("customer-7", "CustomerUpdated", {"step": 1})
    return node


async def test_the_event_browser_jumps_to_an_event_number():
    node = browsing_node()
    app = make_app(node)
    async with app.run_test(size=(160, 45)) as pilot:
        await ready(app, pilot)
        await pilot.press("e")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, EventBrowser)
        screen.query_one("#stream-name", Input).value = "orders-with-a-rather-long-stream-name-1"
        screen.query_one("#stream-name", Input).focus()
        await pilot.press("enter")
        await pilot.pause()
        number = screen.query_one("#event-number", Input)
        number.focus()
        number.value = "7"
        await pilot.press("enter")
        await pilot.pause()
        table = screen.query_one("#events", DataTable)
        assert int(table.get_row_at(0)[0]) == 7
        assert "#7 OrderPlaced" in str(screen.query_one("#detail", Static).content)
        number.focus()
        number.value = "seven"
        await pilot.press("enter")
        await pilot.pause()
        assert "an event number is 0 or more" in str(screen.query_one("#status", Static).content)


async def test_the_stream_list_hides_system_streams_until_asked_and_keeps_names_on_one_line():
    node = browsing_node()
    app = make_app(node)
    async with app.run_test(size=(100, 30)) as pilot:
        await ready(app, pilot)
        await pilot.press("e")
        await pilot.pause()
        screen = app.screen
        options = screen.query_one("#stream-list", OptionList)
        names = [str(options.get_option_at_index(i).prompt) for i in range(options.option_count)]
        assert names == ["customer-7", "orders-with-a-rather-long-stream-name-1"]
        lines = screen_text(app).splitlines()
        at = next(i for i, line in enumerate(lines) if "orders-with-a-rather-long-stre" in line)
        assert "name-1" not in lines[at + 1]  # cut on its line, not wrapped onto the next
        box = screen.query_one("#show-system", Checkbox)
        box.toggle()
        await pilot.pause()
        names = [str(options.get_option_at_index(i).prompt) for i in range(options.option_count)]
        assert "$scavenges-x" in names and "$$orders" in names


async def test_the_key_bar_keys_can_be_clicked():
    from tui.dialogs import HelpScreen
    from tui.widgets import KeyBar

    app = named_app(*three_named())
    async with app.run_test(size=(80, 24)) as pilot:
        await ready(app, pilot)
        bar = app.query_one(KeyBar)
        lines = bar.lines(bar.content_region.width)
        row = next(i for i, line in enumerate(lines) if any(k.action == "help" for k in line))
        column = 0
        for k in lines[row]:
            if k.action == "help":
                break
            column += k.width + 2
        await pilot.click(KeyBar, offset=(1 + column, row))  # the bar's padding is one column
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)


async def test_the_auto_scavenge_schedule_reads_as_the_operator_gave_it():
    """Issue 34: ``*/2 * * * * *`` was shown as the node's normal form, thirty listed seconds. The panel
    shows the text the operator typed (evdb's progress keeps it), and reads it again when the schedule
    changes; a node without it (KurrentDB) still shows its own form."""
    clock = ManualClock()
    leader = FakeNode(port=2113)
    normal = ",".join(str(s) for s in range(0, 60, 2)) + " * * * * *"
    leader.auto_scavenge = {"state": "Waiting", "schedule": normal, "timeUntilNextCycle": "00:00:01"}
    leader.auto_scavenge_progress = progress_body(
        status="Waiting",
        schedule=normal,
        scheduleAsGiven="*/2 * * * * *",
        clusterScavengeId=None,
        members=[],
        done={},
        designatedNode=None,
        nodeScavengeId=None,
    )
    app = make_app(leader, clock=clock)
    async with app.run_test(size=(80, 24)) as pilot:
        await ready(app, pilot)
        await pilot.press("3")
        await pilot.pause()
        text = flat(text_of(app, "auto-panel"))
        assert "schedule */2 * * * * *" in text and "0,2,4" not in text
        # configured again elsewhere: the new text is read with the new normal form
        leader.auto_scavenge["schedule"] = "0,15,30,45 * * * *"
        leader.auto_scavenge_progress.update(schedule="0,15,30,45 * * * *", scheduleAsGiven="*/15 * * * *")
        clock.advance(5)
        await app.poll_all()
        await pilot.pause()
        assert "schedule */15 * * * *" in flat(text_of(app, "auto-panel"))
        # a node that does not keep the given text: its own form, as it says it
        leader.auto_scavenge["schedule"] = "0 6 * * 6"
        leader.auto_scavenge_progress = None
        clock.advance(5)
        await app.poll_all()
        await pilot.pause()
        assert "schedule 0 6 * * 6" in flat(text_of(app, "auto-panel"))
