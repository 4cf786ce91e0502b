"""A real Prometheus server (Debian package ``prometheus``) scrapes the node's /metrics.

The contract: Prometheus accepts the exposition (a parse error would mark the target down), and the
series it stores carry the node's values. Prometheus runs on loopback, on a free port, with its
storage in tmp_path; every wait polls its HTTP API with short pauses up to a deadline.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest

from evdb.free_port import free_port

INSTALL_HINT = "apt-get install -y prometheus"
DEADLINE = 40.0  # seconds for Prometheus to start, scrape and answer
POLL = 0.1
SCRAPE_INTERVAL = "1s"


async def poll(
    what: str, probe: Callable[[], Awaitable[Any]], deadline: float, server: subprocess.Popen, log
) -> Any:
    """Call ``probe`` every POLL seconds until it returns something truthy; fail at the deadline."""
    last: Any = None
    while True:
        if server.poll() is not None:
            pytest.fail(f"Prometheus exited with {server.returncode} while waiting for {what}:\n{log()}")
        try:
            last = await probe()
            if last:
                return last
        except (httpx.HTTPError, ValueError, KeyError) as exc:
            last = exc
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}; last answer: {last!r}\n{log()}")
        await asyncio.sleep(POLL)


def prometheus_binary() -> str:
    """The server's path; a missing server fails the test (never a silent skip)."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail(
            f"the Prometheus server is needed for this test and is not installed: run `{INSTALL_HINT}`"
        )
    return binary


async def test_prometheus_scrapes_evdb_node_up_and_the_status_gauges(node, tmp_path):
    binary = prometheus_binary()
    target = node.http_url.removeprefix("http://")
    assert target != node.http_url, "the node runs insecure: plain HTTP"
    config = tmp_path / "prometheus.yml"
    config.write_text(
        f"global:\n  scrape_interval: {SCRAPE_INTERVAL}\n  scrape_timeout: {SCRAPE_INTERVAL}\n"
        "scrape_configs:\n"
        "  - job_name: evdb\n"
        "    metrics_path: /metrics\n"
        "    scheme: http\n"
        f"    static_configs:\n      - targets: ['{target}']\n"
    )
    port = free_port()
    log_path = tmp_path / "prometheus.log"
    with open(log_path, "wb") as log_file:
        server = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )

    def log() -> str:
        return log_path.read_text(errors="replace")[-3000:]

    deadline = time.monotonic() + DEADLINE
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=2) as prom:

            async def target_up():
                r = await prom.get("/api/v1/targets")
                active = r.json()["data"]["activeTargets"] if r.status_code == 200 else []
                ours = [t for t in active if t["labels"].get("job") == "evdb"]
                return ours[0] if ours and ours[0]["health"] == "up" else None

            async def query(expr: str):
                async def probe():
                    r = await prom.get("/api/v1/query", params={"query": expr})
                    body = r.json()
                    return body["data"]["result"] if body.get("status") == "success" else None

                return await poll(f"a result for {expr}", probe, deadline, server, log)

            up = await poll("the evdb target to be up", target_up, deadline, server, log)
            assert up["scrapeUrl"] == f"{node.http_url}/metrics"
            assert up["lastError"] == ""

            node_up = await query("evdb_node_up")
            assert len(node_up) == 1, node_up
            assert node_up[0]["metric"]["job"] == "evdb"
            assert node_up[0]["metric"]["instance"] == target
            assert node_up[0]["value"][1] == "1"

            statuses = await query("kurrentdb_statuses")
            names = {series["metric"].get("name") for series in statuses}
            assert "Scavenge" in names, statuses
            for series in statuses:
                assert series["metric"].get("status"), series
                assert float(series["value"][1]) > 0, series  # epoch seconds of entering the status
    finally:
        server.terminate()
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=5)
