"""Election rules, kept apart from I/O so they can be tested as plain functions.

A term is a number that only grows; ``proposal.chk`` keeps the highest term this node proposed or
voted in, so a restarted node never votes twice in one term. A candidate asks every voting member;
it wins with a majority of ClusterSize (itself included). A member grants its vote when the term is
new to it, it does not currently follow a live leader, and the candidate's log is at least as up to
date as its own (last epoch number, then writer position); between equally up-to-date logs the
higher NodePriority wins.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LogStanding", "VoteRequest", "grant_vote", "majority"]


def majority(cluster_size: int) -> int:
    return cluster_size // 2 + 1


@dataclass(frozen=True, order=True)
class LogStanding:
    """How up to date a log is: compared as (last epoch number, writer position)."""

    epoch_number: int
    writer_position: int


@dataclass(frozen=True)
class VoteRequest:
    term: int
    candidate_id: str
    standing: LogStanding
    priority: int
    #: a pre-vote: "would you vote for me in ``term``?" The answer changes nothing on either side
    pre_vote: bool = False

    def to_json(self) -> dict:
        body = {
            "term": self.term,
            "candidateId": self.candidate_id,
            "epochNumber": self.standing.epoch_number,
            "writerCheckpoint": self.standing.writer_position,
            "nodePriority": self.priority,
        }
        if self.pre_vote:
            body["preVote"] = True
        return body

    @classmethod
    def from_json(cls, body: dict) -> VoteRequest:
        pre_vote = body.get("preVote", False)
        if not isinstance(pre_vote, bool):
            raise ValueError("preVote must be true or false")
        return cls(
            int(body["term"]),
            str(body["candidateId"]),
            LogStanding(int(body["epochNumber"]), int(body["writerCheckpoint"])),
            int(body.get("nodePriority", 0)),
            pre_vote,
        )


def grant_vote(
    request: VoteRequest,
    *,
    voted_term: int,
    voted_for: str | None,
    own: LogStanding,
    own_priority: int,
    follows_live_leader: bool,
    eligible: bool,
    fresh_vote_for: str | None = None,
) -> tuple[bool, str]:
    """Whether to vote for ``request`` (or, for a pre-vote, whether this node would), and why (logged by
    both sides). A pre-vote is granted only for a term newer than any this node voted in.
    ``fresh_vote_for``: the candidate this node voted for within its election wait, if any."""
    if request.pre_vote:
        voted_for = None
    if request.term < voted_term or (request.term == voted_term and voted_for != request.candidate_id):
        return False, f"term {request.term} is not newer than term {voted_term} already voted in"
    if follows_live_leader:
        return False, "this node follows a live leader"
    if fresh_vote_for is not None and fresh_vote_for != request.candidate_id:
        # it just elected that candidate, which is taking office: a newer term now would depose a
        # leader a majority chose a moment ago (the same lease as hearing a live leader)
        return False, f"this node voted for {fresh_vote_for} in term {voted_term} a moment ago"
    if request.standing < own:
        return False, (
            f"the candidate's log (epoch {request.standing.epoch_number}, position "
            f"{request.standing.writer_position}) is behind this node's (epoch {own.epoch_number}, "
            f"position {own.writer_position})"
        )
    if request.standing == own and eligible and own_priority > request.priority:
        return False, f"equally up to date and this node's priority {own_priority} is higher"
    return True, "granted"
