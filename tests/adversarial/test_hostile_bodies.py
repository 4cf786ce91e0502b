"""Compressed, malformed, inflating and oversized request bodies and oversized headers, sent as an admin
to every operation of ``/openapi.json`` that takes a body, on the leader and on a follower.

The cluster's ``HttpMaxRequestBodySize`` is 1 MiB (tests/adversarial/conftest.py). For each operation:

- a body labelled ``Content-Encoding: gzip`` or ``deflate`` that does not decode: 400;
- a gzip or deflate bomb (about 64 KiB that inflate to 64 MiB, 64 times the limit): 413, and the node
  never holds the inflated body (its resident memory, sampled every 5 ms while it answers, grows by
  less than 32 MiB);
- a plain body one byte over the limit: 413;

and for any request, a 64 KiB header: 400 or 431. Every answer: no 5xx, no traceback in the body,
and the leader's state (users, subscription groups, events of client streams) unchanged.
"""

from __future__ import annotations

import gzip
import re
import threading
import time
import uuid
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from tests.adversarial.conftest import BODY_LIMIT, ClusterUnderTest
from tests.adversarial.state import Leader

BOMB_SIZE = 64 * 1024 * 1024
MEMORY_GROWTH_LIMIT = 32 * 1024 * 1024
TRACEBACK = re.compile(r"Traceback \(most recent call last\)|File \"[^\"]+\.py\", line \d+")
SAMPLES = {
    "stream": "adv-bodies",
    "group": "adv-group",
    "login": "adv-login",
    "command": "reset-password",
    "id": "5f0e6c3a-2b1d-4c8e-9f7a-0a1b2c3d4e5f",
    "priority": "0",
}


def _deflate(data: bytes) -> bytes:
    return zlib.compress(data, 9)


@dataclass(frozen=True)
class Body:
    name: str
    encoding: str | None
    content: bytes
    expected: tuple[int, ...]


def _bodies() -> list[Body]:
    zeros = bytes(BOMB_SIZE)
    return [
        Body("gzip, malformed", "gzip", b"\x1f\x8b\x08\x00 not gzip at all", (400,)),
        Body("deflate, malformed", "deflate", b"x\x9c not deflate at all", (400,)),
        Body("gzip bomb", "gzip", gzip.compress(zeros, 9), (413,)),
        Body("deflate bomb", "deflate", _deflate(zeros), (413,)),
        Body("over the limit", None, b"[" + b" " * BODY_LIMIT + b"]", (413,)),
    ]


BODIES = _bodies()


def _operations(cluster: ClusterUnderTest, node: str) -> list[tuple[str, str, str]]:
    """(method, path template, content type) of every operation of the document with a body."""
    with cluster.client(node, None) as c:
        document = c.get("/openapi.json").json()
    out = []
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            body = operation.get("requestBody")
            if body and (method, path) != ("post", "/admin/shutdown"):
                out.append((method.upper(), path, next(iter(body["content"]))))
    return sorted(out)


def _fill(path: str) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: SAMPLES.get(m.group(1), "x"), path)


class PeakMemory:
    """The largest resident set of a process while the block runs, sampled every 5 ms (/proc)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = 0
        self._stop = threading.Event()

    def rss(self) -> int:
        with open(f"/proc/{self.pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        raise AssertionError(f"no VmRSS for pid {self.pid}")

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.rss())
            time.sleep(0.005)

    def __enter__(self) -> PeakMemory:
        self.before = self.rss()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


@pytest.fixture(scope="module")
def targets(cluster: ClusterUnderTest) -> dict[str, str]:
    roles = cluster.by_role()
    return {"leader": roles["leader"], "follower": roles["follower"]}


@pytest.fixture
def leader_state(cluster: ClusterUnderTest, targets) -> Iterator[Leader]:
    with cluster.client(targets["leader"], cluster.admin) as admin:
        yield Leader(admin)


def _pid(cluster: ClusterUnderTest, name: str) -> int:
    return next(n["pid"] for n in cluster.local.info()["nodes"] if n["name"] == name)


@pytest.mark.slow
@pytest.mark.parametrize("target", ["leader", "follower"])
@pytest.mark.parametrize("body", BODIES, ids=[b.name for b in BODIES])
def test_a_hostile_body_is_refused_with_4xx_and_changes_nothing(cluster, targets, leader_state, target, body):
    node = targets[target]
    operations = _operations(cluster, node)
    assert len(operations) >= 8, operations  # appends, metadata, users, groups, backup, auto-scavenge ...
    before = leader_state.position()
    wrong: list[str] = []
    with PeakMemory(_pid(cluster, node)) as memory, cluster.client(node, cluster.admin, timeout=60) as c:
        for method, path, content_type in operations:
            headers = {"Content-Type": content_type, "Kurrent-EventType": "Hostile"}
            headers["Kurrent-EventId"] = str(uuid.uuid4())
            if body.encoding:
                headers["Content-Encoding"] = body.encoding
            try:
                answer = c.request(method, _fill(path), content=body.content, headers=headers)
            except httpx.HTTPError as exc:  # a dropped connection is no answer
                wrong.append(f"{method} {path}: no answer ({exc!r})")
                continue
            if answer.status_code not in body.expected or TRACEBACK.search(answer.text):
                wrong.append(f"{method} {path}: {answer.status_code} {answer.text[:160]!r}")
    changed = leader_state.written_since(before)
    growth = memory.peak - memory.before
    assert not wrong and not changed, (
        f"{body.name} on the {target}, expected {body.expected}:\n  "
        + "\n  ".join(wrong)
        + f"\nwrote to: {changed}"
    )
    assert growth < MEMORY_GROWTH_LIMIT, (
        f"{body.name}: the {target}'s memory grew by {growth / 2**20:.0f} MiB"
    )


@pytest.mark.slow
@pytest.mark.parametrize("target", ["leader", "follower"])
def test_an_oversized_header_is_refused_and_the_node_still_answers(cluster, targets, target):
    node = targets[target]
    with cluster.client(node, cluster.admin) as c:
        answer = c.get("/streams/adv-bodies", headers={"X-Padding": "a" * 65536})
        assert answer.status_code in (400, 431), (answer.status_code, answer.text[:200])
        assert not TRACEBACK.search(answer.text)
        assert c.get("/ping").status_code == 200
