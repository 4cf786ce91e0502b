"""Connections cannot take every file descriptor (issue 33, point 4; evdb/grpc/dispatch.py
ConnectionLimit, evdb/http/lean.py).

With ``nofile=256``, 377 silent TCP connections took every descriptor: appends answered 500 ``Too many
open files`` and new clients could not connect. Now the HTTP port keeps at most HttpMaxConnections
open (by default half the open-file limit); at the limit a new connection closes the oldest one that
has sent nothing, or is answered 503 and closed; a connection silent for HttpRequestHeadTimeout is
closed; a node out of descriptors answers 503 (HTTP) or UNAVAILABLE (gRPC), never 500.
"""

from __future__ import annotations

import asyncio
import base64
import errno
import json
import os
import resource
import socket
import subprocess
import sys
import time
import uuid

import httpx
import pytest
from grpclib.const import Status
from waiting import until, wait_until

from evdb.clock import SystemClock
from evdb.free_port import free_port
from evdb.grpc.errors import grpc_error
from evdb.http.answers import error_answer
from evdb.http.connections import REFUSED, connection_limit
from evdb.node import Node
from evdb.options import load_options

ADMIN = ("admin", "changeit")
AUTH = "Basic " + base64.b64encode(b"admin:changeit").decode()
EVENTS = "application/vnd.eventstore.events+json"


def _append_body() -> str:
    return json.dumps([{"eventId": str(uuid.uuid4()), "eventType": "t", "data": {"a": 1}}])


def _limit_descriptors() -> None:  # in the node's process, before it starts
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))


def _open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_377_silent_connections_under_nofile_256_leave_appends_answering(tmp_path):
    port = free_port()
    args = [
        sys.executable, "-m", "evdb.cli", "node", "--db", str(tmp_path / "db"), "--log", str(tmp_path / "log"),
        "--insecure", "--http-port", str(port), "--stats-period-sec", "0",
    ]  # fmt: skip
    node = subprocess.Popen(
        args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=_limit_descriptors
    )
    silent: list[socket.socket] = []
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until(lambda: httpx.get(f"{url}/ping", timeout=2).status_code == 200, 60, "the node to start",
                   tolerate=(httpx.HTTPError,))  # fmt: skip
        for _ in range(377):
            silent.append(socket.create_connection(("127.0.0.1", port), timeout=10))
        answers: dict[int, int] = {}
        # a new client each time (a new connection), as the clients could not make one
        for _ in range(40):
            with httpx.Client(base_url=url, auth=ADMIN, timeout=10) as client:
                r = client.post("/streams/fd-1", content=_append_body(), headers={"Content-Type": EVENTS})
            answers[r.status_code] = answers.get(r.status_code, 0) + 1
            assert r.status_code in (201, 503), (r.status_code, r.text)
            assert "Too many open files" not in r.text
        assert answers.get(201, 0) >= 20, answers  # silent connections made room for the clients
        assert node.poll() is None
        for sock in silent:
            sock.close()
        silent.clear()
        # the node recovers: its descriptors go back, appends answer
        wait_until(lambda: _open_fds(node.pid) < 100, 60, "the node's descriptors to be given back",
                   detail=lambda: _open_fds(node.pid))  # fmt: skip
        with httpx.Client(base_url=url, auth=ADMIN, timeout=10) as client:
            r = client.post("/streams/fd-1", content=_append_body(), headers={"Content-Type": EVENTS})
            assert r.status_code == 201, r.text
    finally:
        for sock in silent:
            sock.close()
        node.terminate()
        try:
            _, err = node.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            node.kill()
            _, err = node.communicate()
    assert b"Traceback" not in err, err[-3000:]
    assert b"Closed a silent connection" in err


def _options(tmp_path, *extra: str):
    return load_options(
        [
            "--db", str(tmp_path / "db"), "--log", str(tmp_path / "log"), "--insecure",
            "--http-port", "0", "--stats-period-sec", "0", *extra,
        ],
        {},
    )  # fmt: skip


async def _read_all(reader: asyncio.StreamReader) -> bytes:
    return await asyncio.wait_for(reader.read(), 30)


