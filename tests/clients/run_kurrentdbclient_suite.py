"""Run kurrentdbclient's own test suite (its public repository's ``tests/``), or
eventsourcing-kurrentdb's (``--suite eventsourcing-kurrentdb``), against evdb nodes.

kurrentdbclient's tests find KurrentDB at fixed places (its Makefile and docker-compose.yml): an
insecure node on ``localhost:2113``, a TLS node on ``localhost:2114`` (its own certificate is taken as
the trusted root), and a 3-node TLS cluster on ``127.0.0.1:2110-2112`` whose CA is read from the
repository's ``certs/ca/ca.crt``; eventsourcing-kurrentdb's use the first two. This runner starts evdb
nodes exactly there (``evdb node`` processes, ``--run-projections All --start-standard-projections
true`` as the suites' KurrentDB containers), writes the certificates where the suite reads them, runs
the chosen groups in a virtualenv of the suite's own (the package installed from the checkout, with
the versions its poetry.lock pins for the packages its tests assert on), and prints the counts.

The suites' code is not vendored: it is read from a checkout (``--source DIR``) or cloned from GitHub
at ``--ref`` (the sdists on PyPI have no tests). User-defined (JavaScript) projection tests are left
out: every test whose body creates or updates a projection (evdb runs the system projections only);
a README or sample test that fails only on evdb's answer to creating one is counted apart.

    .venv/bin/python tests/clients/run_kurrentdbclient_suite.py --source /path/to/kurrentdbclient
    .venv/bin/python tests/clients/run_kurrentdbclient_suite.py --group secure --group cluster
    .venv/bin/python tests/clients/run_kurrentdbclient_suite.py --quick   # a representative subset
    .venv/bin/python tests/clients/run_kurrentdbclient_suite.py --suite eventsourcing-kurrentdb \\
        --source /path/to/eventsourcing-kurrentdb

Exit status: 0 when every selected test passed (or was skipped by the suite itself), 1 otherwise.
"""

from __future__ import annotations

import argparse
import ast
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import tomllib
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import httpx

from evdb.free_port import free_port

INSECURE_PORT = 2113
SECURE_PORT = 2114
CLUSTER_PORTS = (2110, 2111, 2112)
#: A test that hangs fails after this many seconds (pytest-timeout) instead of stopping the run.
TEST_TIMEOUT = 180
#: evdb's answer to Projections/Create (UNIMPLEMENTED): a README or sample test that creates a
#: JavaScript projection fails with it, and is counted apart from the failures.
USER_PROJECTIONS = "User-defined (JavaScript) projections are not supported"
EVDB = [sys.executable, "-m", "evdb.cli"]


@dataclass(frozen=True)
class Group:
    name: str
    what: str
    nodes: tuple[str, ...]  # which nodes it needs: "insecure", "secure", "cluster"
    ids: tuple[str, ...]  # pytest node ids (files or file::Class)
    keyword: str = ""  # a further pytest -k selection


@dataclass(frozen=True)
class Suite:
    name: str
    repository: str
    #: the tag whose tests were run against evdb (docs/grpc.md has the counts)
    default_ref: str
    extras: str  # installed as "<checkout><extras>"
    #: installed at the versions the suite's poetry.lock pins (its tests assert on their messages)
    locked: frozenset[str]
    packages: tuple[str, ...]  # the test runner and what the tests import beyond the package
    marker: str  # a file every checkout of the suite has


SUITES = {
    suite.name: suite
    for suite in (
        # evdb's own dependency is kurrentdbclient 1.3.5; the newest tag whose tests could be read here
        # is 1.0.4 (its tests are not on PyPI); --ref picks another
        Suite(
            "kurrentdbclient",
            "https://github.com/pyeventsourcing/kurrentdbclient",
            "1.0.4",
            "[opentelemetry]",
            frozenset(
                {
                    "grpcio",
                    "protobuf",
                    "typing-extensions",
                    "opentelemetry-api",
                    "opentelemetry-sdk",
                    "opentelemetry-instrumentation",
                    "opentelemetry-instrumentation-grpc",
                    "opentelemetry-semantic-conventions",
                }
            ),
            ("pytest", "pytest-timeout", "opentelemetry-sdk", "opentelemetry-instrumentation-grpc"),
            "tests/test_client.py",
        ),
        Suite(
            "eventsourcing-kurrentdb",
            "https://github.com/pyeventsourcing/eventsourcing-kurrentdb",
            "1.2.2",
            "",
            frozenset(
                {
                    "eventsourcing",
                    "kurrentdbclient",
                    "grpcio",
                    "protobuf",
                    "typing-extensions",
                    "pycryptodome",
                }
            ),
            ("pytest", "pytest-timeout"),
            "eventsourcing_kurrentdb/recorders.py",
        ),
    )
}

