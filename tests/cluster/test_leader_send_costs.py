"""What a leader sends its followers per commit group (issue 24: the leader's CPU per append). A leader
keeps at most SEND_WINDOW records messages unacknowledged per follower, so the groups it writes while a
follower syncs go out together in one message; and each new commit position goes to each follower once,
as an 8-byte message written in the loop step that releases the answers (no sender woken for it, no
JSON). Both run here in the deterministic simulation against the real ClusterService, with every
invariant checked."""

from __future__ import annotations

from collections import Counter

from evdb.cluster import sending, sim

SEEDS = range(2)
CLIENTS = 40  # writers at once: commit groups of several writes, as under load
_POST, _SEND_JSON = sim.SimChannel.post_bytes, sim.SimChannel.send_json


def _messages(monkeypatch, *, window: int) -> tuple[Counter, list[sim.SimulationResult]]:
    counts: Counter = Counter()

    def counted_post(self, data):  # type: ignore[no-untyped-def]
        counts["commit" if len(data) == 8 and self.owner.service.is_leader else "records or ack"] += 1
        _POST(self, data)

    async def counted_json(self, value):  # type: ignore[no-untyped-def]
        if isinstance(value, dict) and "commit" in value:
            counts["json commit"] += 1
        await _SEND_JSON(self, value)

    monkeypatch.setattr(sim.SimChannel, "post_bytes", counted_post)
    monkeypatch.setattr(sim.SimChannel, "send_json", counted_json)
    monkeypatch.setattr(sending, "SEND_WINDOW", window)
    results = [sim.run_seed(seed, seconds=4.0, clients=CLIENTS) for seed in SEEDS]
    return counts, results


def test_a_leader_sends_fewer_records_messages_and_one_commit_message_per_commit(monkeypatch):
    before, before_results = _messages(monkeypatch, window=1_000_000)  # every group shipped on its own
    after, after_results = _messages(monkeypatch, window=2)
    for result in before_results + after_results:
        assert result.ok, (result.seed, result.violations)
    acknowledged_before = sum(r.acknowledged for r in before_results)
    acknowledged_after = sum(r.acknowledged for r in after_results)
    assert acknowledged_before > 100 and acknowledged_after > 100  # the clients really wrote
    per_write_before = before["records or ack"] / acknowledged_before
    per_write_after = after["records or ack"] / acknowledged_after
    assert per_write_after < per_write_before * 0.8, (before, after)
    # a commit position goes to a follower once (at most one per follower per acknowledged write), and
    # as JSON only once per stream (the caught-up mark)
    followers = 2
    assert after["commit"] <= followers * acknowledged_after, after
    assert after["json commit"] < after["commit"] / 10, after


def test_the_window_keeps_a_seed_replaying_exactly():
    a = sim.run_seed(7, seconds=4.0)
    b = sim.run_seed(7, seconds=4.0)
    assert a.ok, a.violations
    assert a.replay_key == b.replay_key


def test_writes_through_followers_are_acknowledged_with_one_writer(monkeypatch):
    """A follower answers its client once it can read the write back: with one writer (no later
    records to carry a commit position) the leader's commit message is what lets it answer."""
    through_followers: Counter = Counter()
    acknowledge = sim.Simulation._acknowledge

    def counted(self, node, event_id, result):  # type: ignore[no-untyped-def]
        through_followers[node.service.state == "Follower"] += 1
        acknowledge(self, node, event_id, result)

    monkeypatch.setattr(sim.Simulation, "_acknowledge", counted)
    for seed in SEEDS:
        result = sim.run_seed(seed, seconds=4.0, clients=1)
        assert result.ok, (seed, result.violations)
    assert through_followers[True] > 30, through_followers
