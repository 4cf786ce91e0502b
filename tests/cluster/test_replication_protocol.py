"""A leader and a follower of different replication protocols refuse each other, each saying why,
instead of misreading the other's records messages (the wire format changed in protocol 2)."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace
from typing import Any

from evdb.cluster.receiving import ReplicationSink
from evdb.cluster.sending import ReplicationSource
from evdb.cluster.transport import Message
from evdb.cluster.wire import REPLICATION_PROTOCOL


class FakeChannel:
    def __init__(self, *incoming: Any) -> None:
        self.incoming = [Message(text=value) for value in incoming]
        self.sent: list[Any] = []
        self.closed = False

    async def receive(self, timeout: float | None = None) -> Message | None:
        return self.incoming.pop(0) if self.incoming else None

    async def send_json(self, value: Any) -> None:
        self.sent.append(value)

    async def close(self) -> None:
        self.closed = True


def test_a_leader_refuses_a_follower_of_an_older_protocol(caplog):
    old_hello = {"instanceId": "f-1", "voting": True, "writer": 0, "epochs": []}  # protocol 1: no field
    channel = FakeChannel(old_hello)
    leader = SimpleNamespace(logger=logging.getLogger("evdb.cluster.test"))
    with caplog.at_level(logging.WARNING, "evdb.cluster.test"):
        asyncio.run(ReplicationSource._serve_follower(leader, channel))  # type: ignore[arg-type]
    assert channel.sent == [{"error": f"replication protocol 1; this leader speaks {REPLICATION_PROTOCOL}"}]
    assert "Follower f-1 speaks replication protocol 1" in caplog.text


def test_the_hello_names_the_protocol():
    service = SimpleNamespace(
        node=SimpleNamespace(instance_id="me"),
        read_only=False,
        db=SimpleNamespace(committed_position=0, epochs=lambda n: []),
        replica=SimpleNamespace(reads_archive=lambda: False),
    )
    assert ReplicationSink._hello(SimpleNamespace(service=service))["protocol"] == REPLICATION_PROTOCOL  # type: ignore[arg-type]
