"""Fixtures of the mirror tests (helpers in mirror_helpers.py)."""

from __future__ import annotations

import pytest
from mirror_helpers import NodeProcess


@pytest.fixture
def nodes(tmp_path):
    started: list[NodeProcess] = []

    def start(name: str) -> NodeProcess:
        node = NodeProcess(tmp_path / name, name)
        started.append(node)
        return node

    yield start
    for node in started:
        node.close()
