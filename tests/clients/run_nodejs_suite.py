"""Run KurrentDB's Node.js client's own test suite (KurrentDB-Client-NodeJS, jest) against evdb nodes.

The suite's harness starts KurrentDB in Docker (packages/test/src/utils/Cluster.ts, and a globalSetup
that pulls the images). This runner copies the checkout given with ``--source`` into a work folder,
installs it from the npm registry (yarn 4 through corepack, as its ``packageManager`` says; install
scripts off: the generated gRPC code is in the repository, and grpc-tools' script would download
protoc), builds the client (``tsc``), puts evdb's harness in place of the Docker one
(tests/clients/nodejs_suite/: Cluster.ts and preflight.ts, whose nodes come from launcher.py), runs
jest with one or two workers and prints the counts by test file.

A failure whose message is evdb's answer to creating a user-defined (JavaScript) projection is
counted apart: evdb runs the system projections only.

    .venv/bin/python tests/clients/run_nodejs_suite.py --source /path/to/KurrentDB-Client-NodeJS
    .venv/bin/python tests/clients/run_nodejs_suite.py --source DIR --workers 2 streams/readAll connection/

Exit status: 0 when no test failed (the suite's own skips aside), 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
HARNESS = HERE / "nodejs_suite"
#: the files of the suite's packages/test/src/utils that evdb's harness replaces
REPLACED = ("Cluster.ts", "preflight.ts")
#: evdb's answer to Projections/Create (UNIMPLEMENTED): such a failure is counted apart
USER_PROJECTIONS = "User-defined (JavaScript) projections are not supported"
#: versions a suite's yarn.lock pins that the npm registry no longer serves (unpublished): their
#: entries are dropped from the lock so that yarn resolves the package's range again
UNPUBLISHED = {"@kurrent/bridge": "0.2.0"}
MARKER = "packages/test/src/utils/Cluster.ts"
#: jest's per-test timeout, as the suite's jest.config.js (a test may raise its own)
TEST_TIMEOUT_MS = 60_000


def default_cache() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "evdb" / "nodejs-suite"


def unpublished_entries_dropped(lock: str) -> str:
    """``yarn.lock`` without the entries of the versions in UNPUBLISHED (and of their platform
    packages, ``name-<platform>``, released with them)."""
    kept = []
    for block in lock.split("\n\n"):
        head = block.lstrip().split("\n", 1)[0]
        version = re.search(r"^\s+version: (\S+)$", block, re.MULTILINE)
        gone = any(
            re.match(rf'^"?{re.escape(name)}(-[a-z0-9-]+)?@', head) and version and version.group(1) == wanted
            for name, wanted in UNPUBLISHED.items()
        )
        if not gone:
            kept.append(block)
    return "\n\n".join(kept)


def _registry() -> str:
    done = subprocess.run(["npm", "config", "get", "registry"], capture_output=True, text=True)
    return done.stdout.strip() or "https://registry.npmjs.org/"


def prepare(source: Path, work: Path, cache: Path) -> Path:
    """The suite copied into ``work``, installed and built, with evdb's harness in place."""
    if not (source / MARKER).exists():
        raise SystemExit(f"{source} is not a KurrentDB-Client-NodeJS checkout: {MARKER} is missing")
    for tool in ("node", "npm", "corepack"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is not installed (apt-get install nodejs npm)")
    if work.exists():
        # keep node_modules (the install is the slow part); take everything else from the source again
        for item in work.iterdir():
            if item.name != "node_modules":
                shutil.rmtree(item) if item.is_dir() and not item.is_symlink() else item.unlink()
    work.mkdir(parents=True, exist_ok=True)
    for item in source.iterdir():
        if item.name in (".git", "node_modules"):
            continue
        target = work / item.name
        shutil.copytree(item, target, symlinks=True) if item.is_dir() else shutil.copy2(item, target)
    lock = work / "yarn.lock"
    lock.write_text(unpublished_entries_dropped(lock.read_text()))
    registry = _registry()
    env = {
        **os.environ,
        "COREPACK_HOME": str(cache / "corepack"),
        "COREPACK_ENABLE_DOWNLOAD_PROMPT": "0",
        "COREPACK_NPM_REGISTRY": registry.rstrip("/"),
        "YARN_NPM_REGISTRY_SERVER": registry.rstrip("/"),
        "YARN_ENABLE_GLOBAL_CACHE": "0",
        "YARN_CACHE_FOLDER": str(cache / "yarn-cache"),
        "YARN_ENABLE_TELEMETRY": "0",
        "YARN_ENABLE_SCRIPTS": "0",
        "YARN_ENABLE_IMMUTABLE_INSTALLS": "0",
    }
    _run(["corepack", "yarn", "install"], work, env, "yarn install")
    tsc = str(work / "node_modules" / ".bin" / "tsc")
    _run([tsc, "--build", "packages/db-client", "packages/opentelemetry"], work, env, "tsc --build")
    utils = work / "packages" / "test" / "src" / "utils"
    for name in REPLACED:
        shutil.copy(HARNESS / name, utils / name)
    return work / "packages" / "test"


def _run(command: list[str], cwd: Path, env: dict[str, str], what: str) -> None:
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        tail = (done.stdout + done.stderr).strip().splitlines()[-15:]
        raise SystemExit(f"{what} failed in {cwd}:\n" + "\n".join(tail))


@dataclass
class FileCounts:
    path: str
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    user_projections: int = 0
    seconds: float = 0.0
    failures: list[str] = field(default_factory=list)
    message: str = ""  # a file that failed as a whole (no test ran): why


def count(report: dict, root: Path) -> list[FileCounts]:
    """Counts by test file from jest's ``--json`` report."""
    files = []
    for result in report.get("testResults", []):
        counts = FileCounts(str(Path(result["name"]).relative_to(root)))
        counts.seconds = max(0.0, (result.get("endTime", 0) - result.get("startTime", 0)) / 1000)
        for test in result.get("assertionResults", []):
            status = test.get("status")
            text = " ".join(test.get("failureMessages") or [])
            if status == "passed":
                counts.passed += 1
            elif status == "failed" and USER_PROJECTIONS in text:
                counts.user_projections += 1
            elif status == "failed":
                counts.failed += 1
                counts.failures.append(test.get("fullName") or test.get("title", "?"))
            else:  # pending, skipped, todo: the suite's own skips
                counts.skipped += 1
        if result.get("status") == "failed" and not result.get("assertionResults"):
            counts.failed += 1
            counts.message = " / ".join((result.get("message") or "").strip().splitlines()[:3])
        files.append(counts)
    return sorted(files, key=lambda c: c.path)


def run_jest(test_root: Path, workers: int, patterns: list[str], results: Path, python: str) -> dict:
    instances = results / "instances"
    instances.mkdir(parents=True, exist_ok=True)
    report = results / "jest.json"
    env = {
        **os.environ,
        "EVDB_PYTHON": python,
        "EVDB_LAUNCHER": str(HARNESS / "launcher.py"),
        "EVDB_INSTANCES": str(instances),
        "CI": "true",
    }
    command = [
        "node",
        str(test_root.parent.parent / "node_modules" / "jest" / "bin" / "jest.js"),
        f"--maxWorkers={workers}",
        "--json",
        f"--outputFile={report}",
        "--forceExit",
        *patterns,
    ]
    with open(results / "jest.out", "wb") as out:
        jest = subprocess.Popen(
            command, cwd=test_root, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            jest.wait()
        finally:
            # jest's workers and whatever they left (the launchers stop their nodes on their own)
            try:
                os.killpg(jest.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    if not report.exists():
        raise SystemExit(f"jest wrote no report: see {results / 'jest.out'}")
    return json.loads(report.read_text())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--source", required=True, help="a checkout (or export) of KurrentDB-Client-NodeJS")
    parser.add_argument("--workers", type=int, default=1, choices=(1, 2), help="jest workers (default 1)")
    parser.add_argument("--cache", default=str(default_cache()), help="where the installed copy is kept")
    parser.add_argument(
        "--results", help="folder for jest's report and the nodes' logs (default: a temp dir)"
    )
    parser.add_argument("patterns", nargs="*", help="jest test path patterns (default: every test file)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))

    source = Path(args.source).resolve()
    cache = Path(args.cache)
    test_root = prepare(source, cache / "work", cache)
    results = Path(args.results or tempfile.mkdtemp(prefix="nodejs-suite-"))
    results.mkdir(parents=True, exist_ok=True)
    print(f"Node.js client suite from {source}; jest's report and the nodes' logs in {results}", flush=True)
    started = time.monotonic()
    report = run_jest(test_root, args.workers, args.patterns, results, sys.executable)
    files = count(report, test_root)
    for c in files:
        print(
            f"{c.path:72} {c.passed:4} passed {c.failed:3} failed {c.skipped:3} skipped "
            f"{c.user_projections:3} user-defined projections {c.seconds:6.0f} s"
        )
        for name in c.failures:
            print(f"    FAILED {name}")
        if c.message:
            print(f"    FILE FAILED {c.message}")
    total = FileCounts("total")
    for c in files:
        total.passed += c.passed
        total.failed += c.failed
        total.skipped += c.skipped
        total.user_projections += c.user_projections
    print(
        f"{len(files)} files in {time.monotonic() - started:.0f} s; user-defined projections: "
        f"{total.user_projections} failed (out of scope)"
    )
    print(f"{total.passed} passed, {total.failed} failed, {total.skipped} skipped")
    return 1 if total.failed else 0


if __name__ == "__main__":
    sys.exit(main())
