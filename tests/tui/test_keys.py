"""Pilot tests: every key and dialog, against fake nodes behind httpx.MockTransport."""

from __future__ import annotations

import json

from textual.command import CommandPalette
from textual.widgets import Button, Checkbox, Input, Static

from evdb.clock import ManualClock
from tests.tui.conftest import PROGRESS, make_app
from tests.tui.fake_node import FakeNode
from tests.tui.pilot import ready, submit, text_of
from tui.app import CHANGING_ACTIONS, TABS, DashboardApp
from tui.collector import NodeCollector
from tui.dialogs import (
    BackupDialog,
    ConfirmCall,
    CronDialog,
    FilterDialog,
    HelpScreen,
    QuitDialog,
    ScavengeDialog,
)
from tui.state import NodeState


async def test_cluster_panel_discovers_members_through_gossip(leader, follower):
    app = make_app(leader, follower)
    async with app.run_test(size=(160, 45)) as pilot:
        await ready(app, pilot)
        assert list(app.state.nodes) == ["http://127.0.0.1:2113", "http://127.0.0.1:2114"]
        text = text_of(app, "cluster")
        assert "Leader" in text and "Follower" in text and "ok" in text


async def test_start_scavenge_validates_then_confirms_with_the_exact_request(leader):
    app = make_app(leader)
    async with app.run_test(size=(160, 45)) as pilot:
        await ready(app, pilot)
        await pilot.press("s")
        dialog = app.screen
        assert isinstance(dialog, ScavengeDialog)
        dialog.query_one("#threads", Input).value = "2"
        dialog.query_one("#throttle_percent", Input).value = "50"
        await submit(app, pilot)
        assert "throttlePercent must be 100 for a multi-threaded scavenge" in str(
            dialog.query_one("#error", Static).content
        )
        dialog.query_one("#threads", Input).value = "0"
        await submit(app, pilot)
        assert "threads must be a 1 or above" in str(dialog.query_one("#error", Static).content)
        dialog.query_one("#threads", Input).value = "1"
        dialog.query_one("#threshold", Input).value = "abc"
        await submit(app, pilot)
        assert "threshold must be an integer" in str(dialog.query_one("#error", Static).content)
        dialog.query_one("#threshold", Input).value = "5"
        await submit(app, pilot)
        confirm = app.screen
        assert isinstance(confirm, ConfirmCall)
        shown = str(confirm.query_one("#request", Static).content)
        assert (
            "POST http://127.0.0.1:2113/admin/scavenge?threads=1&threshold=5&throttlePercent=50&syncOnly=false"
            in shown
        )
        assert "changeit" not in shown
        assert app.focused is confirm.query_one("#cancel", Button)  # starts on Cancel
        await pilot.press("enter")  # Enter alone cancels
        await pilot.pause()
        assert leader.changes() == []
        # again, and send
        await pilot.press("s")
        await submit(app, pilot)
        await pilot.click("#send")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert leader.changes() == [
            "POST http://127.0.0.1:2113/admin/scavenge?threads=1&threshold=5&throttlePercent=50&syncOnly=false"
        ]
        assert app.state.activity[-1].status == 200
        assert "sc-new" in app.state.activity[-1].body
        await app.poll_all()
        assert app.check_action("start_scavenge", ()) is None  # running now: shown disabled
        await pilot.press("7")
        await pilot.pause()
        assert "/admin/scavenge" in text_of(app, "activity-panel")


async def test_stop_scavenge_and_its_key_state(leader):
    app = make_app(leader)
    async with app.run_test(size=(160, 45)) as pilot:
        await ready(app, pilot)
        assert app.check_action("stop_scavenge", ()) is None
        await pilot.press("x")
        assert not isinstance(app.screen, ConfirmCall)
        leader.scavenge_id = "sc-1"
        leader.progress = PROGRESS
        await ready(app, pilot)
        assert app.check_action("stop_scavenge", ()) is True
        await pilot.press("x")
        await pilot.pause()
        assert "DELETE http://127.0.0.1:2113/admin/scavenge/sc-1" in str(
            app.screen.query_one("#request", Static).content
        )
        await pilot.click("#send")
        await app.workers.wait_for_complete()
        assert leader.changes() == ["DELETE http://127.0.0.1:2113/admin/scavenge/sc-1"]


