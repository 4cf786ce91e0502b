"""Issue 34, "Screens that are untrue, stale without saying so, or hidden": each point, at 200×50 and
at 80×24 where the terminal matters, from recorded node answers."""

from __future__ import annotations

import httpx
import pytest

from evdb.clock import ManualClock
from tests.tui.fake_node import FakeNode
from tests.tui.test_truth import Watch, _run, flat, plain, progress, reports
from tui.panels import render_chunks, render_cluster
from tui.state import SCAVENGE_PHASES

WIDTHS = (200, 80)

#: what evdb's progress reports of a run that finished every phase in 1.3 s
PHASE_SECONDS = [
    {"phase": "Beginning", "seconds": 0.05},
    {"phase": "Accumulation", "seconds": 0.4},
    {"phase": "Calculation", "seconds": 0.2},
    {"phase": "Chunk execution", "seconds": 0.5},
    {"phase": "Chunk merging", "seconds": 0.05},
    {"phase": "Index execution", "seconds": 0.08},
    {"phase": "Cleaning", "seconds": 0.02},
]


class EndsBetweenReads(FakeNode):
    """A short run: the progress read says it runs (Beginning), and it has ended, with its
    ``$scavengeCompleted`` written, before the history is read."""

    def handle(self, request: httpx.Request) -> httpx.Response:
        response = super().handle(request)
        if request.url.path == "/admin/scavenge/progress" and self.scavenge_id:
            _run(self, self.scavenge_id, f"{self.host}:{self.port}")
            self.last = {**progress(scavengeId=self.scavenge_id, phase="Cleaning"), "result": "Success"}
            self.scavenge_id, self.progress = "", None
        return response


@pytest.mark.parametrize("width", WIDTHS)
async def test_a_run_is_never_shown_running_above_a_history_that_says_it_ended(clock, width):
    watch = Watch(clock)
    watch.node = EndsBetweenReads(port=2113)
    from tests.tui.test_truth import collector_for

    watch.collector = collector_for(watch.node, clock=clock)
    watch.state.nodes = {watch.node.url: watch.collector.state}
    watch.node.scavenge_id = "sc-short"
    text = flat(await watch.text(width))
    assert "sc-short" in text and "Completed" in text
    assert "Running" not in text and "● Beginning" not in text, text
    assert "Last run: Completed" in text


@pytest.mark.parametrize("width", WIDTHS)
async def test_the_nodes_word_for_a_finished_run_is_completed(clock, width):
    watch = Watch(clock)
    _run(watch.node, "sc-1", "127.0.0.1:2113")
    text = await watch.finished(
        {**progress(phase="Cleaning", phaseSeconds=PHASE_SECONDS), "result": "Success"}, width
    )
    assert "Last run: Completed" in text
    assert "Success" not in text  # the history's row too: the node logs and writes it as Completed


@pytest.mark.parametrize("width", WIDTHS)
async def test_each_phase_of_a_short_run_is_shown_with_its_time_once_done(clock, width):
    watch = Watch(clock)
    body = {**progress(phase="Cleaning", phaseSeconds=PHASE_SECONDS, elapsedSeconds=1.3), "result": "Success"}
    text = flat(await watch.finished(body, width))
    for phase, took in (("Beginning", "0.1 s"), ("Accumulation", "0.4 s"), ("Calculation", "0.2 s")):
        assert f"✔ {phase} {took}" in text, (phase, text)
    assert "✔ Chunk execution 0.5 s" in text and "✔ Cleaning 0.0 s" in text


async def test_while_running_the_finished_phases_show_their_times_and_the_run_its_place(clock):
    watch = Watch(clock)
    body = progress(phase="Calculation", streamsTotal=10, streamsDone=10, phaseSeconds=PHASE_SECONDS[:2])
    text = flat(await watch.running(body))
    assert "✔ Accumulation 0.4 s" in text and "● Calculation" in text
    assert "overall phase 3 of 7: Calculation" in text


