"""What the node hands its cluster service: the ``ClusterHost`` port (evdb/cluster/service.py), never the
node itself.

The cluster (elections, gossip, replication) needs the node's identity, the settings in effect, its
addresses, the database open now and three things only the node can do: give the replication side of
the open database, take office (default users, persistent subscriptions, projections) and cut a diverged
log and reopen. :class:`NodeClusterHost` is that set, built by the node once its HTTP port is bound.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from evdb.clock import Clock
    from evdb.cluster.replica import ReplicationLog
    from evdb.database import Database
    from evdb.options import Options
    from evdb.services import NodeAddresses, OpenDatabase
    from evdb.tls.loading import NodeTls
    from evdb.tls.reload import ReloadableSettings

__all__ = ["NodeClusterHost"]


class NodeClusterHost:
    """The node as its cluster service sees it (structurally a ``ClusterHost``)."""

    def __init__(
        self,
        *,
        name: str,
        instance_id: uuid.UUID,
        logger: logging.Logger,
        clock: Clock,
        settings: ReloadableSettings,
        addresses: NodeAddresses,
        database: OpenDatabase,
        replication_log: Callable[[], ReplicationLog],
        on_became_leader: Callable[[], Awaitable[None]],
        truncate_and_reopen: Callable[[int], Awaitable[None]],
    ) -> None:
        self.name = name
        self.instance_id = instance_id
        self.logger = logger
        self.clock = clock
        self._settings = settings
        self._addresses = addresses
        self._database = database
        #: the HTTP port's address (bound: a port 0 asked for is the one picked)
        self.host = addresses.host
        self.port = addresses.port
        self._replication_log = replication_log
        self._on_became_leader = on_became_leader
        self._truncate_and_reopen = truncate_and_reopen

    @property
    def options(self) -> Options:
        return self._settings.options

    @property
    def tls(self) -> NodeTls | None:
        return self._settings.tls

    @property
    def advertised_host(self) -> str:
        return self._addresses.advertised_host

    @property
    def advertised_port(self) -> int:
        return self._addresses.advertised_port

    @property
    def client_endpoint(self) -> tuple[str, int]:
        return self._addresses.client_endpoint

    @property
    def db(self) -> Database | None:
        return self._database.db

    def replication_log(self) -> ReplicationLog:
        return self._replication_log()

    async def on_became_leader(self) -> None:
        await self._on_became_leader()

    async def truncate_and_reopen(self, position: int) -> None:
        await self._truncate_and_reopen(position)