async def test_readonly_shows_changing_keys_disabled(leader):
    leader.scavenge_id = "sc-1"
    leader.progress = PROGRESS
    app = make_app(leader, readonly=True)
    async with app.run_test(size=(160, 45)) as pilot:
        await ready(app, pilot)
        for action in CHANGING_ACTIONS:
            assert app.check_action(action, ()) is None, action
        for key in ("s", "x", "r", "l", "R", "p", "c"):
            await pilot.press(key)
            await pilot.pause()
            assert app.screen is app.screen_stack[0]
        assert leader.changes() == []
        await pilot.press("question_mark")
        await pilot.pause()
        help_screen = app.screen
        assert isinstance(help_screen, HelpScreen)
        assert ("s", "Scavenge", "read-only mode") in help_screen.rows
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, HelpScreen)


async def test_help_lists_every_binding(leader):
    app = make_app(leader)
    async with app.run_test(size=(160, 45)) as pilot:
        await ready(app, pilot)
        await pilot.press("question_mark")
        await pilot.pause()
        rows = app.screen.rows
        # every binding, the seven panel keys on one row, the six scrolling keys on another
        scrolling = [b for b in DashboardApp.BINDINGS if b.action.startswith("scroll_panel")]
        assert len(scrolling) == 6
        assert len(rows) == len(DashboardApp.BINDINGS) - len(TABS) + 1 - len(scrolling) + 1
        assert (
            "PgDn PgUp ↓ ↑ End Home",
            "scroll the panel (its lower part in a small terminal)",
            "available",
        ) in rows
        keys = {r[0] for r in rows}
        assert {"s", "x", "n", "/", "?", ":", "q"} <= keys
        assert ("x", "Stop scavenge", "no scavenge is running on 127.0.0.1:2113") in rows


async def test_switch_node_and_palette_jump(leader, follower):
    app = make_app(leader, follower)
    async with app.run_test(size=(160, 45)) as pilot:
        await ready(app, pilot)
        assert app.state.selected.endswith(":2113")
        await pilot.press("n")
        assert app.state.selected.endswith(":2114")
        assert app.check_action("resign", ()) is None  # a follower cannot resign
        await pilot.press("n")
        assert app.state.selected.endswith(":2113")
        await pilot.press("colon")
        await pilot.pause()
        assert isinstance(app.screen, CommandPalette)
        await pilot.press(*"Jump to node 127.0.0.1:2114")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await pilot.pause()
        assert app.state.selected.endswith(":2114")


async def test_resign_and_rolling_reload(leader, follower):
    app = make_app(leader, follower)
    async with app.run_test(size=(160, 45)) as pilot:
        await ready(app, pilot)
        await pilot.press("r")
        await pilot.pause()
        assert "POST http://127.0.0.1:2113/admin/node/resign" in str(
            app.screen.query_one("#request", Static).content
        )
        await pilot.click("#send")
        await app.workers.wait_for_complete()
        await pilot.press("R")
        await pilot.pause()
        shown = str(app.screen.query_one("#request", Static).content)
        # the leader last (docs/operations/certificates.md): the follower is reloaded first
        assert shown.index(":2114/admin/reloadconfig") < shown.index(":2113/admin/reloadconfig")
        await pilot.click("#send")
        await app.workers.wait_for_complete()
        assert leader.changes() == [
            "POST http://127.0.0.1:2113/admin/node/resign",
            "POST http://127.0.0.1:2113/admin/reloadconfig",
        ]
        assert follower.changes() == ["POST http://127.0.0.1:2114/admin/reloadconfig"]
        await pilot.press("n", "l", "escape")  # esc cancels the confirmation
        await pilot.pause()
        assert follower.changes() == ["POST http://127.0.0.1:2114/admin/reloadconfig"]


async def test_failed_call_is_reported(leader):
    leader.answers[("POST", "/admin/reloadconfig")] = (500, "could not load the certificate")
    app = make_app(leader)
    async with app.run_test(size=(160, 45)) as pilot:
        await ready(app, pilot)
        await pilot.press("l")
        await pilot.click("#send")
        await app.workers.wait_for_complete()
        assert app.state.activity[-1].status == 500
        assert any("could not load the certificate" in n.message for n in app._notifications)