async def test_the_cluster_table_never_shows_one_phase_s_100_percent_as_the_whole_run(clock):
    watch = Watch(clock)
    await watch.running(progress(phase="Calculation", streamsTotal=10, streamsDone=10))
    row = flat(plain(render_cluster(watch.state, clock.time(), 200), 200))
    assert "scavenging phase 3/7 100%" in row
    await watch.running(progress(phase="Chunk execution", chunksTotal=10, chunksDone=1, chunks=reports(1)))
    row = flat(plain(render_cluster(watch.state, clock.time(), 200), 200))
    assert "scavenging phase 4/7 10%" in row  # the next phase: its place goes on


@pytest.mark.parametrize("width", WIDTHS)
async def test_a_resumed_run_does_not_list_the_stopped_runs_chunks_as_pending(clock, width):
    watch = Watch(clock)
    weights = {str(i): 4.0 for i in range(6)}
    rows = [r for r in reports(5) if r["chunkStartNumber"] >= 3]  # this run executed 3 and 4
    body = progress(
        phase="Chunk execution",
        chunksTotal=6,
        chunksDone=5,
        chunkWeights=weights,
        chunks=rows,
        executedThrough=2,
        scavengePoint={"number": 1, "position": 100, "threshold": 0, "origin": "resumed"},
    )
    await watch.running(body, width)
    text = plain(render_chunks(watch.collector.state, panel_width=width), width)
    lines = {line.split()[0]: line for line in text.splitlines() if line.strip()[:1].isdigit()}
    for chunk in ("0", "1", "2"):
        assert "done earlier" in lines[chunk] and "pending" not in lines[chunk], text
    assert "pending" in lines["5"]
    assert "done earlier 3" in flat(text)


def test_the_phases_are_the_nodes():
    assert PHASE_SECONDS[-1]["phase"] == SCAVENGE_PHASES[-1] and len(PHASE_SECONDS) == len(SCAVENGE_PHASES)


# -- the cluster table ---------------------------------------------------------------------------------
def options_rows(chunk_size: int = 268435456, **pending: tuple[object, object]) -> str:
    """evdb's ``GET /info/options`` (helper "rotate"'s contract): name, value, configured,
    restartPending; ``pending``: option name → (value in effect, configured value)."""
    import json

    rows = [{"name": "ChunkSize", "value": chunk_size, "configured": chunk_size, "restartPending": False}]
    for name, (value, configured) in pending.items():
        rows.append(
            {"name": name, "value": value, "configured": configured, "restartPending": value != configured}
        )
    return json.dumps(rows)


def three() -> tuple[FakeNode, FakeNode, FakeNode]:
    return (
        FakeNode(port=2113, state="Follower"),
        FakeNode(port=2114, state="Leader"),
        FakeNode(port=2115, state="Follower"),
    )


def cluster_text(app, width: int) -> str:
    return plain(render_cluster(app.state, app.clock.time(), width), width)


@pytest.mark.parametrize("size", [(200, 50), (80, 24)])
async def test_after_a_resign_a_row_not_read_within_two_intervals_is_stale_with_what_others_see(size):
    from tests.tui.test_truth import named_app

    clock = ManualClock()
    nodes = three()
    app = named_app(*nodes, clock=clock)
    async with app.run_test(size=size) as pilot:
        await app.poll_all()
        await pilot.pause()
        assert "node2" in cluster_text(app, size[0]) and "Leader?" not in cluster_text(app, size[0])
        for node in nodes:  # node2 resigned: every node answers Unknown, node2's answer is slow
            node.state = "Unknown"
        clock.advance(2.5)
        for node in app.state.ordered():
            if node.label != "node2":
                await app.collectors[node.url].poll_once()
        text = flat(cluster_text(app, size[0]))
        assert "Leader?" in text  # what node2 last said, marked
        assert "stale 2s" in text and "node1 sees it Unknown" in text, text
        assert "NOT writable" in text and "writable: node2" not in text


async def test_health_is_whether_the_cluster_can_take_writes_now():
    from tests.tui.test_truth import named_app

    clock = ManualClock()
    nodes = three()
    app = named_app(*nodes, clock=clock)
    async with app.run_test(size=(200, 50)) as pilot:
        await app.poll_all()
        await pilot.pause()
        assert "cluster: writable: node2 leads, 3 of 3 with it" in flat(cluster_text(app, 200))
        nodes[1].sees_alive = {2113: False, 2115: False}  # the leader is cut off from both followers
        await app.poll_all()
        text = flat(cluster_text(app, 200))
        assert "NOT writable: node2 leads, 1 of 3 with it (needs 2)" in text
        assert "node2" in text and "isolated" in text  # and its row says so (not "ok")


