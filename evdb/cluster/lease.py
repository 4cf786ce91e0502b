"""Sign-in leases: once the leader acknowledges a change of a user, no node signs anyone in with the
old credentials (issue 33). The decisions are pure (times and positions in, answers out); evdb/cluster/
service.py runs them over the replication stream, in a real node and in the simulator alike.

The rule (docs/cluster.md, "Sign-in leases"), with ``L`` the lease (GossipTimeoutMs):

- A follower or replica asks its leader for a lease every ``L/4`` (``{"lease": n, "held": m}`` on the
  replication stream: ``m`` the last grant it received in this stream) and notes when it asked, on its
  own monotonic clock. The leader answers ``{"grant": n, "security": S, "for": F}`` at once.
- The follower may sign callers in until ``asked + min(L, F) * (1 - RATE) / (1 + RATE)``: counted from
  before the grant was sent, and shortened so that clocks running up to ``RATE`` (5%) apart in speed
  still end it before the leader counts it over (:func:`holder_seconds`). Only while its lease runs,
  it shows the leader's ``S`` (the end of the last write of a security stream the leader had when it
  granted; at taking office, its whole log), and no record of a user stream it holds is still hidden
  from its readers. Else it waits (bounded) or answers 503 (not ready, Retry-After).
- The leader answers a write of a security stream (``$user-*``, ``$users``, their metastreams,
  ``$settings``) only once every follower and replica it granted a lease in this office has
  acknowledged holding it, or ``L`` (its own clock) has passed since it last granted that member a
  lease: then that member's lease has ended, and its next grant carries the write's end as ``S``. A
  member that neither acknowledges nor lets its lease lapse cannot exist, so the wait is at most ``L``.
  Nor does it answer one before ``L`` has passed since it took office (leases granted by the leader
  before it have ended by then).
- The leader itself signs callers in only while it shows its whole log as of taking office and holds a
  lease from a majority of ClusterSize (itself included): a voting follower's request naming grant
  ``m`` proves it still followed this leader after the leader sent ``m``; the lease runs for
  ``holder_seconds(L)`` after that send. A voter stops asking once it votes in a newer term, so a
  leader cut off from its majority stops signing in before any new leader can answer a user change;
  its grants say how long its own lease has left (``F``), so no follower's lease outlives it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from evdb.cluster.election import majority

__all__ = [
    "RATE",
    "SECURITY_PREFIXES",
    "LeaseGrantor",
    "LeaseHolder",
    "SecurityWatch",
    "holder_seconds",
    "is_security_stream",
]

#: how far apart in speed two members' monotonic clocks may run (5%)
RATE = 0.05
#: streams whose records decide who signs in or what a user may do: the users' streams, ``$users``,
#: their metastreams, and ``$settings`` (the default ACLs) with its metastream
SECURITY_PREFIXES: tuple[str, ...] = ("$user", "$$$user", "$settings", "$$$settings")
#: the leader remembers the send times of this many of a member's latest grants
_KEPT_GRANTS = 16


def is_security_stream(stream: str) -> bool:
    return stream.startswith(SECURITY_PREFIXES)


def holder_seconds(lease: float) -> float:
    """How long a lease of ``lease`` seconds on the granting clock may be used on another clock, counted
    from before the grant was sent: short enough that it ends before the granting clock counts
    ``lease``, with the two clocks' speeds up to RATE apart."""
    return lease * (1 - RATE) / (1 + RATE)


class LeaseHolder:
    """A follower's or replica's lease from its leader (times on this node's monotonic clock)."""

    def __init__(self, lease: float) -> None:
        self.lease = lease
        #: how often it asks
        self.interval = lease / 4
        self._asked: dict[int, float] = {}
        self._next = 0
        #: until when (this node's clock) it may sign callers in
        self.until = -math.inf
        #: the end of the leader's last security write, from its latest grant: shown before signing in
        self.security_end = 0
        #: the latest grant received in this replication stream (-1: none yet)
        self.held = -1

    def new_stream(self) -> None:
        """A new replication stream: requests still out in the old one will never be answered."""
        self._asked.clear()
        self.held = -1

    def ask(self, now: float) -> dict:
        """The next request, sent now."""
        n = self._next
        self._next += 1
        self._asked[n] = now
        return {"lease": n, "held": self.held}

    def granted(self, grant: Mapping) -> None:
        """The leader's answer to request ``grant["grant"]``."""
        n = int(grant["grant"])
        asked = self._asked.pop(n, None)
        if asked is None:
            return  # not asked in this stream
        for old in [k for k in self._asked if k < n]:
            del self._asked[old]
        seconds = min(self.lease, float(grant.get("for", self.lease)))
        if seconds > 0:
            self.until = max(self.until, asked + holder_seconds(seconds))
        self.security_end = int(grant.get("security", 0))
        self.held = n

    def fresh(self, now: float) -> bool:
        return now < self.until

    def admits(self, now: float, readable: int, unseen_user_records: bool) -> bool:
        """Whether this node may judge credentials now: its lease runs, it shows the leader's last
        security write, and no user record it holds is hidden from its readers."""
        return now < self.until and readable >= self.security_end and not unseen_user_records


