"""The node-to-node connection pool (evdb/cluster/peers.py PeerClient.session): remade at the
ConnectionResetInterval without a window in which a concurrent call or reset finds no pool, and the
replaced pool is closed."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace

from evdb.clock import ManualClock
from evdb.cluster.peers import PeerClient


async def test_a_reset_during_a_remade_pool_never_leaves_a_caller_without_one():
    clock = ManualClock()
    settings = SimpleNamespace(tls=None, options=SimpleNamespace(connection_reset_interval=1))
    client = PeerClient(settings, logger=logging.getLogger("t"), clock=clock)
    first = await client.session()
    clock.advance(5.0)  # past the interval: the next call remakes the pool
    calls = [asyncio.ensure_future(client.session()) for _ in range(5)]
    reset = asyncio.ensure_future(client.reset())
    sessions = await asyncio.gather(*calls)
    await reset
    assert len({id(s) for s in sessions}) == 1  # one new pool, not one per concurrent caller
    assert sessions[0] is not first
    await client.close()
    assert first.closed and sessions[0].closed  # the replaced pool and the last one are closed


async def test_the_reset_interval_in_effect_is_read_at_each_call():
    """A reload replaces the settings; nobody tells the client: it reads ConnectionResetInterval at use."""
    clock = ManualClock()
    settings = SimpleNamespace(tls=None, options=SimpleNamespace(connection_reset_interval=600))
    client = PeerClient(settings, logger=logging.getLogger("t"), clock=clock)
    first = await client.session()
    clock.advance(10.0)
    assert await client.session() is first  # within 600 s
    settings.options = SimpleNamespace(connection_reset_interval=5)  # what NodeSettings.replace does
    assert client.reset_interval == 5.0
    assert await client.session() is not first  # 10 s > the new 5 s: remade
    await client.close()
