from __future__ import annotations

import pytest

from tests.tui.fake_node import FakeCluster, FakeMirror, FakeNode
from tui.app import Connection, DashboardApp, NodeSpec

PROGRESS = {
    "scavengeId": "sc-1",
    "phase": "Chunk execution",
    "phaseElapsedSeconds": 2.0,
    "elapsedSeconds": 12.0,
    "threads": 1,
    "threshold": 4,
    "throttlePercent": 100,
    "chunksTotal": 4,
    "chunksDone": 2,
    "currentChunk": "chunk-000002.000000",
    "chunkWeights": {"0": 10.0, "1": 2.0, "2": 6.0, "3": 0.0},
    "chunks": [
        {
            "chunkStartNumber": 0,
            "chunkEndNumber": 0,
            "weight": 10.0,
            "executed": True,
            "merged": False,
            "sizeBefore": 65536,
            "sizeAfter": 16384,
        },
        {
            "chunkStartNumber": 1,
            "chunkEndNumber": 1,
            "weight": 2.0,
            "executed": False,
            "merged": False,
            "sizeBefore": 65536,
            "sizeAfter": 65536,
        },
    ],
    "streamsTotal": 5,
    "streamsDone": 5,
    "bytesReclaimed": 49152,
    "recordsRemoved": 40,
}


def make_app(*nodes: FakeNode, fake_mirrors: tuple[FakeMirror, ...] = (), **kwargs) -> DashboardApp:
    cluster = FakeCluster(*nodes, mirrors=fake_mirrors)
    kwargs.setdefault("start_collectors", False)
    return DashboardApp(
        [NodeSpec(nodes[0].url)],
        connection=Connection("admin", "changeit", transport=cluster.transport()),
        **kwargs,
    )


@pytest.fixture
def leader() -> FakeNode:
    node = FakeNode(port=2113, state="Leader")
    node.append("$scavenges-old-1", "$scavengeStarted", {"scavengeId": "old-1"})
    node.append(
        "$scavenges-old-1",
        "$scavengeCompleted",
        {"scavengeId": "old-1", "result": "Success", "timeTaken": "00:00:03.5000000", "spaceSaved": 1024},
    )
    node.append("$scavenges", "$>", "0@$scavenges-old-1")
    node.append("$scavenges", "$>", "1@$scavenges-old-1")
    return node


@pytest.fixture
def follower() -> FakeNode:
    return FakeNode(port=2114, state="Follower")