@pytest.mark.parametrize("width", WIDTHS)
async def test_a_followers_lag_is_data_to_ship_and_a_chunk_completion_is_explained(width):
    from tests.tui.test_truth import named_app

    clock = ManualClock()
    nodes = three()
    for node in nodes:
        node.answers[("GET", "/info/options")] = (200, options_rows())
        node.writer_checkpoint = 320_066
    app = named_app(*nodes, clock=clock)
    async with app.run_test(size=(width, 50)) as pilot:
        await app.poll_all()
        await app.poll_all()
        await pilot.pause()
        # a scavenge point on the leader completes chunk 0: its writer goes on at chunk 1's start
        nodes[1].writer_checkpoint = 268_436_935
        clock.advance(1)
        await app.poll_all()
        text = flat(cluster_text(app, 200))
        assert "255.7 MiB" not in text
        assert "1.4 KiB" in text  # the 1,479 bytes written in chunk 1: what a follower has to receive
        assert "node2's writer 320,066 → 268,436,935: chunk #0 completed" in text
        narrow = flat(cluster_text(app, width))
        assert "chunk #0 completed" in narrow


async def test_the_table_says_which_columns_a_narrow_terminal_hides():
    from tests.tui.test_truth import named_app

    app = named_app(*three(), clock=ManualClock())
    async with app.run_test(size=(80, 24)) as pilot:
        await app.poll_all()
        await pilot.pause()
        text = flat(cluster_text(app, 76))
        assert "(1 column hidden: disk r/w)" in text, text
        app.state.nodes[next(iter(app.state.nodes))].job = "writing demo data: 123 of 1,000 events"
        text = flat(cluster_text(app, 100))  # a wide "doing" pushes the process figures out: named
        assert "2 columns hidden: mem, disk r/w" in text, text
        assert "columns" not in flat(cluster_text(app, 200))


async def test_a_restart_only_option_is_pending_not_set_until_the_node_runs_with_it():
    from tests.tui.test_truth import named_app

    nodes = three()
    nodes[0].answers[("GET", "/info/options")] = (200, options_rows(EnableUnixSocket=(True, True)))
    for node in nodes[1:]:  # not restarted yet
        node.answers[("GET", "/info/options")] = (200, options_rows(EnableUnixSocket=(False, True)))
    app = named_app(*nodes, clock=ManualClock())
    async with app.run_test(size=(200, 50)) as pilot:
        await app.poll_all()
        app.state.node_options = {"EnableUnixSocket": "true"}
        await pilot.pause()
        text = flat(cluster_text(app, 200))
        assert "restart pending: EnableUnixSocket=true (node2 runs false; node3 runs false" in text, text
        assert "EnableUnixSocket=true set" not in text
        for node in nodes[1:]:
            node.answers[("GET", "/info/options")] = (200, options_rows(EnableUnixSocket=(True, True)))
        for collector in app.collectors.values():
            await collector._read_options()
        text = flat(cluster_text(app, 200))
        assert "EnableUnixSocket=true set" in text and "restart pending" not in text


async def test_without_info_options_the_given_options_are_not_claimed_in_effect():
    from tests.tui.test_truth import named_app

    app = named_app(*three(), clock=ManualClock())  # the fake nodes answer 404 to /info/options
    async with app.run_test(size=(200, 50)) as pilot:
        await app.poll_all()
        app.state.node_options = {"EnableUnixSocket": "true"}
        await pilot.pause()
        text = flat(cluster_text(app, 200))
        assert "EnableUnixSocket=true (given; the nodes do not say what they run)" in text
        assert all(n.options_available is False for n in app.state.ordered())


