"""The election decisions of one node, as a pure state machine: it takes what gossip says about the
other members, vote requests and the time, and returns what to do; it sends, persists and awaits
nothing. ``ClusterService`` (evdb/cluster/service.py) is the I/O shell around it, in a real node and in
the simulator (evdb/cluster/sim.py) alike, so both run these very decisions.

The rules (docs/cluster.md, "Elections"), Raft's pre-vote and check-quorum as etcd runs them:

- A node that has seen no live leader for its wait (the gossip timeout, or the election timeout if
  longer, plus a random part of one election timeout drawn once per round) **stands**: first a
  pre-vote round asks the live voting members whether they would vote for it in the next term; only
  when a majority (itself included) would does it raise its term (``proposal.chk``) and ask for votes.
  A pre-vote changes nothing on either side, so a node that cannot win never raises its term.
- A member refuses a pre-vote or a vote while it hears a live leader (it leads, or it follows a leader
  that answered gossip within the gossip timeout and still says Leader), while it takes office, when
  the term is not new to it, when the candidate's log is behind its own, and, between equal logs, when
  its own priority is higher and it may stand. For one election wait after it votes it grants no
  other candidate a pre-vote or a vote: the one it elected is taking office, and a pre-vote granted
  before this node hears of it would let a node cut off from the new leader raise its term and
  depose it when the link heals.
- A leader steps down when it has not heard from a majority (itself included) within the gossip
  timeout (check-quorum), when another leader with a newer epoch answers its gossip, or when a voting
  member it hears is in a newer term than its epoch: with pre-votes a term rises only after a majority
  was ready to elect that node, so such a term is a real election, never the noise of a node that
  cannot win.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from evdb.cluster.election import LogStanding, VoteRequest, grant_vote, majority

__all__ = [
    "HAND_OVER_TO",
    "Elector",
    "Follow",
    "LeaderLost",
    "Member",
    "Own",
    "Stand",
    "StepDown",
    "VoteAnswer",
]

LEADING = ("Leader", "ResigningLeader", "PreLeader")
#: the gossip key by which a resigned leader names its successor (evdb's own, beside KurrentDB's member)
HAND_OVER_TO = "handOverTo"


@dataclass(frozen=True)
class Member:
    """What gossip last said about another member (its own entry), as the decisions need it."""

    name: str  # how log lines name it (host:port)
    alive: bool  # answered gossip within the gossip timeout
    instance_id: str | None = None
    state: str = "Unknown"
    epoch: int = -1  # epochNumber
    term: int = -1  # proposalNumber: the highest term it proposed or voted in
    read_only: bool = False
    can_vote: bool = True  # a voting member with a node-to-node endpoint
    #: a leader that resigned names the follower it hands over to (gossip's ``handOverTo``)
    hand_over_to: str | None = None

    @classmethod
    def from_gossip(cls, name: str, alive: bool, info: dict, *, can_vote: bool) -> Member:
        hand_over_to = info.get(HAND_OVER_TO)
        return cls(
            name,
            alive,
            info.get("instanceId"),
            str(info.get("state", "Unknown")),
            int(info.get("epochNumber", -1)),
            int(info.get("proposalNumber", -1)),
            bool(info.get("isReadOnlyReplica", False)),
            can_vote and not info.get("isReadOnlyReplica", False),
            hand_over_to if isinstance(hand_over_to, str) else None,
        )


@dataclass(frozen=True)
class Own:
    """This node's own facts at the moment of a decision."""

    instance_id: str
    state: str
    term: int  # proposal.chk
    voted_for: str | None
    standing: LogStanding
    leader_id: str | None  # the leader it follows (or itself)
    following: bool = False  # a replication session with that leader is running


@dataclass(frozen=True)
class StepDown:
    reason: str


@dataclass(frozen=True)
class Follow:
    leader: Member


@dataclass(frozen=True)
class LeaderLost:
    leader_id: str


@dataclass(frozen=True)
class Stand:
    """Stand for election: run a pre-vote round for :meth:`Elector.next_term`. ``handed_over_by``: the
    resigned leader that named this node its successor (it stands without waiting)."""

    handed_over_by: str | None = None


