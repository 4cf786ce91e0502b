"""Shared pieces of the network benchmarks (issue 24): the targets, the compiled load generators, CPU
accounting of the client and of every node, and py-spy profiles of the nodes.

Targets are launched with evdb's own local-cluster launcher (`evdb cluster up`: one process per node,
on-disk databases, TLS unless insecure). CPU is read from /proc/<pid>/stat (user + system) before and
after each load for every node, and from the load generator's own rusage when it exits.

The tools come from Debian (wrk, nghttp2-client) and PyPI (py-spy): `sh bench/install-tools.sh`.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from node_variant import check_variant

from evdb.cluster.launcher import ClusterLaunchError, LocalCluster

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
PY_SPY = ROOT / ".venv" / "bin" / "py-spy"
ADMIN = ("admin", "changeit")
BASIC = "Basic " + base64.b64encode(f"{ADMIN[0]}:{ADMIN[1]}".encode()).decode()
CLOCK_TICK = os.sysconf("SC_CLK_TCK")

#: the targets every network benchmark knows: (nodes, read-only replicas, insecure)
TARGETS = {
    "single-insecure": (1, 0, True),
    "single-tls": (1, 0, False),
    "cluster3-tls": (3, 0, False),
    "cluster3+1-tls": (3, 1, False),
    "cluster5-tls": (5, 0, False),
}


def need_tools(*tools: str) -> None:
    """Exit with the install command when a tool is missing (never a silent fallback)."""
    missing = [t for t in tools if shutil.which(t) is None and not (t == "py-spy" and PY_SPY.exists())]
    if missing:
        raise SystemExit(f"missing {', '.join(missing)}: run `sh bench/install-tools.sh` as root first")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a running process (/proc/<pid>/stat fields 14 and 15)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICK


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def fdatasync_probe(folder: str | None = None, count: int = 500) -> tuple[float, float]:
    """The disk's own floor for a durable single append: p50 and p99 ms of a 256-byte write plus
    fdatasync at the end of a preallocated file, in the folder the targets use."""
    times = []
    with tempfile.NamedTemporaryFile(dir=folder, prefix="fsync-probe-") as f:
        os.posix_fallocate(f.fileno(), 0, count * 256)
        os.fsync(f.fileno())
        block = b"x" * 256
        for i in range(count):
            started = time.perf_counter()
            os.pwrite(f.fileno(), block, i * 256)
            os.fdatasync(f.fileno())
            times.append(time.perf_counter() - started)
    times.sort()
    return times[len(times) // 2] * 1000, times[int(len(times) * 0.99)] * 1000


@dataclass
class Node:
    name: str
    url: str
    pid: int
    leader: bool


@dataclass
class Target:
    """A running evdb target: its nodes (the leader first) and how to reach the leader."""

    kind: str
    nodes: list[Node]
    ca: str | None
    cluster: LocalCluster

    @property
    def leader(self) -> Node:
        return self.nodes[0]

    def cpu(self) -> dict[str, float]:
        return {n.name: cpu_seconds(n.pid) for n in self.nodes}

    def client(self, timeout: float = 30.0):
        return self.cluster.client(self.leader.url, timeout=timeout)


class VariantCluster(LocalCluster):
    """The local cluster with every node started by bench/node_variant.py (a variant of the node's
    runtime: uvloop, a shorter GIL switch interval): experiments that measure a change before evdb's."""

    def __init__(self, data_dir: str, variant: str) -> None:
        super().__init__(data_dir)
        self.variant = check_variant(variant)

    def _start_node(self, node: dict) -> int:
        folder = Path(node["config"]).parent
        with open(folder / "stdout.log", "ab") as out:
            process = subprocess.Popen(
                [sys.executable, str(BENCH / "node_variant.py"), "node", "--config", node["config"]],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                cwd=folder,
                env={**os.environ, "EVDB_BENCH_VARIANT": self.variant},
            )
        threading.Thread(target=process.wait, name=f"reap-{process.pid}", daemon=True).start()
        return process.pid


def split_target(name: str) -> tuple[str, str]:
    """ "single-tls@uvloop+gil0.5ms" -> ("single-tls", "uvloop+gil0.5ms"); no "@": the plain node."""
    kind, _, variant = name.partition("@")
    if kind not in TARGETS:
        raise SystemExit(f"unknown target {kind!r}; known: {', '.join(TARGETS)}")
    return kind, check_variant(variant or "asyncio")


