"""KurrentDB's official Node.js client (``@kurrent/kurrentdb-client``, the version pinned in
tests/clients/nodejs/package.json, from the npm registry) drives a TLS node with its own script,
tests/clients/nodejs/check.cjs: appends, reads, every error the client maps (each its own class, none
``UnknownError``), a filtered ``$all`` subscription with checkpoints, persistent subscriptions.

The package is installed with ``npm ci`` (package-lock.json) into a cache folder outside the work tree,
once per lock file. The test skips, saying why, only when Node.js/npm are missing (``.ci/run`` installs
Debian's ``nodejs`` and ``npm``) or the npm registry cannot be reached.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.clients.conftest import ADMIN, tls_node_with_user

HERE = Path(__file__).parent / "nodejs"
MAX_APPEND = 4096
USER = ("node-user", "node-pw")


def _installed_client() -> Path:
    """A folder holding check.cjs and the pinned client (node_modules), installed once per lock file."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("Node.js and npm are not installed (apt-get install nodejs npm; .ci/run installs them)")
    lock = (HERE / "package-lock.json").read_bytes() + (HERE / "package.json").read_bytes()
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "evdb" / "nodejs-client"
    folder = cache / hashlib.sha256(lock).hexdigest()[:16]
    if not (folder / "node_modules" / "@kurrent" / "kurrentdb-client" / "package.json").exists():
        cache.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=cache, prefix="install-"))
        for file in ("package.json", "package-lock.json"):
            shutil.copy(HERE / file, staging / file)
        done = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts"],
            cwd=staging,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if done.returncode != 0:
            shutil.rmtree(staging, ignore_errors=True)
            tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
            if any(
                word in " ".join(tail) for word in ("ENOTFOUND", "EAI_AGAIN", "ECONNREFUSED", "ETIMEDOUT")
            ):
                pytest.skip(f"the npm registry cannot be reached: {' / '.join(tail)}")
            raise AssertionError(f"npm ci failed in {staging}: {' / '.join(tail)}")
        try:
            staging.rename(folder)
        except OSError:  # another run installed it meanwhile
            shutil.rmtree(staging, ignore_errors=True)
    shutil.copy(HERE / "check.cjs", folder / "check.cjs")
    return folder


def run_check(folder: Path, env: dict[str, str]) -> list[dict]:
    done = subprocess.run(
        [shutil.which("node") or "node", "check.cjs"],
        cwd=folder,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=240,
    )
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert lines and "summary" in lines[-1], (
        f"no summary (exit {done.returncode}): {done.stdout}{done.stderr}"
    )
    return lines


def test_the_nodejs_client_against_a_tls_node(tmp_path):
    folder = _installed_client()
    thread, certs = tls_node_with_user(tmp_path, "nodejs", USER, "--max-append-size", str(MAX_APPEND))
    try:
        where = f"localhost:{thread.port}?tlsCAFile={certs.ca_path}"
        lines = run_check(
            folder,
            {
                "EVDB_URI": f"kurrentdb://{ADMIN[0]}:{ADMIN[1]}@{where}",
                "EVDB_USER_URI": f"kurrentdb://{USER[0]}:{USER[1]}@{where}",
                "EVDB_MAX_APPEND": str(MAX_APPEND),
            },
        )
    finally:
        thread.stop()
    checks = {line["check"]: line for line in lines if "check" in line}
    for line in checks.values():
        print(f"{line['status']:>8}  {line['check']}: {line['detail']}")
    failed = [f"{c['check']}: {c['detail']}" for c in checks.values() if c["status"] == "failed"]
    assert not failed, "\n".join(failed)
    expected = {
        "server features: version and BatchAppend",
        "append and read back",
        "error: wrong expected version (append)",
        "error: wrong expected version (delete)",
        "error: wrong expected version (soft-deleted stream)",
        "error: stream not found (read)",
        "error: stream deleted (read, append, delete)",
        "error: access denied",
        "error: maximum append size exceeded",
        "error: deadline exceeded",
        "filtered $all subscription: checkpoints",
        "persistent subscriptions: to a stream",
        "persistent subscriptions: to $all, filtered",
    }
    assert expected <= set(checks), sorted(expected - set(checks))
    assert all(checks[c]["status"] == "ok" for c in expected if not c.startswith("persistent")), checks