@dataclass(frozen=True)
class VoteAnswer:
    granted: bool
    reason: str
    #: a granted vote (never a pre-vote): record ``term`` and the candidate in proposal.chk before
    #: answering, stop following any older leader
    record: bool = False


Decision = StepDown | Follow | LeaderLost | Stand


class Elector:
    def __init__(
        self,
        *,
        cluster_size: int,
        read_only: bool,
        priority: int,
        gossip_timeout: float,
        election_timeout: float,
        rng: random.Random,
        now: float,
    ) -> None:
        self.cluster_size = cluster_size
        self.read_only = read_only
        self.priority = priority
        self.gossip_timeout = gossip_timeout
        self.election_timeout = election_timeout
        self.rng = rng
        #: when this node last saw a live leader (or last gave up a round): its wait runs from here
        self.leader_seen = now
        self._wait: tuple[float, float] = (now - 1.0, 0.0)  # (leader_seen it was drawn for, seconds)
        self.no_candidacy_until = 0.0  # after a resign: this node does not stand until then
        #: after a resign: the follower this node hands over to (gossip says so until no_candidacy_until)
        self.hand_over_to: str | None = None
        #: the last hand-over this node acted on: (the resigned leader, its epoch); one stand each
        self._handover_taken: tuple[str | None, int] | None = None
        #: the candidate this node last voted for, and when: for one election wait it grants no other
        #: candidate a pre-vote or a vote, so the one it elected can take office
        self._last_vote: tuple[str, float] | None = None

    # -- time
    def wait_before_standing(self) -> float:
        """Seconds without a leader before this node stands: drawn once per round (each time
        ``leader_seen`` moves). Drawn afresh on every tick the wait collapsed to its minimum, the same
        on every node, and two nodes could split the votes round after round for good."""
        since, wait = self._wait
        if since != self.leader_seen:
            base = max(self.gossip_timeout, self.election_timeout)
            wait = base + self.rng.random() * self.election_timeout
            self._wait = (self.leader_seen, wait)
        return wait

    def stands_in(self, now: float) -> float:
        """Seconds from ``now`` until this node, with no leader, would stand (0: due now; inf: never, a
        read-only replica). The gossip loop wakes then, not at its next round: rounds every gossip
        interval made nodes whose random waits ended in the same interval stand together and split
        the votes (three nodes started together did, costing an election wait of 2-3 s)."""
        if self.read_only:
            return math.inf
        due = max(self.leader_seen + self.wait_before_standing(), self.no_candidacy_until)
        return max(0.0, due - now)

    def round_over(self, now: float) -> None:
        """A round ended without a leader here (a pre-vote or an election lost, a failed office):
        wait a new random delay before standing again."""
        self.leader_seen = now

    def resigned(self, now: float, successor: str | None = None) -> None:
        """This node resigned as leader: it stands in no election for a while, and names
        ``successor`` (its most up-to-date voting follower) in gossip meanwhile, which stands at once
        instead of after an election wait (Raft's leadership transfer). The successor still needs a
        majority's pre-vote and vote, so this moves only when an election starts."""
        self.leader_seen = now
        self.no_candidacy_until = now + max(3 * self.gossip_timeout, 5.0)
        self.hand_over_to = successor

    def handing_over(self, now: float) -> str | None:
        """The successor this node names in gossip now (None: none)."""
        return self.hand_over_to if now < self.no_candidacy_until else None

    # -- gossip
    def evaluate(self, now: float, own: Own, members: list[Member]) -> Decision | None:
        """After a gossip round: what this node does now."""
        alive = [m for m in members if m.alive]
        if own.state == "Leader":
            return self._check_office(own, alive)
        if own.state in ("ResigningLeader", "PreLeader"):
            return None
        # a leader elected before the term this node voted in is stale: following it could confirm
        # writes the newer leader does not have (it steps down once it sees this node's term)
        leaders = [m for m in alive if m.state == "Leader" and (m.epoch >= own.term or self.read_only)]
        if leaders:
            leader = max(leaders, key=lambda m: m.epoch)
            self.leader_seen = now
            if own.leader_id != leader.instance_id or not own.following:
                return Follow(leader)
            return None
        if own.leader_id is not None:
            self.leader_seen = now
            return LeaderLost(own.leader_id)
        if self.read_only or now < self.no_candidacy_until:
            return None
        handed_over_by = self._handed_over(own, alive)
        if handed_over_by is not None:
            return Stand(handed_over_by)
        if self.cluster_size == 1 or now - self.leader_seen >= self.wait_before_standing():
            return Stand()
        return None

    def _handed_over(self, own: Own, alive: list[Member]) -> str | None:
        """The resigned leader (no longer leading) that names this node its successor, once per
        hand-over: a stand that fails leaves this node to the usual election wait."""
        for m in alive:
            if m.hand_over_to != own.instance_id or m.state in LEADING:
                continue
            taken = (m.instance_id, m.epoch)
            if taken == self._handover_taken:
                continue
            self._handover_taken = taken
            return m.name
        return None

    def _check_office(self, own: Own, alive: list[Member]) -> StepDown | None:
        epoch = own.standing.epoch_number
        newer = [m for m in alive if m.state == "Leader" and m.epoch > epoch]
        if newer:
            return StepDown(f"Another leader with a newer epoch exists ({newer[0].name}); stepping down")
        newer_term = [m for m in alive if m.can_vote and m.term > epoch]
        if newer_term:
            # a member voted or stood in a later term after a majority granted its pre-vote: it no
            # longer takes this leader's log, and acknowledgements from the others alone must not
            # decide (Raft's "higher term" rule)
            return StepDown(
                f"Member {newer_term[0].name} is in term {newer_term[0].term}, newer than this "
                f"leader's epoch {epoch}; stepping down"
            )
        if self.cluster_size > 1 and 1 + sum(1 for m in alive if m.can_vote) < majority(self.cluster_size):
            return StepDown("The leader cannot see a majority of the cluster; stepping down")
        return None

    # -- elections
    @staticmethod
    def next_term(own: Own, members: list[Member]) -> int:
        """The term to stand in: newer than any this node or any member it heard of proposed, voted
        in or led."""
        return max([own.term, *(max(m.epoch, m.term) for m in members)]) + 1

    def request(self, own: Own, members: list[Member], *, pre_vote: bool) -> VoteRequest:
        return VoteRequest(
            self.next_term(own, members) if pre_vote else own.term,
            own.instance_id,
            own.standing,
            self.priority,
            pre_vote=pre_vote,
        )

    def elected(self, grants: int) -> bool:
        """Whether ``grants`` (this node's own included) is a majority of ClusterSize."""
        return grants >= majority(self.cluster_size)

    def answer(self, now: float, request: VoteRequest, own: Own, leader: Member | None) -> VoteAnswer:
        """A candidate asks for this node's vote (or pre-vote). ``leader``: what gossip says of the
        leader this node follows, if any."""
        hears_leader = own.state == "Leader" or (
            leader is not None
            and leader.alive
            and leader.state == "Leader"
            and leader.instance_id != request.candidate_id
        )
        fresh_vote_for = None
        if self._last_vote is not None:
            candidate, at = self._last_vote
            if now - at < max(self.gossip_timeout, self.election_timeout):
                fresh_vote_for = candidate
        granted, reason = grant_vote(
            request,
            voted_term=own.term,
            voted_for=own.voted_for,
            own=own.standing,
            own_priority=self.priority,
            follows_live_leader=hears_leader,
            eligible=not self.read_only and now >= self.no_candidacy_until,
            fresh_vote_for=fresh_vote_for,
        )
        if self.read_only:
            return VoteAnswer(False, "read-only replicas do not vote")
        if own.state == "PreLeader":
            # this node won an election and is writing its epoch: a vote now could let a second leader
            # take office over a log this node is about to extend
            return VoteAnswer(False, "this node is taking office as leader")
        if granted and not request.pre_vote:
            self.leader_seen = now  # give the candidate time to take office
            self._last_vote = (request.candidate_id, now)
            return VoteAnswer(True, reason, record=True)
        return VoteAnswer(granted, reason)
