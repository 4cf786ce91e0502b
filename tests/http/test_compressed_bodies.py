"""Compressed request bodies (issue 33, point 3; evdb/http/bodies.py).

A body labelled gzip or deflate that does not decode is a 400 saying so on every route that reads a
body (it was a 500 and a traceback in the log); one in a coding the node does not inflate is a 415; a
bomb (a few hundred KB inflating to hundreds of MiB) is refused with 413 as soon as it passes a bound,
so eight at once cost the node a few MiB, not their inflated size, and ``/ping`` is answered meanwhile.
Requests go to a node's own listening site: the lean path hands each of them to aiohttp.
"""

from __future__ import annotations

import asyncio
import gzip
import os
import threading
import time
import zlib

import httpx
import pytest

from evdb.clock import SystemClock
from evdb.node import Node
from evdb.options import load_options

ADMIN = ("admin", "changeit")
EVENTS = "application/vnd.eventstore.events+json"
EVENT_ID = "00000000-0000-4000-8000-000000000033"
APPEND = b'[{"eventId": "%s", "eventType": "t", "data": {"a": 1}}]' % EVENT_ID.encode()

#: (method, path, content type, a valid body) of every kind of route that reads a body
ROUTES = [
    ("POST", "/streams/hostile-1", EVENTS, APPEND),
    ("POST", "/streams/hostile-1/metadata", "application/json", b'{"$maxCount": 5}'),
    ("POST", "/users", "application/json", b'{"loginName": "zed", "fullName": "Z", "password": "pw"}'),
    ("PUT", "/subscriptions/hostile-1/group-1", "application/json", b"{}"),
    ("PUT", "/projection/$by_category/config", "application/json", b'{"emitEnabled": true}'),
    ("POST", "/admin/backup", "application/json", b'{"destination": "/nonexistent"}'),
]


def _options(tmp_path, *extra: str):
    return load_options(
        [
            "--db", str(tmp_path / "db"), "--log", str(tmp_path / "log"), "--insecure",
            "--http-port", "0", "--stats-period-sec", "0", "--run-projections", "System", *extra,
        ],
        {},
    )  # fmt: skip


@pytest.fixture
async def client(tmp_path):
    async with (
        Node(_options(tmp_path), clock=SystemClock(), name="bodies") as node,
        httpx.AsyncClient(base_url=node.http_url, auth=ADMIN, timeout=60) as c,
    ):
        yield c