CLIENT = "tests/test_client.py"
# the classes of tests/test_client.py the named groups take; "connection" takes every other class
_NAMED_CLASSES = {
    "TestKurrentDBClient",
    "TestKurrentDBClientWithInsecureConnection",
    "TestClusterNode1",
    "TestClusterNode2",
    "TestClusterNode3",
}
#: the --quick subset: streams, $all and filters, catch-up and persistent subscriptions, system
#: projections' $et-/$ce- links, errors, over TLS and insecure, and one cluster node (a few minutes)
QUICK_KEYWORD = (
    "append or get_stream or read_all or subscribe_to_all or subscribe_to_stream or "
    "subscription_to_stream or subscription_to_all or delete_stream or tombstone or "
    "resolve_links or stream_metadata or get_commit_position or max_append"
)


def groups(suite: Suite, source: Path) -> list[Group]:
    if suite.name == "eventsourcing-kurrentdb":
        return [
            Group(
                "eventsourcing",
                "recorders, applications, projections, docs (:2113, :2114)",
                ("insecure", "secure"),
                ("tests",),
            )
        ]
    other = [c for c in _test_classes(source / CLIENT) if c not in _NAMED_CLASSES]
    return [
        Group("secure", "one TLS node (:2114)", ("secure",), (f"{CLIENT}::TestKurrentDBClient",)),
        Group(
            "insecure",
            "one insecure node (:2113)",
            ("insecure",),
            (f"{CLIENT}::TestKurrentDBClientWithInsecureConnection",),
        ),
        Group(
            "cluster",
            "3-node TLS cluster (:2110-2112), one class per node",
            ("cluster",),
            tuple(f"{CLIENT}::TestClusterNode{i}" for i in (1, 2, 3)),
        ),
        Group(
            "connection",
            "connection strings, discovery, node preference, reconnection, errors",
            ("insecure", "secure", "cluster"),
            tuple(f"{CLIENT}::{c}" for c in other),
        ),
        Group(
            "async", "the asyncio client", ("insecure", "secure", "cluster"), ("tests/test_client_async.py",)
        ),
        Group(
            "persistent",
            "persistent subscription acks",
            ("secure",),
            ("tests/test_persistent_subscription.py",),
        ),
        Group(
            "instrumentation",
            "OpenTelemetry instrumentation (insecure node)",
            ("insecure",),
            ("tests/test_instrumentation.py",),
        ),
        Group(
            "docs",
            "README and samples run as scripts, event types",
            ("insecure", "secure"),
            ("tests/test_docs.py", "tests/test_samples.py", "tests/test_events.py"),
        ),
    ]