class LeaseGrantor:
    """A leader's leases: what it granted to whom, and its own lease from its voting followers (times on
    the leader's monotonic clock)."""

    def __init__(self, lease: float, cluster_size: int) -> None:
        self.lease = lease
        self.cluster_size = cluster_size
        self.office_at = math.inf
        self.office_end = 0
        #: the end of the last write of a security stream this leader wrote (at taking office: its log)
        self.security_end = 0
        #: member -> when it was last granted a lease
        self.last_grant: dict[str, float] = {}
        self._sent: dict[str, dict[int, float]] = {}
        #: voting member -> the send time of the latest grant it proved it received
        self._confirmed: dict[str, float] = {}

    def take_office(self, now: float, log_end: int) -> None:
        self.office_at = now
        self.office_end = log_end
        self.security_end = log_end
        self.last_grant.clear()
        self._sent.clear()
        self._confirmed.clear()

    def security_written(self, end: int) -> None:
        """(writer thread) A write of a security stream ending at ``end`` is in the log."""
        if end > self.security_end:
            self.security_end = end

    def own_until(self) -> float:
        """Until when this leader holds a lease from a majority (itself included)."""
        needed = majority(self.cluster_size) - 1
        if needed <= 0:
            return math.inf
        times = sorted(self._confirmed.values(), reverse=True)
        if len(times) < needed:
            return -math.inf
        return times[needed - 1] + holder_seconds(self.lease)

    def grant(
        self, member: str, voting: bool, request: Mapping, now: float, *, acked: int = -1, holding: int = -1
    ) -> dict:
        """The answer to ``member``'s request. It grants nothing (``"for": 0``, still an answer the
        member names in its next request, which proves it follows this leader) while this leader holds
        no lease itself, or while it holds the answer to a security write ending at ``holding`` that the
        member (``acked``: its acknowledged durable end) does not hold: its lease lapses, so the write
        waits at most ``L``."""
        n = int(request["lease"])
        held = int(request.get("held", -1))
        sent = self._sent.setdefault(member, {})
        if voting and held in sent:
            self._confirmed[member] = max(self._confirmed.get(member, -math.inf), sent[held])
        sent[n] = now
        left = self.own_until() - now
        if left <= 0 or acked < holding:
            left = 0.0
        else:
            self.last_grant[member] = now
        if len(sent) > _KEPT_GRANTS:
            for old in sorted(sent)[: len(sent) - _KEPT_GRANTS]:
                del sent[old]
        return {"grant": n, "security": self.security_end, "for": min(self.lease, left)}

    def admits(self, now: float, readable: int) -> bool:
        """Whether the leader may judge credentials now."""
        return now < self.own_until() and readable >= self.office_end

    def releases(self, end: int, acked: Mapping[str, int], now: float) -> bool:
        """Whether a security write ending at ``end`` may be answered now (``acked``: each connected
        member's acknowledged durable end)."""
        if now < self.office_at + self.lease:
            return False
        lease = self.lease
        return all(acked.get(m, -1) >= end or now >= t + lease for m, t in self.last_grant.items())

    def next_release_check(self, now: float) -> float:
        """When a held security write may next be released by time alone (a lease lapsing)."""
        times = [t + self.lease for t in self.last_grant.values() if t + self.lease > now]
        if self.office_at + self.lease > now:
            times.append(self.office_at + self.lease)
        return min(times, default=now)


class SecurityWatch:
    """The database's visibility watch (see :meth:`evdb.database.Database.add_visibility_watch`) that
    tells the leader's replication gate which commit groups hold a write of a security stream: the
    writer calls :meth:`changing` before it hands the group's answers to the gate, in its own thread."""

    prefixes = SECURITY_PREFIXES

    def __init__(self) -> None:
        self.pending = False

    def changing(self, streams: frozenset[str]) -> None:
        self.pending = True

    def changed(self, streams: frozenset[str]) -> None:
        pass

    def take(self) -> bool:
        """Whether a security stream was written since the last call."""
        if not self.pending:
            return False
        self.pending = False
        return True