async def test_a_reload_answered_200_that_failed_is_reported_and_stops_the_rolling_reload(leader, follower):
    """POST /admin/reloadconfig answers 200 whatever the outcome (as KurrentDB's); the node's lastReload
    in /admin/certificates says it failed."""
    follower.certificates = {
        "secure": True,
        "lastReload": {
            "trigger": "/admin/reloadconfig",
            "result": "Failed",
            "error": "node.key does not exist",
        },
    }
    app = make_app(leader, follower)
    async with app.run_test(size=(160, 45)) as pilot:
        await ready(app, pilot)
        await pilot.press("R")
        await pilot.pause()
        await pilot.click("#send")
        await app.workers.wait_for_complete()
        assert follower.changes() == ["POST http://127.0.0.1:2114/admin/reloadconfig"]
        assert leader.changes() == []  # stopped at the first failure: the leader is not reloaded
        assert app.state.activity[-1].outcome == "failed"
        assert any("node.key does not exist" in n.message for n in app._notifications)


async def test_auto_scavenge_pause_resume_and_schedule(leader, clock):
    leader.auto_scavenge = {"state": "Waiting", "schedule": "0 6 * * 6", "timeUntilNextCycle": "1.02:03:04.5"}
    app = make_app(leader, clock=clock)
    async with app.run_test(size=(160, 45)) as pilot:
        await ready(app, pilot)
        await pilot.press("3")
        await pilot.pause()
        assert "next cycle in" in text_of(app, "auto-panel") and "1d 02:03:04" in text_of(app, "auto-panel")
        clock.advance(4)
        app.render_panels()
        assert "1d 02:03:00" in text_of(app, "auto-panel")  # the countdown runs on the injected clock
        await pilot.press("p")
        await pilot.click("#send")
        await app.workers.wait_for_complete()
        await app.poll_all()
        assert leader.auto_scavenge["state"] == "Paused"
        await pilot.press("p")
        await pilot.pause()
        assert "/auto-scavenge/resume" in str(app.screen.query_one("#request", Static).content)
        await pilot.click("#send")
        await app.workers.wait_for_complete()
        await pilot.press("c")
        await pilot.pause()
        cron = app.screen
        assert isinstance(cron, CronDialog)
        cron.query_one("#schedule", Input).value = "61 * * * *"
        await pilot.pause()
        assert "Invalid CRON expression" in str(cron.query_one("#preview", Static).content)
        await pilot.press("enter")
        assert app.screen is cron
        cron.query_one("#schedule", Input).value = "30 2 * * *"
        await pilot.pause()
        assert "next runs:" in str(cron.query_one("#preview", Static).content)
        await submit(app, pilot)
        shown = str(app.screen.query_one("#request", Static).content)
        assert '{"schedule": "30 2 * * *"}' in shown
        await pilot.click("#send")
        await app.workers.wait_for_complete()
        assert leader.auto_scavenge["schedule"] == "30 2 * * *"


async def test_panels_without_extensions_say_not_available(leader):
    app = make_app(leader)
    async with app.run_test(size=(160, 45)) as pilot:
        await ready(app, pilot)
        assert app.check_action("pause_resume_auto", ()) is None
        await pilot.press("3")
        await pilot.pause()
        assert "not available on this node" in text_of(app, "auto-panel")
        await pilot.press("4")
        await pilot.pause()
        assert "not available on this node" in text_of(app, "backup-panel")


async def test_backup_panel(leader):
    leader.backup = {
        "operation": "full",
        "state": "running",
        "step": 4,
        "part": "full",
        "stepName": "chunk files",
        "filesDone": 1,
        "filesTotal": 3,
        "bytesDone": 1048576,
        "bytesTotal": 3145728,
        "filesCopied": 9,
        "bytesCopied": 2097152,
        "bytesPerSecond": 524288,
    }
    app = make_app(leader)
    async with app.run_test(size=(160, 45)) as pilot:
        await ready(app, pilot)
        await pilot.press("4")
        await pilot.pause()
        text = text_of(app, "backup-panel")
        assert "chunk files" in text and "1 of 3" in text and "512.0 KiB/s" in text


