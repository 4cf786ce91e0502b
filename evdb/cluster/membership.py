"""Gossip rounds and elections: the I/O shell that asks the peers for gossip on the gossip interval,
merges their answers into the gossip view (evdb/cluster/gossip.py), does what the election machine
(evdb/cluster/elector.py) decides after each round (stand, follow, step down), runs pre-votes and
elections, and answers other candidates' vote requests. ``ClusterService`` (evdb/cluster/service.py)
owns one :class:`Membership`; taking office, stepping down and following are the service's.
"""

from __future__ import annotations

import asyncio
import contextlib

from evdb.cluster.advertising import CLIENT_HOST, CLIENT_PORT
from evdb.cluster.election import VoteRequest
from evdb.cluster.elector import HAND_OVER_TO, Follow, LeaderLost, Member, Own, Stand, StepDown
from evdb.cluster.gossip import Peer
from evdb.cluster.shell import ClusterShell, ShellPart
from evdb.cluster.transport import PeerError

__all__ = ["FAST_GOSSIP", "Membership"]

#: seconds between gossip rounds while a leader may be taking office (Membership.look_again_soon)
FAST_GOSSIP = 0.05
#: the round that lets a node stand runs this long after its election wait ends (its clock's grain)
STAND_AFTER = 0.001


class Membership(ShellPart):
    """One node's gossip rounds and elections."""

    def __init__(self, service: ClusterShell) -> None:
        super().__init__(service)
        #: held while this node stands for election
        self.election_lock = asyncio.Lock()
        #: set to end the gossip loop's rest at once (a vote granted: the candidate's office is near)
        self._look_again = asyncio.Event()
        #: until when (this node's clock) the gossip loop looks every FAST_GOSSIP seconds, not every
        #: gossip interval: after this node granted a vote, until it follows a leader
        self._fast_until = -1.0

    def own_member(self) -> dict:
        """This node's own entry of its ``/gossip`` answer, in KurrentDB's member shape."""
        from evdb.version import VERSION

        db = self.service.db
        chk = db.log.checkpoints
        epochs = db.epochs(1)
        secure = self.service.node.tls is not None
        member: dict = {
            "instanceId": str(self.service.node.instance_id),
            "timeStamp": self.service.node.clock.time(),
            "state": self.service.state,
            "isAlive": True,
            "internalTcpIp": self.service.replication_host_advertised,
            "internalTcpPort": 0 if secure else self.service.replication_port_advertised,
            "internalSecureTcpPort": self.service.replication_port_advertised if secure else 0,
            "externalTcpIp": self.service.node.advertised_host,
            "externalTcpPort": 0,
            "externalSecureTcpPort": 0,
            "httpEndPointIp": self.service.node.advertised_host,
            "httpEndPointPort": self.service.node.advertised_port,
            CLIENT_HOST: self.service.node.client_endpoint[0],
            CLIENT_PORT: self.service.node.client_endpoint[1],
            "lastCommitPosition": db.committed_position,
            "writerCheckpoint": db.committed_position,
            "chaserCheckpoint": chk.chaser.value,
            "epochPosition": epochs[0]["position"] if epochs else -1,
            "epochNumber": epochs[0]["epochNumber"] if epochs else -1,
            "epochId": epochs[0]["epochId"] if epochs else "00000000-0000-0000-0000-000000000000",
            "nodePriority": self.service.priority,
            "proposalNumber": self.service.term,
            "isReadOnlyReplica": self.service.read_only,
            "esVersion": VERSION,
        }
        successor = self.service.elector.handing_over(self._now())
        if successor is not None:  # (only for a few seconds after a resign)
            member[HAND_OVER_TO] = successor
        return member

    # -- gossip ----------------------------------------------------------------------------------------
    async def _gossip_loop(self) -> None:
        while True:
            try:
                await self._gossip_round()
                await self._evaluate()
            except asyncio.CancelledError:
                raise
            except Exception:
                self.logger.exception("Cluster gossip round failed")
            await self._rest()

    def _rest_seconds(self) -> float:
        """The gossip interval; FAST_GOSSIP while a candidate this node voted for may be taking office
        (gossip is asked for, not sent: without this, a voter learned of its new leader up to a whole
        interval after the election, and the leader could not commit, nor sign anyone in, before)."""
        rest = self.service.gossip_interval
        if self.service.leader_id is None and self.service.state == "Unknown":
            now = self._now()
            if now < self._fast_until:
                rest = min(FAST_GOSSIP, rest)
            # no leader: the round that would make this node stand runs when its random wait ends
            rest = min(rest, self.service.elector.stands_in(now) + STAND_AFTER)
        return rest

    async def _rest(self) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._look_again.wait(), self._rest_seconds())
        self._look_again.clear()

    def look_again_soon(self) -> None:
        """Gossip every FAST_GOSSIP seconds, from now until this node follows a leader (at most a
        gossip timeout)."""
        self._fast_until = self._now() + self.service.gossip_timeout
        self._look_again.set()

    async def _gossip_round(self) -> None:
        if not self.service.peers:
            return
        await asyncio.gather(*(self._gossip_with(peer) for peer in self.service.peers.values()))

    async def _gossip_with(self, peer: Peer) -> None:
        try:
            body = await self.service.transport.gossip(peer.seed, max(self.service.gossip_interval, 0.5))
        except PeerError as exc:
            # a certificate failure is logged by the peer client, naming the peer (evdb/cluster/peers.py)
            if self.service.gossip.failed(peer, str(exc), certificate=exc.certificate, now=self._now()):
                self.logger.warning("Gossip with %s:%d failed: %s", *peer.seed, exc)
            return
        came_alive = self.service.gossip.heard(peer, body, str(self.service.node.instance_id), self._now())
        if came_alive is not None:
            self.logger.info("Member %s:%d is alive (%s)", *peer.seed, came_alive)

    def _members(self) -> list[Member]:
        return self.service.gossip.members(self._now())

    def _own(self) -> Own:
        return Own(
            str(self.service.node.instance_id),
            self.service.state,
            self.service.term,
            self.service.voted_for,
            self.service.standing(),
            self.service.leader_id,
            self.service._follow_task is not None and not self.service._follow_task.done(),
        )

    async def _evaluate(self) -> None:
        """Do what the election machine (evdb/cluster/elector.py) decides after a gossip round."""
        decision = self.service.elector.evaluate(self._now(), self._own(), self._members())
        if isinstance(decision, StepDown):
            self.logger.warning("%s", decision.reason)
            await self.service._step_down()
        elif isinstance(decision, Follow):
            peer = self.service.gossip.by_instance(decision.leader.instance_id)
            assert peer is not None  # the elector chose it from these members
            await self.service._follow(peer)
        elif isinstance(decision, LeaderLost):
            self.logger.warning("Lost the leader %s; no leader is known", decision.leader_id)
            await self.service._stop_following()
            # what the same round says next (a resigned leader's hand-over to this node): not a whole
            # gossip interval later
            if self.service.leader_id is None:
                await self._evaluate()
        elif isinstance(decision, Stand):
            if decision.handed_over_by is not None:
                self.logger.info(
                    "The resigned leader %s handed over to this node: standing for election now",
                    decision.handed_over_by,
                )
            await self._run_election()

    # -- elections (the decisions: evdb/cluster/elector.py) ---------------------------------------------
    def _voters(self) -> list[Peer]:
        return self.service.gossip.voters(self._now())

    async def _pre_vote(self) -> bool:
        """Raft's pre-vote: whether a majority would grant this node its vote in the next term. Nothing
        is recorded on either side, so a node that cannot win (cut off, or refused by members that hear
        a live leader) never raises its term, and no leader ever sees a term it would step down for."""
        request = self.service.elector.request(self._own(), self._members(), pre_vote=True)
        answers = await asyncio.gather(*(self._ask_vote(p, request) for p in self._voters()))
        grants = 1 + sum(answers)
        if self.service.elector.elected(grants):
            return True
        self.logger.info(
            "Pre-vote for term %d: %d of %d would grant it; not standing",
            request.term,
            grants,
            self.service.cluster_size,
        )
        return False

    async def _run_election(self) -> None:
        async with self.election_lock:
            started = self._now()
            voted_in = self.service.term
            if self.service.cluster_size > 1 and not await self._pre_vote():
                self.service.elector.round_over(self._now())
                return
            if (
                self.service.term != voted_in
                or self.service.leader_id is not None
                or self.service.state != "Unknown"
            ):
                return  # during the pre-vote this node voted for another, or found a leader
            await self.service._stop_following()
            term = self.service.elector.next_term(self._own(), self._members())
            self.service.db.log.checkpoints.proposal.write(term)
            self.service.voted_for = str(self.service.node.instance_id)
            self.service.election_count += 1
            request = self.service.elector.request(self._own(), self._members(), pre_vote=False)
            self.logger.info(
                "Starting an election for term %d (epoch %d, position %d, priority %d)",
                term,
                request.standing.epoch_number,
                request.standing.writer_position,
                self.service.priority,
            )
            answers = await asyncio.gather(*(self._ask_vote(p, request) for p in self._voters()))
            votes = 1 + sum(answers)
            if self.service.term != term or self.service.voted_for != str(self.service.node.instance_id):
                # while the votes came in, this node granted its own vote in a newer term: that
                # candidate may win too, so this election must not count
                self.logger.info(
                    "Abandoned the election for term %d: this node voted in term %d meanwhile",
                    term,
                    self.service.term,
                )
                return
            if self.service.elector.elected(votes) and self.service.state not in (
                "Leader",
                "ResigningLeader",
            ):
                self.logger.info(
                    "Won the election for term %d with %d of %d votes", term, votes, self.service.cluster_size
                )
                await self.service._become_leader(term)
                self.service.last_election_seconds = self._now() - started
            else:
                self.logger.info(
                    "Lost the election for term %d (%d of %d votes)", term, votes, self.service.cluster_size
                )
                self.service.elector.round_over(self._now())

    async def _ask_vote(self, peer: Peer, request: VoteRequest) -> bool:
        assert peer.replication_endpoint is not None
        try:
            body = await self.service.transport.vote(
                peer.replication_endpoint, request.to_json(), self.service.election_timeout
            )
        except PeerError as exc:
            self.logger.info("No vote from %s:%d: %s", *peer.seed, exc)
            return False
        if not isinstance(body, dict):
            return False
        if not body.get("granted"):
            self.logger.info(
                "%s:%d refused its %s: %s",
                *peer.seed,
                "pre-vote" if request.pre_vote else "vote",
                body.get("reason"),
            )
        return bool(body.get("granted"))

    async def handle_vote(self, body: dict) -> dict:
        """``/internal/vote``: a candidate asks for this node's vote."""
        try:
            vote = VoteRequest.from_json(body)
        except (ValueError, KeyError, TypeError) as exc:
            return {"granted": False, "reason": f"bad request: {exc}"}
        leader = self.service.leader_peer()
        answer = self.service.elector.answer(
            self._now(),
            vote,
            self._own(),
            None
            if leader is None
            else leader.member(self._now(), self.service.gossip_timeout, can_vote=True),
        )
        granted, reason = answer.granted, answer.reason
        if answer.record and not vote.pre_vote:  # a pre-vote changes nothing here
            # a voter in a new term takes nothing more from an older leader (its acks could confirm writes
            # the new leader does not have): the term is recorded first, so the gossip loop cannot
            # start following the old leader again while the replication session is being stopped
            self.service.db.log.checkpoints.proposal.write(vote.term)
            self.service.voted_for = vote.candidate_id
            await self.service._stop_following()
        if granted and not vote.pre_vote:
            self.look_again_soon()  # the candidate may take office in a moment: follow it then
        self.logger.info(
            "%s for %s in term %d: %s",
            "Pre-vote" if vote.pre_vote else "Vote",
            vote.candidate_id,
            vote.term,
            "granted" if granted else f"refused ({reason})",
        )
        return {"granted": granted, "reason": reason, "term": self.service.term}
