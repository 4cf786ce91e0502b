"""The decisions of a write that follows the leader (evdb/client_retry.py), with a fake clock."""

from __future__ import annotations

from evdb.client_retry import LeaderRetry, NotLeaderAnswer, leader_from_gossip, member_urls, not_leader
from evdb.clock import ManualClock


def test_not_leader_answers_and_the_leader_they_name():
    base = "https://127.0.0.1:2113"
    redirect = not_leader(307, {"Location": "https://127.0.0.2:2114/streams/s?x=1"}, b"", base)
    assert redirect == NotLeaderAnswer("https://127.0.0.2:2114")
    named = not_leader(503, {}, b"This node is not the leader. Leader is at 10.0.0.3:2113.", base)
    assert named == NotLeaderAnswer("https://10.0.0.3:2113")
    assert not_leader(503, {}, "This node is not the leader.", base) == NotLeaderAnswer(None)
    assert not_leader(503, {}, b"Server is shutting down", base) is None
    assert not_leader(201, {}, b"", base) is None
    assert not_leader(400, {}, b"not the leader", base) is None


def test_the_leader_and_the_members_of_a_gossip_answer():
    gossip = {
        "members": [
            {"state": "Follower", "isAlive": True, "httpEndPointIp": "127.0.0.1", "httpEndPointPort": 1},
            {"state": "Leader", "isAlive": False, "httpEndPointIp": "127.0.0.2", "httpEndPointPort": 2},
            {"state": "Leader", "isAlive": True, "httpEndPointIp": "::1", "httpEndPointPort": 3},
        ]
    }
    assert leader_from_gossip(gossip, "http") == "http://[::1]:3"
    assert member_urls(gossip, "https") == ["https://127.0.0.1:1", "https://127.0.0.2:2", "https://[::1]:3"]
    assert leader_from_gossip({"members": "nonsense"}, "http") is None
    assert leader_from_gossip([], "http") is None


def test_waits_double_up_to_the_most_and_end_at_the_limit():
    clock = ManualClock()
    retry = LeaderRetry(2.0, first=0.25, most=1.0, follows=2, clock=clock)
    waits = []
    while (wait := retry.next_wait()) is not None:
        waits.append(wait)
        clock.advance(wait)
    assert waits == [0.25, 0.5, 1.0, 0.25]  # the last one cut at the limit
    assert retry.spent == 2.0
    fresh = LeaderRetry(10.0, follows=2, clock=clock)
    assert [fresh.follow(), fresh.follow(), fresh.follow()] == [True, True, False]  # a redirect loop ends
    fresh.next_wait()
    assert fresh.follow()  # after a wait the node may be followed again