async def test_at_the_limit_a_busy_set_refuses_with_503_and_silent_ones_make_room(tmp_path):
    options = _options(tmp_path, "--http-max-connections", "4")
    async with Node(options, clock=SystemClock(), name="limit") as node:
        port = node.port
        head = f"POST /streams/held HTTP/1.1\r\nHost: x\r\nAuthorization: {AUTH}\r\n".encode()
        held = []
        for _ in range(4):  # four connections in a request (a head begun): none is silent
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(head)
            await writer.drain()
            held.append((reader, writer))
        await until(lambda: node.grpc.connections.open_count() == 4, "four connections counted", 30)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        assert await _read_all(reader) == REFUSED
        writer.close()
        assert node.grpc.connections.refused == 1
        for _, w in held:
            w.close()
        await until(lambda: node.grpc.connections.open_count() == 0, "the connections to close", 30)
        # four silent ones, then a client: the oldest silent one is closed to make room
        silent = [await asyncio.open_connection("127.0.0.1", port) for _ in range(4)]
        await until(lambda: node.grpc.connections.open_count() == 4, "four silent connections", 30)
        async with httpx.AsyncClient(base_url=node.http_url, auth=ADMIN, timeout=30) as client:
            r = await client.post("/streams/room", content=_append_body(), headers={"Content-Type": EVENTS})
            assert r.status_code == 201, r.text
        assert await _read_all(silent[0][0]) == b""  # closed, nothing said
        assert node.grpc.connections.evicted == 1
        for _, w in silent:
            w.close()


async def test_at_the_limit_the_connection_idle_longest_makes_room(tmp_path):
    """Keep-alive connections between requests (aiohttp's after a GET, the lean path's after an
    append) are closed, the one idle longest first, when a new client comes at the limit."""
    options = _options(tmp_path, "--http-max-connections", "3")
    async with Node(options, clock=SystemClock(), name="idle") as node:
        connections = []
        for request in (
            b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n",
            b"POST /streams/idle-1 HTTP/1.1\r\nHost: x\r\nContent-Type: "
            + EVENTS.encode()
            + b"\r\nAuthorization: "
            + AUTH.encode()
            + b"\r\nContent-Length: %d\r\n\r\n",
            b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n",
        ):
            reader, writer = await asyncio.open_connection("127.0.0.1", node.port)
            if b"%d" in request:
                body = _append_body().encode()
                request = request % len(body) + body
            writer.write(request)
            answer = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
            assert answer.startswith((b"HTTP/1.1 200", b"HTTP/1.1 201")), answer
            connections.append((reader, writer))
        await until(lambda: node.grpc.connections.open_count() == 3, "three idle connections", 30)
        async with httpx.AsyncClient(base_url=node.http_url, auth=ADMIN, timeout=30) as client:
            r = await client.post("/streams/idle-2", content=_append_body(), headers={"Content-Type": EVENTS})
            assert r.status_code == 201, r.text
        assert node.grpc.connections.evicted == 1 and node.grpc.connections.refused == 0
        # the first (the GET's) was idle longest: it is the one closed
        first = connections[0][0]
        await asyncio.wait_for(first.read(), 30)  # the rest of its answer, then the end
        assert first.at_eof()
        for _, writer in connections:
            writer.close()


async def test_silent_and_slow_head_connections_are_closed_after_the_head_timeout(tmp_path):
    options = _options(tmp_path, "--http-request-head-timeout", "1")
    async with Node(options, clock=SystemClock(), name="head") as node:
        started = time.monotonic()
        silent_reader, silent_writer = await asyncio.open_connection("127.0.0.1", node.port)
        slow_reader, slow_writer = await asyncio.open_connection("127.0.0.1", node.port)
        slow_writer.write(b"POST /streams/slow HTTP/1.1\r\nHost: x\r\n")  # the lean path's, never ended
        await slow_writer.drain()
        assert await _read_all(silent_reader) == b""
        assert await _read_all(slow_reader) == b""
        assert time.monotonic() - started < 25
        assert node.grpc.connections.timed_out >= 1
        silent_writer.close()
        slow_writer.close()
        async with httpx.AsyncClient(base_url=node.http_url, auth=ADMIN, timeout=30) as client:
            assert (await client.get("/ping")).status_code == 200


def test_the_refusal_is_a_whole_http_answer():
    head, body = REFUSED.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 503 ") and f"Content-Length: {len(body)}".encode() in head


def test_the_default_limit_is_half_the_open_file_limit():
    assert connection_limit(0, 256) == 128
    assert connection_limit(0, 20) == 16
    assert connection_limit(300, 256) == 300


class _Node:
    """What error_answer and grpc_error read of the node's services."""

    class database:
        db = object()
        generation = 0

    class logger:
        @staticmethod
        def error(*args, **kwargs):
            raise AssertionError("a resource error is not an unexpected one")

        exception = error
        info = error


