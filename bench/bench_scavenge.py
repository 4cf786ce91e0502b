"""Scavenge throughput against the disk's copy speed, and append latency during a scavenge.

Builds a database of --size-gib (chunk size --chunk-mib) where half the records are removable (half
the streams are tombstoned), then, --runs times: copies the database folder with ``cp -r`` (timed: the
disk's copy speed for the same files) and scavenges the copy (timed). Also measures single-append
latency (p50/p99) on an idle node, while a scavenge runs, and idle again afterwards (how noisy the
machine is). Chunk work runs in worker processes (evdb/scavenge/workers.py), so the timed scavenge
includes starting them.

    .venv/bin/python bench/bench_scavenge.py --size-gib 2 --chunk-mib 256 --runs 3
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import statistics
import subprocess
import tempfile
import threading
import time

from evdb.database import Database
from evdb.scavenge.service import ScavengeRequest, ScavengeService
from evdb.streams import NewEvent

STREAMS = 1000


def build(directory: str, size: int, chunk_size: int) -> int:
    db = Database.open(os.path.join(directory, "db"), chunk_size=chunk_size)
    payload = os.urandom(900)
    n = 0
    while db.committed_position < size:
        for kind in ("keep", "drop"):
            stream = f"{kind}-{n % STREAMS}"
            db.append(stream, [NewEvent("E", payload) for _ in range(200)])
        n += 1
    for i in range(STREAMS):
        db.delete_stream(f"drop-{i}", hard=True)
    written = db.committed_position
    db.close()
    return written


def folder_size(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def scavenge(directory: str, chunk_size: int, threads: int) -> tuple[float, int, int]:
    db = Database.open(os.path.join(directory, "db"), chunk_size=chunk_size)
    service = ScavengeService(
        db,
        state_path=ScavengeService.state_path_for(os.path.join(directory, "db", "index")),
        logger=logging.getLogger("bench"),
    )
    before = folder_size(os.path.join(directory, "db"))
    started = time.perf_counter()
    service.start(ScavengeRequest(threads=threads))
    service.wait()
    took = time.perf_counter() - started
    assert service.last()[1] == "Success", service.last()
    service.close()
    db.close()
    return took, before, folder_size(os.path.join(directory, "db"))


def latency(directory: str, chunk_size: int) -> dict[str, float]:
    """p50/p99 of single appends: idle, then while a scavenge runs."""
    db = Database.open(os.path.join(directory, "db"), chunk_size=chunk_size)
    service = ScavengeService(
        db,
        state_path=ScavengeService.state_path_for(os.path.join(directory, "db", "index")),
        logger=logging.getLogger("bench"),
    )

    def sample(count: int | None, until: threading.Event | None) -> list[float]:
        out = []
        while (count is None or len(out) < count) and not (until is not None and until.is_set()):
            t = time.perf_counter()
            db.append("latency", [NewEvent("E", b"x" * 200)])
            out.append(time.perf_counter() - t)
        return out

    idle = sample(3000, None)
    done = threading.Event()
    service.start(ScavengeRequest())
    waiter = threading.Thread(target=lambda: (service.wait(), done.set()))
    waiter.start()
    busy = sample(None, done)
    waiter.join()
    idle_after = sample(3000, None)  # the machine's noise: idle again, after the scavenge
    service.close()
    db.close()

    def pct(xs: list[float], p: float) -> float:
        return sorted(xs)[min(len(xs) - 1, int(len(xs) * p))] * 1000

    return {
        "idle p50 ms": pct(idle, 0.5),
        "idle p99 ms": pct(idle, 0.99),
        "idle after p50 ms": pct(idle_after, 0.5),
        "idle after p99 ms": pct(idle_after, 0.99),
        "scavenging p50 ms": pct(busy, 0.5),
        "scavenging p99 ms": pct(busy, 0.99),
        "appends during scavenge": len(busy),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size-gib", type=float, default=2.0)
    parser.add_argument("--chunk-mib", type=int, default=256)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    chunk_size = args.chunk_mib * 1024 * 1024
    base = tempfile.mkdtemp(dir=args.dir, prefix="bench-scavenge-")
    try:
        source = os.path.join(base, "source")
        started = time.perf_counter()
        written = build(source, int(args.size_gib * 1024**3), chunk_size)
        print(f"built {written / 1024**3:.2f} GiB in {time.perf_counter() - started:.0f} s", flush=True)
        cps, scavs, sizes = [], [], []
        for run in range(args.runs):
            copy = os.path.join(base, f"run-{run}")
            t = time.perf_counter()
            subprocess.run(["cp", "-r", source, copy], check=True)
            cps.append(time.perf_counter() - t)
            took, before, after = scavenge(copy, chunk_size, args.threads)
            scavs.append(took)
            sizes.append((before, after))
            print(
                f"run {run + 1}: cp -r {cps[-1]:.1f} s, scavenge {took:.1f} s, {before / 1024**3:.2f} -> {after / 1024**3:.2f} GiB",
                flush=True,
            )
            shutil.rmtree(copy)
        copy = os.path.join(base, "latency")
        subprocess.run(["cp", "-r", source, copy], check=True)
        lat = latency(copy, chunk_size)
        cp_median, scav_median = statistics.median(cps), statistics.median(scavs)
        print()
        print(f"| database | cp -r (median) | scavenge, {args.threads} thread(s) (median) | ratio |")
        print("|---|---|---|---|")
        print(
            f"| {written / 1024**3:.2f} GiB, chunks of {args.chunk_mib} MiB, half removable | {cp_median:.1f} s | {scav_median:.1f} s | {scav_median / cp_median:.2f}× |"
        )
        print()
        print("| append latency | p50 | p99 |")
        print("|---|---|---|")
        print(f"| idle | {lat['idle p50 ms']:.2f} ms | {lat['idle p99 ms']:.2f} ms |")
        print(
            f"| during the scavenge ({lat['appends during scavenge']} appends) | {lat['scavenging p50 ms']:.2f} ms | {lat['scavenging p99 ms']:.2f} ms |"
        )
        print(
            f"| idle again, after it | {lat['idle after p50 ms']:.2f} ms | {lat['idle after p99 ms']:.2f} ms |"
        )
        print(f"p99 ratio: {lat['scavenging p99 ms'] / lat['idle p99 ms']:.2f}×")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
