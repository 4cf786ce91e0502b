"""Append latency and throughput: a 3-node local cluster against a single node, same machine, same run.

    .venv/bin/python bench/bench_cluster.py [--appends 2000] [--runs 3] [--writers 8]

Each configuration is launched with `evdb cluster up` (TLS, separate processes); appends go over HTTPS
to the leader. Reports p50/p99 of sequential appends and appends/s with concurrent writers (medians).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
import uuid

from evdb.cluster.launcher import LocalCluster


def measure(local: LocalCluster, appends: int, writers: int) -> tuple[float, float, float]:
    url = local.wait_for_leader(60)
    latencies = []
    with local.client(url) as c:
        for _ in range(appends):
            started = time.perf_counter()
            r = c.post(
                "/streams/bench",
                json={"n": 1},
                headers={"Kurrent-EventType": "B", "Kurrent-EventId": str(uuid.uuid4())},
            )
            latencies.append(time.perf_counter() - started)
            assert r.status_code == 201, r.text
    latencies.sort()
    p50 = latencies[len(latencies) // 2] * 1000
    p99 = latencies[int(len(latencies) * 0.99)] * 1000

    def writer(count: int) -> None:
        with local.client(url) as c:
            for _ in range(count):
                c.post("/streams/bench-c", json={"n": 1}, headers={"Kurrent-EventType": "B"})

    threads = [threading.Thread(target=writer, args=(appends // writers,)) for _ in range(writers)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rate = (appends // writers) * writers / (time.perf_counter() - started)
    return p50, p99, rate


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--appends", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--writers", type=int, default=8)
    args = parser.parse_args()
    results: dict[int, list[tuple[float, float, float]]] = {1: [], 3: []}
    for _ in range(args.runs):
        for nodes in (1, 3):
            with tempfile.TemporaryDirectory() as folder:
                local = LocalCluster(folder)
                local.up(nodes=nodes, log=lambda *_: None)
                try:
                    results[nodes].append(measure(local, args.appends, args.writers))
                finally:
                    local.down(log=lambda *_: None)
    for nodes, rows in results.items():
        p50 = statistics.median(r[0] for r in rows)
        p99 = statistics.median(r[1] for r in rows)
        rate = statistics.median(r[2] for r in rows)
        print(
            f"{nodes} node(s): append p50 {p50:.2f} ms, p99 {p99:.2f} ms, {rate:.0f} appends/s with {args.writers} writers"
        )
    single, three = (statistics.median(r[2] for r in results[n]) for n in (1, 3))
    print(f"3-node throughput / single node: {three / single:.2f}")


if __name__ == "__main__":
    main()
