"""HTTP/1.1 single-event appends from a compiled load generator (wrk), measuring the node, not the client.

    sh bench/install-tools.sh     # wrk, h2load, PostgreSQL, psycopg, py-spy
    .venv/bin/python bench/bench_http.py [--seconds 10] [--runs 3] [--connections 8] [--threads 2]
        [--targets single-insecure,single-tls,cluster3-tls] [--profile DIR] [--json FILE]

Each run launches every target fresh with evdb's local-cluster launcher (`evdb cluster up`: one process
per node, on-disk database, TLS unless insecure) and points wrk at the leader: `wrk -t2 -c8` posting one
event per request to /streams/<stream> (ES-EventType, a unique ES-EventId per request made in Lua,
Content-Type application/json, Basic auth; over TLS to a TLS target). Every answer must be 201 and the
stream must then hold at least the appends wrk counted. Reported per target (medians of the runs):
appends/s, p50 and p99 (wrk's own latency histogram), and the CPU of wrk and of each node over the
run, as shares of one core, with the load average. Targets alternate inside each run so that the
machine's background load falls on all of them alike.

--profile DIR: after the measured runs, one more run per target with py-spy sampling the leader (and one
follower) during the load; prints where each node's milliseconds go per request
(bench/profile_summary.py). A profiled run is never one of the measured ones.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import uuid
from pathlib import Path

from netbench import (
    CLOCK_TICK,
    PY_SPY,
    LoadResult,
    Profiler,
    Target,
    fdatasync_probe,
    launch,
    load_average,
    need_tools,
    target_names,
    wrk_appends,
)
from profile_summary import table


def median_row(rows: list[LoadResult]) -> dict:
    def med(f) -> float:
        return statistics.median(f(r) for r in rows)

    nodes = rows[0].node_cpu.keys()
    return {
        "rate": med(lambda r: r.rate),
        "p50": med(lambda r: r.p50_ms),
        "p99": med(lambda r: r.p99_ms),
        "client_cpu": med(lambda r: r.client_share),
        "leader_cpu": med(lambda r: next(iter(r.node_cpu.values())) / r.seconds),
        "other_cpu": med(lambda r: r.others_share) if len(nodes) > 1 else 0.0,
        "node_ms_per_append": med(lambda r: sum(r.node_cpu.values()) / r.requests * 1000),
        "loads": [r.load for r in rows],
    }


def thread_counters(pid: int) -> dict[int, tuple[float, float, int, int]]:
    """Per thread of ``pid``: user and system CPU seconds, voluntary and involuntary context switches."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                status = dict(line.split(":", 1) for line in f if ":" in line)
        except FileNotFoundError:  # the thread ended
            continue
        out[int(tid)] = (
            int(fields[11]) / CLOCK_TICK,
            int(fields[12]) / CLOCK_TICK,
            int(status["voluntary_ctxt_switches"]),
            int(status["nonvoluntary_ctxt_switches"]),
        )
    return out


