"""What a node knows of the other members from gossip, as a pure view (evdb/cluster/gossip.py): answers
and failures merged in with the time they came, no transport, no clock but the numbers passed in."""

from __future__ import annotations

from evdb.cluster.gossip import NO_INSTANCE, GossipView

TIMEOUT = 2.5
A, B = ("127.0.0.1", 2113), ("127.0.0.1", 2114)


def answer(port: int, instance: str, state: str = "Follower", **fields: object) -> dict:
    own = {
        "instanceId": instance,
        "state": state,
        "httpEndPointIp": "127.0.0.1",
        "httpEndPointPort": port,
        "internalTcpPort": port + 1000,
        **fields,
    }
    other = {"instanceId": "someone-else", "httpEndPointIp": "127.0.0.1", "httpEndPointPort": 9999}
    return {"serverIp": "127.0.0.1", "serverPort": port, "members": [other, own]}


def test_a_peers_own_entry_is_taken_and_its_coming_alive_is_said_once():
    view = GossipView([A, B], TIMEOUT)
    peer = view.peers[A]
    assert view.heard(peer, answer(2113, "a", "Leader"), "me", now=1.0) == "Leader"
    assert peer.info["instanceId"] == "a" and peer.last_seen == 1.0
    assert view.heard(peer, answer(2113, "a", "Leader"), "me", now=2.0) is None  # still alive
    assert view.heard(peer, answer(2113, "a"), "me", now=2.0 + TIMEOUT + 0.1) == "Follower"  # again


def test_an_answer_from_this_node_itself_or_without_its_own_entry_changes_nothing():
    view = GossipView([A], TIMEOUT)
    peer = view.peers[A]
    assert view.heard(peer, answer(2113, "me"), "me", now=1.0) is None
    assert (
        view.heard(peer, {"serverIp": "127.0.0.1", "serverPort": 2113, "members": []}, "me", now=1.0) is None
    )
    assert view.heard(peer, "not json", "me", now=1.0) is None
    assert peer.last_seen == -1.0 and not peer.info


def test_a_certificate_failure_kills_the_peer_at_once_and_is_not_logged_again():
    view = GossipView([A], TIMEOUT)
    peer = view.peers[A]
    view.heard(peer, answer(2113, "a"), "me", now=1.0)
    assert not view.failed(peer, "certificate refused by 127.0.0.1:2113", certificate=True, now=1.5)
    assert not peer.alive(1.5, TIMEOUT) and view.errors() == {
        "127.0.0.1:2113": "certificate refused by 127.0.0.1:2113"
    }
    view.heard(peer, answer(2113, "a"), "me", now=2.0)
    assert view.failed(peer, "timed out", certificate=False, now=2.1)  # a live peer's failure: logged
    assert not view.failed(peer, "timed out", certificate=False, now=2.0 + TIMEOUT + 1)  # a dead one's: not


def test_voters_members_and_the_leader_by_instance():
    view = GossipView([A, B], TIMEOUT)
    view.heard(view.peers[A], answer(2113, "a", "Leader", epochNumber=3, proposalNumber=4), "me", now=1.0)
    view.heard(view.peers[B], answer(2114, "b", "ReadOnlyReplica", isReadOnlyReplica=True), "me", now=1.0)
    assert [p.seed for p in view.voters(now=2.0)] == [A]  # a read-only replica never votes
    assert view.voters(now=1.0 + TIMEOUT + 0.1) == []
    members = {m.instance_id: m for m in view.members(now=2.0)}
    assert (members["a"].epoch, members["a"].term, members["a"].can_vote) == (3, 4, True)
    assert members["b"].read_only and not members["b"].can_vote
    assert view.by_instance("b") is view.peers[B]
    assert view.by_instance(None) is None and view.by_instance("c") is None


def test_the_gossip_answer_lists_dead_members_as_unknown_and_unheard_seeds_by_address():
    view = GossipView([A, B], TIMEOUT)
    view.heard(view.peers[A], answer(2113, "a", "Leader"), "me", now=1.0)
    alive, unheard = view.answer(now=2.0)
    assert (alive["state"], alive["isAlive"]) == ("Leader", True)
    assert unheard == {
        "instanceId": NO_INSTANCE,
        "state": "Unknown",
        "isAlive": False,
        "httpEndPointIp": "127.0.0.1",
        "httpEndPointPort": 2114,
    }
    dead, _ = view.answer(now=1.0 + TIMEOUT + 0.1)
    assert (dead["state"], dead["isAlive"]) == ("Unknown", False)
