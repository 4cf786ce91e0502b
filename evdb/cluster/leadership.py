"""A leader's decisions, as a pure machine: its followers' progress, the write gate (when a client's
write is answered), the commit position, shipping records before its own sync and what a failed sync
of shipped records means. It takes events (a follower subscribed, acknowledged or went away, the
writer wrote or synced, the clock) and returns what to do (answers to release, a commit position to
take, when to look again); it sends, persists and awaits nothing. ``ClusterService``
(evdb/cluster/service.py) runs it, in a real node and in the simulator (evdb/cluster/sim.py) alike.

The rules (docs/cluster.md, "What a member serves: the commit position" and "Sign-in leases"):

- A write is answered once a majority of ClusterSize holds it durably: the leader counts itself with
  its own durable end (once its fdatasync is done), each voting follower with the end it acknowledged
  (evdb/cluster/commit.py ``majority_end``); answers are released in position order.
- The commit position moves only past the leader's own epoch record (``leader_commit``).
- A security write (users, ACLs) is answered once a majority holds it **and** every member this leader
  granted a sign-in lease holds it or its lease lapsed (evdb/cluster/lease.py ``LeaseGrantor``).
- Records written and being synced are shipped meanwhile; a sync of shipped records that fails ends
  this office: the node writes nothing more until it is elected again, and steps down.
- Stepping down (check-quorum, a newer leader) is decided by the election machine
  (evdb/cluster/elector.py); what a leader holds is then refused (:meth:`Leadership.fail`).

Answers are opaque here (the writer's ``(future, result)`` lists): the machine holds and returns them.
The writer thread and the event loop both call it: the shell holds its gate lock around each call.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Any

from evdb.cluster.commit import leader_commit, majority_end
from evdb.cluster.lease import LeaseGrantor

__all__ = ["Leadership", "Progress", "Release", "unacked_window"]

#: one gated group: its end position and its answers (opaque: the writer's ``(future, result)`` list)
Held = tuple[int, Any]


@dataclass
class Progress:
    """What a leader knows of one subscribed follower."""

    voting: bool
    acked: int  # the end of its log it acknowledged as durable
    name: str = ""  # its instance id
    #: the highest commit position this follower was sent in a commit message
    commit_sent: int = -1


@dataclass
class Release:
    """What a leader does after an acknowledgement, a sync or a lease's lapse."""

    #: the commit position the cluster reached (readers see up to it; followers are told), or None
    commit: int | None = None
    #: the answers to give now, in position order
    answers: list[Any] = field(default_factory=list)
    #: the held security writes were looked at (the shell cancels its lease timer)
    leases_checked: bool = False
    #: seconds until the held security writes should be looked at again, or None
    recheck_in: float | None = None