# -- certificates during a rotation ---------------------------------------------------------------------
async def test_during_a_rotation_the_chain_column_judges_with_the_dashboards_own_trust(tmp_path):
    """``certs rotate --prepare`` repoints the clients' CA link to the new CA before any node reloads:
    a node still presenting the old CA's certificate is fine (the dashboard's calls, through
    FollowedTrust, still trust the old CA), so its chain is not INVALID."""
    import asyncio
    import os

    from evdb.tls import create_ca, create_node_certificate, load_node_tls
    from evdb.tls.certs import repoint_link
    from evdb.tls.trust import FollowedTrust
    from tui.collector import NodeCollector
    from tui.state import NodeState

    old_cert, old_key = create_ca(tmp_path / "gen-1")
    create_ca(tmp_path / "gen-2")
    cert, key = create_node_certificate(old_cert, old_key, tmp_path / "node", ip_addresses=["127.0.0.1"])
    server_context = load_node_tls(cert, key, old_cert).server_context(require_client_cert=False)

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=server_context)
    port = server.sockets[0].getsockname()[1]
    link = tmp_path / "ca"
    os.symlink("gen-1", link)
    trust = FollowedTrust(link / "ca.crt")
    repoint_link(link, "gen-2")  # --prepare: the clients' CA is the new one now
    trust.refresh()  # what the dashboard's tick does
    clock = ManualClock()
    async with httpx.AsyncClient() as client, server:
        collector = NodeCollector(
            NodeState(url=f"https://127.0.0.1:{port}"),
            client,
            clock,
            ca_file=str(link / "ca.crt"),
            trust=lambda: trust.context,
        )
        await collector._read_certificate()
    certificate = collector.state.certificate
    assert certificate is not None and certificate.error is None and certificate.verified, certificate


# -- auto-scavenge -------------------------------------------------------------------------------------
def _auto(nodes, state: str, left: str | None = "00:00:00", **progress_changes) -> None:
    from tests.tui.test_cycle_certs_mirror import progress_body

    for node in nodes:
        node.auto_scavenge = {"state": state, "schedule": "0 6 * * 6", "timeUntilNextCycle": left}
        node.auto_scavenge_progress = progress_body(**progress_changes)


def auto_text(app, width: int) -> str:
    from tui.panels import render_auto_scavenge

    return plain(render_auto_scavenge(app.state, app.clock.monotonic(), app.clock.time(), width), width)


@pytest.mark.parametrize("size", [(200, 50), (80, 24)])
async def test_a_pausing_that_lasted_half_a_second_stays_in_the_panels_transitions(size):
    from tests.tui.test_cycle_certs_mirror import NOW, iso
    from tests.tui.test_truth import named_app

    clock = ManualClock()
    nodes = three()
    _auto(nodes, "InProgress")
    app = named_app(*nodes, clock=clock)
    async with app.run_test(size=size) as pilot:
        await app.poll_all()
        await pilot.pause()
        # between two polls the leader asked its node scavenge to stop (Pausing) and it stopped (Paused)
        for node in nodes:
            node.append(
                "$auto-scavenges",
                "$cluster-scavenge-started",
                {"clusterScavengeId": "cycle-1", "startedAt": iso(NOW - 120)},
            )
            node.append("$auto-scavenges", "$pause-requested", {"requestedAt": iso(NOW + 0.2)})
            node.append("$auto-scavenges", "$paused", {"pausedAt": iso(NOW + 0.7)})
        _auto(nodes, "Paused", paused=True)
        clock.advance(1)
        await app.poll_all()
        text = flat(auto_text(app, size[0]))
        assert "22:13:20.200 Pausing" in text and "22:13:20.700 Paused" in text, text
        assert text.index("Paused paused") < text.index("Pausing")  # newest first


async def test_without_the_event_stream_the_transitions_the_dashboard_saw_are_kept():
    from tests.tui.test_truth import named_app

    clock = ManualClock()
    nodes = three()
    _auto(nodes, "InProgress")
    app = named_app(*nodes, clock=clock)
    async with app.run_test(size=(200, 50)) as pilot:
        await app.poll_all()
        for state in ("Pausing", "Paused"):
            _auto(nodes, state, paused=state == "Paused", pauseRequested=state == "Pausing")
            clock.advance(0.5)
            await app.poll_all()
        await pilot.pause()
        text = flat(auto_text(app, 200))
        assert "as the dashboard saw them" in text
        assert "Pausing seen by the dashboard (was InProgress)" in text
        assert "Paused seen by the dashboard (was Pausing)" in text


