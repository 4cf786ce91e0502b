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
import statistics
import uuid
from pathlib import Path

from netbench import (
    LoadResult,
    Profiler,
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
    args = parser.parse_args()
    targets = target_names(args.targets, args.variants)
    need_tools("wrk", *(["py-spy"] if args.profile else []))
    print(f"load average at start: {load_average()}", flush=True)
    p50, p99 = fdatasync_probe()
    print(f"this disk: 256-byte write + fdatasync p50 {p50:.3f} ms, p99 {p99:.3f} ms", flush=True)
    results: dict[str, list[LoadResult]] = {t: [] for t in targets}
    for run in range(args.runs):
        for kind in targets:
            with launch(kind) as target:
                r = wrk_appends(
                    target,
                    f"wrk-{uuid.uuid4().hex[:8]}",
                    seconds=args.seconds,
                    connections=args.connections,
                    threads=args.threads,
                )
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
