"""Election rules, and replication between two databases in one process: the follower's log is the
leader's byte for byte (positions, chunks, epochs); a diverged tail is found and cut."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator

import pytest

from evdb.cluster.election import LogStanding, VoteRequest, grant_vote, majority
from evdb.cluster.gossip import parse_gossip_seeds
from evdb.cluster.replica import ChunkLogReplication
from evdb.cluster.sending import resolve_common_point
from evdb.database import Database
from evdb.errors import InvalidOption, NotLeader, WrongExpectedVersion
from evdb.streams import NewEvent


def request(term=5, epoch=2, position=100, priority=0, candidate="b"):
    return VoteRequest(term, candidate, LogStanding(epoch, position), priority)


def vote(
    req, *, voted_term=4, voted_for=None, own=LogStanding(2, 100), priority=0, live=False, eligible=True
):
    return grant_vote(
        req,
        voted_term=voted_term,
        voted_for=voted_for,
        own=own,
        own_priority=priority,
        follows_live_leader=live,
        eligible=eligible,
    )


def test_majority_of_the_cluster_size():
    assert [majority(n) for n in (1, 2, 3, 4, 5)] == [1, 2, 2, 3, 3]


def test_votes_go_to_new_terms_and_up_to_date_logs_only():
    assert vote(request())[0]
    assert not vote(request(term=4))[0]  # already voted in term 4
    assert vote(request(term=4), voted_term=4, voted_for="b")[0]  # same candidate asks again
    assert not vote(request(term=4), voted_term=4, voted_for="c")[0]
    assert not vote(request(position=99))[0]  # behind in the same epoch
    assert vote(request(epoch=3, position=0))[0]  # a newer epoch wins over a longer log
    assert not vote(request(epoch=1, position=10_000))[0]
    granted, reason = vote(request(), live=True)
    assert not granted and "live leader" in reason


def test_priority_decides_between_equally_up_to_date_logs():
    assert not vote(request(priority=1), priority=5)[0]
    assert vote(request(priority=5), priority=1)[0]
    assert vote(request(position=101, priority=0), priority=5)[0]  # a longer log beats priority
    assert vote(request(priority=1), priority=5, eligible=False)[0]  # a resigned leader steps aside


def test_vote_requests_round_trip_as_json():
    req = request(term=9, epoch=3, position=77, priority=-2, candidate="x")
    assert VoteRequest.from_json(req.to_json()) == req


def test_gossip_seeds_are_parsed_and_checked():
    assert parse_gossip_seeds(" 127.0.0.1:2113,[::1]:2114 ,") == [("127.0.0.1", 2113), ("::1", 2114)]
    for bad in ("localhost", "host:", ":80", "h:99999", "h:x"):
        with pytest.raises(InvalidOption, match="GossipSeed"):
            parse_gossip_seeds(bad)


def copy_log(leader: Database, follower: Database, start: int, max_bytes: int = 700) -> int:
    """What the replication stream does: read raw records on one side, apply them on the other."""
    position = start
    while True:
        position, frames, completed = ChunkLogReplication(leader).read_raw(position, max_bytes)
        if completed is not None:
            ChunkLogReplication(follower).complete_replicated_chunk(completed)
            continue
        if not frames:
            return position
        ChunkLogReplication(follower).apply_replicated(position, frames)
        position += len(frames)


def events(n, size=60):
    return [NewEvent("t", b"x" * size, b"", uuid.uuid4(), False) for _ in range(n)]


def log_content(db: Database) -> list[tuple]:
    return [(r.stream, r.event_number, r.log_position, r.event_id, r.data) for r in db.iter_all(0)]


@contextlib.contextmanager
def leader_and_follower(tmp_path, chunk_size: int = 4096) -> Iterator[tuple[Database, Database]]:
    """A leader's and a follower's database (``tmp_path/a`` and ``b``), both closed afterwards."""
    with contextlib.ExitStack() as stack:
        leader = Database.open(str(tmp_path / "a"), chunk_size=chunk_size)
        stack.callback(leader.close)
        follower = Database.open(str(tmp_path / "b"), chunk_size=chunk_size)
        stack.callback(follower.close)
        yield leader, follower


def test_a_follower_copy_is_identical_across_chunks_and_epochs(tmp_path):
    with leader_and_follower(tmp_path) as (leader, follower):
        leader.write_epoch(1, uuid.uuid4())
        for i in range(150):
            leader.append(f"s-{i % 5}", events(1 + i % 3))
        leader.write_epoch(2, uuid.uuid4())
        leader.append("after", events(2))
        end = copy_log(leader, follower, 0)
        assert end == leader.committed_position == follower.committed_position
        assert log_content(follower) == log_content(leader)
        assert len(follower.log.distinct_chunks()) == len(leader.log.distinct_chunks()) > 5
        assert [e["epochId"] for e in follower.epochs()] == [e["epochId"] for e in leader.epochs()]
        assert follower.log.checkpoints.epoch.value == leader.log.checkpoints.epoch.value
        # the follower's index answers stream reads like the leader's
        for s in ("s-0", "s-4", "after"):
            theirs = [e.event_id for e in leader.read_stream_forward(s, 0, 1000).events]
            assert [e.event_id for e in follower.read_stream_forward(s, 0, 1000).events] == theirs
        # a completed chunk replicates its completion too
        leader.call_in_writer(lambda ctx: ctx.complete_active_chunk())
        copy_log(leader, follower, end)
        assert follower.log.active_chunk.start_position == leader.log.active_chunk.start_position


def test_records_that_do_not_start_at_the_followers_end_are_refused(tmp_path):
    with leader_and_follower(tmp_path) as (leader, follower):
        leader.append("s", events(3))
        position, frames, _ = ChunkLogReplication(leader).read_raw(0, 10_000)
        ChunkLogReplication(follower).apply_replicated(position, frames)
        with pytest.raises(Exception, match="ends at"):
            ChunkLogReplication(follower).apply_replicated(
                position, frames
            )  # the same records again: not at the end
        assert log_content(follower) == log_content(leader)


def test_a_diverged_tail_is_cut_on_reopen(tmp_path):
    """An old leader wrote records nobody else got; after truncation it holds exactly the common part."""
    old = Database.open(str(tmp_path / "old"), chunk_size=4096)
    new = Database.open(str(tmp_path / "new"), chunk_size=4096)
    try:
        old.write_epoch(1, uuid.uuid4())
        old.append("s", events(10))
        common = copy_log(old, new, 0)
        old.append("lost", events(5))  # never replicated: not acknowledged by a majority
        new.write_epoch(2, uuid.uuid4())  # the new leader's epoch starts at the common end
        new.append("s", events(2))

        assert resolve_common_point(new, old) == ("truncate", common)
        old.truncate_on_next_open(common)
    finally:
        old.close()
        new.close()
    old = Database.open(str(tmp_path / "old"), chunk_size=4096)
    new = Database.open(str(tmp_path / "new"), chunk_size=4096)
    try:
        assert old.committed_position == common
        copy_log(new, old, common)
        assert log_content(old) == log_content(new)
        assert "lost" not in {r[0] for r in log_content(old)}
        assert old.read_stream_forward("s", 0, 100).events[-1].event_number == 11
    finally:
        old.close()
        new.close()


def test_a_follower_epoch_the_leader_never_had_is_cut_even_when_its_log_is_shorter(tmp_path):
    """A node briefly elected in epoch 2 wrote its epoch record and a little more; the cluster went on
    from epoch 1 under another leader, which wrote further than that node's end before its epoch 3.
    The node's records after its own epoch 2 are not the leader's even though its log is shorter."""

    leader = Database.open(str(tmp_path / "leader"), chunk_size=1 << 16)
    brief = Database.open(str(tmp_path / "brief"), chunk_size=1 << 16)
    try:
        leader.write_epoch(1, uuid.uuid4())
        leader.append("s", events(3))
        common = copy_log(leader, brief, 0)
        brief.write_epoch(2, uuid.uuid4())  # elected, then cut off
        brief.append("brief", events(2))
        leader.append("s", events(40))  # the epoch-1 leader went on: well past the brief node's end
        leader.write_epoch(3, uuid.uuid4())
        assert brief.committed_position < leader.epochs()[0]["position"]
        assert resolve_common_point(leader, brief) == ("truncate", common)
    finally:
        leader.close()
        brief.close()


@pytest.mark.parametrize("chunk_size", [4096, 1 << 18], ids=["epoch-in-a-completed-chunk", "active-chunk"])
def test_a_cut_through_a_later_epoch_keeps_the_earlier_epochs(tmp_path, chunk_size):
    """A node that led briefly (epoch 2) and is cut back to before that epoch still knows epoch 1, so
    the leader can find their common history (with no epoch left it would be refused for good)."""
    db = Database.open(str(tmp_path / "n"), chunk_size=chunk_size)
    try:
        db.write_epoch(1, uuid.uuid4())
        db.append("s", events(30))  # several chunks
        first = db.epochs()
        cut = db.write_epoch(2, uuid.uuid4())
        db.append("brief", events(3))
        assert [e["epochNumber"] for e in db.epochs()] == [2, 1]
        db.truncate_on_next_open(cut)
    finally:
        db.close()
    db = Database.open(str(tmp_path / "n"), chunk_size=chunk_size)
    try:
        assert db.committed_position == cut
        assert db.epochs() == first
    finally:
        db.close()


def test_a_new_leader_recognises_retries_of_appends_it_received_by_replication(tmp_path):
    """A client whose append reached the old leader (and a majority) but whose answer was lost retries
    it, with any expected version, on the new leader: the same positions come back, nothing twice."""
    with leader_and_follower(tmp_path) as (leader, follower):
        single, batch, recreated = events(1), events(3), events(2)
        first = leader.append("s", single)
        second = leader.append("s", batch)
        leader.append("gone", events(1))
        leader.delete_stream("gone", -2)
        third = leader.append("gone", recreated)  # recreate: the same append rewrites $$gone
        copy_log(leader, follower, 0, max_bytes=150)  # small messages: appends split between them
        follower.forget_stream_states(recent_appends=False)  # what taking office does
        for stream, evs, original in (("s", single, first), ("s", batch, second), ("gone", recreated, third)):
            again = follower.append(stream, evs)  # ANY expected version
            assert again.duplicate and again.position == original.position, (stream, again, original)
        assert len(follower.read_stream_forward("s", 0, 100).events) == 4
        with pytest.raises(WrongExpectedVersion):
            follower.append("s", batch[:2])  # part of an append is not a retry


def test_two_leaders_elected_at_the_start_the_older_epochs_node_starts_again_from_zero(tmp_path):
    """Two nodes elected in the same instant of a new cluster each wrote an epoch at position 0; the
    one with the newer epoch leads. The other's log holds nothing committed: it is cut to 0 and copied,
    not refused for good (it used to stay CatchingUp forever)."""

    leader = Database.open(str(tmp_path / "leader"), chunk_size=1 << 16)
    brief = Database.open(str(tmp_path / "brief"), chunk_size=1 << 16)
    stranger = Database.open(str(tmp_path / "stranger"), chunk_size=1 << 16)
    try:
        brief.write_epoch(1, uuid.uuid4())
        brief.append("$users", events(2))
        leader.write_epoch(2, uuid.uuid4())
        leader.append("$users", events(2))
        assert resolve_common_point(leader, brief) == ("truncate", 0)
        # a log with an epoch newer than the leader's is not this cluster's history: never cut
        stranger.write_epoch(7, uuid.uuid4())
        stranger.append("orders", events(3))
        assert resolve_common_point(leader, stranger) == ("refuse", 0)
    finally:
        leader.close()
        brief.close()
        stranger.close()


def pre(req):
    import dataclasses

    return dataclasses.replace(req, pre_vote=True)


def elector(now=100.0, **kw):
    import random

    from evdb.cluster.elector import Elector

    options = dict(cluster_size=3, read_only=False, priority=0, gossip_timeout=2.0, election_timeout=1.0)
    options.update(kw)
    return Elector(rng=random.Random(7), now=now, **options)


def own(state="Unknown", term=4, voted_for=None, epoch=2, position=100, leader_id=None, following=False):
    from evdb.cluster.elector import Own

    return Own("me", state, term, voted_for, LogStanding(epoch, position), leader_id, following)


def member(name="b", alive=True, state="Follower", epoch=2, term=2, read_only=False):
    from evdb.cluster.elector import Member

    return Member(name, alive, f"id-{name}", state, epoch, term, read_only, not read_only)


def test_the_wait_before_standing_is_drawn_once_per_round_and_spread():
    """Two nodes that lost an election together must not stand again in the same instant: each draws
    its wait once per round (not on every gossip tick, which collapsed it to the same minimum on every
    node and split the votes round after round)."""
    machine = elector()
    first = machine.wait_before_standing()
    assert all(machine.wait_before_standing() == first for _ in range(20))  # same round
    waits = []
    for round_start in range(200):
        machine.round_over(200.0 + round_start)
        waits.append(machine.wait_before_standing())
    assert all(2.0 <= w < 3.0 for w in waits)
    assert len({round(w, 3) for w in waits}) > 150 and max(waits) - min(waits) > 0.8


def test_a_pre_vote_is_granted_for_a_newer_term_only_and_records_nothing():
    from evdb.cluster.elector import Stand

    machine = elector()
    answer = machine.answer(101.0, pre(request(term=5)), own(term=4), None)
    assert answer.granted and not answer.record  # would vote, and records nothing
    assert machine.answer(101.0, request(term=5), own(term=4), None).record  # a real vote is recorded
    # a pre-vote for the term this node already voted in is refused, even for the same candidate
    assert not machine.answer(101.0, pre(request(term=4)), own(term=4, voted_for="b"), None).granted
    # a candidate stands in a term newer than any it heard of, and asks in a pre-vote first
    decision = machine.evaluate(104.0, own(term=4), [member("b", epoch=6, term=7)])
    assert isinstance(decision, Stand)
    assert machine.request(own(term=4), [member("b", epoch=6, term=7)], pre_vote=True).term == 8


def test_a_node_that_hears_a_live_leader_refuses_pre_votes_and_votes():
    machine = elector()
    leader = member("a", state="Leader")
    for pre_vote in (True, False):
        req = request(term=9, epoch=5, position=10_000)
        req = pre(req) if pre_vote else req
        refused = machine.answer(101.0, req, own("Follower", leader_id="id-a"), leader)
        assert not refused.granted and "live leader" in refused.reason
        assert not machine.answer(101.0, req, own("Leader", leader_id="me"), None).granted
        # a leader that stopped answering, or says it is no longer the leader, holds nobody back
        assert machine.answer(
            101.0, req, own("Follower", leader_id="id-a"), member("a", alive=False, state="Leader")
        ).granted
        assert machine.answer(
            101.0, req, own("Follower", leader_id="id-a"), member("a", state="ResigningLeader")
        ).granted


def test_a_node_that_just_voted_gives_its_candidate_one_election_wait_to_take_office():
    """Simulator seed 22523: node1 voted for node2, then granted node3 a pre-vote for the next term in
    the same instant, before it heard that node2 had won. node3, cut one way from node2, raised its
    term on that pre-vote, and when the link healed three seconds later node2, the healthy majority's
    leader, stepped down for it. For one election wait after a vote, no other candidate gets one."""
    machine = elector()  # gossip timeout 2 s, election timeout 1 s: the wait is 2 s
    assert machine.answer(101.0, request(term=5, candidate="b"), own(term=4), None).record
    voted = own(term=5, voted_for="b")
    for pre_vote in (True, False):
        req = request(term=6, candidate="c")
        req = pre(req) if pre_vote else req
        refused = machine.answer(101.05, req, voted, None)
        assert not refused.granted and "voted for b in term 5 a moment ago" in refused.reason
        # the candidate it voted for may stand again (it lost, say), and after the wait anyone may
        assert machine.answer(
            101.05,
            request(term=6, candidate="b") if not pre_vote else pre(request(term=6, candidate="b")),
            voted,
            None,
        ).granted
    # (its last vote, for b again at 101.05, started a new wait)
    assert not machine.answer(103.0, pre(request(term=7, candidate="c")), voted, None).granted
    assert machine.answer(103.1, pre(request(term=7, candidate="c")), voted, None).granted


def test_a_leader_steps_down_for_a_lost_majority_or_a_real_newer_term_only():
    from evdb.cluster.elector import StepDown

    machine = elector(cluster_size=5)
    leader = own("Leader", term=2, leader_id="me")
    followers = [member(n) for n in "bc"]
    assert (
        machine.evaluate(
            101.0, leader, [*followers, member("d", alive=False, term=40), member("e", alive=False)]
        )
        is None
    )
    # check-quorum: it hears from fewer than a majority
    decision = machine.evaluate(101.0, leader, [followers[0], member("c", alive=False)])
    assert isinstance(decision, StepDown) and "majority" in decision.reason
    # a read-only replica's term or a dead member's never counts
    assert machine.evaluate(101.0, leader, [*followers, member("r", term=9, read_only=True)]) is None
    # a member it hears that voted in a newer term (with pre-votes, only after a majority granted one)
    decision = machine.evaluate(101.0, leader, [*followers, member("d", term=3)])
    assert isinstance(decision, StepDown) and "term 3" in decision.reason
    decision = machine.evaluate(101.0, leader, [*followers, member("d", state="Leader", epoch=3, term=3)])
    assert isinstance(decision, StepDown) and "newer epoch" in decision.reason


def test_a_node_follows_the_newest_live_leader_and_stands_only_after_its_wait():
    from evdb.cluster.elector import Follow, LeaderLost, Stand

    machine = elector()
    stale = member("a", state="Leader", epoch=3, term=3)
    newer = member("b", state="Leader", epoch=5, term=5)
    decision = machine.evaluate(101.0, own(term=5), [stale, newer])
    assert isinstance(decision, Follow) and decision.leader.name == "b"
    assert (
        machine.evaluate(101.0, own("Follower", term=5, leader_id="id-b", following=True), [stale, newer])
        is None
    )
    # a leader elected before the term this node voted in is not followed
    assert machine.evaluate(101.0, own(term=5), [stale]) is None
    lost = machine.evaluate(102.0, own("Follower", term=5, leader_id="id-b", following=True), [stale])
    assert isinstance(lost, LeaderLost)
    wait = machine.wait_before_standing()
    assert machine.evaluate(102.0 + wait - 0.01, own(term=5), []) is None
    assert isinstance(machine.evaluate(102.0 + wait + 1e-9, own(term=5), []), Stand)
    machine.resigned(200.0)  # a resigned leader stays out of the next election
    assert machine.evaluate(204.0, own(term=5), []) is None
    assert isinstance(elector(read_only=False, cluster_size=1).evaluate(100.0, own(), []), Stand)
    assert elector(read_only=True).evaluate(1000.0, own(), []) is None


def test_a_resigned_leader_hands_over_to_its_successor_which_stands_at_once():
    """Raft's leadership transfer: a resign cost the cluster an election wait (about 3 s with the
    default timeouts, every auto-scavenge cycle, when the leader is scavenged last). The resigned leader
    names its most up-to-date follower in gossip; that follower stands at its next evaluation, once per
    hand-over (a stand that fails leaves it to the usual wait); any other node waits as before."""
    import dataclasses

    from evdb.cluster.elector import HAND_OVER_TO, Member, Stand

    resigned = elector()
    resigned.resigned(200.0, "me")
    assert resigned.handing_over(201.0) == "me"
    assert resigned.handing_over(200.0 + 6.0) is None  # only during its own stay out
    info = {
        "instanceId": "id-a",
        "state": "Unknown",
        "epochNumber": 2,
        "proposalNumber": 2,
        HAND_OVER_TO: "me",
    }
    ex_leader = Member.from_gossip("a", True, info, can_vote=True)
    assert ex_leader.hand_over_to == "me"

    successor = elector(now=200.0)  # it heard the leader a moment ago
    decision = successor.evaluate(200.5, own(term=4), [ex_leader, member("b")])
    assert isinstance(decision, Stand) and decision.handed_over_by == "a"  # no election wait
    assert successor.evaluate(200.6, own(term=4), [ex_leader, member("b")]) is None  # once
    # still leading (resigning): no stand yet
    fresh = elector(now=200.0)
    assert (
        fresh.evaluate(200.5, own(term=4), [dataclasses.replace(ex_leader, state="ResigningLeader")]) is None
    )
    # another node is not the one named: it waits as before
    other = elector(now=200.0)
    named_other = dataclasses.replace(ex_leader, hand_over_to="someone-else")
    assert other.evaluate(200.5, own(term=4), [named_other]) is None
    # a hand-over of a later resign (a newer epoch) is taken again
    later = dataclasses.replace(ex_leader, epoch=3)
    successor.round_over(300.0)
    assert isinstance(successor.evaluate(300.1, own(term=4), [later]), Stand)


def test_a_resigning_leader_names_the_voting_follower_that_acknowledged_the_most():
    from evdb.cluster.leadership import Leadership, Progress

    leadership = Leadership.__new__(Leadership)
    leadership.followers = {
        "b": Progress(voting=True, acked=90, name="b"),
        "c": Progress(voting=True, acked=100, name="c"),
        "r": Progress(voting=False, acked=200, name="r"),
    }
    assert leadership.successor() == "c"
    leadership.followers["a"] = Progress(voting=True, acked=100, name="a")
    assert leadership.successor() == "a"  # ties: the lowest id, the same on every replay
    leadership.followers = {"r": Progress(voting=False, acked=200, name="r")}
    assert leadership.successor() is None


def test_records_written_before_a_new_leaders_epoch_record_are_found_and_cut(tmp_path):
    """The divergence a reliability engineer found: a new leader wrote client records after the
    previous epoch's records it had and before its own epoch record (it took writes while PreLeader).
    The epochs alone put the common point at that epoch record, inside the old leader's records; the
    record-by-record check finds where the logs really parted, on a record boundary both share."""
    old = Database.open(str(tmp_path / "old"), chunk_size=1 << 16)
    new = Database.open(str(tmp_path / "new"), chunk_size=1 << 16)
    try:
        old.write_epoch(1, uuid.uuid4())
        old.append("s", events(5))
        common = copy_log(old, new, 0)
        old.append("s", events(7))  # the old leader went on; never replicated
        new.append("stray", events(3))  # written by the new leader before its epoch record
        new.write_epoch(2, uuid.uuid4())
        new.append("s", events(1))
        assert resolve_common_point(new, old) == ("truncate", common)
        # a follower that stopped exactly at a record boundary of the stray part still gets cut
        assert old.committed_position != new.epochs()[0]["position"]
    finally:
        old.close()
        new.close()


def test_a_follower_whose_log_is_a_prefix_goes_on_from_its_end(tmp_path):
    leader = Database.open(str(tmp_path / "leader"), chunk_size=1 << 16)
    follower = Database.open(str(tmp_path / "follower"), chunk_size=1 << 16)
    try:
        leader.write_epoch(1, uuid.uuid4())
        leader.append("s", events(5))
        end = copy_log(leader, follower, 0)
        leader.append("s", events(5))
        assert resolve_common_point(leader, follower) == ("ok", end)
        assert resolve_common_point(leader, leader) == ("ok", leader.committed_position)
    finally:
        leader.close()
        follower.close()


def test_the_write_permit_refuses_client_writes_but_not_epochs(tmp_path):
    """A node taking office writes nothing of a client's before its epoch record: the writer asks the
    permit under its lock, so a write queued before the node stood is refused too."""
    db = Database.open(str(tmp_path / "n"), chunk_size=1 << 16)
    try:
        db.write_permit = lambda: False
        with pytest.raises(NotLeader):
            db.append("s", events(1))
        with pytest.raises(NotLeader):
            db.delete_stream("s")
        db.write_epoch(1, uuid.uuid4())  # the epoch itself is the cluster's own write
        assert db.read_all_forward(0, 100).events[-1].stream == "$epochs"
        db.write_permit = lambda: True
        db.append("s", events(1))
    finally:
        db.close()


def test_reads_stop_at_the_read_limit_but_the_writer_sees_everything(tmp_path):
    """A cluster member serves only what the cluster committed; the writer still checks expected
    versions against every record it holds."""
    db = Database.open(str(tmp_path / "n"), chunk_size=1 << 16)
    try:
        db.append("s", events(2))
        limit = db.committed_position
        db.append("s", events(3))
        db.set_read_limit(limit)
        assert db.readable_position == limit
        assert [e.event_number for e in db.read_stream_forward("s", 0, 100).events] == [0, 1]
        assert [e.event_number for e in db.read_stream_backward("s", None, 100).events] == [1, 0]
        assert db.stream_state("s").last_event_number == 1
        assert db.read_all_forward(0, 100).is_end
        assert all(e.log_position < limit for e in db.read_all_forward(0, 100).events)
        assert all(e.log_position < limit for e in db.read_all_backward(None, 100).events)
        with pytest.raises(WrongExpectedVersion):
            db.append("s", events(1), expected_version=1)  # the writer knows event 4 exists
        db.append("s", events(1), expected_version=4)
        db.set_read_limit(db.committed_position)
        assert db.stream_state("s").last_event_number == 5
    finally:
        db.close()
    db = Database.open(str(tmp_path / "n"), chunk_size=1 << 16)
    try:
        assert db.commit_limit_at_open() == db.committed_position
    finally:
        db.close()


def test_a_follower_that_stops_at_a_completed_chunks_end_is_not_cut_back_into_it(tmp_path):
    """A follower whose log ends where a completed chunk ends (a scavenge point completes the chunk, say)
    goes on from there: cutting it back to the chunk's last record would reopen it at the chunk's end
    again, and again, at every reconnection."""
    leader = Database.open(str(tmp_path / "leader"), chunk_size=1 << 16)
    follower = Database.open(str(tmp_path / "follower"), chunk_size=1 << 16)
    try:
        leader.write_epoch(1, uuid.uuid4())
        leader.append("s", events(5))
        leader.call_in_writer(lambda ctx: ctx.complete_active_chunk())
        end = copy_log(leader, follower, 0)
        assert follower.committed_position == leader.committed_position == end == 1 << 16
        assert resolve_common_point(leader, follower) == ("ok", end)
        leader.append("s", events(2))  # and once the leader went on in the next chunk
        assert resolve_common_point(leader, follower) == ("ok", end)
    finally:
        leader.close()
        follower.close()


def test_all_reads_reach_a_read_limit_at_a_chunk_boundary(tmp_path):
    """A read limit at a completed chunk's end (past the chunk's last record): a forward read of $all
    reports the end there instead of asking again from the same place for ever."""
    db = Database.open(str(tmp_path / "n"), chunk_size=1 << 16)
    try:
        db.append("s", events(3))
        db.call_in_writer(lambda ctx: ctx.complete_active_chunk())
        limit = db.committed_position
        db.append("s", events(2))
        db.set_read_limit(limit)
        page = db.read_all_forward(0, 100)
        assert len(page.events) == 3 and page.is_end and page.next_position == limit
        again = db.read_all_forward(page.next_position, 100)
        assert again.events == [] and again.is_end
    finally:
        db.close()


def test_a_chunk_filled_to_its_last_byte_is_completed_on_the_follower_too(tmp_path):
    """Records that fill a chunk exactly: the leader goes on in the next chunk without a completion
    message (the follower is already at the chunk's end); the follower completes its chunk there and
    takes the next records (it used to fail 'data does not fit in the chunk' for good; found by the
    real-process fault soak)."""
    from evdb.storage import records as rec

    size = 1 << 16
    leader = Database.open(str(tmp_path / "leader"), chunk_size=size)
    follower = Database.open(str(tmp_path / "follower"), chunk_size=size)
    try:
        frame = rec.event_frame_size(len("s"), len("t"), 1000, 0)
        while size - leader.committed_position >= 2 * frame:
            leader.append("s", events(1, size=1000))
        left = size - leader.committed_position
        leader.append("s", events(1, size=1000 + left - frame))  # ends exactly at the chunk's end
        assert leader.committed_position == size
        copy_log(leader, follower, 0)
        assert follower.committed_position == size
        leader.append("s", events(3))  # in the next chunk
        end = copy_log(leader, follower, size)
        assert follower.committed_position == leader.committed_position == end
        assert log_content(follower) == log_content(leader)
    finally:
        leader.close()
        follower.close()


def test_the_commit_rules():
    from evdb.cluster.commit import follower_readable, leader_commit, majority_end

    # the leader's durable end and the voting followers' acknowledged ends: a majority's end
    assert majority_end(900, [700, 500], 3) == 700
    assert majority_end(600, [700, 500], 3) == 600  # the leader counts only what it synced
    assert majority_end(900, [], 3) == -1  # fewer than a majority report
    assert majority_end(900, [800, 100, 50, 40], 5) == 100
    assert majority_end(900, [], 1) == 900
    # past its own epoch record only (Raft's rule), and never before it wrote one
    assert leader_commit(700, 640) == 700
    assert leader_commit(640, 640) is None and leader_commit(500, 640) is None
    assert leader_commit(700, -1) is None
    # a follower serves its leader's commit position, as far as it holds it durably
    assert follower_readable(700, 650) == 650 and follower_readable(700, 900) == 700
