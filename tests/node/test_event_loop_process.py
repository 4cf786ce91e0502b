"""The ``evdb node`` process runs on uvloop (issue 24), or on asyncio's own loop with
``EVDB_EVENT_LOOP=asyncio``: everything the node does with its loop works on both. Real processes
(the local-cluster launcher): HTTP/1.1 and gRPC on the one port (TLS with ALPN, or the HTTP/2
preface without TLS), SIGHUP (a configuration reload), SIGTERM (a clean stop)."""

from __future__ import annotations

import os
import signal
import ssl
import subprocess
import sys
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from kurrentdbclient import KurrentDBClient, NewEvent, StreamState
from waiting import wait_until

from evdb.cluster.launcher import LocalCluster
from evdb.errors import InvalidInput
from evdb.node_cli import EVENT_LOOP_VARIABLE, event_loop

pytestmark = pytest.mark.slow


def log_text(folder: str) -> str:
    return "\n".join(p.read_text(errors="replace") for p in sorted(Path(folder).rglob("*")) if p.is_file())


@pytest.mark.parametrize(
    ("loop", "insecure"),
    [("uvloop", False), ("uvloop", True), ("asyncio", True)],
    ids=["uvloop-tls", "uvloop-insecure", "asyncio-insecure"],
)
def test_the_node_process_serves_on_its_event_loop(tmp_path, monkeypatch, loop, insecure):
    if loop == "asyncio":
        monkeypatch.setenv(EVENT_LOOP_VARIABLE, "asyncio")
    else:
        monkeypatch.delenv(EVENT_LOOP_VARIABLE, raising=False)  # the default
    local = LocalCluster(tmp_path / "single")
    local.up(nodes=1, insecure=insecure, timeout=60, log=lambda *_: None)
    info = local.info()
    node = info["nodes"][0]
    try:
        expected = "uvloop 0.23" if loop == "uvloop" else "asyncio"
        wait_until(
            lambda: f"Running on the {expected}" in log_text(node["log_dir"]),
            30,
            f"the node's log to name the {expected} event loop",
        )
        verify: ssl.SSLContext | bool = False if insecure else ssl.create_default_context(cafile=info["ca"])
        stream = f"loop-{uuid.uuid4().hex[:8]}"
        with httpx.Client(base_url=node["url"], auth=("admin", "changeit"), verify=verify, timeout=30) as c:
            for n in range(3):  # the second and third sign-ins come from the cache
                r = c.post(
                    f"/streams/{stream}",
                    content=b'{"n": %d}' % n,
                    headers={
                        "ES-EventType": "Tested",
                        "ES-EventId": str(uuid.uuid4()),
                        "Content-Type": "application/json",
                    },
                )
                assert r.status_code == 201, r.text
            assert c.get("/streams/x", auth=("admin", "wrong")).status_code == 401

        # gRPC on the same port: ALPN h2 over TLS, the HTTP/2 preface without
        host = urlsplit(node["url"]).netloc
        query = "tls=false" if insecure else f"tlsCaFile={info['ca']}"
        client = KurrentDBClient(f"kurrentdb://admin:changeit@{host}?{query}")
        try:
            client.append_to_stream(stream, current_version=2, events=[NewEvent(type="Tested", data=b"{}")])
            assert [e.type for e in client.get_stream(stream)] == ["Tested"] * 4
            client.append_to_stream(
                f"{stream}-new", current_version=StreamState.NO_STREAM, events=[NewEvent("T", b"{}")]
            )
        finally:
            client.close()

        def last_reload(c: httpx.Client):
            return c.get("/admin/certificates").json().get("lastReload")

        os.kill(int(node["pid"]), signal.SIGHUP)
        with httpx.Client(base_url=node["url"], auth=("admin", "changeit"), verify=verify, timeout=10) as c:
            reload = wait_until(
                lambda: (r := last_reload(c)) and r.get("trigger") == "SIGHUP" and r,
                30,
                "the SIGHUP reload to be recorded",
            )
        assert reload["result"] == "Success", reload
    finally:
        local.down(timeout=15, log=lambda *_: None)  # SIGTERM
    assert "Shutting down" in log_text(node["log_dir"])


def test_an_unknown_event_loop_is_refused_naming_the_variable(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "evdb.cli", "node", "--mem-db", "--insecure", "--http-port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, EVENT_LOOP_VARIABLE: "tokio"},
        cwd=tmp_path,
    )
    assert result.returncode == 2
    assert "EVDB_EVENT_LOOP='tokio'" in result.stderr and "uvloop" in result.stderr


def test_the_event_loop_choice():
    assert event_loop({})[0].startswith("uvloop ")
    assert event_loop({EVENT_LOOP_VARIABLE: " UVLoop "})[0].startswith("uvloop ")
    name, factory = event_loop({EVENT_LOOP_VARIABLE: "asyncio"})
    assert name == "asyncio"
    loop = factory()
    try:
        assert type(loop).__module__.startswith("asyncio")
    finally:
        loop.close()
    with pytest.raises(InvalidInput, match="not an event loop"):
        event_loop({EVENT_LOOP_VARIABLE: "trio"})
