"""scripts/install.sh decides which Debian packages to install (issue 34): only those whose command is
missing, ``apt-get update`` once before the first install, and npm only when the Node.js in place
brought none (NodeSource's nodejs brings its own and conflicts with Debian's npm).

The script runs for real with a PATH of its own: a recording ``apt-get`` (and ``sudo``) that "installs"
a package by creating its commands, and the commands a test says are already there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "install.sh"

#: what the recording apt-get creates for each package (nodejs: node, and npm when it brings one)
FAKE_APT = f"""#!{sys.executable}
import json, os, sys
bin_dir = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(bin_dir, "apt.log"), "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\\n")
commands = {{"openssl": ["openssl"], "prometheus": ["prometheus"], "chromium": ["chromium"], "npm": ["npm"],
            "nodejs": ["node", "npm"] if os.environ.get("NODE_BRINGS_NPM") else ["node"],
            "python3-venv": []}}
if "install" in sys.argv:
    for package in sys.argv[sys.argv.index("install") + 1:]:
        if package.startswith("-"):
            continue
        if package not in commands:
            sys.exit(f"no such package {{package}}")
        for command in commands[package]:
            path = os.path.join(bin_dir, command)
            with open(path, "w") as f:
                f.write("#!/bin/sh\\n")
            os.chmod(path, 0o755)
"""


def _run(
    tmp_path: Path, present: list[str], *, node_brings_npm: bool = False, args: tuple[str, ...] = ()
) -> list[list[str]]:
    """Run the script's package step with only ``present`` (and python3) on PATH; apt-get's calls."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "apt-get").write_text(FAKE_APT)
    (bin_dir / "apt-get").chmod(0o755)
    (bin_dir / "python3").symlink_to("/usr/bin/python3")  # Debian's, with venv and ensurepip
    for command in present:
        (bin_dir / command).write_text("#!/bin/sh\n")
        (bin_dir / command).chmod(0o755)
    env = {"PATH": str(bin_dir), "HOME": str(tmp_path)}
    if node_brings_npm:
        env["NODE_BRINGS_NPM"] = "1"
    done = subprocess.run(
        ["/bin/bash", str(SCRIPT), *args, "--packages-only"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    log = bin_dir / "apt.log"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def _installed(calls: list[list[str]]) -> list[list[str]]:
    return [
        [a for a in c[c.index("install") + 1 :] if not a.startswith("-")] for c in calls if "install" in c
    ]


@pytest.fixture(autouse=True)
def _debian_python():
    if not os.path.exists("/usr/bin/python3"):
        pytest.skip("needs Debian's /usr/bin/python3")


def test_a_fresh_machine_gets_every_package_and_debian_npm(tmp_path):
    calls = _run(tmp_path, [])
    assert calls[0] == ["update", "-qq"] and sum(c[0] == "update" for c in calls) == 1
    assert _installed(calls) == [["openssl", "prometheus", "chromium", "nodejs"], ["npm"]]


def test_nodesource_nodejs_brings_its_npm_so_debian_npm_is_never_asked_for(tmp_path):
    calls = _run(tmp_path, ["openssl", "chromium"], node_brings_npm=True)
    assert _installed(calls) == [["prometheus", "nodejs"]]
    assert calls[0] == ["update", "-qq"]


def test_an_installed_nodejs_with_its_own_npm_is_left_alone(tmp_path):
    assert _run(tmp_path, ["openssl", "prometheus", "chromium", "node", "npm"]) == []  # not even an update


def test_only_npm_missing(tmp_path):
    calls = _run(tmp_path, ["openssl", "prometheus", "chromium", "node"])
    assert calls == [["update", "-qq"], calls[1]] and _installed(calls) == [["npm"]]


def test_running_evdb_alone_needs_none_of_the_tests_peers(tmp_path):
    assert _run(tmp_path, [], args=("--no-tests",)) == []  # Debian's python3 with venv: nothing


def test_ci_uses_the_script():
    assert "scripts/install.sh .ci-venv" in (ROOT / ".ci" / "run").read_text()
