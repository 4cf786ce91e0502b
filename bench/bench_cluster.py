"""Append latency and throughput: a 3-node local cluster against a single node, same machine, same run,
measured with a compiled load generator (wrk) so that the figures are the node's, not a Python client's.

    sh bench/install-tools.sh
    .venv/bin/python bench/bench_cluster.py [--seconds 10] [--runs 3] [--connections 8]

Each configuration is launched with `evdb cluster up` (TLS, one process per node, on-disk databases);
wrk posts single-event appends over HTTPS to the leader (bench/wrk_append.lua: a unique event id per
request): first from one connection (sequential: p50/p99), then from --connections connections
(appends/s). Reported as medians of the runs, with wrk's CPU and each node's CPU beside them.
"""

from __future__ import annotations

import argparse
import statistics

from netbench import load_average, need_tools, sequential_then_concurrent


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--connections", type=int, default=8)
    args = parser.parse_args()
    need_tools("wrk")
    print(f"load average at start: {load_average()}", flush=True)
    configs = {"1 node": "single-tls", "3 nodes": "cluster3-tls"}
    results = sequential_then_concurrent(
        configs,
        runs=args.runs,
        seconds=args.seconds,
        connections=args.connections,
        describe=lambda run, name, seq, conc: (
            f"run {run + 1}, {name}: sequential p50 {seq.p50_ms:.2f} ms, p99 {seq.p99_ms:.2f} ms "
            f"(CPU {seq.cpu_text()}); {args.connections} connections {conc.rate:,.0f} appends/s, "
            f"p50 {conc.p50_ms:.2f} ms (CPU {conc.cpu_text()}); load {conc.load}"
        ),
    )
    print(f"\nmedians of {args.runs} runs, {args.seconds:g} s per load; CPU as shares of one core")
    print(
        f"| | sequential p50 | sequential p99 | appends/s, {args.connections} connections | p50 | p99 "
        "| wrk CPU | leader CPU | followers' CPU |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    rates = {}
    for name, rows in results.items():

        def med(f, rows=rows) -> float:
            return statistics.median(f(r) for r in rows)

        rates[name] = med(lambda r: r[1].rate)
        print(
            f"| {name} | {med(lambda r: r[0].p50_ms):.2f} ms | {med(lambda r: r[0].p99_ms):.2f} ms | "
            f"{rates[name]:,.0f} | {med(lambda r: r[1].p50_ms):.2f} ms | {med(lambda r: r[1].p99_ms):.2f} ms | "
            f"{med(lambda r: r[1].client_share):.0%} | "
            f"{med(lambda r: r[1].leader_share):.0%} | "
            f"{med(lambda r: r[1].others_share):.0%} |"
        )
    print(f"3-node throughput / single node: {rates['3 nodes'] / rates['1 node']:.2f}")


if __name__ == "__main__":
    main()
