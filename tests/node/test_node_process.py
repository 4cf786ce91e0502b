"""The real ``evdb node`` binary: start-up errors, statistics, shutdown."""

from __future__ import annotations

import subprocess
import sys


def run_node(*args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "evdb.cli", "node", *args], capture_output=True, text=True, timeout=timeout
    )


def test_missing_certificate_file_stops_the_node_naming_it(tmp_path):
    ca = tmp_path / "ca.crt"
    result = run_node(
        "--db",
        str(tmp_path / "db"),
        "--log",
        str(tmp_path / "log"),
        "--http-port",
        "0",
        "--certificate-file",
        str(tmp_path / "nope.crt"),
        "--certificate-private-key-file",
        str(tmp_path / "nope.key"),
        "--trusted-root-certificates-path",
        str(ca),
    )
    assert result.returncode == 1
    assert str(tmp_path / "nope.crt") in result.stderr


def test_invalid_option_exits_2_with_its_name(tmp_path):
    result = run_node("--http-port", "70000")
    assert result.returncode == 2
    assert "HttpPort" in result.stderr and "65535" in result.stderr
