"""Persistent subscriptions (competing consumers), as KurrentDB has them.

``model`` (sources, positions, settings and their rules), ``strategies`` (consumers and the four
consumer strategies), ``checkpoints`` (what is kept in the log, and the store port), ``engine`` (one
group) and ``service`` (every group of the node, served by the leader). The gRPC service is
``evdb/grpc/persistent.py``; the HTTP API ``evdb/http/persistent.py``.
"""

from evdb.persistent.checkpoints import DatabaseStore, SubscriptionStore
from evdb.persistent.model import ALL, EventFilterSpec, EventSource, GroupSettings
from evdb.persistent.service import Connection, PersistentSubscriptionService

__all__ = [
    "ALL",
    "Connection",
    "DatabaseStore",
    "EventFilterSpec",
    "EventSource",
    "GroupSettings",
    "PersistentSubscriptionService",
    "SubscriptionStore",
]
