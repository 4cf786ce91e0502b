"""The lean HTTP/1.1 path for appends (evdb/http/lean.py) answers byte for byte as aiohttp does.

Two nodes start alike (same options, same clock); each gets one more listening site on the same app,
the first with the lean path, the second with aiohttp alone (``DispatchSite(lean=False)``). Every
case's requests go to both, on a new connection each, and the answers must be equal in status,
headers (but Date) and body; the lean site's hand-offs to aiohttp are counted, so each case also
says which path answered it. Plain TCP and TLS; on uvloop too with
``PYTHONPATH=tests .venv/bin/pytest -p uvloop_loops tests/http``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import re
import socket
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from aiohttp.web_protocol import RequestHandler
from waiting import until

from evdb.grpc.dispatch import DispatchSite
from evdb.http.lean import HEAD_LIMIT, KEEPALIVE_TIMEOUT, LeanServer, _read_request
from evdb.node import Node
from evdb.options import load_options
from evdb.tls import create_ca, create_node_certificate

TIMEOUT = 20.0
ADMIN = "Basic " + base64.b64encode(b"admin:changeit").decode()
OPS = "Basic " + base64.b64encode(b"ops:changeit").decode()
WRONG = "Basic " + base64.b64encode(b"admin:wrong").decode()
BODY_LIMIT = 2048


def request(
    stream: str = "orders-1",
    body: bytes = b'{"a": 1}',
    *,
    content_type: str | None = "application/json",
    event_type: str | None = "OrderPlaced",
    event_id: str | None = None,
    auth: str | None = ADMIN,
    extra: tuple[str, ...] = (),
    version: str = "1.1",
    method: str = "POST",
    length: int | None = None,
) -> bytes:
    lines = [f"{method} /streams/{stream} HTTP/{version}", "Host: evdb.test:2113"]
    if content_type is not None:
        lines.append(f"Content-Type: {content_type}")
    if event_type is not None:
        lines.append(f"ES-EventType: {event_type}")
    if event_id is None:  # every request its own id, the same for both nodes: reads compare equal
        event_id = _next_id()
    if event_id != "omit":
        lines.append(f"Kurrent-EventId: {event_id}")
    if auth is not None:
        lines.append(f"Authorization: {auth}")
    lines.extend(extra)
    if method != "GET":
        lines.append(f"Content-Length: {len(body) if length is None else length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + (body if method != "GET" else b"")


def event_id(n: int) -> str:
    return f"00000000-0000-4000-8000-{n:012d}"


_ids = iter(range(1000, 10_000))


def _next_id() -> str:
    return event_id(next(_ids))


def events(*items: dict) -> bytes:
    return json.dumps(list(items)).encode()


@dataclass
class Case:
    name: str
    requests: list[bytes]
    lean: bool  # answered by the lean path (no hand-off), or handed to aiohttp
    pipelined: bool = False  # all requests in one write
    bytewise: bool = False  # every byte its own write
    until_eof: bool = False  # the server closes after the last answer


CASES = [
    # the first sign-in of the credentials runs in a worker thread: aiohttp's
    Case("first sign-in", [request(event_id=event_id(1))], lean=False),
    Case("ops signs in", [request("ops-stream", auth=OPS, event_id=event_id(2))], lean=False),
    Case("json event", [request(event_id=event_id(3))], lean=True),
    # no id: KurrentDB's 307 to /streams/{stream}/incoming/{guid}, answered by aiohttp
    Case("json event, no id", [request("no-id", body=b"[1, 2]", event_id="omit")], lean=False),
    Case("idempotent repeat", [request(event_id=event_id(3))], lean=True),
    Case("octet-stream", [request("bytes", b"\x00\x01", content_type="application/octet-stream")], lean=True),
    Case(
        "text/plain with a charset",
        [request("text", b"hi", content_type="text/plain; charset=utf-8")],
        lean=True,
    ),
    Case(
        "ES-ExpectedVersion",
        [request("orders-1", extra=("ES-ExpectedVersion: 0",), event_id=event_id(4))],
        lean=True,
    ),
    Case("wrong expected version", [request("orders-1", extra=("Kurrent-ExpectedVersion: 7",))], lean=True),
    Case("no stream expected", [request("orders-1", extra=("Kurrent-ExpectedVersion: -1",))], lean=True),
    Case(
        "events+json",
        [
            request(
                "batch",
                events(
                    {"eventId": event_id(10), "eventType": "A", "data": {"x": 1}, "metadata": {"m": True}},
                    {"eventId": event_id(11), "eventType": "B", "data": "text"},
                    {"eventId": event_id(12), "eventType": "C", "dataBase64": "AAE=", "isJson": False},
                ),
                content_type="application/vnd.kurrent.events+json",
                event_type=None,
            )
        ],
        lean=True,
    ),
    Case(
        "metastream",
        [
            request(
                "$$batch",
                events({"eventId": event_id(13), "eventType": "$metadata", "data": {"$maxCount": 5}}),
                content_type="application/vnd.eventstore.events+json",
                event_type=None,
            )
        ],
        lean=True,
    ),
    Case(
        "bad metadata",
        [
            request(
                "$$batch",
                events({"eventId": event_id(14), "eventType": "$metadata", "data": {"$maxCount": "x"}}),
                content_type="application/vnd.kurrent.events+json",
                event_type=None,
            )
        ],
        lean=False,
    ),
    Case(
        "pipelined", [request("pipe", event_id=event_id(20 + i)) for i in range(4)], lean=True, pipelined=True
    ),
    Case("split at every byte", [request("bytewise", event_id=event_id(30))], lean=True, bytewise=True),
    Case(
        "Connection: close",
        [request("closing", extra=("Connection: close",), event_id=event_id(31))],
        lean=True,
        until_eof=True,
    ),
    Case("Connection: keep-alive", [request("kept", extra=("Connection: keep-alive",))], lean=True),
    Case("bad JSON", [request("bad", b"{nope")], lean=True),  # a single event's body: stored as it came
    Case("NaN", [request("bad", b"NaN")], lean=True),
    Case("missing event type", [request("bad", event_type=None)], lean=False),
    Case("bad event id", [request("bad", event_id="not-a-uuid")], lean=False),
    Case("bad expected version", [request("bad", extra=("ES-ExpectedVersion: x",))], lean=False),
    Case("unsupported type", [request("bad", content_type="image/png")], lean=False),
    Case("no content type", [request("untyped", b"raw", content_type=None)], lean=False),
    Case("anonymous", [request("orders-1", auth=None)], lean=False),
    Case("wrong password", [request("orders-1", auth=WRONG)], lean=False),
    Case("malformed authorization", [request("orders-1", auth="Basic !!!")], lean=False),
    Case("ops on a system stream", [request("$system", auth=OPS)], lean=False),
    Case("$all", [request("$all")], lean=False),
    Case("larger than the body limit", [request("big", b"x" * (BODY_LIMIT + 1))], lean=False),
    Case("larger than MaxAppendSize", [request("big", b'"' + b"x" * 1500 + b'"')], lean=False),
    Case("HTTP/1.0", [request("old", version="1.0", event_id=event_id(40))], lean=False, until_eof=True),
    Case("Expect: 100-continue", [request("expect", extra=("Expect: 100-continue",))], lean=False),
    Case(
        "chunked",
        [
            request("chunked", extra=("Transfer-Encoding: chunked",), length=None)
            .replace(b"Content-Length: 8\r\n", b"")
            .replace(b'{"a": 1}', b'8\r\n{"a": 1}\r\n0\r\n\r\n')
        ],
        lean=False,
    ),
    Case("percent-encoded name", [request("with%20space")], lean=False),
    Case("a query", [request("orders-1?x=1")], lean=False),
    Case("repeated header", [request("twice", extra=("ES-EventType: Other",))], lean=False),
    Case("read, then append", [request("orders-1", method="GET"), request("after-read")], lean=False),
    Case("append, then read", [request("read-after"), request("read-after", method="GET")], lean=False),
    Case(
        "hard delete",
        [request("gone", method="DELETE", body=b"", content_type=None, extra=("ES-HardDelete: true",))],
        lean=False,
    ),
    Case("stream deleted", [request("gone")], lean=True),
    Case(
        "soft-deleted stream, wrong version", [request("gone", extra=("ES-ExpectedVersion: 3",))], lean=True
    ),
]


def _without_date(answers: bytes) -> bytes:
    """The answers without what differs by design: the date, and the fresh id of a 307 to
    ``/incoming/{guid}`` (a single event without an id: both paths leave it to aiohttp)."""
    answers = re.sub(rb"\r\nDate: [^\r]*\r\n", b"\r\nDate: -\r\n", answers)
    return re.sub(rb"/incoming/[0-9a-f-]{36}", b"/incoming/-", answers)


async def _read_answers(reader: asyncio.StreamReader, count: int, until_eof: bool) -> bytes:
    if until_eof:
        return await reader.read()
    out = b""
    for _ in range(count):
        head = await reader.readuntil(b"\r\n\r\n")
        length = re.search(rb"\r\nContent-Length: (\d+)\r\n", head, re.IGNORECASE)
        body = await reader.readexactly(int(length.group(1))) if length else b""
        out += head + body
    return out


async def exchange(port: int, case: Case, context: ssl.SSLContext | None) -> bytes:
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=context, server_hostname="localhost" if context else None
    )
    try:
        if case.pipelined:
            writer.write(b"".join(case.requests))
            await writer.drain()
            return await _read_answers(reader, len(case.requests), case.until_eof)
        answers = b""
        for raw in case.requests:
            if case.bytewise:
                for i in range(len(raw)):
                    writer.write(raw[i : i + 1])
                    await writer.drain()
            else:
                writer.write(raw)
                await writer.drain()
            answers += await _read_answers(reader, 1, case.until_eof)
        return answers
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            await writer.wait_closed()


@dataclass
class Pair:
    lean_port: int
    plain_port: int
    lean: LeanServer
    client_context: ssl.SSLContext | None
    node: Node  # the lean path's


def _options(tmp_path, name: str):
    return load_options(
        [
            "--db",
            str(tmp_path / name / "db"),
            "--log",
            str(tmp_path / name / "log"),
            "--insecure",
            "--http-port",
            "0",
            "--stats-period-sec",
            "0",
            "--http-max-request-body-size",
            str(BODY_LIMIT),
            "--max-append-size",
            "1024",
        ],
        {},
    )


@pytest.fixture(scope="module")
def certificates(tmp_path_factory) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    base = tmp_path_factory.mktemp("lean-tls")
    ca_cert, ca_key = create_ca(base / "ca")
    cert, key = create_node_certificate(ca_cert, ca_key, base / "node")
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(cert, key)
    client = ssl.create_default_context(cafile=str(ca_cert))
    client.set_alpn_protocols(["http/1.1"])
    return server, client


@pytest.fixture(params=["plain", "tls"])
async def pair(request, tmp_path, clock, certificates) -> AsyncIterator[Pair]:
    server_context, client_context = certificates if request.param == "tls" else (None, None)
    sites = []
    async with (
        Node(_options(tmp_path, "lean"), clock=clock, name="lean") as lean_node,
        Node(_options(tmp_path, "plain"), clock=clock, name="plain") as plain_node,
    ):
        ports = []
        for node, lean in ((lean_node, True), (plain_node, False)):
            sock = socket.create_server(("127.0.0.1", 0))
            runner, grpc = node._runner, node.grpc  # the node's app, on one more listening socket
            assert runner is not None and grpc is not None
            site = DispatchSite(runner, sock, grpc=grpc, ssl_context=server_context, lean=lean)
            await site.start()
            sites.append(site)
            ports.append(sock.getsockname()[1])
        lean_server = sites[0]._lean_server
        assert lean_server is not None and sites[1]._lean_server is None
        try:
            yield Pair(ports[0], ports[1], lean_server, client_context, lean_node)
        finally:
            for site in sites:
                await site.stop()


async def test_every_case_is_answered_alike_by_both_paths(pair: Pair) -> None:
    for case in CASES:
        handed_off = pair.lean.handed_off
        lean = await asyncio.wait_for(exchange(pair.lean_port, case, pair.client_context), TIMEOUT)
        plain = await asyncio.wait_for(exchange(pair.plain_port, case, pair.client_context), TIMEOUT)
        assert lean.startswith(b"HTTP/1."), case.name
        assert _without_date(lean) == _without_date(plain), case.name
        assert pair.lean.handed_off - handed_off == (0 if case.lean else 1), case.name


async def test_a_lean_connection_goes_on_after_a_hand_off_with_aiohttp(pair: Pair) -> None:
    """An error hands the connection to aiohttp at the request's start; the next requests are
    aiohttp's, in order (a GET between appends, then appends again)."""
    case = Case(
        "mixed",
        [
            request("mixed", event_id=event_id(50)),
            request("mixed", event_type=None),  # 400: no event type
            request("mixed", method="GET"),
            request("mixed", event_id=event_id(51)),
        ],
        lean=False,
        pipelined=True,
    )
    await asyncio.wait_for(
        exchange(pair.lean_port, Case("sign in", [request("warm")], lean=False), pair.client_context), TIMEOUT
    )
    await asyncio.wait_for(
        exchange(pair.plain_port, Case("sign in", [request("warm")], lean=False), pair.client_context),
        TIMEOUT,
    )
    lean = await asyncio.wait_for(exchange(pair.lean_port, case, pair.client_context), TIMEOUT)
    plain = await asyncio.wait_for(exchange(pair.plain_port, case, pair.client_context), TIMEOUT)
    assert _without_date(lean) == _without_date(plain)
    assert lean.count(b"HTTP/1.1 201 Created") == 2 and b"HTTP/1.1 400 Bad Request" in lean


