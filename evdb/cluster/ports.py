"""The database port of the cluster: what ClusterService uses of its node's database.

evdb.database.Database is the real one; the simulator's SimDatabase (evdb/cluster/sim) is the other.
Both pass one contract suite (tests/contracts/test_database_port.py), which also fails when either
lacks a member named here. The replication side of the same log is evdb/cluster/replica.py's
ReplicationLog (the real one: ChunkLogReplication over the database; the simulator's database is its
own), and the node-to-node network is evdb/cluster/transport.py's Transport and Channel.
"""

from __future__ import annotations

import concurrent.futures
import uuid
from collections.abc import Callable
from typing import Any, Protocol

from evdb.streams import NewEvent


class ClusterDatabase(Protocol):
    """What the cluster reads and hooks of a member's database (besides its ReplicationLog)."""

    #: the folder (``db_dir``, None in memory) and ``chunk_size``
    config: Any
    #: ``log.checkpoints.proposal`` (the highest term voted in, durable) and ``.chaser``
    log: Any
    #: a follower's writes go to its leader: ``remote_writer(request)`` answers a future
    remote_writer: Any
    #: a leader's answers wait until a majority holds them: ``replication_gate(end, answers)``
    replication_gate: Callable[[int, list], None] | None
    #: appends are refused (NotLeader) while this says no
    write_permit: Callable[[], bool] | None
    #: told each group's end as it is written, before its sync (a leader ships it meanwhile); -1 when
    #: that sync failed
    before_sync: Callable[[int], None] | None

    @property
    def committed_position(self) -> int:
        """The end of the durable log."""

    @property
    def readable_position(self) -> int:
        """How far readers see: the committed position, bounded by the read limit."""

    def set_read_limit(self, position: int) -> None: ...

    def commit_limit_at_open(self) -> int:
        """The read limit as it was last recorded (durable): what a member served before a restart."""

    def record_commit_position(self, position: int) -> None: ...

    def add_commit_listener(self, callback: Callable[[int], None]) -> None: ...

    def remove_commit_listener(self, callback: Callable[[int], None]) -> None: ...

    def add_visibility_watch(self, watch: Any) -> None: ...

    def forget_stream_states(self, *, recent_appends: bool = True) -> None: ...

    def epochs(self, max_count: int = 64) -> list[dict]:
        """The epoch records of the durable log, newest first: epochNumber, epochId, leaderInstanceId,
        previousEpochPosition, position."""

    def write_epoch(self, epoch_number: int, leader_instance_id: uuid.UUID, extra: dict | None = None) -> int:
        """Write and sync an epoch record; its position."""

    def append_async(
        self, stream: str, events: list[NewEvent], expected_version: int = ...
    ) -> concurrent.futures.Future: ...

    def delete_stream_async(
        self, stream: str, expected_version: int = ..., *, hard: bool = False
    ) -> concurrent.futures.Future: ...
