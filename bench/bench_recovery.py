"""What a 5-node cluster costs in writes against a 3-node one (and the read-only replica's share).

    .venv/bin/python bench/bench_recovery.py [--appends 1000] [--runs 3] [--writers 8]

Each configuration is launched with `evdb cluster up` (TLS, one process per node, same machine); appends
go over HTTPS to the leader. A write is acknowledged once a majority has it: 2 of 3 nodes (the leader
and one follower) or 3 of 5 (the leader and two followers). Reports, as medians over the runs, p50/p99
of sequential appends and appends/s with concurrent writers; configurations alternate inside each run
so that the machine's background load falls on all of them alike.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
import uuid

from evdb.cluster.launcher import ClusterLaunchError, LocalCluster

CONFIGS = {"3 nodes": (3, 0), "3 nodes + 1 read-only replica": (3, 1), "5 nodes": (5, 0)}


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
                r = c.post("/streams/bench-c", json={"n": 1}, headers={"Kurrent-EventType": "B"})
                assert r.status_code == 201, r.text

    threads = [threading.Thread(target=writer, args=(appends // writers,)) for _ in range(writers)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rate = (appends // writers) * writers / (time.perf_counter() - started)
    return p50, p99, rate


def launch(folder: str, nodes: int, replicas: int, attempts: int = 3) -> tuple[LocalCluster, int]:
    """A running cluster and how many launches failed first (each attempt in a fresh folder)."""
    failures = 0
    for attempt in range(attempts):
        local = LocalCluster(f"{folder}/try{attempt}")
        try:
            local.up(nodes=nodes, replicas=replicas, timeout=90, log=lambda *_: None)
            return local, failures
        except ClusterLaunchError as exc:
            failures += 1
            print(f"  launch of {nodes}+{replicas} failed ({exc}); trying again", flush=True)
            local.down(log=lambda *_: None)
    raise SystemExit(f"could not launch {nodes} nodes + {replicas} replicas in {attempts} attempts")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--appends", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--writers", type=int, default=8)
    args = parser.parse_args()
    results: dict[str, list[tuple[float, float, float]]] = {name: [] for name in CONFIGS}
    failed_launches = dict.fromkeys(CONFIGS, 0)
    for run in range(args.runs):
        for name, (nodes, replicas) in CONFIGS.items():
            with tempfile.TemporaryDirectory() as folder:
                local, failures = launch(folder, nodes, replicas)
                failed_launches[name] += failures
                try:
                    results[name].append(measure(local, args.appends, args.writers))
                finally:
                    local.down(log=lambda *_: None)
            p50, p99, rate = results[name][-1]
            print(
                f"run {run + 1}, {name}: p50 {p50:.2f} ms, p99 {p99:.2f} ms, {rate:.0f} appends/s", flush=True
            )
    print(
        f"\nmedians of {args.runs} runs, {args.appends} sequential appends, {args.writers} concurrent writers:"
    )
    for name, rows in results.items():
        p50 = statistics.median(r[0] for r in rows)
        p99 = statistics.median(r[1] for r in rows)
        rate = statistics.median(r[2] for r in rows)
        extra = f" ({failed_launches[name]} launch(es) retried)" if failed_launches[name] else ""
        print(f"{name}: append p50 {p50:.2f} ms, p99 {p99:.2f} ms, {rate:.0f} appends/s{extra}")
    three, five = (statistics.median(r[0] for r in results[n]) for n in ("3 nodes", "5 nodes"))
    print(f"5-node p50 / 3-node p50: {five / three:.2f}")


if __name__ == "__main__":
    main()