def test_a_request_split_anywhere_waits_for_its_last_byte() -> None:
    raw = request("split", event_id=event_id(60))
    for cut in range(len(raw)):
        assert _read_request(bytearray(raw[:cut]), BODY_LIMIT) is False, cut
    whole = _read_request(bytearray(raw + b"POST"), BODY_LIMIT)
    assert not isinstance(whole, bool)
    assert whole.end == len(raw) and whole.stream == "split" and whole.body == b'{"a": 1}'


def test_heads_outside_the_strict_subset_go_to_aiohttp() -> None:
    good = request("s")
    assert not isinstance(_read_request(bytearray(good), BODY_LIMIT), bool)
    for bad in (
        good.replace(b"\r\n", b"\n"),
        good.replace(b"\r\n", b"\n")[:40],
        b"GET /",
        b"POST /x",
        good.replace(b"POST", b"post"),
        good.replace(b"Host: ", b"Host : "),
        good.replace(b"Host: evdb.test:2113", b"Host: evdb.test:2113 "),
        good.replace(b"Host: evdb.test:2113\r\n", b"Host: evdb.test:2113\r\n folded\r\n"),
        good.replace(b"/streams/s ", b"/streams/.. "),
        good.replace(b"/streams/s ", b"/streams/s/x "),
        good.replace(b"Host: evdb.test:2113\r\n", b""),
        good.replace(b"Host: evdb.test:2113\r\n", b"Host: \xc3\xa9\r\n"),
        good.replace(b"Content-Length: 8", b"Content-Length: +8"),
        good.replace(b"\r\n\r\n", b"\r\nConnection: upgrade\r\n\r\n", 1),
        good.replace(b"\r\n\r\n", b"\r\nContent-Encoding: gzip\r\n\r\n", 1),
        b"POST /streams/s HTTP/1.1\r\n" + b"X-Long: " + b"x" * HEAD_LIMIT,
    ):
        assert _read_request(bytearray(bad), BODY_LIMIT) is True, bad[:80]


