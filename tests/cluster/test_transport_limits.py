"""The node-to-node listener keeps the client port's rules (issue 33's follow-up): request bodies by
evdb/http/bodies.py (a compressed body inflated with a bound, garbage 400, another coding 415),
unparseable requests by evdb/http/heads.py (a short 431), connections by evdb/http/connections.py's
ConnectionLimit (at most HttpMaxConnections, a silent one closed after HttpRequestHeadTimeout).

Before, its own aiohttp runner inflated a compressed body whole (a 2 MiB JSON body sent as 2 KiB of
gzip reached the vote handler), had no connection limit, and kept a silent connection open for ever.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import logging
from collections.abc import AsyncIterator
from types import SimpleNamespace

import pytest
from waiting import until

from evdb.clock import SystemClock
from evdb.cluster.transport import Channel, HttpTransport, ListenerLimits
from evdb.http.connections import REFUSED
from evdb.http.heads import head_begun_at

TIMEOUT = 30.0


class Handlers:
    def __init__(self) -> None:
        self.votes: list[dict] = []

    async def handle_vote(self, body: dict) -> dict:
        self.votes.append(body)
        return {"granted": True}

    async def handle_write(self, body: dict) -> dict:
        return {"ok": True}

    async def handle_replication(self, channel: Channel) -> None:
        return None


@pytest.fixture
async def listener() -> AsyncIterator[tuple[HttpTransport, Handlers]]:
    transport = HttpTransport(
        host="127.0.0.1",
        port=0,
        settings=SimpleNamespace(
            tls=None, options=SimpleNamespace(certificate_reserved_node_common_name="node")
        ),
        clock=SystemClock(),
        logger=logging.getLogger("test.transport"),
        client=None,  # type: ignore[arg-type]  # only the listener is used
        limits=ListenerLimits(max_connections=4, head_timeout=1.0, keepalive_timeout=130.0),
    )
    handlers = Handlers()
    await transport.start(handlers)
    try:
        yield transport, handlers
    finally:
        await transport.stop()


async def _post(port: int, path: str, body: bytes, *headers: str) -> tuple[int, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        head = [f"POST {path} HTTP/1.1", "Host: peer", "Content-Type: application/json",
                f"Content-Length: {len(body)}", "Connection: close", *headers]  # fmt: skip
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), TIMEOUT)
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
    status = int(answer.split(b" ", 2)[1])
    return status, answer.partition(b"\r\n\r\n")[2]


async def test_a_compressed_body_is_inflated_with_the_client_ports_bounds(listener) -> None:
    transport, handlers = listener
    port = transport.port
    vote = json.dumps({"term": 1}).encode()
    assert (await _post(port, "/internal/vote", gzip.compress(vote), "Content-Encoding: gzip"))[0] == 200
    assert handlers.votes == [{"term": 1}]
    # 2 MiB of JSON in about 2 KiB of gzip: past 100 times its compressed size, refused unread
    bomb = gzip.compress(b'{"pad": "' + b"0" * (2 << 20) + b'"}')
    status, body = await _post(port, "/internal/vote", bomb, "Content-Encoding: gzip")
    assert status == 413, body[:200]
    assert len(handlers.votes) == 1
    status, body = await _post(port, "/internal/write", b"\x1f\x8bnot gzip", "Content-Encoding: gzip")
    assert status == 400 and b"gzip" in body, body[:200]
    status, body = await _post(port, "/internal/vote", vote, "Content-Encoding: br")
    assert status == 415, body[:200]
    status, body = await _post(port, "/internal/vote", b"{nope")
    assert status == 400, body[:200]


async def test_an_oversized_header_is_a_short_431(listener) -> None:
    transport, _ = listener
    status, body = await _post(transport.port, "/internal/vote", b"{}", "X-P: " + "a" * 70_000)
    assert status == 431 and b"aaaa" not in body, body[:200]


async def test_connections_are_limited_and_silent_ones_closed(listener) -> None:
    transport, _ = listener
    port = transport.port
    connections = transport.connections
    assert connections is not None and connections.limit == 4
    connections.head_timeout = 60.0  # no head expires while the fifth comes, however slow the machine
    held = []
    for _ in range(4):  # four connections at the limit, each with a request head begun
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /internal/vote HTTP/1.1\r\nHost: peer\r\n")
        await writer.drain()
        held.append((reader, writer))
    await until(lambda: connections.open_count() == 4, "four connections counted", TIMEOUT)
    await until(lambda: _heads_begun(connections) == 4, "four heads partway in", TIMEOUT)
    # a fifth: every one is busy (a head partway in is a request under way): refused with 503
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    assert await asyncio.wait_for(reader.read(), TIMEOUT) == REFUSED
    writer.close()
    assert (connections.refused, connections.evicted) == (1, 0)
    # once HttpRequestHeadTimeout has passed since a head began, its connection may make room
    connections.head_timeout = 1.0
    loop = asyncio.get_running_loop()
    await until(lambda: _oldest_head_age(connections, loop.time()) >= 1.0, "a head a second old", TIMEOUT)
    status, _ = await _post(port, "/internal/vote", b"{}")
    assert status == 200
    assert connections.evicted == 1 and connections.open_count() <= 4
    assert await asyncio.wait_for(held[0][0].read(), TIMEOUT) == b""
    for _, w in held:
        w.close()
    await until(lambda: connections.open_count() == 0, "the connections to close", TIMEOUT)
    silent_reader, silent_writer = await asyncio.open_connection("127.0.0.1", port)
    assert await asyncio.wait_for(silent_reader.read(), TIMEOUT) == b""  # closed after 1 s
    assert connections.timed_out == 1
    silent_writer.close()


def _heads_begun(connections) -> int:
    assert connections.http is not None
    return sum(head_begun_at(h) is not None for h in connections.http._connections)


def _oldest_head_age(connections, now: float) -> float:
    assert connections.http is not None
    begun = [head_begun_at(h) for h in connections.http._connections]
    return max((now - b for b in begun if b is not None), default=0.0)


async def test_a_head_never_finished_is_closed_after_the_head_timeout(listener) -> None:
    """aiohttp's handler has no timer for a request head (only its keep-alive, after a first request):
    a head begun and never finished is closed after HttpRequestHeadTimeout, as the lean path's is."""
    transport, _ = listener
    reader, writer = await asyncio.open_connection("127.0.0.1", transport.port)
    writer.write(b"POST /internal/vote HTTP/1.1\r\nHost: peer\r\n")
    await writer.drain()
    assert await asyncio.wait_for(reader.read(), TIMEOUT) == b""  # closed after 1 s
    writer.close()