def target_names(targets: str, variants: str) -> list[str]:
    """Every target with every variant (the plain node for "asyncio"), checked."""
    names = [t if v == "asyncio" else f"{t}@{v}" for v in variants.split(",") for t in targets.split(",")]
    for name in names:
        split_target(name)
    return names


@contextmanager
def launch(name: str, folder: str | None = None, attempts: int = 3) -> Iterator[Target]:
    """Start a target (a TARGETS name, with "@variant": its nodes run bench/node_variant.py) in a
    fresh temporary folder, wait for its leader, stop it after."""
    kind, variant = split_target(name)
    nodes, replicas, insecure = TARGETS[kind]
    with tempfile.TemporaryDirectory(dir=folder, prefix=f"evdb-{kind}-") as tmp:
        for attempt in range(attempts):
            path = f"{tmp}/try{attempt}"
            local: LocalCluster = (
                LocalCluster(path) if variant == "asyncio" else VariantCluster(path, variant)
            )
            try:
                local.up(nodes=nodes, replicas=replicas, insecure=insecure, timeout=90, log=lambda *_: None)
                leader_url = local.wait_for_leader(60)
                break
            except ClusterLaunchError as exc:
                print(f"  launch of {kind} failed ({exc}); trying again", flush=True)
                local.down(log=lambda *_: None)
        else:
            raise SystemExit(f"could not launch {kind} in {attempts} attempts")
        try:
            info = local.info()
            members = [
                Node(n["name"], n["url"], int(n["pid"]), n["url"] == leader_url) for n in info["nodes"]
            ]
            members.sort(key=lambda n: not n.leader)
            yield Target(name, members, info.get("ca"), local)
        finally:
            local.down(log=lambda *_: None)


# -- wrk: HTTP/1.1 single-event appends ------------------------------------------------------------------


@dataclass
class LoadResult:
    """One load run against a target: what the generator counted and what each process spent."""

    tool: str
    requests: int
    seconds: float
    p50_ms: float
    p99_ms: float
    errors: int
    client_cpu: float  # CPU seconds of the load generator (all its threads)
    node_cpu: dict[str, float] = field(default_factory=dict)  # CPU seconds of each node during the load
    load: str = ""

    @property
    def rate(self) -> float:
        return self.requests / self.seconds

    @property
    def client_share(self) -> float:
        """The load generator's CPU as a share of one core over the run."""
        return self.client_cpu / self.seconds

    @property
    def leader_share(self) -> float:
        return next(iter(self.node_cpu.values()), 0.0) / self.seconds

    @property
    def others_share(self) -> float:
        """Every other node's CPU together, as a share of one core."""
        return sum(list(self.node_cpu.values())[1:]) / self.seconds

    def cpu_text(self) -> str:
        """Each process's CPU as a share of one core over the run."""
        nodes = ", ".join(f"{name} {cpu / self.seconds:.0%}" for name, cpu in self.node_cpu.items())
        return f"client {self.client_cpu / self.seconds:.0%}; {nodes}"

    def row(self) -> dict:
        return {
            "tool": self.tool,
            "requests": self.requests,
            "seconds": round(self.seconds, 3),
            "rate": round(self.rate, 1),
            "p50_ms": round(self.p50_ms, 3),
            "p99_ms": round(self.p99_ms, 3),
            "errors": self.errors,
            "client_cpu_s": round(self.client_cpu, 3),
            "node_cpu_s": {k: round(v, 3) for k, v in self.node_cpu.items()},
            "load": self.load,
        }