class Leadership:
    def __init__(self, cluster_size: int, leases: LeaseGrantor) -> None:
        self.cluster_size = cluster_size
        self.leases = leases
        #: the subscribed followers by instance id (the shell's links: Progress and its stream)
        self.followers: dict[str, Progress] = {}
        #: answers held until a majority has their position, in position order (the writer appends)
        self.gate: collections.deque[Held] = collections.deque()
        self.security_gated: set[int] = set()  # gate positions of security writes
        self.lease_held: list[Held] = []  # security writes a majority holds, held for leases
        #: the shell stopped: answers gated from now on are refused at once (none would release them)
        self.closed = False
        self.own_epoch_position = -1  # the epoch record this node wrote on taking office
        #: records written and being synced, shipped meanwhile: (the database, its announced end)
        self.ship_upto: tuple[Any, int] | None = None
        #: a sync of records already shipped failed: nothing more is written in this office
        self.sync_failed = False
        self.sync_failures = 0

    # -- office ----------------------------------------------------------------------------------------
    def taking_office(self) -> None:
        """A new office starts: its epoch record goes after what this log holds."""
        self.ship_upto = None
        self.sync_failed = False

    def left_office(self) -> None:
        self.ship_upto = None

    def may_write(self, leading: bool) -> bool:
        """The database's write permit: only a leader under its own epoch, never after a failed sync of
        records it shipped."""
        return leading and not self.sync_failed

    # -- the writer --------------------------------------------------------------------------------------
    def written(self, db: Any, end: int, leading: bool) -> bool:
        """The writer wrote records up to ``end`` and is about to sync them; True: wake the senders to
        ship them now (only while leading)."""
        if not leading:
            return False
        self.ship_upto = (db, end)
        return True

    def shipped_sync_failed(self) -> None:
        """A sync of records already shipped failed: they are being rolled back, followers may hold
        records this log no longer has. The shell steps down (if it still leads)."""
        self.sync_failed = True
        self.ship_upto = None
        self.sync_failures += 1

    def ship_limit(self, db: Any) -> int | None:
        """How far a sender may read ``db`` beyond its durable end (records written, being synced)."""
        ship = self.ship_upto
        return ship[1] if ship is not None and ship[0] is db else None

    def senders_wait_for(self, db: Any, committed: int, leading: bool) -> bool:
        """At a commit of ``db`` up to ``committed``: True when the senders were already woken for
        these records before their sync (:meth:`written`), so waking them again finds nothing new."""
        ship = self.ship_upto
        return leading and ship is not None and ship[0] is db and committed <= ship[1]

    # -- the gate ----------------------------------------------------------------------------------------
    def hold(self, position: int, answers: Any, security: bool) -> None:
        """A leader's writer gates a group ending at ``position`` (``security``: it wrote a security
        stream, answered once the leases allow it too)."""
        if security:
            self.security_gated.add(position)
            self.leases.security_written(position)
        self.gate.append((position, answers))

    def majority_position(self, own_durable_end: int) -> int:
        acks = [p.acked for p in self.followers.values() if p.voting]
        return majority_end(own_durable_end, acks, self.cluster_size)

    def release(self, own_durable_end: int, now: float) -> Release:
        """What a majority (and the leases) now allow: the commit position and the answers to give."""
        confirmed = self.majority_position(own_durable_end)
        out = Release(commit=leader_commit(confirmed, self.own_epoch_position))
        gate = self.gate
        while gate and gate[0][0] <= confirmed:
            position, answers = gate.popleft()
            if position in self.security_gated:  # security writes wait for the leases as well
                self.security_gated.discard(position)
                self.lease_held.append((position, answers))
            else:
                out.answers.append(answers)
        if self.lease_held:
            self._release_leased(now, out)
        return out

    def _release_leased(self, now: float, out: Release) -> None:
        """The security writes a majority holds are answered once every member this leader granted a
        lease holds them too or its lease lapsed; else looked at again when the next lease lapses."""
        acked = {name: p.acked for name, p in self.followers.items()}
        held, self.lease_held = self.lease_held, []
        for position, answers in held:
            if self.leases.releases(position, acked, now):
                out.answers.append(answers)
            else:
                self.lease_held.append((position, answers))
        out.leases_checked = True
        if self.lease_held:
            out.recheck_in = max(self.leases.next_release_check(now) - now, 0.0) + 0.001

    def fail(self) -> list[Any]:
        """This node no longer leads (or stopped): every answer held is refused."""
        held = [answers for _, answers in (*self.gate, *self.lease_held)]
        self.gate = collections.deque()
        self.lease_held = []
        self.security_gated.clear()
        return held

    # -- followers ---------------------------------------------------------------------------------------
    def subscribed(self, progress: Progress) -> None:
        self.followers[progress.name] = progress

    def gone(self, progress: Progress) -> None:
        if self.followers.get(progress.name) is progress:
            del self.followers[progress.name]

    @staticmethod
    def acknowledged(progress: Progress, position: int) -> None:
        progress.acked = max(progress.acked, position)

    def successor(self) -> str | None:
        """The voting follower a resigning leader hands over to: the one that acknowledged the most
        of its log (ties: the lowest instance id, so the choice is the same on every replay)."""
        voting = [p for p in self.followers.values() if p.voting]
        if not voting:
            return None
        return min(voting, key=lambda p: (-p.acked, p.name)).name

    def followers_behind(self, end: int) -> bool:
        """Whether a voting follower has not acknowledged ``end`` yet (a resigning leader waits)."""
        return any(p.acked < end for p in self.followers.values() if p.voting)

    @staticmethod
    def commit_due(progress: Progress, position: int) -> bool:
        """Whether ``progress``'s follower should be sent commit position ``position``."""
        return position >= 0 and progress.commit_sent < position

    def grant_lease(self, progress: Progress, request: dict, now: float) -> dict:
        """A follower asks for a sign-in lease (evdb/cluster/lease.py)."""
        holding = max((position for position, _ in self.lease_held), default=-1)
        return self.leases.grant(
            progress.name, progress.voting, request, now, acked=progress.acked, holding=holding
        )

    def describe(self) -> dict[str, dict]:
        return {k: {"voting": p.voting, "acked": p.acked} for k, p in self.followers.items()}


def unacked_window(unacked: collections.deque[int], acked: int, window: int) -> bool:
    """A sender's flow control: drop the records messages ``acked`` covers from ``unacked`` (their
    ends, in order); True when ``window`` messages are still out (it waits for an acknowledgement)."""
    while unacked and unacked[0] <= acked:
        unacked.popleft()
    return len(unacked) >= window
