"""The ports between the cluster's shell and its surroundings: :class:`ClusterHost`, what
``ClusterService`` (evdb/cluster/service.py) needs of its node, and :class:`ClusterShell`, what the
shell's helpers (evdb/cluster/membership.py, sending.py, receiving.py) use of the ``ClusterService``
that owns them. No module here imports the service: the helpers see it through this port alone.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import logging

    from evdb.cluster.election import LogStanding
    from evdb.cluster.elector import Elector
    from evdb.cluster.following import FollowerStream
    from evdb.cluster.gossip import GossipView, Peer
    from evdb.cluster.leadership import Leadership
    from evdb.cluster.lease import LeaseHolder
    from evdb.cluster.replica import ReplicationLog
    from evdb.cluster.transport import Transport
    from evdb.database import Database

__all__ = ["ClusterHost", "ClusterShell", "ShellPart"]


class ClusterHost(Protocol):
    """What the cluster needs of its node (evdb.node.Node is one; the simulator has its own)."""

    logger: logging.Logger
    instance_id: uuid.UUID
    host: str
    port: int
    name: str
    clock: Any

    @property
    def options(self) -> Any: ...

    @property
    def tls(self) -> Any: ...

    @property
    def advertised_host(self) -> str: ...

    @property
    def advertised_port(self) -> int: ...

    @property
    def client_endpoint(self) -> tuple[str, int]: ...

    @property
    def db(self) -> Database | None: ...

    def replication_log(self) -> ReplicationLog:
        """The replication side of the database open now (evdb/cluster/replica.py)."""

    async def on_became_leader(self) -> None: ...

    async def truncate_and_reopen(self, position: int) -> None: ...


class ClusterShell(Protocol):
    """What the helpers use of their ``ClusterService``: its facts, its machines and the steps that
    change its role (taking office, stepping down, following)."""

    node: ClusterHost
    logger: logging.Logger
    transport: Transport
    _now: Callable[[], float]
    _blocking: Callable[..., Awaitable[Any]]
    # settings
    cluster_size: int
    read_only: bool
    priority: int
    gossip_interval: float
    gossip_timeout: float
    election_timeout: float

    @property
    def reset_interval(self) -> float:
        """ConnectionResetInterval in effect (read at each use: a reload changes it)."""
        ...

    # the role and what it knows
    state: str
    leader_id: str | None
    voted_for: str | None
    commit_position: int
    election_count: int
    last_election_seconds: float | None
    # the machines
    elector: Elector
    gossip: GossipView
    peers: dict[tuple[str, int], Peer]
    leadership: Leadership
    lease: LeaseHolder
    #: gossip now, and often until this node follows a leader (evdb/cluster/membership.py)
    look_again_soon: Callable[[], None]
    # the I/O state the helpers share with it
    _committed: asyncio.Event
    _follow_task: asyncio.Task | None
    _reopening: asyncio.Future | None

    @property
    def db(self) -> Database: ...

    @property
    def replica(self) -> ReplicationLog: ...

    @property
    def term(self) -> int: ...

    @property
    def is_leader(self) -> bool: ...

    @property
    def _leading(self) -> bool: ...

    @property
    def replication_host_advertised(self) -> str: ...

    @property
    def replication_port_advertised(self) -> int: ...

    def standing(self) -> LogStanding: ...

    def leader_peer(self) -> Peer | None: ...

    async def _become_leader(self, term: int) -> None: ...

    async def _step_down(self, *, resigning: bool = False) -> None: ...

    async def _follow(self, leader: Peer) -> None: ...

    async def _stop_following(self) -> None: ...

    def _advance_commit(self, position: int) -> None: ...

    def _take_commit(self, stream: FollowerStream, commit: int) -> None: ...

    def _post_commit(self, position: int) -> None: ...

    def _release_gate(self) -> None: ...

    def _wake_senders(self) -> None: ...


class ShellPart:
    """A helper of the shell: its service, and the service's logger, clock and blocking-call runner."""

    def __init__(self, service: ClusterShell) -> None:
        self.service = service
        self.logger = service.logger
        self._now = service._now
        self._blocking = service._blocking
