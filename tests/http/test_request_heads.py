"""A request whose head is past aiohttp's limits, or that does not parse: a short answer, never the
client's bytes echoed, and at most one log line a second naming the client (issue 33's follow-up;
evdb/http/heads.py).

Before: ``curl -H "X-P: $(head -c 70000 /dev/zero | tr '\\0' a)" http://node/streams/x`` was answered
400 quoting the first 100 bytes of the header, and aiohttp logged "Error handling request" with a
traceback at error level for each such request, anonymous ones too; the lean path (evdb/http/lean.py)
answered an append carrying 200 headers, which aiohttp refuses past 128.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import pytest

from evdb.clock import ManualClock, SystemClock
from evdb.grpc.dispatch import DispatchSite
from evdb.http.heads import MAX_HEADERS, MAX_LINE, RefusedRequests
from evdb.node import Node
from evdb.options import load_options
from evdb.tls import create_ca, create_node_certificate

TIMEOUT = 30.0
HEAD_TOO_LARGE = (
    b"Request header fields too large: a request line or header field over 8190 bytes, "
    b"or more than 128 headers."
)


def _head(request_line: str, *headers: str) -> bytes:
    return (request_line + "\r\nHost: x\r\n" + "".join(h + "\r\n" for h in headers) + "\r\n").encode()


_MANY = tuple(f"X-H{i}: v" for i in range(MAX_HEADERS + 72))
CASES = {
    "a 70,000-byte header": _head("GET /streams/x HTTP/1.1", "X-P: " + "a" * 70_000),
    "a header twice the limit": _head("GET /streams/x HTTP/1.1", "X-P: " + "a" * 2 * MAX_LINE),
    "a long request line": _head("GET /streams/" + "a" * 9000 + " HTTP/1.1"),
    "200 headers on a read": _head("GET /streams/x HTTP/1.1", *_MANY),
    # an append the lean path would otherwise take: it must hand it to aiohttp's limit
    "200 headers on an append": _head(
        "POST /streams/heads HTTP/1.1", "Content-Type: application/json", "Content-Length: 2", *_MANY
    )
    + b"{}",
}


@dataclass
class Site:
    port: int
    context: ssl.SSLContext | None
    node: Node


@pytest.fixture(scope="module")
def certificates(tmp_path_factory) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    base = tmp_path_factory.mktemp("heads-tls")
    ca_cert, ca_key = create_ca(base / "ca")
    cert, key = create_node_certificate(ca_cert, ca_key, base / "node")
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(cert, key)
    client = ssl.create_default_context(cafile=str(ca_cert))
    client.set_alpn_protocols(["http/1.1"])
    return server, client


@pytest.fixture(params=["plain", "tls", "plain, aiohttp alone"])
async def site(request, tmp_path, certificates) -> AsyncIterator[Site]:
    server_context, client_context = certificates if request.param == "tls" else (None, None)
    options = load_options(
        ["--db", str(tmp_path / "db"), "--log", str(tmp_path / "log"), "--insecure",
         "--http-port", "0", "--stats-period-sec", "0"],
        {},
    )  # fmt: skip
    async with Node(options, clock=SystemClock(), name="heads") as node:
        sock = socket.create_server(("127.0.0.1", 0))
        assert node._runner is not None and node.grpc is not None
        extra = DispatchSite(
            node._runner,
            sock,
            grpc=node.grpc,
            ssl_context=server_context,
            lean="aiohttp" not in request.param,
        )
        await extra.start()
        try:
            yield Site(sock.getsockname()[1], client_context, node)
        finally:
            await extra.stop()


async def _exchange(site: Site, raw: bytes) -> bytes:
    """What the node answers to ``raw`` before it closes the connection."""
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", site.port, ssl=site.context, server_hostname="localhost" if site.context else None
    )
    answer = b""
    try:
        with contextlib.suppress(ConnectionError):  # the node closes with the client's bytes unread
            writer.write(raw)
            await writer.drain()
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            while chunk := await reader.read(65536):
                answer += chunk
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            await writer.wait_closed()
    return answer


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def logs(site: Site) -> Iterator[_Records]:
    """What the node's logger and aiohttp's log (the node's does not propagate to the root)."""
    records = _Records()
    loggers = [site.node.logger, logging.getLogger("aiohttp")]
    for logger in loggers:
        logger.addHandler(records)
    aiohttp_level = loggers[1].level
    loggers[1].setLevel(logging.DEBUG)
    try:
        yield records
    finally:
        for logger in loggers:
            logger.removeHandler(records)
        loggers[1].setLevel(aiohttp_level)


def _text(records: _Records) -> str:
    return "\n".join(r.getMessage() for r in records.records)


def _status_and_body(answer: bytes) -> tuple[bytes, bytes, bytes]:
    head, _, body = answer.partition(b"\r\n\r\n")
    return head.split(b"\r\n", 1)[0], head, body


@pytest.mark.parametrize("case", list(CASES))
async def test_a_head_past_the_limits_is_a_short_431(site: Site, case: str, logs) -> None:
    answer = await asyncio.wait_for(_exchange(site, CASES[case]), TIMEOUT)
    status, head, body = _status_and_body(answer)
    assert status.endswith(b" 431 Request Header Fields Too Large"), answer[:300]  # HTTP/1.0: aiohttp's
    assert body == HEAD_TOO_LARGE
    assert b"Content-Type: text/plain" in head  # and the connection closed: _exchange read to its end
    assert b"aaaa" not in answer and b"X-H" not in answer
    assert not [r for r in logs.records if r.exc_info or "Error handling request" in r.getMessage()]
    refusals = [r for r in logs.records if r.getMessage().startswith("Refused a request from 127.0.0.1")]
    assert len(refusals) == 1 and refusals[0].levelno == logging.WARNING, _text(logs)
    assert refusals[0].name == "evdb.node.heads"
    # the node goes on answering, on that port
    ping = await asyncio.wait_for(_exchange(site, _head("GET /ping HTTP/1.1", "Connection: close")), TIMEOUT)
    assert ping.startswith(b"HTTP/1.1 200"), ping[:200]


async def test_a_request_that_does_not_parse_is_a_short_400(site: Site, logs) -> None:
    raw = b"GET /streams/x HTTP/1.1\r\nHost: x\r\nNo colon in this header line secret-bytes\r\n\r\n"
    answer = await asyncio.wait_for(_exchange(site, raw), TIMEOUT)
    status, _, body = _status_and_body(answer)
    assert status.endswith(b" 400 Bad Request") and body == b"Malformed HTTP request.", answer[:300]
    assert not [r for r in logs.records if r.exc_info or "Error handling request" in r.getMessage()]
    assert "Refused a request from 127.0.0.1: it does not parse" in _text(logs)


async def test_a_flood_of_refused_heads_logs_one_line_a_second(site: Site, logs) -> None:
    started = time.monotonic()
    for _ in range(30):
        answer = await asyncio.wait_for(_exchange(site, CASES["a 70,000-byte header"]), TIMEOUT)
        assert b" 431 " in answer.split(b"\r\n", 1)[0]
    elapsed = time.monotonic() - started
    lines = [r for r in logs.records if r.getMessage().startswith("Refused a request from")]
    assert 1 <= len(lines) <= 1 + elapsed / 1.0, (len(lines), elapsed)
    assert not [r for r in logs.records if r.exc_info]


def test_refusals_are_logged_once_a_second_with_the_count_of_the_others() -> None:
    clock = ManualClock()
    logger = logging.getLogger("evdb.test.refusals")
    refusals = RefusedRequests(logger, clock=clock)
    records = _Records()
    logger.addHandler(records)
    for _ in range(5):
        refusals.note("10.0.0.1", "its request head is past the limits (431)")
        clock.advance(0.1)
    clock.advance(0.5)  # 1 s after the first line
    refusals.note("10.0.0.2", "it does not parse as HTTP/1.1 (400, BadHttpMessage)")
    logger.removeHandler(records)
    messages = [r.getMessage() for r in records.records]
    assert messages == [
        "Refused a request from 10.0.0.1: its request head is past the limits (431) (0 such refusals "
        "not logged since the last line, 1 in all; one line a second at most)",
        "Refused a request from 10.0.0.2: it does not parse as HTTP/1.1 (400, BadHttpMessage) (4 such "
        "refusals not logged since the last line, 6 in all; one line a second at most)",
    ]
    assert refusals.count == 6