def run_measured(
    command: list[str], target: Target, timeout: float
) -> tuple[subprocess.CompletedProcess, float, dict[str, float], float, str]:
    """Run a load generator to its end; its output, its own CPU seconds (rusage), each node's CPU
    seconds over the same time, the wall time and the load average at the end."""
    before = target.cpu()
    started = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        process = subprocess.Popen(command, stdout=out, stderr=err)
        deadline = time.monotonic() + timeout
        while True:
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                process.kill()
                pid, status, usage = os.wait4(process.pid, 0)
                raise SystemExit(f"{command[0]} did not end within {timeout:.0f} s: killed")
            time.sleep(0.01)
        elapsed = time.perf_counter() - started
        process.returncode = os.waitstatus_to_exitcode(status)
        after = target.cpu()
        out.seek(0)
        err.seek(0)
        done = subprocess.CompletedProcess(
            command,
            process.returncode,
            out.read().decode(errors="replace"),
            err.read().decode(errors="replace"),
        )
    if done.returncode != 0:
        raise SystemExit(f"{command[0]} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    node_cpu = {name: after[name] - before[name] for name in before}
    return done, usage.ru_utime + usage.ru_stime, node_cpu, elapsed, load_average()


def wrk_appends(
    target: Target, stream: str, *, seconds: float, connections: int = 8, threads: int = 2
) -> LoadResult:
    """Single-event appends (one event per POST /streams/<stream>) from wrk for ``seconds`` seconds;
    every response must be 201 and the stream must hold at least as many events as wrk counted."""
    need_tools("wrk")
    nonce = uuid.uuid4().hex[:20]  # with wrk's thread number and request counter: a unique event id
    command = [
        "wrk",
        f"-t{threads}",
        f"-c{connections}",
        f"-d{seconds:g}s",
        "--timeout",
        "10s",
        "-s",
        str(BENCH / "wrk_append.lua"),
        target.leader.url,
        "--",
        f"/streams/{stream}",
        nonce,
        BASIC,
    ]
    done, client_cpu, node_cpu, _, load = run_measured(command, target, seconds + 60)
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    errors = sum(summary["errors"].values())
    if errors:
        raise SystemExit(f"wrk saw {errors} errors ({summary['errors']}): {done.stdout[-1500:]}")
    with target.client() as c:
        r = c.get(f"/streams/{stream}/head/backward/1", headers={"Accept": "application/json"})
        r.raise_for_status()
        written = r.json()["entries"][0]["eventNumber"] + 1
    if written < summary["requests"]:
        raise SystemExit(f"wrk counted {summary['requests']} appends but {stream} holds {written} events")
    return LoadResult(
        "wrk",
        summary["requests"],
        summary["duration_us"] / 1e6,
        summary["p50_us"] / 1000,
        summary["p99_us"] / 1000,
        errors,
        client_cpu,
        node_cpu,
        load,
    )


# -- py-spy: where a node's time goes -------------------------------------------------------------------


class Profiler:
    """py-spy samples of some nodes of a target while a load runs (``--idle``: waiting is recorded
    too, so the event loop's idle time and the writer's fsync show), one raw file per node. With
    ``seconds`` None it samples until :meth:`stop`."""

    def __init__(
        self, folder: Path, label: str, nodes: list[Node], seconds: float | None, rate: int = 200
    ) -> None:
        self.files = {n.name: folder / f"{label}-{n.name}.txt" for n in nodes}
        folder.mkdir(parents=True, exist_ok=True)
        duration = ["--duration", f"{max(1, round(seconds))}"] if seconds is not None else []
        self.processes = [
            subprocess.Popen(
                [
                    str(PY_SPY),
                    "record",
                    "--pid",
                    str(n.pid),
                    *duration,
                    "--rate",
                    str(rate),
                    "--format",
                    "raw",
                    "--threads",
                    "--idle",
                    "--nonblocking",
                    "-o",
                    str(self.files[n.name]),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            for n in nodes
        ]

    def stop(self) -> dict[str, Path]:
        """End the sampling now (py-spy writes its file on SIGINT)."""
        for p in self.processes:
            p.send_signal(signal.SIGINT)
        return self.wait()

    def wait(self) -> dict[str, Path]:
        for p in self.processes:
            _, err = p.communicate(timeout=120)
            if p.returncode != 0:
                raise SystemExit(f"py-spy failed: {err.decode(errors='replace')[-1000:]}")
        return self.files


def sequential_then_concurrent(
    configs: dict[str, str],
    *,
    runs: int,
    seconds: float,
    connections: int,
    describe: Callable[[int, str, LoadResult, LoadResult], str],
) -> dict[str, list[tuple[LoadResult, LoadResult]]]:
    """Per run, each target of ``configs`` (name -> launch kind) launched fresh and loaded twice with wrk:
    one connection (the sequential latency), then ``connections``; ``describe(run, name, seq, conc)`` is
    the line printed for each. The pairs by target name, one per run."""
    results: dict[str, list[tuple[LoadResult, LoadResult]]] = {name: [] for name in configs}
    for run in range(runs):
        for name, kind in configs.items():
            with launch(kind) as target:
                seq = wrk_appends(
                    target, f"seq-{uuid.uuid4().hex[:8]}", seconds=seconds, connections=1, threads=1
                )
                conc = wrk_appends(
                    target, f"conc-{uuid.uuid4().hex[:8]}", seconds=seconds, connections=connections
                )
            results[name].append((seq, conc))
            print(describe(run, name, seq, conc), flush=True)
    return results
