"""The leader's decisions as a pure machine (evdb/cluster/leadership.py), driven with plain values: no
event loop, no database, no clock but the numbers passed in."""

from __future__ import annotations

import collections

from evdb.cluster.leadership import Leadership, Progress, unacked_window
from evdb.cluster.lease import LeaseGrantor

LEASE = 10.0


def leader(size: int = 3, *, epoch_at: int = 0, office_at: float = 0.0) -> Leadership:
    leases = LeaseGrantor(LEASE, size)
    leases.take_office(office_at, 0)
    machine = Leadership(size, leases)
    machine.own_epoch_position = epoch_at
    return machine


def follower(machine: Leadership, name: str, acked: int = 0, *, voting: bool = True) -> Progress:
    progress = Progress(voting, acked, name=name)
    machine.subscribed(progress)
    return progress


def test_a_write_is_answered_once_a_majority_holds_it_durably_in_position_order():
    machine = leader()
    a, b = follower(machine, "a"), follower(machine, "b")
    machine.hold(10, "first", security=False)
    machine.hold(20, "second", security=False)
    assert machine.release(own_durable_end=20, now=1.0).answers == []  # the leader alone: 1 of 3
    machine.acknowledged(a, 10)
    release = machine.release(own_durable_end=20, now=1.0)
    assert (release.commit, release.answers) == (10, ["first"])
    machine.acknowledged(b, 20)
    assert machine.release(own_durable_end=20, now=1.0).answers == ["second"]
    assert not machine.gate


def test_the_leader_counts_only_what_it_has_synced():
    machine = leader()
    a = follower(machine, "a", 20)
    machine.hold(20, "w", security=False)
    release = machine.release(own_durable_end=10, now=1.0)  # written, still being synced here
    assert (release.commit, release.answers) == (10, [])
    assert machine.release(own_durable_end=20, now=1.0).answers == ["w"]
    assert a.acked == 20


def test_read_only_replicas_never_count_towards_the_majority():
    machine = leader()
    follower(machine, "replica", 50, voting=False)
    machine.hold(50, "w", security=False)
    assert machine.majority_position(50) == -1
    assert machine.release(own_durable_end=50, now=1.0).answers == []


def test_the_commit_position_moves_only_past_the_leaders_own_epoch_record():
    machine = leader(epoch_at=30)
    follower(machine, "a", 30)
    assert machine.release(own_durable_end=30, now=1.0).commit is None  # the epoch record's start
    machine.acknowledged(machine.followers["a"], 40)
    assert machine.release(own_durable_end=40, now=1.0).commit == 40


def test_an_acknowledgement_never_moves_a_follower_back():
    machine = leader()
    a = follower(machine, "a", 40)
    machine.acknowledged(a, 20)
    assert a.acked == 40


def test_a_security_write_waits_for_the_leases_it_granted_too():
    machine = leader(office_at=0.0)
    a, b = follower(machine, "a"), follower(machine, "b")
    assert machine.grant_lease(a, {"lease": 1}, now=1.0)["grant"] == 1  # a holds a lease (maybe empty)
    machine.hold(10, "user change", security=True)
    machine.acknowledged(b, 10)
    release = machine.release(own_durable_end=10, now=2.0)
    assert release.answers == [] and release.leases_checked
    assert release.recheck_in is not None and 0 < release.recheck_in <= LEASE  # when it may lapse
    assert machine.lease_held and not machine.gate
    later = machine.release(own_durable_end=10, now=LEASE + 1.5)
    assert later.answers == ["user change"] and later.recheck_in is None
    machine.acknowledged(a, 10)
    assert machine.release(own_durable_end=10, now=LEASE + 2).answers == []


def test_a_lease_grant_waits_while_the_member_lacks_a_held_security_write():
    machine = leader(size=1)
    a = follower(machine, "a", 5, voting=False)
    machine.hold(10, "user change", security=True)
    machine.release(own_durable_end=10, now=1.0)  # a majority (the leader) holds it; the lease wait
    assert machine.lease_held
    assert machine.grant_lease(a, {"lease": 1}, now=1.0)["for"] == 0
    machine.acknowledged(a, 10)
    assert machine.grant_lease(a, {"lease": 2}, now=1.0)["for"] > 0


def test_a_leader_that_stops_leading_refuses_every_answer_it_holds():
    machine = leader()
    follower(machine, "a", 10)
    machine.hold(10, "security", security=True)
    machine.hold(20, "plain", security=False)
    machine.release(own_durable_end=20, now=1.0)
    assert machine.fail() == ["plain", "security"]  # one held for a majority, one for the leases
    assert not machine.gate and not machine.lease_held and not machine.security_gated


def test_the_order_of_refusals_is_the_gate_then_the_lease_wait():
    machine = leader()
    machine.hold(10, "held for leases", security=True)
    follower(machine, "a", 10)
    machine.release(own_durable_end=10, now=1.0)
    machine.hold(20, "held for a majority", security=False)
    assert machine.fail() == ["held for a majority", "held for leases"]


def test_shipping_before_the_sync_and_a_failed_sync_of_shipped_records():
    machine, db, other = leader(), object(), object()
    assert not machine.written(db, 50, leading=False)  # not leading: nothing is shipped early
    assert machine.written(db, 50, leading=True)
    assert machine.ship_limit(db) == 50 and machine.ship_limit(other) is None
    assert machine.senders_wait_for(db, 50, leading=True)  # its sync ended: the senders had it
    assert not machine.senders_wait_for(db, 60, leading=True)
    assert machine.may_write(leading=True)
    machine.shipped_sync_failed()
    assert not machine.may_write(leading=True) and machine.ship_limit(db) is None
    assert machine.sync_failures == 1
    machine.taking_office()  # a new office writes again
    assert machine.may_write(leading=True) and not machine.may_write(leading=False)


def test_a_resigning_leader_waits_for_its_voting_followers_only():
    machine = leader()
    a = follower(machine, "a", 10)
    follower(machine, "replica", 0, voting=False)
    assert machine.followers_behind(20)
    machine.acknowledged(a, 20)
    assert not machine.followers_behind(20)


def test_a_follower_that_subscribed_again_is_not_removed_by_its_old_session():
    machine = leader()
    old = follower(machine, "a", 10)
    new = follower(machine, "a", 12)
    machine.gone(old)
    assert machine.followers["a"] is new
    machine.gone(new)
    assert machine.followers == {}


def test_each_commit_position_goes_once_to_each_follower():
    progress = Progress(True, 0, name="a", commit_sent=30)
    assert not Leadership.commit_due(progress, 30) and not Leadership.commit_due(progress, -1)
    assert Leadership.commit_due(progress, 31)


def test_a_sender_waits_while_its_window_of_unacknowledged_messages_is_full():
    unacked = collections.deque([10, 20])
    assert unacked_window(unacked, acked=5, window=2)
    assert not unacked_window(unacked, acked=10, window=2) and list(unacked) == [20]
