"""The node is the composition root: each layer gets its own typed services, never the Node (issue 36).
What the running node hands out is checked here; tests/test_import_cycles.py checks that no module below
evdb/node imports it."""

from __future__ import annotations

import dataclasses

from evdb.http.common import SERVICES
from evdb.node import Node
from evdb.node.cluster_host import NodeClusterHost
from evdb.services import ApiServices


def _reaches_the_node(value: object, node: Node) -> bool:
    return value is node or getattr(value, "__self__", None) is node


async def test_the_layers_get_services_and_never_the_node(node: Node) -> None:
    assert node._runner is not None and node.grpc is not None and node.cluster is not None
    http = node._runner.app[SERVICES]
    assert isinstance(http, ApiServices) and node.grpc.services is http
    # the set holds services, never the node (nor a method bound to it, but /stats' figures)
    reached = [f.name for f in dataclasses.fields(http) if _reaches_the_node(getattr(http, f.name), node)]
    assert reached == ["collect_stats"]
    # what a reload changes is read from the node's one settings holder
    assert http.settings is node.settings and http.database is node.opened
    assert isinstance(node.cluster.node, NodeClusterHost) and node.cluster.node is not node
    assert node.cluster.node.db is node.db and node.cluster.node.options is node.options
