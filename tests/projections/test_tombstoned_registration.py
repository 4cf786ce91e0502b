"""Issue 33's follow-up: a tombstoned ``$projections-$all`` (the projections' registration stream)
stopped the whole projection subsystem: after a restart it never loaded (``projections.active`` stayed
False, ``$ce-`` and ``$et-`` streams were no longer written) and the supervisor logged a warning every
second. Now the subsystem loads, reports the fault once, and each projection goes on from its own
checkpoint (nothing emitted twice); restarting the subsystem works."""

from __future__ import annotations

import logging

import httpx
from waiting import until

from evdb.clock import SystemClock
from evdb.node import Node
from evdb.projections.service import REGISTRATION_STREAM
from tests.projections.test_tombstoned_checkpoint_http import ADMIN, _append, _options


def _links(node: Node, stream: str) -> int:
    db = node.db
    assert db is not None
    return db.stream_state(stream).last_event_number + 1


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


async def test_a_tombstoned_registration_stream_leaves_the_projections_running(tmp_path):
    async with (
        Node(_options(tmp_path), clock=SystemClock(), name="r1") as node,
        httpx.AsyncClient(base_url=node.http_url, auth=ADMIN, timeout=30) as client,
    ):
        await _append(client, "cart-1")
        await until(lambda: _links(node, "$ce-cart") == 1, "the first link", 30)
        r = await client.delete(f"/streams/{REGISTRATION_STREAM}", headers={"Kurrent-HardDelete": "true"})
        assert r.status_code == 204, r.text
        await _append(client, "cart-2")
        await until(lambda: _links(node, "$ce-cart") == 2, "the second link", 30)
    records = _Records()
    async with (
        Node(_options(tmp_path), clock=SystemClock(), name="r2") as node,
        httpx.AsyncClient(base_url=node.http_url, auth=ADMIN, timeout=30) as client,
    ):
        node.logger.addHandler(records)
        try:
            await until(
                lambda: node.projections is not None and node.projections.active, "the projections", 30
            )
            assert node.projections is not None
            assert REGISTRATION_STREAM in (node.projections.registration_fault or "")
            for name in ("$by_category", "$by_event_type", "$streams"):
                r = await client.get(f"/projection/{name}")
                assert r.status_code == 200 and r.json()["status"] == "Running", (name, r.text)
                assert REGISTRATION_STREAM in r.json()["stateReason"], r.text  # the fault reported
            await _append(client, "cart-3")
            await until(lambda: _links(node, "$ce-cart") >= 3, "the projections to go on", 30)
            await until(lambda: _links(node, "$et-Made") >= 3, "the projections to go on", 30)
            r = await client.post("/projections/restart")
            assert r.status_code == 200, r.text
            await _append(client, "cart-4")
            await until(lambda: _links(node, "$ce-cart") >= 4, "the projections after the restart", 30)
            await until(lambda: _links(node, "$et-Made") >= 4, "the projections after the restart", 30)
            # from their checkpoints: no link written twice
            assert _links(node, "$ce-cart") == 4 and _links(node, "$et-Made") == 4
        finally:
            node.logger.removeHandler(records)
        faults = [m for m in records.messages if "registration stream" in m or "could not start" in m]
        assert 1 <= len(faults) <= 2, faults  # once per load: the first and the restart's
