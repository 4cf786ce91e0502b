"""A real Prometheus server (Debian's ``prometheus`` package) scrapes the node's /metrics."""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_prometheus_scrapes_the_node(node, tmp_path):
    binary = shutil.which("prometheus")
    assert binary, "Prometheus is needed for this test: apt-get install -y prometheus (.ci/run installs it)"
    target = node.http_url.removeprefix("http://")
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n"
        "scrape_configs:\n  - job_name: evdb\n    metrics_path: /metrics\n"
        f"    static_configs:\n      - targets: ['{target}']\n"
    )
    port = free_port()
    server = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        value = None
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as prom:
            for _ in range(600):  # up to about a minute, polling every 0.1 s
                assert server.poll() is None, server.stderr.read().decode()[-2000:]
                try:
                    r = await prom.get("/api/v1/query", params={"query": "evdb_node_up"})
                    result = r.json()["data"]["result"] if r.status_code == 200 else []
                    if result:
                        value = result[0]["value"][1]
                        break
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.1)
            assert value == "1", "Prometheus never scraped evdb_node_up"
            r = await prom.get("/api/v1/query", params={"query": 'kurrentdb_statuses{name="Scavenge"}'})
            assert r.json()["data"]["result"], "the scavenge status gauge was not scraped"
    finally:
        server.terminate()
        server.wait(timeout=30)