@pytest.mark.parametrize("width", WIDTHS)
async def test_no_countdown_to_a_next_cycle_while_paused(width):
    from tests.tui.test_truth import named_app

    nodes = three()
    _auto(nodes, "Paused", paused=True)
    app = named_app(*nodes, clock=ManualClock())
    async with app.run_test(size=(width, 50)) as pilot:
        await app.poll_all()
        await pilot.pause()
        text = flat(auto_text(app, width))
        assert "00:00" not in text and "next cycle in" not in text
        assert "none while paused (p resumes)" in text


async def test_the_last_cycles_summary_names_each_nodes_role_when_it_was_scavenged():
    from tests.tui.test_cycle_certs_mirror import NOW, iso
    from tests.tui.test_truth import named_app

    clock = ManualClock()
    nodes = three()  # node2 (2114) leads
    leader_first = dict(done={}, designatedNode="127.0.0.1:2113", nodeScavengeId="sc-1")
    _auto(nodes, "InProgress", **leader_first)
    app = named_app(*nodes, clock=clock)
    async with app.run_test(size=(200, 50)) as pilot:
        await app.poll_all()  # node1 is scavenged as a Follower
        _auto(
            nodes,
            "InProgress",
            done={"127.0.0.1:2113": "Success"},
            designatedNode="127.0.0.1:2114",
            nodeScavengeId="sc-2",
        )
        await app.poll_all()  # node2 as the Leader
        # then node2 resigned and node1 leads; the cycle ends
        nodes[0].state, nodes[1].state = "Leader", "Follower"
        _auto(
            nodes,
            "Waiting",
            left="2.00:00:00",
            clusterScavengeId=None,
            startedAt=None,
            members=[],
            done={},
            designatedNode=None,
            nodeScavengeId=None,
            lastCompletedAt=iso(NOW + 55),
        )
        clock.advance(60)
        await app.poll_all()
        await pilot.pause()
        text = flat(auto_text(app, 200))
        assert "node1 (127.0.0.1:2113) Follower Completed" in text, text
        assert "node2 (127.0.0.1:2114) Leader" in text and "Leader now" not in text
        assert "node3 (127.0.0.1:2115) Follower now" in text  # never seen designated: said so


# -- backup --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("width", WIDTHS)
async def test_a_failed_backups_duration_is_the_nodes(width):
    from tests.tui.test_cycle_certs_mirror import NOW
    from tests.tui.test_truth import finished_backup
    from tui.panels import render_backup
    from tui.state import BackupState

    body = finished_backup(state="failed", elapsedSeconds=0.003, finishedAt=NOW - 59.997, error="disk full")
    del body["seconds"], body["chaser"]
    node = Watch(ManualClock()).collector.state
    node.backup = BackupState(available=True, body=body)  # first seen already ended
    text = flat(plain(render_backup(node, now=NOW, width=width), width))
    assert "duration unknown" not in text
    assert "took 0.003 s" in text and "finished 2023-11-14 22:12:20" in text


async def test_the_backup_folder_hint_is_the_nodes_own_and_new_after_a_restore(tmp_path):
    from textual.widgets import Input

    from tests.tui.test_truth import named_app

    nodes = three()
    for node in nodes:
        node.backup = {}
    app = named_app(*nodes, clock=ManualClock(), cluster_dir=str(tmp_path))
    async with app.run_test(size=(80, 24)) as pilot:
        await app.poll_all()
        await pilot.press("n")
        await pilot.pause()
        node2 = app.state.node()
        assert node2.label == "node2"
        app._restored(node2)
        await pilot.press("b")
        await pilot.pause()
        field = app.screen.query_one("#destination", Input)
        assert field.placeholder == "/var/backups/evdb/node2"
        assert field.value.startswith(str(tmp_path / "backups" / "node2-after-restore-")), field.value


