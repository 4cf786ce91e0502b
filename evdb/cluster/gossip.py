"""What one node knows of the other members from gossip, as a pure view: each answer (or failure) of a
``GET /gossip`` is merged in with the time it came, and the view says who is alive, who votes, who
leads, and what this node's own ``/gossip`` answer lists. It sends and awaits nothing;
``ClusterService`` (evdb/cluster/service.py) asks the peers on its timer and logs what it says.

The rules (docs/cluster.md, "Gossip"):

- A peer is alive while it answered gossip within the gossip timeout (GossipTimeoutMs).
- An answer is taken as that peer's own entry: the member whose HTTP endpoint is the answer's
  ``serverIp``/``serverPort``; an answer from this node itself (a seed naming it) is ignored. The
  addresses kept are those nodes use (evdb/cluster/advertising.py ``cluster_member``), not those
  clients are told.
- A peer that refused this node's certificate (or whose certificate this node refused) is dead at once:
  the peer client logged why, naming it; other failures of a live peer are logged once each round.
- A peer not alive shows ``Unknown`` (or ``Shutdown``) in this node's answer; one never heard shows its
  seed address alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from evdb.cluster.advertising import cluster_member
from evdb.cluster.elector import Member
from evdb.errors import InvalidOption

__all__ = ["GossipView", "Peer", "parse_gossip_seeds"]

NO_INSTANCE = "00000000-0000-0000-0000-000000000000"


def parse_gossip_seeds(text: str) -> list[tuple[str, int]]:
    """``host:port,host:port`` (IPv6 as ``[::1]:2113``) → a list of endpoints; clear errors otherwise."""
    seeds = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        host, sep, port = item.rpartition(":")
        host = host.strip("[]")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise InvalidOption(f"GossipSeed: {item!r} is not host:port (for example 127.0.0.1:2113).")
        seeds.append((host, int(port)))
    return seeds


@dataclass
class Peer:
    """What gossip last said about another member (its own entry of its /gossip answer)."""

    seed: tuple[str, int]
    info: dict = field(default_factory=dict)
    last_seen: float = -1.0  # monotonic seconds; -1 = never
    last_error: str | None = None  # why the last call to it failed (names the peer; shown in /cluster/info)

    def alive(self, now: float, timeout: float) -> bool:
        return self.last_seen >= 0 and now - self.last_seen <= timeout

    @property
    def name(self) -> str:
        return f"{self.seed[0]}:{self.seed[1]}"

    @property
    def replication_endpoint(self) -> tuple[str, int] | None:
        port = self.info.get("internalSecureTcpPort") or self.info.get("internalTcpPort")
        host = self.info.get("internalTcpIp") or self.seed[0]
        return (host, int(port)) if port else None

    def member(self, now: float, timeout: float, *, can_vote: bool | None = None) -> Member:
        """This peer as the election machine sees it (evdb/cluster/elector.py)."""
        return Member.from_gossip(
            self.name,
            self.alive(now, timeout),
            self.info,
            can_vote=self.replication_endpoint is not None if can_vote is None else can_vote,
        )


class GossipView:
    """The peers named by GossipSeed and what each last said."""

    def __init__(self, seeds: list[tuple[str, int]], timeout: float) -> None:
        self.timeout = timeout
        self.peers = {seed: Peer(seed) for seed in seeds}

    def failed(self, peer: Peer, error: str, *, certificate: bool, now: float) -> bool:
        """A gossip call to ``peer`` failed; True when it should be logged (a live peer's failure that
        is not a certificate's, which the peer client logs)."""
        peer.last_error = error
        if certificate:
            peer.last_seen = min(peer.last_seen, now - self.timeout - 1)
            return False
        return peer.alive(now, self.timeout)

    def heard(self, peer: Peer, body: object, own_instance_id: str, now: float) -> str | None:
        """``peer`` answered gossip with ``body``; the state it says it is in when it was not alive
        before (the shell logs that it is alive), else None."""
        if not isinstance(body, dict):
            return None
        server = (body.get("serverIp"), body.get("serverPort"))
        own = next(
            (
                m
                for m in body.get("members", [])
                if isinstance(m, dict) and (m.get("httpEndPointIp"), m.get("httpEndPointPort")) == server
            ),
            None,
        )
        if own is None or own.get("instanceId") == own_instance_id:
            return None
        own = cluster_member(own)  # the addresses nodes use, not those clients are told
        came_alive = not peer.alive(now, self.timeout)
        peer.info = own
        peer.last_seen = now
        peer.last_error = None
        return str(own.get("state")) if came_alive else None

    def alive(self, now: float) -> list[Peer]:
        return [p for p in self.peers.values() if p.alive(now, self.timeout)]

    def voters(self, now: float) -> list[Peer]:
        """The live voting members this node can ask for a vote."""
        return [p for p in self.alive(now) if not p.info.get("isReadOnlyReplica") and p.replication_endpoint]

    def members(self, now: float) -> list[Member]:
        """Every member gossip told of, as the election machine sees it."""
        return [p.member(now, self.timeout) for p in self.peers.values() if p.info]

    def by_instance(self, instance_id: str | None) -> Peer | None:
        """The peer with this instance id (None for None: a never-heard peer has no info to match)."""
        if instance_id is None:
            return None
        return next((p for p in self.peers.values() if p.info.get("instanceId") == instance_id), None)

    def answer(self, now: float) -> list[dict]:
        """The other members' entries of this node's ``/gossip`` answer, in KurrentDB's shape."""
        out = []
        for peer in self.peers.values():
            if peer.info:
                info = dict(peer.info)
                info["isAlive"] = peer.alive(now, self.timeout)
                if not info["isAlive"]:
                    info["state"] = "Unknown" if info.get("state") != "Shutdown" else "Shutdown"
                out.append(info)
            else:
                host, port = peer.seed
                out.append(
                    {
                        "instanceId": NO_INSTANCE,
                        "state": "Unknown",
                        "isAlive": False,
                        "httpEndPointIp": host,
                        "httpEndPointPort": port,
                    }
                )
        return out

    def errors(self) -> dict[str, str]:
        """The last failure of each peer whose last call failed (``/cluster/info``)."""
        return {peer.name: peer.last_error for peer in self.peers.values() if peer.last_error}