async def test_the_idle_timeout_is_aiohttps(pair: Pair) -> None:
    """Both paths close an idle connection after the node's HttpKeepAliveTimeout (not aiohttp's own
    default, an hour)."""
    import inspect

    default = inspect.signature(RequestHandler.__init__).parameters["keepalive_timeout"].default
    assert default == KEEPALIVE_TIMEOUT
    options = pair.node.options
    runner = pair.node._runner
    assert runner is not None and runner.server is not None
    handler = runner.server()
    assert handler.keepalive_timeout == pair.lean.keepalive_timeout == options.http_keep_alive_timeout
    assert pair.lean.keepalive_timeout < KEEPALIVE_TIMEOUT


async def test_stopping_the_site_closes_its_idle_lean_connections(pair: Pair) -> None:
    case = Case("sign in", [request("stop")], lean=False)
    await asyncio.wait_for(exchange(pair.lean_port, case, pair.client_context), TIMEOUT)
    reader, writer = await asyncio.open_connection(
        "127.0.0.1",
        pair.lean_port,
        ssl=pair.client_context,
        server_hostname="localhost" if pair.client_context else None,
    )
    writer.write(request("stop"))
    assert (await asyncio.wait_for(_read_answers(reader, 1, False), TIMEOUT)).startswith(b"HTTP/1.1 201")
    assert len(pair.lean.connections) == 1  # answered here, and kept open
    await asyncio.wait_for(pair.lean.close(), TIMEOUT)
    assert await asyncio.wait_for(reader.read(), TIMEOUT) == b""
    assert not pair.lean.connections
    writer.close()
    with contextlib.suppress(ConnectionError, ssl.SSLError):
        await writer.wait_closed()


