"""The README's commands run as written, in order (issue 34).

- Its two set-up commands: exactly two, each calling scripts/install.sh (which tests/test_install_script.py
  runs); every local link points at a file, and every operations guide and docs/dashboard.md is linked.
- "Try it": its curl block against a real ``evdb node --dev`` started in a temporary folder, as the README
  says; the one change is the port (a free one instead of 2113).
- "A local cluster" and "Scavenging from the command line": every block in order, in a temporary folder
  (``.venv`` there points at this interpreter's environment). Changed for the test only: the
  ``<... port>`` placeholders get the nodes' ports, ``demo-load`` writes 5,000 events instead of its
  100,000 (the suite's time), and the throttled scavenge runs at 5 % instead of 50 % so that it still runs
  when the next line stops it.
"""

from __future__ import annotations

import os
import re
import signal
import ssl
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from waiting import wait_until

from evdb.cluster.launcher import LocalCluster
from evdb.free_port import free_port

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def _section(title: str) -> str:
    start = README.index(f"\n## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start : end if end != -1 else len(README)]


def _sh_blocks(text: str) -> list[str]:
    return re.findall(r"```sh\n(.*?)```", text, re.S)


def _run(script: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run README lines with bash, stopping at the first failing command; curl answers' status codes
    (and nothing else) on stdout, one a line."""
    wrapper = "set -euo pipefail\ncurl() { command curl -sS -o /dev/null -w '%{http_code}\\n' \"$@\"; }\n"
    done = subprocess.run(
        ["bash", "-c", wrapper + script], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, f"{script}\nexit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


def _codes(done: subprocess.CompletedProcess) -> list[str]:
    return re.findall(r"^\d{3}$", done.stdout, re.M)


def test_the_two_commands_install_with_the_script():
    first = _sh_blocks(README)[0].strip().splitlines()
    assert len(first) == 2, first
    assert first[0].startswith("scripts/install.sh --no-tests && ") and first[0].endswith(
        ".venv/bin/evdb dashboard"
    )
    assert first[1].startswith("scripts/install.sh && .venv/bin/python -m mypy && .venv/bin/python -m pytest")
    assert "apt-get" not in first[1]  # the script decides what to install


def test_every_local_link_exists_and_every_operations_guide_is_linked():
    links = set(re.findall(r"\]\(([^)#]+)\)", README))
    local = {link for link in links if not link.startswith(("http://", "https://"))}
    assert not [link for link in local if not (ROOT / link).exists()]
    for guide in sorted((ROOT / "docs" / "operations").glob("*.md")):
        assert f"docs/operations/{guide.name}" in local, guide.name
    assert "docs/dashboard.md" in local
    assert "\n## Scavenging from the command line\n" in README and "evdb scavenge start" in README


def _venv_here(folder: Path) -> None:
    (folder / ".venv").symlink_to(Path(sys.executable).parent.parent)


@pytest.mark.slow
def test_try_it_runs_as_written_against_a_dev_node(tmp_path):
    _venv_here(tmp_path)
    section = _section("Try it")
    start = re.search(r"`(\.venv/bin/evdb node --dev)`", section)
    assert start is not None
    port = free_port()
    node = subprocess.Popen(
        [*start.group(1).split(), "--http-port", str(port)],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        ca = tmp_path / "data" / "dev-certs" / "ca" / "ca.crt"

        def answers() -> bool:
            if not ca.exists():
                return False
            with httpx.Client(verify=ssl.create_default_context(cafile=str(ca)), timeout=2) as c:
                return c.get(f"https://localhost:{port}/info").status_code == 200

        wait_until(answers, 60, "the dev node to answer", tolerate=(httpx.HTTPError,))
        (block,) = _sh_blocks(section)
        done = _run(block.replace("localhost:2113", f"localhost:{port}"), tmp_path)
        # append, read, $maxCount, soft delete, /info, /metrics
        assert _codes(done) == ["201", "200", "201", "204", "200", "200"], done.stdout
    finally:
        os.killpg(node.pid, signal.SIGTERM)
        try:
            node.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(node.pid, signal.SIGKILL)
            node.wait(timeout=10)


@pytest.mark.slow
def test_the_local_cluster_blocks_run_as_written_in_order(tmp_path):
    _venv_here(tmp_path)
    cluster_blocks = _sh_blocks(_section("A local cluster"))
    (scavenge_block,) = _sh_blocks(_section("Scavenging from the command line"))
    assert len(cluster_blocks) == 2
    first, jobs = cluster_blocks
    up, rest = first.split("\n", 1)
    local = LocalCluster(tmp_path / "cluster")
    try:
        _run(up, tmp_path)
        leader = local.wait_for_leader(60)
        port = {n["name"]: n["url"].rsplit(":", 1)[1] for n in local.info()["nodes"]}
        follower = next(
            n["name"] for n in local.info()["nodes"] if n["url"] != leader and n["name"] != "replica1"
        )
        leader_port = leader.rsplit(":", 1)[1]
        rest = rest.replace("<follower port>", port[follower]).replace("<any port>", port["replica1"])
        done = _run(rest.replace("<leader port>", leader_port), tmp_path)
        assert _codes(done) == ["201", "200", "200"], done.stdout  # write, read, resign
        assert not local.running_nodes()  # the block ends with cluster down

        jobs = jobs.replace("demo-load --data ./cluster", "demo-load --data ./cluster --events 5000")
        done = _run(jobs, tmp_path, timeout=600)
        assert "already running" not in done.stdout + done.stderr
        assert (tmp_path / "backups" / "node2" / "BACKUP-COMPLETE").exists()
        assert "Restored node2 from ./backups/node2" in done.stdout

        node2 = next(n for n in local.info()["nodes"] if n["name"] == "node2")
        scavenge = scavenge_block.replace("<any port>", node2["url"].rsplit(":", 1)[1])
        scavenge = scavenge.replace("--throttle-percent 50", "--throttle-percent 5")
        started = time.monotonic()
        done = _run(scavenge, tmp_path, timeout=600)
        lines = done.stdout.split("\n")
        stopped = next(i for i, line in enumerate(lines) if line.startswith("stopped"))
        assert lines.index("Success") > stopped, done.stdout  # the resumed run finished
        assert not local.running_nodes(), time.monotonic() - started
    finally:
        if local.exists() and local.running_nodes():
            local.down(timeout=10, log=lambda *_: None)
