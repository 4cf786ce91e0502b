"""schemathesis against /openapi.json of a live node: no server error, nothing undocumented."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ST = Path(sys.executable).with_name("st")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_schemathesis_finds_no_server_error_and_no_contract_violation(tmp_path):
    assert ST.exists() or shutil.which("st"), "schemathesis is a test dependency: pip install -e '.[test]'"
    port = free_port()
    node = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "evdb.cli",
            "node",
            "--mem-db",
            "--insecure",
            "--http-port",
            str(port),
            "--log",
            str(tmp_path / "log"),
            "--stats-period-sec",
            "0",
            "--chunk-size",
            "1MiB",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/ping", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert node.poll() is None, node.stderr.read()
            assert time.monotonic() < deadline, "the node did not start"
            time.sleep(0.05)
        result = subprocess.run(
            [
                str(ST) if ST.exists() else "st",
                "run",
                f"http://127.0.0.1:{port}/openapi.json",
                "--auth",
                "admin:changeit",
                "--checks",
                "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance",
                "--exclude-path",
                "/admin/shutdown",
                "--max-examples",
                "8",
                "--seed",
                "20261122",
                "--max-time",
                "60",
                "--phases",
                "examples,coverage,fuzzing",
            ],
            capture_output=True,
            text=True,
            timeout=240,
            env={**os.environ, "NO_COLOR": "1"},
        )
        assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    finally:
        node.terminate()
        node.wait(timeout=30)
    assert "Unhandled error" not in (node.stderr.read() if node.stderr else "")
