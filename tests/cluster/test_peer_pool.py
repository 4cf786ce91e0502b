"""The node-to-node connection pool (evdb/cluster/peers.py PeerClient.session): remade at the
ConnectionResetInterval without a window in which a concurrent call or reset finds no pool, and the
replaced pool is closed."""

from __future__ import annotations

import asyncio
import logging

from evdb.cluster.peers import PeerClient


async def test_a_reset_during_a_remade_pool_never_leaves_a_caller_without_one():
    now = [0.0]
    client = PeerClient(
        lambda: None, reset_interval=1.0, logger=logging.getLogger("t"), monotonic=lambda: now[0]
    )
    first = await client.session()
    now[0] = 5.0  # past the interval: the next call remakes the pool
    calls = [asyncio.ensure_future(client.session()) for _ in range(5)]
    reset = asyncio.ensure_future(client.reset())
    sessions = await asyncio.gather(*calls)
    await reset
    assert len({id(s) for s in sessions}) == 1  # one new pool, not one per concurrent caller
    assert sessions[0] is not first
    await client.close()
    assert first.closed and sessions[0].closed  # the replaced pool and the last one are closed