async def test_scavenge_and_chunk_panels_from_progress(leader):
    leader.scavenge_id = "sc-1"
    leader.progress = PROGRESS
    app = make_app(leader)
    async with app.run_test(size=(160, 45)) as pilot:
        await ready(app, pilot)
        text = text_of(app, "scavenge-panel")
        assert "Running" in text and "● Chunk execution" in text and "2 of 4" in text
        assert "1 / 4 / 100%" in text and "48.0 KiB" in text
        assert "old-1" in text and "Completed" in text and "3.5 s" in text
        await pilot.press("2")
        await pilot.pause()
        chunks = text_of(app, "chunks-panel")
        assert "threshold 4" in chunks
        assert "executed" in chunks and "skipped" in chunks and "pending" in chunks
        assert "executed 1  skipped 1  merged 0" in chunks


async def test_kurrentdb_node_scavenge_from_streams_and_metrics():
    node = FakeNode(evdb=False)
    node.scavenge_id = "k-1"
    node.append("$scavenges-k-1", "$scavengeStarted", {"scavengeId": "k-1"})
    node.append(
        "$scavenges-k-1",
        "$scavengeChunksCompleted",
        {"chunkStartNumber": 0, "chunkEndNumber": 0, "wasScavenged": True, "spaceSaved": 2048},
    )
    node.append(
        "$scavenges-k-1",
        "$scavengeChunksCompleted",
        {"chunkStartNumber": 1, "chunkEndNumber": 1, "wasScavenged": False, "spaceSaved": 0},
    )
    # KurrentDB resolves the links of $scavenges: the linked event itself
    node.streams["$scavenges"] = [dict(node.streams["$scavenges-k-1"][0])]
    app = make_app(node)
    async with app.run_test(size=(160, 45)) as pilot:
        await ready(app, pilot)
        sc = app.state.node().scavenge
        assert sc.progress_available is False and sc.running and sc.phase == "Calculation"
        assert sc.bytes_reclaimed == 2048 and [c.executed for c in sc.chunks] == [True, False]
        assert [h.scavenge_id for h in sc.history] == ["k-1"]


async def test_filter_logs(leader, tmp_path):
    folder = tmp_path / "node1"
    folder.mkdir()
    lines = [
        {"@t": "2024-05-01T12:00:01.000000Z", "@l": "Information", "@m": "Scavenge Started."},
        {"@t": "2024-05-01T12:00:02.000000Z", "@l": "Error", "@m": "certificate chain validation failed"},
        {"@t": "2024-05-01T12:00:03.000000Z", "@l": "Warning", "@m": "slow append"},
    ]
    (folder / "log-20240501.json").write_text("".join(json.dumps(x) + "\n" for x in lines) + '{"@t": "torn')
    app = make_app(leader, log_dirs=[str(folder)])
    async with app.run_test(size=(160, 45)) as pilot:
        await ready(app, pilot)
        app.tick()
        await pilot.press("6")
        await pilot.pause()
        text = text_of(app, "logs-panel")
        assert "Scavenge Started." in text and "slow append" in text and "torn" not in text
        await pilot.press("slash")
        await pilot.pause()
        assert isinstance(app.screen, FilterDialog)
        app.screen.query_one("#filter", Input).value = "level:bogus"
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, FilterDialog)  # an invalid filter keeps the dialog open
        assert "unknown level" in str(app.screen.query_one("#error", Static).content)
        app.screen.query_one("#filter", Input).value = "level:warn cert"
        await pilot.press("enter")
        await pilot.pause()
        text = text_of(app, "logs-panel")
        assert "certificate chain validation failed" in text and "slow append" not in text
        await pilot.press("escape")  # clears the filter
        await pilot.pause()
        assert "slow append" in text_of(app, "logs-panel")
        await pilot.press("5")
        await pilot.pause()
        assert "certificate chain validation failed" in text_of(app, "certs-panel")


async def test_quit_asks_about_the_launched_cluster(leader):
    app = make_app(leader, cluster_dir="/tmp/cluster-x")
    async with app.run_test(size=(160, 45)) as pilot:
        await ready(app, pilot)
        await pilot.press("q")
        await pilot.pause()
        assert isinstance(app.screen, QuitDialog)
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, QuitDialog)
        await pilot.press("q")
        await pilot.click("#stop")
    assert app.return_value == "stop"


async def test_quit_without_cluster(leader):
    app = make_app(leader)
    async with app.run_test() as pilot:
        await pilot.press("q")
    assert app.return_value is None