# -- reload --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("result", ["Failed", "Success", None])
async def test_a_reloads_notice_tells_its_outcome_not_the_200(result):
    from tests.tui.pilot import notices
    from tests.tui.test_cycle_certs_mirror import certificates_body
    from tests.tui.test_truth import named_app

    nodes = three()
    for node in nodes:  # None: a node without /admin/certificates (KurrentDB)
        node.certificates = (
            None
            if result is None
            else certificates_body(
                result=result, error="could not load /certs/node.crt" if result == "Failed" else None
            )
        )
    app = named_app(*nodes, clock=ManualClock())
    async with app.run_test(size=(200, 50)) as pilot:
        await app.poll_all()
        app.clear_notifications()
        await pilot.press("l")
        await pilot.pause()
        await pilot.click("#send")
        await app.workers.wait_for_complete()
        await pilot.pause()
        told = notices(app)
        assert "200 OK" not in told, told
        if result == "Failed":
            assert "the reload failed" in told and "could not load /certs/node.crt" in told
        elif result == "Success":
            assert "reloaded (its lastReload: Success)" in told
        else:
            assert "outcome not known here" in told and "only the node's log tells" in told


# -- event browser -------------------------------------------------------------------------------------
@pytest.mark.parametrize("size", [(200, 50), (80, 24)])
async def test_after_opening_a_stream_the_next_keys_go_to_the_event_number(size):
    from textual.widgets import DataTable, Input

    from tests.tui.conftest import make_app
    from tests.tui.pilot import ready
    from tests.tui.test_truth import browsing_node

    app = make_app(browsing_node())
    async with app.run_test(size=size) as pilot:
        await ready(app, pilot)
        await pilot.press("e")
        await pilot.pause()
        screen = app.screen
        await pilot.press(*"orders-with-a-rather-long-stream-name-1", "enter")
        await pilot.pause()
        assert app.focused is screen.query_one("#event-number", Input)
        await pilot.press("2", "7", "enter")
        await pilot.pause()
        assert screen.query_one("#stream-name", Input).value == "orders-with-a-rather-long-stream-name-1"
        table = screen.query_one("#events", DataTable)
        assert int(table.get_row_at(0)[0]) == 27
        await pilot.press("right_square_bracket")  # ] still pages, from the number field
        await pilot.pause()
        assert int(table.get_row_at(0)[0]) == 7
        await pilot.press("tab")  # Tab goes on, never back to retype the name
        await pilot.press("1")
        assert screen.query_one("#stream-name", Input).value == "orders-with-a-rather-long-stream-name-1"


async def test_the_stream_picker_offers_the_streams_that_can_be_read_first():
    from textual.widgets import OptionList

    from tests.tui.conftest import make_app
    from tests.tui.pilot import ready

    node = FakeNode(port=2113)
    for i in range(30):
        node.append(f"demo-{i}", "Created", {"i": i})
    for i in range(600):  # a scavenge's own events since: newer than the demo's
        node.append(f"$scavenges-s{i % 3}", "$scavengeChunksCompleted", {})
    node.append("demo-gone-1", "$streamDeleted", {})
    node.append("demo-gone-2", "$streamDeleted", {})
    app = make_app(node)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await pilot.press("e")
        await pilot.pause()
        options = app.screen.query_one("#stream-list", OptionList)
        names = [str(options.get_option_at_index(i).prompt) for i in range(options.option_count)]
        assert names[:2] == ["demo-29", "demo-28"] and len(names) == 32, names
        assert names[-2:] == ["demo-gone-2  (deleted)", "demo-gone-1  (deleted)"]
        options.highlighted = len(names) - 1
        options.focus()
        await pilot.press("enter")
        await pilot.pause()
        assert "demo-gone-1" in str(app.screen.query_one("#status").content)
        assert "(deleted)" not in str(app.screen.query_one("#status").content)


# -- 80×24 ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("width", WIDTHS)
async def test_chunk_sizes_are_never_cut(clock, width):
    watch = Watch(clock)
    rows = [
        {
            "chunkStartNumber": i,
            "chunkEndNumber": i,
            "weight": 4.0,
            "executed": True,
            "merged": False,
            "sizeBefore": 1_035_980,  # 1011.7 KiB
            "sizeAfter": 10_240,
        }
        for i in range(3)
    ]
    await watch.running(progress(chunks=rows, chunkWeights={"0": 4.0, "1": 4.0, "2": 4.0, "3": 1.0}), width)
    text = plain(render_chunks(watch.collector.state, panel_width=width - 4), width - 4)
    assert text.count("1011.7 KiB") == 3 and "…" not in text, text


