"""``evdb demo-load`` while the leader resigns (issue 34): the not-leader answers are retried at the new
leader, bounded, and nothing is written twice (exact expected versions and event ids make a retried
batch a duplicate).

The demo writes through the leader that resigns after the first batch: from its resignation until it
learns the new leader (an election away) it is a node without a leader, as a follower is during a
resign, and answers ``503 This node is not the leader`` to the next batch, every time."""

from __future__ import annotations

import httpx
import pytest

from evdb.clock import SystemClock
from evdb.cluster.launcher import LocalCluster
from evdb.demo import MAX_COUNT, DemoLoadError, write_demo_data

pytestmark = pytest.mark.slow

JSON = {"Accept": "application/json"}


def _quiet(*_args) -> None:
    pass


def _events(client: httpx.Client, stream: str) -> list[dict]:
    """Every event of ``stream`` in event-number order (paging forward); [] for no stream."""
    out: list[dict] = []
    while True:
        page = client.get(f"/streams/{stream}/{len(out)}/forward/100", headers=JSON)
        if page.status_code == 404:
            return out
        page.raise_for_status()
        entries = sorted(page.json()["entries"], key=lambda e: e["eventNumber"])
        out += entries
        if len(entries) < 100:
            return out


def test_demo_load_follows_the_leader_across_a_resign(tmp_path):
    local = LocalCluster(tmp_path / "cluster")
    local.up(nodes=3, chunk_size="1MiB", timeout=90, log=_quiet)
    try:
        old_leader = local.wait_for_leader(60)
        resigned: list[int] = []

        def resign_after_the_first_batch(done: int, total: int) -> None:
            if not resigned:
                with local.client(old_leader) as c:
                    assert c.post("/admin/node/resign").status_code == 200
                resigned.append(done)

        notices: list[str] = []
        with local.client(old_leader, timeout=30) as client:
            report = write_demo_data(
                client,
                events=2000,
                progress=resign_after_the_first_batch,
                notice=notices.append,
                clock=SystemClock(),
            )
        assert resigned == [100] and report.events_written == 2000
        # the old leader answered "not the leader" while it resigned, and the writes went on at the new
        # leader: the one its gossip named, or the one it redirected them to once it followed it (the
        # demo's writes ask for the leader, as KurrentDB's clients' do)
        new_leader = local.wait_for_leader(60)
        assert new_leader != old_leader
        assert notices and all(n.startswith("following the leader at https://127.0.0.1:") for n in notices)
        assert notices[-1] == f"following the leader at {new_leader}"
        with local.client(new_leader) as c:
            for stream in report.kept:
                events = _events(c, stream)
                assert [e["eventNumber"] for e in events] == list(range(200)), stream  # none twice
                assert len({e["eventId"] for e in events}) == 200
            for stream in report.max_count:
                assert len(_events(c, stream)) == MAX_COUNT
                assert len(_events(c, f"$${stream}")) == 1  # one metadata event
                assert c.get(f"/streams/{stream}/metadata", headers=JSON).json() == {"$maxCount": MAX_COUNT}
            for stream in report.soft_deleted:
                assert c.get(f"/streams/{stream}", headers=JSON).status_code == 404
                assert len(_events(c, f"$${stream}")) == 1  # one deletion
            for stream in report.hard_deleted:
                assert c.get(f"/streams/{stream}", headers=JSON).status_code == 410
    finally:
        local.down(timeout=10, log=_quiet)


def test_demo_load_gives_up_on_a_node_that_never_answers(tmp_path):
    """Nothing to follow when no node ever answered: the first failure is the answer, at once."""
    refused = pytest.raises(DemoLoadError, match=r"The node at http://127\.0\.0\.1:9 did not answer")
    with httpx.Client(base_url="http://127.0.0.1:9", timeout=5) as client, refused:  # the discard port
        write_demo_data(client, events=10, clock=SystemClock(), sleep=lambda _: pytest.fail("it waited"))
