"""A simulated node: what survives its crashes, and the ClusterHost port its ClusterService runs on."""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from evdb.cluster.sim.disk import SimDatabase, _Durable
from evdb.cluster.sim.world import NetWorld


@dataclass
class SimNode:
    sim: NetWorld
    index: int
    name: str
    instance_id: uuid.UUID
    durable: _Durable = field(default_factory=_Durable)
    alive: bool = False
    incarnation: int = 0
    clock_offset: float = 0.0
    service: Any = None
    db: Any = None
    transport: Any = None

    @property
    def port(self) -> int:
        return 2000 + self.index

    @property
    def replication_port(self) -> int:
        return 3000 + self.index

    def monotonic(self) -> float:
        return self.sim.loop.time() + self.clock_offset

    def gossip_answer(self) -> dict:
        return {"members": self.service.members(), "serverIp": "127.0.0.1", "serverPort": self.port}


class _Host:
    """The ClusterHost port for one simulated node."""

    def __init__(self, node: SimNode, options: Any, logger: logging.Logger) -> None:
        self._node = node
        self.options = options
        self.logger = logger
        self.instance_id = node.instance_id
        self.tls = None
        self.host = "127.0.0.1"
        self.advertised_host = "127.0.0.1"
        self.port = self.advertised_port = node.port
        self.client_endpoint = (self.advertised_host, node.port)
        self.name = node.name
        self.clock = SimpleNamespace(time=lambda: 1_700_000_000.0 + node.sim.loop.time())

    @property
    def db(self) -> SimDatabase:
        return self._node.db

    def replication_log(self) -> SimDatabase:
        return self._node.db  # the simulated log replicates itself (a ReplicationLog of records)

    async def on_became_leader(self) -> None:
        pass

    async def truncate_and_reopen(self, position: int) -> None:
        node = self._node
        await node.service.detach_database()
        node.db.truncate(position)
        old = node.db
        db = SimDatabase(old.sim, node, node.durable)
        node.service.attach_database(db)
        node.db = db
        old.closed = True