async def test_unreachable_node_is_marked_and_polled_less_often(leader, follower):
    follower.up = False
    app = make_app(leader, follower)
    async with app.run_test(size=(160, 45)) as pilot:
        await ready(app, pilot)
        assert "DOWN" in text_of(app, "cluster")
        collector = app.collectors["http://127.0.0.1:2114"]
        assert collector.next_delay() > collector.interval
        follower.up = True
        await app.poll_all()
        assert collector.next_delay() == collector.interval


async def test_collector_loop_keeps_one_poll_in_flight(leader):
    import asyncio

    import httpx

    clock = ManualClock()
    gate = asyncio.Event()
    seen = []

    async def slow(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.path)
        if request.url.path == "/gossip":
            await gate.wait()
        return leader.handle(request)

    class Slow(httpx.AsyncBaseTransport):
        async def handle_async_request(self, request):
            return await slow(request)

    async with httpx.AsyncClient(transport=Slow()) as client:
        collector = NodeCollector(NodeState(leader.url), client, clock, interval=1.0)
        task = asyncio.create_task(collector.run())
        await asyncio.sleep(0.01)
        await collector.poll_once()  # a second poll while one is in flight does nothing
        assert seen.count("/gossip") == 1
        gate.set()
        for _ in range(200):
            if clock.sleepers:
                break
            await asyncio.sleep(0.005)
        assert collector.state.polls == 2 - 1 and clock.sleepers == 1
        clock.advance(1.0)
        for _ in range(200):
            if collector.state.polls == 2 and clock.sleepers:
                break
            await asyncio.sleep(0.005)
        assert collector.state.polls == 2
        task.cancel()


async def test_start_backup_validates_the_folder_then_confirms(leader):
    leader.backup = {}
    app = make_app(leader)
    async with app.run_test(size=(160, 45)) as pilot:
        await ready(app, pilot)
        assert app.check_action("start_backup", ()) is True
        await pilot.press("b")
        dialog = app.screen
        assert isinstance(dialog, BackupDialog)
        dialog.query_one("#destination", Input).value = "relative/folder"
        await submit(app, pilot)
        assert "must be an absolute path" in str(dialog.query_one("#error", Static).content)
        dialog.query_one("#destination", Input).value = "/backups/n1"
        await submit(app, pilot)
        confirm = app.screen
        assert isinstance(confirm, ConfirmCall)
        shown = str(confirm.query_one("#request", Static).content)
        assert "POST http://127.0.0.1:2113/admin/backup" in shown
        assert '{"to": "/backups/n1", "differential": false, "stopScavenge": false}' in shown
        await pilot.click("#send")
        await app.workers.wait_for_complete()
        await app.poll_all()
        await pilot.pause()
        assert leader.changes() == ["POST http://127.0.0.1:2113/admin/backup"]
        assert app.state.activity[-1].status == 202
        assert app.check_action("start_backup", ()) is None  # running now: shown disabled
        # the next backup of this node starts from the same folder, as a differential one
        leader.backup["state"] = "completed"
        await app.poll_all()
        await pilot.press("b")
        assert app.screen.query_one("#destination", Input).value == "/backups/n1"
        assert app.screen.query_one("#differential", Checkbox).value is True


async def test_backup_key_is_disabled_where_the_node_has_no_backup_endpoints(leader):
    app = make_app(leader)
    async with app.run_test(size=(160, 45)) as pilot:
        await ready(app, pilot)
        assert app.check_action("start_backup", ()) is None
        assert ("b", "Backup", "backups are not available on 127.0.0.1:2113") in app.help_rows()


async def test_the_certificates_tab_opened_reads_the_certificates_at_once(leader):
    """Certificates are read at a slow pace (a TLS handshake each); one rotated outside the dashboard
    (``evdb certs rotate``) shows at the first poll after the tab is opened, not up to 30 s later."""
    app = make_app(leader)
    async with app.run_test(size=(160, 45)) as pilot:
        await ready(app, pilot)
        read = [r.url.path for r in leader.requests].count("/admin/certificates")
        await app.poll_all()
        assert [r.url.path for r in leader.requests].count("/admin/certificates") == read
        await pilot.press("5")
        await pilot.pause()
        await app.poll_all()
        assert [r.url.path for r in leader.requests].count("/admin/certificates") == read + 1