def _test_classes(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    return [
        node.name
        for node in tree.body
        if isinstance(node, ast.ClassDef)
        and any(isinstance(f, ast.FunctionDef) and f.name.startswith("test") for f in node.body)
    ]


def user_projection_tests(source: Path) -> list[str]:
    """The names of the tests whose bodies create or update a user-defined projection."""
    names: set[str] = set()
    for path in sorted((source / "tests").glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test"):
                body = ast.unparse(node)
                if "create_projection(" in body or "update_projection(" in body:
                    names.add(node.name)
    return sorted(names)


# -- the suite's code and environment ----------------------------------------------------------------
def checkout(suite: Suite, source: str | None, ref: str, cache: Path) -> Path:
    if source:
        path = Path(source).resolve()
        if not (path / suite.marker).exists():
            raise SystemExit(f"{path} is not a {suite.name} checkout: {suite.marker} is missing")
        return path
    path = cache / suite.name / ref / "src"
    if not (path / suite.marker).exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=path.parent, prefix="clone-"))
        done = subprocess.run(
            ["git", "clone", "--quiet", "--depth", "1", "--branch", ref, suite.repository, str(staging)],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            shutil.rmtree(staging, ignore_errors=True)
            raise SystemExit(
                f"cannot clone {suite.repository} at {ref} ({done.stderr.strip()}); "
                "give a checkout with --source (the sdist on PyPI has no tests)"
            )
        staging.rename(path)
    return path


def locked_versions(suite: Suite, source: Path) -> list[str]:
    """``name==version`` of the suite's own pins (its poetry.lock) for the packages whose behaviour its
    tests assert on (grpcio's error messages, OpenTelemetry's span shapes, eventsourcing's recorders)."""
    lock = source / "poetry.lock"
    if not lock.exists():
        return []
    packages = tomllib.loads(lock.read_text()).get("package", [])
    return [f"{p['name']}=={p['version']}" for p in packages if p.get("name") in suite.locked]


def virtualenv(suite: Suite, source: Path, folder: Path) -> Path:
    """A virtualenv with the suite's package (installed from the checkout), its locked dependencies and
    the test packages; made again when what it should hold changes."""
    python = folder / "bin" / "python"
    marker = folder / ".evdb-ready"
    wanted = [f"{source}{suite.extras}", *locked_versions(suite, source), *suite.packages]
    if not marker.exists() or marker.read_text() != " ".join(wanted):
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(folder)], check=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *wanted],
            check=True,
        )
        marker.write_text(" ".join(wanted))
    return python


# -- evdb nodes where the suite looks for KurrentDB ---------------------------------------------------
def _port_free(port: int) -> bool:
    """Nothing listens there (connections of an earlier run in TIME_WAIT do not count, as for a node)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def certificates(source: Path) -> Path:
    """A CA in ``certs/ca`` (where the suite reads it) and a certificate for each node."""
    certs = source / "certs"
    if not (certs / "ca" / "ca.crt").exists():
        subprocess.run(
            [*EVDB, "certs", "create-ca", "--out", str(certs / "ca"), "--force"],
            check=True,
            stdout=subprocess.DEVNULL,
        )
    for name in ("single", "node1", "node2", "node3"):
        if not (certs / name / "node.crt").exists():
            subprocess.run(
                [
                    *EVDB,
                    "certs",
                    "create-node",
                    "--ca-certificate",
                    str(certs / "ca" / "ca.crt"),
                    "--ca-key",
                    str(certs / "ca" / "ca.key"),
                    "--out",
                    str(certs / name),
                    "--ip-addresses",
                    "127.0.0.1",
                    "--dns-names",
                    "localhost",
                ],
                check=True,
                stdout=subprocess.DEVNULL,
            )
    return certs


@contextmanager
def node(args: list[str], folder: Path, name: str) -> Iterator[subprocess.Popen]:
    folder.mkdir(parents=True, exist_ok=True)
    log = open(folder / f"{name}.out", "wb")  # noqa: SIM115 - closed below
    process = subprocess.Popen(
        [*EVDB, "node", *args, "--log", str(folder / name)],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        log.close()


def _common(port: int, host: str) -> list[str]:
    """As the suite's KurrentDB containers: clients are told ``host:port`` (``localhost`` for the
    single nodes, ``127.0.0.1`` for the cluster's)."""
    return [
        "--http-ip",
        "127.0.0.1",
        "--http-port",
        str(port),
        "--advertise-host-to-client-as",
        host,
        "--advertise-node-port-to-client-as",
        str(port),
        "--run-projections",
        "All",
        "--start-standard-projections",
        "true",
        "--stats-period-sec",
        "0",
    ]


def _tls(certs: Path, name: str) -> list[str]:
    return [
        "--certificate-file",
        str(certs / name / "node.crt"),
        "--certificate-private-key-file",
        str(certs / name / "node.key"),
        "--trusted-root-certificates-path",
        str(certs / "ca"),
    ]