def thread_names(pid: int) -> dict[int, str]:
    """Python's names of the threads of ``pid`` (py-spy dump), or none without py-spy."""
    if not PY_SPY.exists():
        return {}
    dump = subprocess.run(
        [str(PY_SPY), "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=60
    )
    return {int(m[1]): m[2] for m in re.finditer(r'^Thread (\d+) \(\w+\): "([^"]*)"', dump.stdout, re.M)}


#: the system calls counted per thread in a --per-thread run (perf's tracepoints, when perf is there)
SYSCALLS = ("futex", "read", "write", "writev", "pwrite64", "fdatasync", "epoll_pwait", "getpid")


def count_syscalls(pid: int, seconds: float) -> subprocess.Popen | None:
    """``perf stat`` counting :data:`SYSCALLS` per thread of ``pid`` for ``seconds`` (None without perf)."""
    if shutil.which("perf") is None:
        return None
    events = ",".join(f"syscalls:sys_enter_{name}" for name in SYSCALLS)
    command = ["perf", "stat", "-x,", "--per-thread", "-e", events, "-p", str(pid)]
    return subprocess.Popen(
        [*command, "--", "sleep", f"{seconds:g}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def syscalls_per_thread(counting: subprocess.Popen | None) -> dict[int, dict[str, float]]:
    """What :func:`count_syscalls` counted: thread id -> system call -> count."""
    if counting is None:
        return {}
    _, err = counting.communicate(timeout=120)
    out: dict[int, dict[str, float]] = {}
    for line in err.splitlines():  # "python-<tid>,<count>,,syscalls:sys_enter_<name>,..."
        fields = line.split(",")
        if len(fields) > 3 and fields[3].startswith("syscalls:sys_enter_") and fields[1].isdigit():
            tid = int(fields[0].rsplit("-", 1)[1])
            out.setdefault(tid, {})[fields[3].removeprefix("syscalls:sys_enter_")] = float(fields[1])
    return out


def per_thread_table(
    kind: str, before: dict, after: dict, names: dict[int, str], requests: int, syscalls: dict | None = None
) -> str:
    """Each busy thread's CPU (user, system), context switches and system calls per append over one load."""
    counted = [name for name in SYSCALLS if any(name in calls for calls in (syscalls or {}).values())]
    lines = [
        f"| {kind}: thread | user ms/append | system ms/append | voluntary switches/append | involuntary |"
        + "".join(f" {name}/append |" for name in counted),
        "|---|---|---|---|---|" + "---|" * len(counted),
    ]
    for tid in sorted(after, key=lambda t: -(after[t][0] + after[t][1])):
        if tid not in before:
            continue
        user, system, vol, invol = (after[tid][i] - before[tid][i] for i in range(4))
        if user + system < 0.001 * requests / 1000:  # under 1 µs per append
            continue
        calls = (syscalls or {}).get(tid, {})
        lines.append(
            f"| {names.get(tid, tid)} | {user / requests * 1000:.4f} | {system / requests * 1000:.4f} | "
            f"{vol / requests:.2f} | {invol / requests:.2f} |"
            + "".join(f" {calls.get(name, 0) / requests:.2f} |" for name in counted)
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--targets", default="single-insecure,single-tls,cluster3-tls")
    parser.add_argument("--profile", type=Path, default=None, help="folder for py-spy profiles")
    parser.add_argument("--json", type=Path, default=None, help="write every run's figures here")
    parser.add_argument(
        "--variants",
        default="asyncio",
        help="e.g. asyncio,uvloop,gil0.5ms: also run every target with its nodes in these runtime variants "
        "(experiments: bench/node_variant.py)",
    )
    parser.add_argument(
        "--per-thread",
        action="store_true",
        help="one more run per target: each node's CPU (user, system), context switches and system calls "
        "per append, thread by thread (/proc/<pid>/task; names from py-spy dump; calls from perf)",
    )
    args = parser.parse_args()
    targets = target_names(args.targets, args.variants)
    need_tools("wrk", *(["py-spy"] if args.profile else []))
    print(f"load average at start: {load_average()}", flush=True)
    p50, p99 = fdatasync_probe()
    print(f"this disk: 256-byte write + fdatasync p50 {p50:.3f} ms, p99 {p99:.3f} ms", flush=True)
    results: dict[str, list[LoadResult]] = {t: [] for t in targets}

    def appends(target: Target) -> LoadResult:
        """wrk's single-event appends to a new stream of ``target``, as the arguments say."""
        return wrk_appends(
            target,
            f"wrk-{uuid.uuid4().hex[:8]}",
            seconds=args.seconds,
            connections=args.connections,
            threads=args.threads,
        )

    for run in range(args.runs):
        for kind in targets:
            with launch(kind) as target:
                r = appends(target)
            results[kind].append(r)
            print(
                f"run {run + 1}, {kind}: {r.rate:,.0f} appends/s, p50 {r.p50_ms:.2f} ms, p99 {r.p99_ms:.2f} ms; "
                f"CPU {r.cpu_text()}; load {r.load}",
                flush=True,
            )
    print(
        f"\nwrk -t{args.threads} -c{args.connections} -d{args.seconds:g}s, single-event appends; "
        f"medians of {args.runs} runs"
    )
    print(
        "| target | appends/s | p50 ms | p99 ms | wrk CPU | leader CPU | other nodes' CPU | node CPU ms/append | load averages |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    medians = {}
    for kind, rows in results.items():
        m = medians[kind] = median_row(rows)
        print(
            f"| {kind} | {m['rate']:,.0f} | {m['p50']:.2f} | {m['p99']:.2f} | {m['client_cpu']:.0%} | "
            f"{m['leader_cpu']:.0%} | {m['other_cpu']:.0%} | {m['node_ms_per_append']:.3f} | "
            f"{'; '.join(x.split()[0] for x in m['loads'])} |"
        )
    if "single-insecure" in medians:
        base = medians["single-insecure"]["rate"]
        print(
            "same-run ratios to single-insecure: "
            + ", ".join(f"{k} {m['rate'] / base:.2f}×" for k, m in medians.items())
        )
    if args.per_thread:
        for kind in targets:
            with launch(kind) as target:
                pids = {node.name: node.pid for node in target.nodes}  # the leader first
                before = {name: thread_counters(pid) for name, pid in pids.items()}
                # the same seconds as wrk's load
                counting = {name: count_syscalls(pid, args.seconds) for name, pid in pids.items()}
                r = appends(target)
                after = {name: thread_counters(pid) for name, pid in pids.items()}
                syscalls = {name: syscalls_per_thread(c) for name, c in counting.items()}
                names = {name: thread_names(pid) for name, pid in pids.items()}
            print(
                f"\nper-thread run, {kind}: {r.rate:,.0f} appends/s, p50 {r.p50_ms:.2f} ms; CPU {r.cpu_text()}"
            )
            for number, name in enumerate(pids):
                role = "leader" if number == 0 else "follower"
                print(
                    per_thread_table(
                        f"{kind} {name} ({role})",
                        before[name],
                        after[name],
                        names[name],
                        r.requests,
                        syscalls[name],
                    )
                )
    profiles = {}
    if args.profile:
        for kind in targets:
            with launch(kind) as target:
                profiler = Profiler(args.profile, f"http-{kind}", target.nodes[:2], args.seconds)
                r = wrk_appends(
                    target,
                    f"wrk-{uuid.uuid4().hex[:8]}",
                    seconds=args.seconds,
                    connections=args.connections,
                    threads=args.threads,
                )
                files = profiler.wait()
            print(
                f"\nprofiled run, {kind}: {r.rate:,.0f} appends/s, p50 {r.p50_ms:.2f} ms; CPU {r.cpu_text()}"
            )
            for name, path in files.items():
                print(table(path, r.requests, r.seconds, r.node_cpu[name]))
            profiles[kind] = {"run": r.row(), "files": {k: str(v) for k, v in files.items()}}
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "runs": {k: [r.row() for r in v] for k, v in results.items()},
                    "medians": medians,
                    "profiles": profiles,
                },
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
