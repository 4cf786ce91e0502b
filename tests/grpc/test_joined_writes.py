"""evdb.grpc.dispatch._JoinedWrites on a real socket transport: the writes of one event-loop step reach
the transport as one write, in order, at the end of the step; a large write (JOIN_LIMIT) and close() pass
what waits on at once."""

from __future__ import annotations

import asyncio
import socket

from evdb.grpc.dispatch import JOIN_LIMIT, _JoinedWrites


async def _pair() -> tuple[asyncio.WriteTransport, socket.socket, list[bytes]]:
    ours, theirs = socket.socketpair()
    theirs.setblocking(False)
    loop = asyncio.get_running_loop()
    transport, _ = await loop.create_connection(asyncio.Protocol, sock=ours)
    writes: list[bytes] = []
    real_write = transport.write

    def counted(data: bytes) -> None:  # the real write, counted
        writes.append(bytes(data))
        real_write(data)

    transport.write = counted  # type: ignore[method-assign,assignment]
    return transport, theirs, writes  # type: ignore[return-value]


async def _received(sock: socket.socket, size: int) -> bytes:
    loop = asyncio.get_running_loop()
    data = b""
    while len(data) < size:
        data += await asyncio.wait_for(loop.sock_recv(sock, size - len(data)), 10)
    return data


async def test_the_writes_of_one_step_go_out_as_one_write_in_order():
    transport, peer, writes = await _pair()
    joined = _JoinedWrites(transport, asyncio.get_running_loop())
    joined.write(b"headers|")
    joined.write(b"")
    joined.write(b"message|")
    joined.write(b"trailers")
    assert writes == []  # nothing before the step ends
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert writes == [b"headers|message|trailers"]
    assert await _received(peer, 24) == b"headers|message|trailers"
    joined.write(b"next")
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert writes[1:] == [b"next"]
    joined.close()
    peer.close()


async def test_a_large_write_and_close_pass_on_what_waits_at_once():
    transport, peer, writes = await _pair()
    joined = _JoinedWrites(transport, asyncio.get_running_loop())
    joined.write(b"a")
    joined.write(b"b" * JOIN_LIMIT)
    assert writes == [b"a" + b"b" * JOIN_LIMIT]  # at once: the transport's flow control sees it
    joined.write(b"last")
    joined.close()  # what waits goes out before the close
    assert writes[1:] == [b"last"]
    assert joined.is_closing()
    data = await _received(peer, 1 + JOIN_LIMIT + 4)
    assert data.endswith(b"last")
    peer.close()