def _states(port: int, tls: bool, ca: Path) -> list[str]:
    scheme = "https" if tls else "http"
    try:
        answer = httpx.get(f"{scheme}://127.0.0.1:{port}/gossip", verify=str(ca) if tls else False, timeout=2)
        return [m.get("state", "") for m in answer.json().get("members", [])]
    except (httpx.HTTPError, ValueError):
        return []


def _wait(what: str, ready, processes: list[subprocess.Popen], timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return
        for process in processes:
            if process.poll() is not None:
                log = cast(list[str], process.args)[-1]  # the node's --log folder; its output beside it
                raise SystemExit(f"{what}: a node exited with {process.returncode} (see {log}.out)")
        time.sleep(0.5)
    raise SystemExit(f"{what} not ready after {timeout:.0f} s")


def start_nodes(stack: ExitStack, wanted: set[str], certs: Path, folder: Path) -> None:
    ports = {"insecure": [INSECURE_PORT], "secure": [SECURE_PORT], "cluster": list(CLUSTER_PORTS)}
    busy = [p for kind in wanted for p in ports[kind] if not _port_free(p)]
    if busy:
        raise SystemExit(f"the suite's ports {busy} are in use: stop whatever listens there first")
    ca = certs / "ca" / "ca.crt"
    if "insecure" in wanted:
        p = stack.enter_context(
            node([*_common(INSECURE_PORT, "localhost"), "--insecure", "--mem-db", "true"], folder, "insecure")
        )
        _wait("the insecure node", lambda: _states(INSECURE_PORT, False, ca) == ["Leader"], [p])
    if "secure" in wanted:
        p = stack.enter_context(
            node(
                [*_common(SECURE_PORT, "localhost"), *_tls(certs, "single"), "--mem-db", "true"],
                folder,
                "secure",
            )
        )
        _wait("the TLS node", lambda: _states(SECURE_PORT, True, ca) == ["Leader"], [p])
    if "cluster" in wanted:
        processes = []
        for i, port in enumerate(CLUSTER_PORTS, start=1):
            seeds = ",".join(f"127.0.0.1:{q}" for q in CLUSTER_PORTS if q != port)
            replication = free_port()
            args = [
                *_common(port, "127.0.0.1"),
                *_tls(certs, f"node{i}"),
                "--db",
                str(folder / f"node{i}-db"),
                "--cluster-size",
                "3",
                "--gossip-seed",
                seeds,
                "--replication-ip",
                "127.0.0.1",
                "--replication-port",
                str(replication),
            ]
            processes.append(stack.enter_context(node(args, folder, f"node{i}")))

        def cluster_ready() -> bool:
            states = _states(CLUSTER_PORTS[0], True, ca)
            return sorted(states) == ["Follower", "Follower", "Leader"]

        _wait("the cluster", cluster_ready, processes)


# -- running and counting -------------------------------------------------------------------------------
@dataclass
class Counts:
    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    user_projections: int = 0  # failed only for a user-defined projection (not in evdb)
    seconds: float = 0.0
    failures: tuple[str, ...] = ()
    projections: tuple[str, ...] = ()


def run_group(
    python: Path, source: Path, group: Group, keyword: str, results: Path, timeout: int | None = TEST_TIMEOUT
) -> Counts:
    """Run one group's tests with the suite's own Python and count them from pytest's JUnit report."""
    report = results / f"{group.name}.xml"
    command = [
        str(python),
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-q",
        "-rfE",
        f"--junitxml={report}",
        *([f"--timeout={timeout}"] if timeout else []),
        "-o",
        "junit_logging=all",  # a sample's captured output says why it failed
        *(["-k", keyword] if keyword else []),
        *group.ids,
    ]
    started = time.monotonic()
    with open(results / f"{group.name}.txt", "wb") as out:
        subprocess.run(command, cwd=source, stdout=out, stderr=subprocess.STDOUT)
    counts = Counts(seconds=time.monotonic() - started)
    if not report.exists():
        counts.errors = 1
        counts.failures = (f"pytest wrote no report: see {results / (group.name + '.txt')}",)
        return counts
    failures: list[str] = []
    projections: list[str] = []
    for case in ET.parse(report).getroot().iter("testcase"):
        outcome = {child.tag for child in case}
        name = f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}"
        text = " ".join((child.get("message") or "") + (child.text or "") for child in case)
        if outcome & {"failure", "error"} and USER_PROJECTIONS in text:
            counts.user_projections += 1  # a README or sample that creates a JavaScript projection
            projections.append(name)
        elif "failure" in outcome:
            counts.failed += 1
            failures.append(name)
        elif "error" in outcome:
            counts.errors += 1
            failures.append(name)
        elif "skipped" in outcome:
            counts.skipped += 1
        else:
            counts.passed += 1
    counts.failures = tuple(failures)
    counts.projections = tuple(projections)
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--suite", choices=sorted(SUITES), default="kurrentdbclient")
    parser.add_argument("--source", help="a checkout of the suite's repository (default: clone --ref)")
    parser.add_argument("--ref", help="the tag to clone (default: the one measured, docs/grpc.md)")
    parser.add_argument("--group", action="append", help="a group to run (repeatable; default: all)")
    parser.add_argument("--quick", action="store_true", help="a representative subset (a few minutes)")
    parser.add_argument("-k", dest="keyword", default="", help="a further pytest -k selection")
    parser.add_argument(
        "--cache",
        default=str(
            Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "evdb" / "client-suites"
        ),
        help="where clones and virtualenvs are kept",
    )
    parser.add_argument(
        "--results", help="folder for the nodes' logs and pytest's reports (default: a temp dir)"
    )
    args = parser.parse_args(argv)
    # a SIGTERM stops the nodes too (the ExitStack below), as Ctrl-C does
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))

    suite = SUITES[args.suite]
    ref = args.ref or suite.default_ref
    cache = Path(args.cache)
    source = checkout(suite, args.source, ref, cache)
    by_name = {g.name: g for g in groups(suite, source)}
    quick = args.quick and suite.name == "kurrentdbclient"
    chosen_names = args.group or (["secure", "insecure", "cluster"] if quick else list(by_name))
    unknown = [n for n in chosen_names if n not in by_name]
    if unknown:
        raise SystemExit(f"unknown group {unknown}; the groups: {', '.join(by_name)}")
    chosen = [by_name[n] for n in chosen_names]
    if quick:  # one cluster node stands for the three
        chosen = [
            Group(g.name, g.what, g.nodes, (f"{CLIENT}::TestClusterNode1",)) if g.name == "cluster" else g
            for g in chosen
        ]
    left_out = user_projection_tests(source)
    keyword = f"not ({' or '.join(left_out)})" if left_out else ""
    if quick:
        keyword = f"({QUICK_KEYWORD}) and {keyword}" if keyword else f"({QUICK_KEYWORD})"
    if args.keyword:
        keyword = f"({args.keyword}) and {keyword}" if keyword else args.keyword

    venv = cache / suite.name / (ref if not args.source else f"local-{source.name}") / "venv"
    python = virtualenv(suite, source, venv)
    certs = certificates(source)
    results = Path(args.results or tempfile.mkdtemp(prefix=f"{suite.name}-suite-"))
    results.mkdir(parents=True, exist_ok=True)
    print(f"{suite.name} tests from {source}")
    if left_out:
        print(f"user-defined projection tests left out: {', '.join(left_out)}")
    print(f"nodes' logs and reports in {results}", flush=True)
    table = []
    with ExitStack() as stack:
        wanted = {kind for g in chosen for kind in g.nodes}
        start_nodes(stack, wanted, certs, results)
        for group in chosen:
            counts = run_group(python, source, group, keyword, results)
            table.append((group, counts))
            print(
                f"{group.name:16} {counts.passed:4} passed {counts.failed:3} failed {counts.errors:3} errors "
                f"{counts.skipped:3} skipped {counts.user_projections:3} user-defined projections "
                f"{counts.seconds:6.0f} s   {group.what}",
                flush=True,
            )
            for failure in counts.failures:
                print(f"    FAILED {failure}")
            for name in counts.projections:
                print(f"    needs a user-defined projection: {name}")
    bad = sum(c.failed + c.errors for _, c in table)
    total = sum(c.passed for _, c in table)
    print(f"total: {total} passed, {bad} failed or errors")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