def _broken(coding: str) -> list[tuple[str, bytes]]:
    """Bodies labelled ``coding`` that do not decode: not compressed, cut short, garbage after."""
    good = gzip.compress(APPEND) if coding == "gzip" else zlib.compress(APPEND)
    return [
        ("plain", APPEND),
        ("truncated", good[: len(good) // 2]),
        ("trailing garbage", good + b"garbage" if coding == "deflate" else good[:-8] + b"\0" * 8),
    ]


def _headers(content_type: str, coding: str) -> dict[str, str]:
    return {
        "Content-Type": content_type,
        "Content-Encoding": coding,
        "ES-EventType": "t",
        "ES-EventId": EVENT_ID,
    }


@pytest.mark.parametrize("coding", ["gzip", "deflate"])
async def test_a_body_that_does_not_decode_is_a_400_on_every_route(client, coding):
    for method, path, content_type, _ in ROUTES:
        for what, body in _broken(coding):
            r = await client.request(method, path, content=body, headers=_headers(content_type, coding))
            assert r.status_code == 400, (method, path, what, r.status_code, r.text)
            assert "Content-Encoding" in r.text and "Traceback" not in r.text, (method, path, what, r.text)
    # nothing was done by any of them
    assert (await client.get("/streams/hostile-1")).status_code == 404
    assert (await client.get("/users/zed")).status_code == 404
    assert (await client.get("/subscriptions/hostile-1/group-1/info")).status_code == 404


async def test_an_unknown_coding_is_a_415(client):
    for method, path, content_type, body in ROUTES:
        for coding in ("br", "zstd", "compress", "gzip, x-rot13"):
            r = await client.request(method, path, content=body, headers=_headers(content_type, coding))
            assert r.status_code == 415, (method, path, coding, r.status_code, r.text)
            assert "gzip" in r.text and "deflate" in r.text
    assert (await client.get("/streams/hostile-1")).status_code == 404


@pytest.mark.parametrize(
    ("coding", "encode"),
    [
        ("gzip", gzip.compress),
        ("x-gzip", lambda b: gzip.compress(b[:10]) + gzip.compress(b[10:])),  # two members
        ("deflate", zlib.compress),
        ("deflate", lambda b: zlib.compress(b, wbits=-15)),  # raw deflate, as some clients send
        ("gzip, deflate", lambda b: zlib.compress(gzip.compress(b))),
        ("identity", lambda b: b),
    ],
)
async def test_compressed_bodies_that_decode_are_served(client, coding, encode):
    r = await client.post("/streams/hostile-1", content=encode(APPEND), headers=_headers(EVENTS, coding))
    assert r.status_code == 201, r.text
    r = await client.post(
        "/streams/hostile-1/metadata",
        content=encode(b'{"$maxCount": 5}'),
        headers=_headers("application/json", coding),
    )
    assert r.status_code == 201, r.text
    assert (await client.get("/streams/hostile-1/metadata")).json() == {"$maxCount": 5}


def _bomb(mib: int) -> bytes:
    """A gzip body of ``mib`` MiB of zeros (about 1 KB per MiB)."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = bytes(1 << 20)
    return b"".join(compressor.compress(block) for _ in range(mib)) + compressor.flush()


class _PeakRss:
    """The process's largest resident set while running, sampled every few milliseconds."""

    def __init__(self) -> None:
        self.peak = self.now()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def now() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096

    def _run(self) -> None:
        while not self._stop.wait(0.002):
            self.peak = max(self.peak, self.now())

    def __enter__(self) -> _PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


async def test_eight_gzip_bombs_get_413_without_inflating_and_ping_is_answered(client):
    bomb = _bomb(200)  # about 200 KB, 200 MiB inflated (past the 64 MiB HttpMaxRequestBodySize)
    assert len(bomb) < 300_000
    await client.get("/ping")
    baseline = _PeakRss.now()
    pings: list[float] = []

    async def ping_meanwhile(started: asyncio.Event) -> None:
        await started.wait()
        t = time.perf_counter()
        assert (await client.get("/ping")).status_code == 200
        pings.append(time.perf_counter() - t)

    async def one(i: int, started: asyncio.Event) -> int:
        method, path, content_type, _ = ROUTES[i % 4]
        request = client.request(method, path, content=bomb, headers=_headers(content_type, "gzip"))
        started.set()
        return (await request).status_code

    started = asyncio.Event()
    with _PeakRss() as rss:
        statuses = await asyncio.gather(*(one(i, started) for i in range(8)), ping_meanwhile(started))
    assert statuses[:8] == [413] * 8
    grown = (rss.peak - baseline) / (1 << 20)
    # before: every bomb inflated whole (8 x 200 MiB); now each stops near 1 MiB
    assert grown < 48, f"RSS grew by {grown:.0f} MiB for eight bombs"
    assert pings and pings[0] < 2.5, pings
    for method, path, content_type, _ in ROUTES[:4]:  # one at a time, each route says why
        r = await client.request(method, path, content=bomb, headers=_headers(content_type, "gzip"))
        assert r.status_code == 413, (path, r.status_code, r.text)
        assert "inflates" in r.text
    assert (await client.get("/streams/hostile-1")).status_code == 404


async def test_a_compressed_body_inflating_past_the_body_limit_is_a_413(tmp_path):
    # random hex digits (they compress about 2 times) inflating past a 64 KiB HttpMaxRequestBodySize
    data = b'[{"eventId": "%s", "eventType": "t", "data": "%s"}]' % (
        EVENT_ID.encode(),
        os.urandom(52 * 1024).hex().encode(),
    )
    packed = gzip.compress(data)
    assert 48 * 1024 < len(packed) < 64 * 1024 < len(data)
    options = _options(tmp_path, "--http-max-request-body-size", str(64 * 1024))
    async with (
        Node(options, clock=SystemClock(), name="limit") as node,
        httpx.AsyncClient(base_url=node.http_url, auth=ADMIN, timeout=60) as c,
    ):
        r = await c.post("/streams/big", content=packed, headers=_headers(EVENTS, "gzip"))
        assert r.status_code == 413 and "HttpMaxRequestBodySize" in r.text, r.text
        assert (await c.get("/streams/big")).status_code == 404
