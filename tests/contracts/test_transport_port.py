"""The cluster's transport port (evdb/cluster/transport.py Transport and Channel): one contract,
inherited by a test class for the real HttpTransport (two of them on loopback, plain TCP) and one for
the simulator's SimTransport (two simulated nodes on a quiet network), so the network the simulation
checks the cluster against answers as the real one does: votes and forwarded writes reach the peer's
handlers and bring back their answers, an unreachable peer is a PeerError, and a replication stream
carries JSON and binary messages both ways, in order, until one side closes it.

Gossip is not here: the real node gossips over its client port's ``GET /gossip`` (the HTTP API), not
the node-to-node listener. The meta-test fails when a fake lacks a member of the port that the real
one has, or takes other parameters for it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from port_members import drift

from evdb.clock import SystemClock
from evdb.cluster import sim
from evdb.cluster.peers import PeerClient, PeerError
from evdb.cluster.transport import Channel, HttpTransport, Message, Transport, _WebSocketChannel
from evdb.free_port import free_port
from evdb.options import Options
from evdb.tls.reload import NodeSettings

TIMEOUT = 10.0


class Handlers:
    """The serving peer's handlers: they record what came and echo it back."""

    def __init__(self) -> None:
        self.votes: list[dict] = []
        self.writes: list[dict] = []
        self.streams_ended = asyncio.Event()

    async def handle_vote(self, body: dict) -> dict:
        self.votes.append(body)
        return {"granted": True, "term": body.get("term")}

    async def handle_write(self, body: dict) -> dict:
        self.writes.append(body)
        return {"ok": True, "events": len(body.get("events", []))}

    async def handle_replication(self, channel: Channel) -> None:
        try:
            while True:
                message = await channel.receive(TIMEOUT)
                if message is None:
                    return
                if message.text == "bye":
                    await channel.close()
                    return
                if message.text is not None:
                    await channel.send_json({"echo": message.text})
                else:
                    await channel.send_bytes(b"echo:" + (message.binary or b""))
        finally:
            self.streams_ended.set()


class World:
    """A calling transport, a serving peer's endpoint and handlers, and an endpoint nobody serves."""

    caller: Any
    endpoint: tuple[str, int]
    nobody: tuple[str, int]
    handlers: Handlers


Body = Callable[[World], Awaitable[None]]


class TransportPortContract:
    def run(self, body: Body) -> None:
        raise NotImplementedError

    def test_a_vote_reaches_the_peers_handler_and_brings_its_answer(self) -> None:
        async def body(w: World) -> None:
            answer = await w.caller.vote(w.endpoint, {"term": 3, "candidate": "x"}, TIMEOUT)
            assert answer == {"granted": True, "term": 3}
            assert w.handlers.votes == [{"term": 3, "candidate": "x"}]

        self.run(body)

    def test_a_forwarded_write_reaches_the_peers_handler_and_brings_its_answer(self) -> None:
        async def body(w: World) -> None:
            answer = await w.caller.write(
                w.endpoint, {"stream": "s", "events": [{"a": 1}, {"b": 2}]}, TIMEOUT
            )
            assert answer == {"ok": True, "events": 2}
            assert w.handlers.writes == [{"stream": "s", "events": [{"a": 1}, {"b": 2}]}]

        self.run(body)

    def test_a_peer_nobody_serves_is_a_peer_error(self) -> None:
        async def body(w: World) -> None:
            with pytest.raises(PeerError):
                await w.caller.vote(w.nobody, {"term": 1}, 1.0)
            with pytest.raises(PeerError):
                await w.caller.write(w.nobody, {"stream": "s"}, 1.0)
            with pytest.raises(PeerError):
                async with w.caller.replicate(w.nobody, 5.0):
                    pass
            assert w.handlers.votes == [] and w.handlers.writes == []

        self.run(body)

    def test_a_stream_carries_json_and_binary_both_ways_in_order(self) -> None:
        async def body(w: World) -> None:
            async with w.caller.replicate(w.endpoint, 5.0) as channel:
                await channel.send_json({"hello": [1, 2]})
                await channel.send_bytes(b"\x00\x01")
                channel.post_bytes((42).to_bytes(8, "little"))
                answers = [await channel.receive(TIMEOUT) for _ in range(3)]
                assert answers == [
                    Message(text={"echo": {"hello": [1, 2]}}),
                    Message(binary=b"echo:\x00\x01"),
                    Message(binary=b"echo:" + (42).to_bytes(8, "little")),
                ]
                assert await channel.receive(0.2) is None  # nothing more came
            async with asyncio.timeout(TIMEOUT):
                await w.handlers.streams_ended.wait()  # the caller's close ended the peer's side

        self.run(body)

    def test_a_stream_the_peer_closes_ends_for_the_caller(self) -> None:
        async def body(w: World) -> None:
            async with w.caller.replicate(w.endpoint, 5.0) as channel:
                await channel.send_json("bye")
                assert await channel.receive(TIMEOUT) is None
                async with asyncio.timeout(TIMEOUT):
                    while not channel.closed:
                        await asyncio.sleep(0.01)
                with pytest.raises(PeerError):
                    for _ in range(100):  # a write may still go out while the close travels
                        await channel.send_json({"late": True})
                        await asyncio.sleep(0.01)

        self.run(body)


# -- the real transport -------------------------------------------------------------------------------


class TestHttpTransport(TransportPortContract):
    def run(self, body: Body) -> None:
        async def main() -> None:
            logger = logging.getLogger("test.contracts.transport")

            def transport() -> HttpTransport:
                # no certificates: plain HTTP between the two (the TLS rules have their own tests)
                settings = NodeSettings(Options(insecure=True))
                clock = SystemClock()
                client = PeerClient(settings, logger=logger, clock=clock)
                return HttpTransport(
                    host="127.0.0.1", port=0, settings=settings, clock=clock, logger=logger, client=client
                )

            server, caller = transport(), transport()
            w = World()
            w.handlers = Handlers()
            w.caller = caller
            w.endpoint = ("127.0.0.1", await server.start(w.handlers))
            w.nobody = ("127.0.0.1", free_port())
            try:
                await body(w)
            finally:
                await caller.client.close()
                await server.stop()

        asyncio.run(main())


# -- the simulator's ------------------------------------------------------------------------------------
class TestSimTransport(TransportPortContract):
    def run(self, body: Body) -> None:
        simulation = sim.Simulation(1, nodes=2)
        caller, server = simulation.nodes
        for node in simulation.nodes:
            node.alive = True
            node.transport = sim.SimTransport(simulation, node)

        async def main() -> None:
            w = World()
            w.handlers = Handlers()
            server.service = w.handlers
            w.caller = caller.transport
            w.endpoint = ("127.0.0.1", await server.transport.start(w.handlers))
            w.nobody = ("127.0.0.1", 3999)
            await body(w)

        try:
            simulation.loop.run_until_complete(main())
        finally:
            simulation.loop.close()


# -- the meta-test ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("port", "real", "fake"),
    [(Transport, HttpTransport, sim.SimTransport), (Channel, _WebSocketChannel, sim.SimChannel)],
    ids=["Transport", "Channel"],
)
def test_the_fake_transport_has_every_member_of_the_port_that_the_real_one_has(port, real, fake):
    assert not drift(port, real, fake)
