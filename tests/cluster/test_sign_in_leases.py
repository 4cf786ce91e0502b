"""Sign-in leases (evdb/cluster/lease.py), the pure decisions: what a follower may do with the grants it
got, and when a leader may answer a write of a user stream. Times are plain numbers (seconds on each
node's monotonic clock)."""

from __future__ import annotations

import math

from evdb.cluster.lease import (
    RATE,
    LeaseGrantor,
    LeaseHolder,
    SecurityWatch,
    holder_seconds,
    is_security_stream,
)

L = 2.0


def test_a_lease_used_on_another_clock_ends_before_the_granting_clock_counts_it_over():
    # the holder's clock may run RATE slower and the granter's RATE faster: real seconds of each
    assert holder_seconds(L) / (1 - RATE) <= L / (1 + RATE) + 1e-12
    assert holder_seconds(L) > 0.9 * L


def test_security_streams():
    for stream in ("$user-bob", "$users", "$$$user-bob", "$$$users", "$settings", "$$$settings"):
        assert is_security_stream(stream)
    for stream in ("users", "bob", "$all", "$et-x", "$$bob", "$ce-user"):
        assert not is_security_stream(stream)


def test_a_follower_signs_in_only_while_its_lease_runs_counted_from_when_it_asked():
    holder = LeaseHolder(L)
    assert not holder.admits(0.0, 100, False)  # never granted
    request = holder.ask(10.0)
    assert request == {"lease": 0, "held": -1}
    holder.granted({"grant": 0, "security": 50, "for": L})  # arrives much later: still from 10.0
    assert holder.admits(10.0 + holder_seconds(L) - 0.001, 100, False)
    assert not holder.admits(10.0 + holder_seconds(L), 100, False)
    assert holder.held == 0 and holder.ask(11.0)["held"] == 0


def test_a_follower_waits_for_the_leaders_last_security_write_and_its_own_hidden_user_records():
    holder = LeaseHolder(L)
    holder.ask(0.0)
    holder.granted({"grant": 0, "security": 500, "for": L})
    assert not holder.admits(0.1, 499, False)  # the leader's last user change is not shown here yet
    assert holder.admits(0.1, 500, False)
    assert not holder.admits(0.1, 500, True)  # a user record is held but hidden from readers


def test_a_grant_for_nothing_or_not_asked_in_this_stream_gives_no_lease():
    holder = LeaseHolder(L)
    holder.ask(0.0)
    holder.granted({"grant": 0, "security": 0, "for": 0})  # the leader holds no lease itself
    assert not holder.fresh(0.1) and holder.held == 0
    holder.ask(1.0)
    holder.new_stream()  # the stream broke: its requests are never answered there
    holder.granted({"grant": 1, "security": 0, "for": L})
    assert not holder.fresh(1.1)
    holder.ask(2.0)
    holder.granted({"grant": 2, "security": 0, "for": 0.5})  # the leader's own lease ends sooner
    assert holder.fresh(2.0 + holder_seconds(0.5) - 0.001) and not holder.fresh(2.0 + holder_seconds(0.5))


def _leader(now: float = 0.0, size: int = 3, log_end: int = 100) -> LeaseGrantor:
    grantor = LeaseGrantor(L, size)
    grantor.take_office(now, log_end)
    return grantor


def _confirm(grantor: LeaseGrantor, member: str, now: float) -> None:
    """``member`` asks, gets an answer, and names it in its next request (at ``now``)."""
    grantor.grant(member, True, {"lease": 0, "held": -1}, now)
    grantor.grant(member, True, {"lease": 1, "held": 0}, now)


def test_a_leader_signs_in_only_under_a_lease_from_a_majority_and_once_it_shows_its_log():
    grantor = _leader(log_end=100)
    assert not grantor.admits(0.1, 100)  # no follower confirmed yet
    first = grantor.grant("b", True, {"lease": 0, "held": -1}, 0.2)
    assert first["for"] == 0  # holds no lease itself: grants none
    grantor.grant("b", True, {"lease": 1, "held": 0}, 0.5)  # b got answer 0 (sent at 0.2)
    assert grantor.own_until() == 0.2 + holder_seconds(L)
    assert not grantor.admits(0.6, 99)  # not yet showing its log as of taking office
    assert grantor.admits(0.6, 100)
    assert not grantor.admits(0.2 + holder_seconds(L), 100)
    replica = _leader(size=3)
    replica.grant("r", False, {"lease": 0, "held": -1}, 0.2)
    replica.grant("r", False, {"lease": 1, "held": 0}, 0.5)
    assert replica.own_until() == -math.inf  # a read-only replica confirms nothing
    assert _leader(size=1).admits(0.0, 100)


def test_a_security_write_waits_for_every_member_granted_a_lease_to_hold_it_or_to_lapse():
    grantor = _leader(now=0.0)
    _confirm(grantor, "b", 0.1)
    grant = grantor.grant("c", False, {"lease": 0, "held": -1}, 0.2)
    assert grant["for"] > 0 and grantor.last_grant == {"b": 0.1, "c": 0.2}
    grantor.security_written(300)
    assert not grantor.releases(300, {"b": 300, "c": 300}, L - 0.01)  # earlier leaders' leases may run
    assert grantor.releases(300, {"b": 300, "c": 300}, L)
    assert not grantor.releases(300, {"b": 300, "c": 299}, L)  # c lacks it and its lease may run
    assert not grantor.releases(300, {"b": 300}, 0.2 + L - 0.01)  # c went silent: not for long
    assert grantor.releases(300, {"b": 300}, 0.2 + L)
    assert grantor.next_release_check(L) == 0.1 + L  # b's lease lapses first: look again then


def test_a_member_that_lacks_a_held_security_write_gets_no_new_lease():
    grantor = _leader(now=0.0)
    _confirm(grantor, "b", 0.1)
    grantor.grant("c", False, {"lease": 0, "held": -1}, 0.2)
    refused = grantor.grant("c", False, {"lease": 1, "held": 0}, 1.0, acked=250, holding=300)
    assert refused["for"] == 0 and grantor.last_grant["c"] == 0.2  # its lease lapses at 0.2 + L
    granted = grantor.grant("c", False, {"lease": 2, "held": 1}, 1.1, acked=300, holding=300)
    assert granted["for"] > 0 and granted["security"] == 100  # the office's start (nothing written)


def test_a_grant_names_the_last_security_write_and_a_new_office_forgets_the_old_leases():
    grantor = _leader(now=0.0, log_end=100)
    _confirm(grantor, "b", 0.1)
    grantor.security_written(400)
    grantor.security_written(300)
    assert grantor.grant("b", True, {"lease": 2, "held": 1}, 0.3)["security"] == 400
    grantor.take_office(5.0, 700)
    assert grantor.last_grant == {} and grantor.security_end == 700
    assert not grantor.admits(5.1, 700)


def test_the_security_watch_tells_each_write_once():
    watch = SecurityWatch()
    assert not watch.take()
    watch.changing(frozenset({"$user-bob"}))
    assert watch.take() and not watch.take()