class _Transport(asyncio.Transport):
    """What a lean connection uses of its transport, recording whether reading is paused."""

    def __init__(self) -> None:
        super().__init__()
        self.reading = True
        self.written = bytearray()

    def get_extra_info(self, name, default=None):  # type: ignore[no-untyped-def]
        return ("127.0.0.1", 50000) if name == "peername" else default

    def write(self, data) -> None:  # type: ignore[no-untyped-def]
        self.written += data

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass


async def test_a_client_that_reads_no_answers_is_not_read_without_bound(pair: Pair) -> None:
    """Writing paused (the client reads none of its answers) and nothing waiting for the writer: a
    client pipelining past a request's largest size is no longer read, and reading resumes once the
    answers flow again."""
    assert await pair.node.users.sign_in_header(ADMIN, "admin", "changeit") is not None
    protocol = pair.lean.protocol()
    transport = _Transport()
    protocol.connection_made(transport)
    protocol.pause_writing()  # type: ignore[attr-defined]
    pipelined = b"".join(request("unread", event_id=event_id(40 + i)) for i in range(60))
    assert len(pipelined) > HEAD_LIMIT + BODY_LIMIT
    protocol.data_received(pipelined)
    assert not transport.reading and transport.written == b""  # nothing answered, nothing more read
    protocol.resume_writing()  # type: ignore[attr-defined]
    await until(lambda: transport.reading, "reading to resume with the answers", TIMEOUT)
    await until(lambda: transport.written.count(b"HTTP/1.1 201") == 60, "all 60 answers", TIMEOUT)
    protocol.connection_lost(None)
