"""What a 5-node cluster costs in writes against a 3-node one (and the read-only replica's share),
measured with a compiled load generator (wrk).

    sh bench/install-tools.sh
    .venv/bin/python bench/bench_recovery.py [--seconds 10] [--runs 3] [--connections 8]

Each configuration is launched with `evdb cluster up` (TLS, one process per node, same machine); wrk
posts single-event appends over HTTPS to the leader (bench/wrk_append.lua). A write is acknowledged once
a majority has it: 2 of 3 nodes (the leader and one follower) or 3 of 5 (the leader and two followers).
Reports, as medians over the runs, p50/p99 from one connection (sequential) and appends/s from
--connections connections, with wrk's CPU and the nodes' CPU; configurations alternate inside each run
so that the machine's background load falls on all of them alike.
"""

from __future__ import annotations

import argparse
import statistics

from netbench import load_average, need_tools, sequential_then_concurrent

CONFIGS = {
    "3 nodes": "cluster3-tls",
    "3 nodes + 1 read-only replica": "cluster3+1-tls",
    "5 nodes": "cluster5-tls",
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--connections", type=int, default=8)
    args = parser.parse_args()
    need_tools("wrk")
    print(f"load average at start: {load_average()}", flush=True)
    results = sequential_then_concurrent(
        CONFIGS,
        runs=args.runs,
        seconds=args.seconds,
        connections=args.connections,
        describe=lambda run, name, seq, conc: (
            f"run {run + 1}, {name}: p50 {seq.p50_ms:.2f} ms, p99 {seq.p99_ms:.2f} ms; "
            f"{conc.rate:,.0f} appends/s (CPU {conc.cpu_text()}); load {conc.load}"
        ),
    )
    print(f"\nmedians of {args.runs} runs, {args.seconds:g} s per load; CPU as shares of one core")
    print(
        f"| cluster | append p50 | append p99 | appends/s, {args.connections} connections | wrk CPU "
        "| leader CPU | other nodes' CPU |"
    )
    print("|---|---|---|---|---|---|---|")
    p50s = {}
    for name, rows in results.items():

        def med(f, rows=rows) -> float:
            return statistics.median(f(r) for r in rows)

        p50s[name] = med(lambda r: r[0].p50_ms)
        print(
            f"| {name} | {p50s[name]:.2f} ms | {med(lambda r: r[0].p99_ms):.2f} ms | "
            f"{med(lambda r: r[1].rate):,.0f} | {med(lambda r: r[1].client_share):.0%} | "
            f"{med(lambda r: r[1].leader_share):.0%} | "
            f"{med(lambda r: r[1].others_share):.0%} |"
        )
    print(f"5-node p50 / 3-node p50: {p50s['5 nodes'] / p50s['3 nodes']:.2f}")


if __name__ == "__main__":
    main()
