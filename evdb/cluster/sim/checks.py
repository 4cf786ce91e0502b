"""The simulation's checks, run as it goes: safety (no acknowledged write lost, one history, one
leader per epoch, reads of your writes, truncations, sign-in leases) and liveness (a connected
majority has one leader that stays and acknowledges writes)."""

from __future__ import annotations

import asyncio
import uuid
from itertools import combinations

from evdb.cluster.election import majority
from evdb.cluster.lease import is_security_stream
from evdb.cluster.sim.disk import SimDatabase
from evdb.cluster.sim.network import SimChannel
from evdb.cluster.sim.nodes import SimNode
from evdb.cluster.sim.records import SimRecord
from evdb.cluster.sim.state import SimulationState
from evdb.streams import AppendResult

#: simulated seconds a majority must be connected both ways, undisturbed, before the liveness check
#: requires it to have exactly one leader that stays and acknowledges writes (about six times the
#: longest wait before a node stands: GossipTimeoutMs 500 + LeaderElectionTimeoutMs 300)
LIVENESS_GRACE = 5.0
#: GossipTimeoutMs of the simulated nodes (seconds): also their sign-in lease
GOSSIP_TIMEOUT = 0.5
#: how often (simulated seconds) the liveness check has that leader acknowledge a write, and how long
#: the write may take
PROBE_EVERY = 1.0
PROBE_TIMEOUT = 2.0