async def test_the_event_browsers_timestamps_are_whole_at_80x24():
    from tests.tui.conftest import make_app
    from tests.tui.pilot import ready
    from tests.tui.test_truth import browsing_node, screen_text

    app = make_app(browsing_node())
    async with app.run_test(size=(80, 24)) as pilot:
        await ready(app, pilot)
        await pilot.press("e")
        await pilot.pause()
        await pilot.press(*"orders-with-a-rather-long-stream-name-1", "enter")
        await pilot.pause()
        await pilot.pause()
        text = screen_text(app)
        assert "2024-05-01 12:00:29" in text and "2024-05-01 12:00:28" in text, text


async def _world_app(size):
    import pathlib
    import tempfile

    from tests.tui.test_snapshots import _world
    from tests.tui.test_truth import named_app

    log_dir = pathlib.Path(tempfile.mkdtemp()) / "node1"
    log_dir.mkdir()
    return named_app(*_world(False, log_dir), clock=ManualClock(), log_dirs=[str(log_dir)])


@pytest.mark.parametrize("key", ["end", "pagedown", "down"])
async def test_at_80x24_the_scavenge_history_below_the_fold_is_reached_with_the_keys(key):
    from tests.tui.test_truth import screen_text

    app = await _world_app((80, 24))
    async with app.run_test(size=(80, 24)) as pilot:
        await app.poll_all()
        await app.poll_all()
        app.clear_notifications()
        await pilot.press("1")
        await pilot.pause()
        assert "History of node1" not in screen_text(app)
        for _ in range(1 if key != "down" else 30):
            await pilot.press(key)
        await pilot.pause()
        assert "History of node1" in screen_text(app)
        await pilot.press("home")
        await pilot.pause()
        assert "Scavenge on node1" in screen_text(app)


async def test_at_80x24_a_sends_notice_is_one_short_line_on_the_cluster_boxs_border():
    from tests.tui.pilot import notices
    from tests.tui.test_truth import screen_text

    app = await _world_app((80, 24))
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await app.poll_all()
        await app.poll_all()
        app.clear_notifications()
        await pilot.press("n")  # node2: no scavenge runs there
        await pilot.pause()
        app.clear_notifications()
        await pilot.press("l")
        await pilot.pause()
        await pilot.click("#send")
        await app.workers.wait_for_complete()
        await pilot.pause()
        await pilot.pause()
        told = notices(app)
        assert told.count("\n") == 0 and "POST /admin/reloadconfig" in told, told
        lines = screen_text(app).splitlines()
        # on the cluster box's top border, under the title bar: nothing that matters is covered
        assert "node2: POST /admin/reloadconfig → reloaded (its lastReload: Success)" in lines[1], lines[:3]
        assert not any("reloadconfig" in line for line in lines[2:]), lines
        assert "Scavenge on node2" in "\n".join(lines)  # the panel is not covered


@pytest.mark.parametrize("key", ["l", "q"])
async def test_a_dialog_that_starts_on_cancel_says_so(key, tmp_path):
    from textual.widgets import Static

    app = await _world_app((80, 24))
    app.cluster_dir = str(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await app.poll_all()
        await pilot.press(key)
        await pilot.pause()
        hint = str(app.screen.query_one("#cancel-first", Static).content)
        assert "Focus starts on Cancel" in hint and app.focused.id == "cancel"


def test_a_backups_folder_is_never_cut_at_80_columns():
    from tests.tui.test_truth import finished_backup
    from tui.panels import render_backup
    from tui.state import BackupState

    folder = "/tmp/evdb-scenario-resumed-scavenge-and-pausing-ffgaiboh/backup-node1"
    node = Watch(ManualClock()).collector.state
    node.backup = BackupState(available=True, body=finished_backup(destination=folder))
    text = plain(render_backup(node, now=0.0, width=76), 76)
    assert folder in "".join(line.strip() for line in text.splitlines()), text
    assert "…" not in text