@pytest.mark.parametrize("code", [errno.EMFILE, errno.ENFILE])
def test_out_of_descriptors_is_503_and_unavailable_never_500(code):
    exc = OSError(code, os.strerror(code))
    answer = error_answer(_Node(), exc, "POST", "/streams/x", 0)  # type: ignore[arg-type]
    assert answer.status == 503 and ("Retry-After", "1") in answer.headers
    assert b"file descriptors" in answer.body
    assert grpc_error(_Node(), exc).status is Status.UNAVAILABLE  # type: ignore[arg-type]


def test_a_full_disk_is_507_and_resource_exhausted():
    exc = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    assert error_answer(_Node(), exc, "POST", "/streams/x", 0).status == 507  # type: ignore[arg-type]
    assert grpc_error(_Node(), exc).status is Status.RESOURCE_EXHAUSTED  # type: ignore[arg-type]


async def _raw_grpc_call(port: int, prefix: bytes, payload: bytes) -> tuple[Status, str]:
    """A Streams.Read call whose request message is sent as the raw bytes ``prefix + payload``."""
    from grpclib.client import Channel
    from grpclib.const import Cardinality
    from grpclib.exceptions import GRPCError
    from kurrentdbclient.protos.v1 import streams_pb2

    channel = Channel("127.0.0.1", port)
    try:
        async with channel.request(
            "/event_store.client.streams.Streams/Read",
            Cardinality.UNARY_STREAM,
            streams_pb2.ReadReq,
            streams_pb2.ReadResp,
            metadata={"authorization": AUTH},
        ) as stream:
            await stream.send_request()
            await stream._stream.send_data(prefix + payload, end_stream=True)
            stream._send_message_done = True  # what grpclib's send_message would have noted
            try:
                await stream.recv_message()
                await stream.recv_trailing_metadata()
            except GRPCError as exc:
                return exc.status, exc.message or ""
            raise AssertionError("the call was answered")
    finally:
        channel.close()


async def test_a_grpc_message_longer_than_the_limit_or_compressed_is_refused_unread(tmp_path):
    """grpclib gathered a request message whole, whatever the length its prefix claimed (up to
    4 GiB); a compressed one was an INTERNAL error with a traceback in the log."""
    import struct

    options = _options(tmp_path, "--http-max-request-body-size", str(64 * 1024))
    async with Node(options, clock=SystemClock(), name="grpc-limit") as node:
        status, message = await asyncio.wait_for(
            _raw_grpc_call(node.port, struct.pack(">?I", False, 2**32 - 1), b"\0" * 65536), 30
        )
        assert status is Status.RESOURCE_EXHAUSTED and "HttpMaxRequestBodySize" in message, message
        status, message = await asyncio.wait_for(
            _raw_grpc_call(node.port, struct.pack(">?I", True, 10), b"\0" * 10), 30
        )
        assert status is Status.UNIMPLEMENTED and "Compressed" in message, message


async def test_a_head_partway_in_is_busy_until_the_head_timeout(tmp_path):
    """A connection partway through sending its request head (to aiohttp's handler, which the lean
    path hands a connection to after a GET) is a request under way: at the limit the newcomer is refused with
    503, not let in by closing it (evdb/http/connections.py ``_aiohttp_idle``)."""
    options = _options(tmp_path, "--http-max-connections", "4", "--http-request-head-timeout", "60")
    async with Node(options, clock=SystemClock(), name="heads") as node:
        held = []
        for partial in (b"GET /ping HTTP/1.1\r\nHost: x\r\n", b"POST /streams/h HTTP/1.1\r\nHost: x\r\n"):
            for _ in range(2):
                reader, writer = await asyncio.open_connection("127.0.0.1", node.port)
                writer.write(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")  # a first request, answered
                answer = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
                assert answer.startswith(b"HTTP/1.1 200"), answer
                await asyncio.wait_for(reader.readexactly(_content_length(answer)), 30)
                writer.write(partial)  # then the next request's head, partway
                await writer.drain()
                held.append((reader, writer))
        connections = node.grpc.connections
        await until(lambda: connections.open_count() == 4, "four connections counted", 30)
        await until(lambda: _heads_partway(connections) == 4, "four heads partway in", 30)
        reader, writer = await asyncio.open_connection("127.0.0.1", node.port)
        assert await _read_all(reader) == REFUSED
        writer.close()
        assert (connections.refused, connections.evicted) == (1, 0)
        for _, w in held:
            w.close()


def _content_length(head: bytes) -> int:
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return int(line.split(b":", 1)[1])
    return 0


def _heads_partway(connections) -> int:
    from evdb.http.heads import head_begun_at

    if connections.http is None:
        return 0
    return sum(head_begun_at(h) is not None for h in connections.http._connections)