class Checks(SimulationState):
    """The checker's part of :class:`~evdb.cluster.sim.simulation.Simulation`."""

    def find_in_log(self, db: SimDatabase, stream: str, ids: list[str]) -> SimRecord | None:
        for record in reversed(db.records):
            if record.kind == "event" and record.event_id == ids[0] and record.stream == stream:
                return record
        return None

    def note_write(self, node: SimNode, epoch: int, records: list[SimRecord]) -> None:
        for record in records:
            self.written_by.setdefault(record.event_id, (node.name, epoch))

    def check_visible(self, node: SimNode) -> None:
        """What a node serves to readers must be one history: every record it newly serves is the one
        every node served (or will serve) at that position."""
        db = node.db
        limit = db.readable_position
        start = self._served_up_to.get(node.name, 0)
        if limit <= start:
            self._served_up_to[node.name] = min(start, limit)
            return
        index = db._index_at(start) if start else 0
        records = db.records
        while index is not None and index < db.synced and records[index].position < limit:
            record = records[index]
            seen = self.history.setdefault(record.position, record)
            if seen != record:
                self.violation(
                    f"{node.name} serves {record.kind} {record.stream}/{record.number} {record.event_id[:8]} at "
                    f"position {record.position}, where another node served {seen.kind} {seen.stream}/"
                    f"{seen.number} {seen.event_id[:8]}"
                )
                return
            index += 1
        self._served_up_to[node.name] = limit

    def check_truncation(self, node: SimNode, cut: list[SimRecord]) -> None:
        for record in cut:
            if (
                record.event_id in self.acknowledged
                and self.acknowledged[record.event_id][0] == record.position
            ):
                holders = self._holders(record)
                if holders < majority(self.size):
                    self.violation(
                        f"{node.name} cut acknowledged event {record.event_id[:8]} at {record.position}; "
                        f"only {holders} nodes still hold it"
                    )

    def check_cut_below_served(self, node: SimNode, position: int) -> None:
        """A node never cuts its log below what it served to readers."""
        served = self._served_up_to.get(node.name, 0)
        if served > position:
            self.violation(f"{node.name} cut its log to {position}, below what it served ({served})")
            self._served_up_to[node.name] = position

    def _holders(self, record: SimRecord, exclude: SimNode | None = None) -> int:
        count = 0
        for node in self.nodes:
            if node is exclude:
                continue
            recs = node.durable.records
            lo, hi = 0, len(recs)
            while lo < hi:
                mid = (lo + hi) // 2
                if recs[mid].position < record.position:
                    lo = mid + 1
                else:
                    hi = mid
            if (
                lo < len(recs)
                and recs[lo].event_id == record.event_id
                and recs[lo].position == record.position
            ):
                count += 1
        return count

    def check_acknowledged(self, event_ids: list[str]) -> None:
        for event_id in event_ids:
            position = self.acknowledged[event_id][0]
            record = SimRecord(position, 160, "event", event_id=event_id)
            if self._holders(record) < majority(self.size):
                self.violation(f"acknowledged event {event_id[:8]} at {position} is held by no majority")

    def _acknowledge(self, node: SimNode, event_id: str, result: AppendResult) -> None:
        if event_id in self.acknowledged and self.acknowledged[event_id][0] != result.position:
            self.violation(
                f"event {event_id[:8]} acknowledged at {result.position} and earlier at "
                f"{self.acknowledged[event_id][0]}"
            )
        self.acknowledged.setdefault(event_id, (result.position, int(self.loop.time() * 1000)))
        writer = self.written_by.get(event_id)
        if writer is not None:
            leaders = self.writers_by_epoch.setdefault(writer[1], set())
            leaders.add(writer[0])
            if len(leaders) > 1:
                self.violation(f"two leaders acknowledged writes in epoch {writer[1]}: {sorted(leaders)}")
        self.check_acknowledged([event_id])
        if is_security_stream(self._streams.get(event_id, "")):
            self.security_acked = max(self.security_acked, result.position + 160)
            self.check_sign_ins()
        if node.service.is_leader:
            self.check_read_your_writes(node, event_id, result.position)

    def check_sign_ins(self) -> None:
        """Sign-in leases (evdb/cluster/lease.py): once a user change is acknowledged, no node would sign
        anyone in with the credentials before it: a node whose decision (ClusterService.admits_sign_in,
        with whether it holds a user record its readers cannot see yet) admits shows the change. Leases
        assume monotonic clocks that run steadily: for two leases after a node's clock jumped forward
        (the simulator's clock fault) the check is off (a leader's jump ends its members' leases early
        in its eyes only)."""
        if self.security_acked == 0 or self.loop.time() < self._clock_jumped_at + 2 * GOSSIP_TIMEOUT:
            return
        for node in self.nodes:
            if not node.alive or node.service is None or node.db is None:
                continue
            db = node.db
            readable = db.readable_position
            unseen = False  # a user record this node holds and does not show (newest first)
            for r in reversed(db.records):
                if r.end <= readable:
                    break
                if r.kind == "event" and is_security_stream(r.stream):
                    unseen = True
                    break
            self.sign_in_checks += 1
            if node.service.admits_sign_in(unseen) and readable < self.security_acked:
                self.violation(
                    f"{node.name} ({node.service.state}) would sign callers in showing up to {readable}, "
                    f"before the user change acknowledged up to {self.security_acked}"
                )

    def check_read_your_writes(self, leader: SimNode, event_id: str, position: int) -> None:
        """Read your writes on followers (evdb/cluster/service.py, the rule at the top): when a leader
        answers a write, every follower streaming from it that holds the write durably has been sent a
        commit message covering it, and shows the write the moment that message arrives (a read that
        reaches it later sees the write). A follower still syncing it is not held to this here."""
        service = leader.service
        epoch = service.standing().epoch_number
        end = position + 160  # the clients append one event (a SimRecord of 160 bytes)
        for node in self.nodes:
            link = service._followers.get(str(node.instance_id))
            if node is leader or not node.alive or link is None or link.channel is None:
                continue
            if link.channel.closed or link.channel.lost or node.db.committed_position < end:
                continue  # the stream broke (the follower takes nothing more from it), or no durable copy
            arrival = link.channel.commit_arrival(end)
            if arrival is None:
                self.violation(
                    f"{leader.name} answered event {event_id[:8]} at {position} before sending {node.name}, "
                    f"which holds it, a commit message covering it"
                )
                continue
            self.loop.call_at(
                arrival + 1e-6, self._check_shown, node, node.incarnation, link.channel, epoch, event_id, end
            )

    def _check_shown(
        self, node: SimNode, incarnation: int, channel: SimChannel, epoch: int, event_id: str, end: int
    ) -> None:
        if node.incarnation != incarnation or not node.alive or channel.peer is None or channel.peer.closed:
            return  # restarted, or the stream broke before the message was read: nothing was promised
        if node.service.term > epoch:
            return  # it voted in a newer term meanwhile: it takes nothing more from this leader
        if node.db.readable_position < end:
            self.violation(
                f"{node.name} did not show event {event_id[:8]} (ending at {end}) when the leader's commit "
                f"message covering it arrived: it shows up to {node.db.readable_position}"
            )

    def check_liveness(self) -> None:
        """Once a majority has been connected both ways, with no fault touching its members, for
        LIVENESS_GRACE, it has exactly one leader; that leader stays (same node, same epoch) while the
        majority stays connected, and acknowledges writes (:meth:`_probe`). A fault may rightly cost
        an election only when it touches the majority or its leader (:meth:`disturb`, and a link to the
        leader that goes down): a minority that is cut off, one-way links, a certificate split with
        lingering connections, flapping links to others and restarts outside it must not."""
        now = self.loop.time()
        linked = {frozenset((a.index, b.index)) for a, b in self._pairs if self.both_ways(a, b)}
        for pair in self._linked - linked:
            # a link to the leader went down: the member at its other end may rightly elect another
            a, b = (self.nodes[i] for i in sorted(pair))
            for one, other in ((a, b), (b, a)):
                if one.alive and one.service.state == "Leader":
                    self._disturbed[other.index] = now
        self._linked = linked
        since: dict[frozenset[int], float] = {}
        for members in self._majorities:
            if all(frozenset(pair) in linked for pair in combinations(sorted(members), 2)):
                since[members] = self._connected_since.get(members, now)
        self._connected_since = since
        required = [
            members
            for members, at in since.items()
            if now - max(at, *(self._disturbed.get(i, 0.0) for i in members)) >= LIVENESS_GRACE
        ]
        for members in list(self._kept_leader):
            if members not in required:
                del self._kept_leader[members]
        if not required:
            return
        self.liveness_checks += 1
        # the majority's leader may be outside it (a member a fault touched) while connected both ways
        # to every node of it
        covered = sorted(
            set().union(*required)
            | {
                n.index
                for n in self.nodes
                if any(all(n.index == i or frozenset((n.index, i)) in linked for i in m) for m in required)
            }
        )
        leaders = [self.nodes[i] for i in covered if self.nodes[i].service.state == "Leader"]
        if not leaders:
            # a leader outside it that serves a majority of its own sharing a member with it: a one-way
            # cut can leave a member of the majority unable to reach that leader, and the member it
            # shares refuses to elect another while it hears a live leader (check-quorum): the
            # cluster is live, as Raft's pre-vote and check-quorum mean it to be
            leaders = [n for n in self.nodes if self._serves_overlapping_majority(n, linked, required)]
            covered = sorted(set(covered) | {n.index for n in leaders})
        if not leaders and self._resign_keeps_out(required):
            return
        if len(leaders) != 1:
            names = [self.nodes[i].name for i in covered]
            self.violation(
                f"liveness: {names}, a majority connected both ways for {LIVENESS_GRACE:.0f}s, has "
                f"{len(leaders)} leaders ({[n.name for n in leaders]}; states "
                f"{[self.nodes[i].service.state for i in covered]})"
            )
            for members in required:  # reported once per grace period
                self._connected_since[members] = now
            return
        leader = leaders[0]
        key = (leader.name, leader.service.standing().epoch_number)
        for members in required:
            kept = self._kept_leader.setdefault(members, key)
            if kept != key:
                self.violation(
                    f"liveness: the leader of {[self.nodes[i].name for i in sorted(members)]} changed from "
                    f"{kept[0]} (epoch {kept[1]}) to {key[0]} (epoch {key[1]}) while that majority stayed "
                    f"connected both ways"
                )
                self._kept_leader[members] = key
        if not self._probing and now >= self._probe_due:
            self._probing = True
            self.loop.create_task(self._probe(leader, key, required))

    def _resign_keeps_out(self, required: list[frozenset[int]]) -> bool:
        """A resigned leader stands in no election for its window (``Elector.resigned``: KurrentDB's
        "not a candidate in the next election"). While that window, and a grace after it, runs and
        every other member of a required majority has a log behind the resigned node's (none of them
        can win: each is refused by it), that majority rightly has no leader. Seed 88848 of the long
        run: a leader resigned 70 ms after taking office, before the others held its epoch; the one
        member with it in the live majority could not win, and it stood again once its 5 s were up."""
        for node in self.nodes:
            if not node.alive or node.service is None:
                continue
            elector = getattr(node.service, "elector", None)  # (the election code before it had none)
            if elector is None:
                continue
            left = elector.no_candidacy_until - node.monotonic()
            if left + LIVENESS_GRACE <= 0:
                continue
            own = node.service.standing()
            for members in required:
                others = [self.nodes[i] for i in members if i != node.index]
                if node.index in members and all(o.service.standing() < own for o in others if o.alive):
                    return True
        return False

    def _serves_overlapping_majority(
        self, node: SimNode, linked: set[frozenset[int]], required: list[frozenset[int]]
    ) -> bool:
        """``node`` leads, is connected both ways to a majority (itself included) and to a member of
        every required majority."""
        if not (node.alive and node.service.state == "Leader"):
            return False
        reached = {node.index} | {n.index for n in self.nodes if frozenset((node.index, n.index)) in linked}
        return 2 * len(reached) > len(self.nodes) and all(reached & m for m in required)

    async def _probe(self, leader: SimNode, key: tuple[str, int], required: list[frozenset[int]]) -> None:
        """The majority's one leader acknowledges a write within PROBE_TIMEOUT (unless the majority
        stopped being required meanwhile)."""
        try:
            started = self.loop.time()
            event_id = str(uuid.UUID(int=self.rng.getrandbits(128)))
            result = await self._append(leader, "liveness", event_id, timeout=PROBE_TIMEOUT)
            untouched = all(self._disturbed.get(i, 0.0) < started for m in required for i in m)
            if result is not None:
                self._acknowledge(leader, event_id, result)
            elif (
                self._checking_liveness
                and untouched  # a fault since the write began (a failed sync, say) may refuse it
                and all(self._kept_leader.get(m) == key for m in required)
            ):
                self.violation(
                    f"liveness: {leader.name}, the leader of a majority connected both ways, did not "
                    f"acknowledge a write within {PROBE_TIMEOUT:.0f}s"
                )
        finally:
            self._probing = False
            self._probe_due = self.loop.time() + PROBE_EVERY

    async def liveness_loop(self) -> None:
        self._checking_liveness = True
        try:
            while True:
                await asyncio.sleep(0.05)
                try:
                    self.check_liveness()
                    self.check_sign_ins()
                except Exception as exc:  # a check that cannot run is a failed seed, never a silent pass
                    self.violation(f"the liveness check failed: {exc!r}")
                    return
        finally:
            self._checking_liveness = False

    def final_check(self) -> None:
        history = {r.position: r for r in self.nodes[0].db.records[: self.nodes[0].db.synced]}
        for node in self.nodes[1:]:
            if node.db.records[: node.db.synced] != self.nodes[0].db.records[: self.nodes[0].db.synced]:
                self.violation(f"{node.name}'s log differs from {self.nodes[0].name}'s after healing")
        for event_id, (position, _at) in self.acknowledged.items():
            record = history.get(position)
            if record is None or record.event_id != event_id:
                self.violation(f"acknowledged event {event_id[:8]} at {position} is not in the final history")
        seen: dict[str, int] = {}
        for record in history.values():
            if record.kind == "event":
                if record.event_id in seen:
                    self.violation(f"event {record.event_id[:8]} is in the log twice")
                seen[record.event_id] = record.position
        for name, position, event_id in self.reads:
            record = history.get(position)
            if record is None or record.event_id != event_id:
                self.violation(f"{name} served event {event_id[:8]} at {position}, not in the final history")
