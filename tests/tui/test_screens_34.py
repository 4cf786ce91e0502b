"""Issue 34, "Screens that are untrue, stale without saying so, or hidden": each point, at 200×50 and
at 80×24 where the terminal matters, from recorded node answers."""

from __future__ import annotations

import httpx
import pytest

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
    assert "scavenging 3/7 Calculation 100%" in row
    await watch.running(progress(phase="Chunk execution", chunksTotal=10, chunksDone=1, chunks=reports(1)))
    row = flat(plain(render_cluster(watch.state, clock.time(), 200), 200))
    assert "scavenging 4/7 Chunk execution 10%" in row  # the next phase: its place goes on


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
