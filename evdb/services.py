"""What the node hands its API layers: typed services, never the node itself.

The node (evdb/node) is the composition root: it builds every service and gives the HTTP API
(evdb/http), the gRPC API (evdb/grpc) and the web UI (evdb/webui) one :class:`ApiServices`, a frozen
set of the services they answer from. Settings a reload changes are read at each use from
``settings`` (the node's one :class:`~evdb.tls.reload.NodeSettings`, typed as the
:class:`~evdb.tls.reload.ReloadableSettings` port); the database and what lives as long as it are
read at each use from ``database`` (:class:`OpenDatabase`: a follower whose log diverged closes and
reopens it).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from evdb.errors import DatabaseReopening

if TYPE_CHECKING:
    from evdb.auth import UserStore
    from evdb.autoscavenge.service import AutoScavengeService
    from evdb.clock import Clock
    from evdb.cluster.peers import PeerClient
    from evdb.cluster.service import ClusterService
    from evdb.database import Database
    from evdb.licensing import License
    from evdb.metrics import NodeMetrics
    from evdb.options import Options
    from evdb.persistent import PersistentSubscriptionService
    from evdb.projections import SystemProjections
    from evdb.scavenge.service import ScavengeService
    from evdb.subscriptions import CommitNotifier
    from evdb.tls.reload import ConfigReloader, ReloadableSettings

__all__ = ["ApiServices", "GrpcServices", "NodeAddresses", "OpenDatabase", "WebUiServices"]


class OpenDatabase:
    """The database open now and what lives as long as it: its scavenge service, its users and its
    commit notifier. A follower whose log went further than the new leader's closes and reopens it
    (``Node.truncate_and_reopen``): ``db`` is None meanwhile and ``generation`` grows, so a request
    that began before sees its failure as the reopening (HTTP 503, gRPC UNAVAILABLE)."""

    def __init__(self) -> None:
        self.db: Database | None = None
        self.scavenge: ScavengeService | None = None
        self.users: UserStore
        self.notifier: CommitNotifier
        #: grows each time the database is closed and reopened under running requests (truncation)
        self.generation = 0

    def open_db(self) -> Database:
        """The database open now; DatabaseReopening while a follower reopens it (every surface asks here)."""
        db = self.db
        if db is None:
            raise DatabaseReopening()
        return db

    def open_scavenge(self) -> ScavengeService:
        """The scavenge service of the database open now (it lives as long as the database)."""
        service = self.scavenge
        if service is None:
            raise DatabaseReopening()
        return service


class NodeAddresses:
    """Where the node listens and what it tells others, read from the settings in effect at each use.
    ``host`` and ``port`` are the HTTP port's (port 0 is replaced by the port bound at start)."""

    def __init__(self, settings: ReloadableSettings, host: str, port: int) -> None:
        self._settings = settings
        self.host = host
        self.port = port

    @property
    def scheme(self) -> str:
        return "http" if self._settings.options.insecure else "https"

    @property
    def _reachable_host(self) -> str:
        return self.host if self.host not in ("0.0.0.0", "::") else "127.0.0.1"

    @property
    def http_url(self) -> str:
        return f"{self.scheme}://{self._reachable_host}:{self.port}"

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def advertised_host(self) -> str:
        """The address other nodes use to reach this node's HTTP port (NodeHostAdvertiseAs)."""
        given = self._settings.options.node_host_advertise_as
        return str(given) if given else self._reachable_host

    @property
    def advertised_port(self) -> int:
        """The HTTP port other nodes are told (NodePortAdvertiseAs)."""
        return int(self._settings.options.node_port_advertise_as or self.port)

    @property
    def client_endpoint(self) -> tuple[str, int]:
        """What clients are told to reach this node at: gossip and not-leader redirects
        (AdvertiseHostToClientAs, AdvertiseNodePortToClientAs), as KurrentDB."""
        o = self._settings.options
        return (
            str(o.advertise_host_to_client_as or self.advertised_host),
            int(o.advertise_node_port_to_client_as or self.advertised_port),
        )


@dataclass(frozen=True)
class ApiServices:
    """The services the HTTP API, the gRPC API and the web UI answer from (built by the node once its
    services run; none is replaced while it serves, except what ``database`` and ``settings`` hold)."""

    name: str
    instance_id: uuid.UUID
    logger: logging.Logger
    clock: Clock
    settings: ReloadableSettings
    addresses: NodeAddresses
    database: OpenDatabase
    #: the node-to-node side: elections, gossip, leadership (None: not built, as in some tests)
    cluster: ClusterService | None
    peers: PeerClient | None
    persistent: PersistentSubscriptionService
    #: the system projections (RunProjections System or All); None when they do not run
    projections: SystemProjections | None
    auto_scavenge: AutoScavengeService | None
    metrics: NodeMetrics
    reloader: ConfigReloader
    #: the licence loaded at start (None: none)
    license: License | None
    #: the index folder of an on-disk database (None in memory): where a backup finds the index
    index_dir: str | None
    #: set to stop the node (POST /admin/shutdown, gRPC Shutdown)
    shutdown_requested: asyncio.Event
    #: KurrentDB's /stats figures, gathered now (blocking)
    collect_stats: Callable[[], dict[str, Any]]

    @property
    def options(self) -> Options:
        """The options in effect (a reload replaces them): read at each use."""
        return self.settings.options


class _NodeFacts(Protocol):
    """What every API surface reads: the node's identity, addresses, open database, cluster and
    persistent subscriptions."""

    @property
    def instance_id(self) -> uuid.UUID: ...

    @property
    def addresses(self) -> NodeAddresses: ...

    @property
    def database(self) -> OpenDatabase: ...

    @property
    def cluster(self) -> ClusterService | None: ...

    @property
    def persistent(self) -> PersistentSubscriptionService: ...


class GrpcServices(_NodeFacts, Protocol):
    """What the gRPC API reads of :class:`ApiServices` (its services are typed with this smaller set)."""

    @property
    def logger(self) -> logging.Logger: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def settings(self) -> ReloadableSettings: ...

    @property
    def options(self) -> Options: ...

    @property
    def projections(self) -> SystemProjections | None: ...

    @property
    def metrics(self) -> NodeMetrics: ...

    @property
    def license(self) -> License | None: ...

    @property
    def shutdown_requested(self) -> asyncio.Event: ...


class WebUiServices(_NodeFacts, Protocol):
    """What the web Admin UI reads of :class:`ApiServices`."""

    @property
    def name(self) -> str: ...

    @property
    def peers(self) -> PeerClient | None: ...

    @property
    def collect_stats(self) -> Callable[[], dict[str, Any]]: ...

    @property
    def clock(self) -> Clock: ...
