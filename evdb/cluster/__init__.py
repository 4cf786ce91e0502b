"""The cluster: gossip, elections, replication and write forwarding between evdb nodes.

A node always runs a :class:`~evdb.cluster.service.ClusterService`; with ``ClusterSize: 1`` and no
gossip seeds it elects itself at start and behaves as a single node. See docs/cluster.md.
"""

from evdb.cluster.service import ClusterService

__all__ = ["ClusterService"]
