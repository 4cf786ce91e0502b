"""`evdb mirror`: catch-up throughput (events/s) and lag under a steady write load, for each --parallel.

    .venv/bin/python bench/bench_mirror.py [--events 5000] [--streams 50] [--rate 1000] [--seconds 20] [--runs 3]
        [--parallel 1,8]

Real nodes (`evdb node --insecure --mem-db`, separate processes) and `evdb mirror --parallel N` between
them, for each N of `--parallel` (1: one append at a time in `$all` order; N > 1: N streams at a time).

1. Catch-up: the primary holds `--events` events written one per append, round-robin over `--streams`
   streams (the worst case for `--parallel 1`: every event is its own append on the secondary), and
   the same number again written 10 per append to one stream per batch (runs of 10). For each N a
   mirror with no checkpoint copies them to a fresh secondary; events/s = events copied / time from
   its start line ("Mirroring ...") to its "caught up" line, both from the mirror's own log time
   stamps (ms). The CPU of the mirror and of both nodes over the catch-up is printed beside it.
2. Lag: the mirror is live; a writer appends `--rate` events/s for `--seconds` seconds (one event per
   append, round-robin over the streams, paced from 8 aiohttp connections: event i is sent at
   start + i / rate) and every 0.05 s a probe event to `probe`, stamped with its
   write time; a subscriber on the secondary (`/subscriptions/streams/probe`) records when each probe
   arrives, and one on the primary (the floor: one node's own subscription, on the same loaded
   machine). Lag = arrival - write time (same machine clock), p50/p99/max.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import statistics
import sys
import tempfile
import threading
import time
import uuid
from datetime import datetime
from pathlib import Path

import aiohttp
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "mirror"))
from mirror_helpers import MirrorProcess, NodeProcess, wait_until

from evdb.mirror.state import Checkpoint, MirrorPaths, read_status

sys.path.insert(0, str(Path(__file__).resolve().parent))
from netbench import BASIC, cpu_seconds, load_average

EVENTS_JSON = {"Content-Type": "application/vnd.kurrent.events+json"}
PROBE_EVERY = 0.05  # seconds between probe events (400 in 20 s: p99 is not the maximum)


def event(i: int, **extra) -> dict:
    return {"eventId": str(uuid.uuid4()), "eventType": "Bench", "data": {"i": i, "pad": "x" * 100, **extra}}


def fill(node: NodeProcess, events: int, streams: int) -> None:
    with httpx.Client(base_url=node.url, auth=("admin", "changeit"), timeout=30) as c:
        for i in range(events):
            c.post(f"/streams/single-{i % streams}", json=[event(i)], headers=EVENTS_JSON).raise_for_status()
        for i in range(0, events, 10):
            batch = [event(i + k) for k in range(10)]
            c.post(f"/streams/runs-{i // 10 % streams}", json=batch, headers=EVENTS_JSON).raise_for_status()


def log_time(line: str) -> float:
    """The time stamp of a mirror log line (``[pid,2026-11-24 18:10:00,123,INF] ...``), in seconds."""
    stamp = line.split(",", 1)[1].rsplit(",", 1)[0]  # "2026-11-24 18:10:00,123"
    when, millis = stamp.rsplit(",", 1)
    return datetime.strptime(when, "%Y-%m-%d %H:%M:%S").timestamp() + int(millis) / 1000


def catch_up(
    folder: Path, primary: NodeProcess, events: int, parallel: int
) -> tuple[float, dict[str, float]]:
    """One mirror with no checkpoint copies the primary's ``events`` to a fresh secondary: events/s
    from its start line to its caught-up line (the mirror's own log time stamps)."""
    secondary = NodeProcess(folder / "s", "s")
    try:
        checkpoint = folder / "m" / "checkpoint.json"
        mirror = MirrorProcess(
            primary.url, secondary.url, checkpoint, "--status-every", "0", "--parallel", str(parallel)
        )
        try:
            started = log_time(mirror.wait_for_line("Mirroring ", 30))
            pids = {"mirror": mirror.proc.pid, "primary": primary.proc.pid, "secondary": secondary.proc.pid}
            before = {k: cpu_seconds(v) for k, v in pids.items()}
            wall = time.monotonic()
            done = log_time(mirror.wait_for_line("Mirror caught up with the primary", 600))
            cpu = {k: (cpu_seconds(v) - before[k]) / (time.monotonic() - wall) for k, v in pids.items()}
            assert mirror.terminate() == 0
        finally:
            mirror.close()
        saved = Checkpoint.load(MirrorPaths.of(checkpoint).checkpoint)
        assert saved is not None and saved.events_copied == events, (saved, events)
        return events / (done - started), cpu
    finally:
        secondary.close()


async def paced_writer(
    url: str, rate: float, seconds: float, streams: int, written: dict[int, float], connections: int = 8
) -> tuple[int, int, float]:
    """Appends one event per request at ``rate`` events/s for ``seconds`` (round-robin over the streams,
    from ``connections`` connections: request i is sent at start + i / rate, or as soon as a connection
    is free), and a probe event to `probe` every PROBE_EVERY s, its write time kept in ``written``. Returns
    (events sent, probes sent, the rate achieved)."""
    async with aiohttp.ClientSession(
        url, headers={"Authorization": BASIC}, connector=aiohttp.TCPConnector(limit=connections + 1)
    ) as session:
        started = time.monotonic()
        total = int(rate * seconds)
        counter = iter(range(total))

        async def post(stream: str, body: list[dict]) -> None:
            async with session.post(f"/streams/{stream}", json=body, headers=EVENTS_JSON) as r:
                if r.status != 201:
                    raise SystemExit(f"append to {stream} answered {r.status}: {await r.text()}")

        async def writer() -> None:
            for i in counter:
                delay = started + i / rate - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                await post(f"load-{i % streams}", [event(i)])

        async def prober() -> int:
            n = 0
            while time.monotonic() - started < seconds:
                written[n] = time.time()
                await post("probe", [{**event(n), "eventType": "Probe"}])
                n += 1
                await asyncio.sleep(max(0.0, started + n * PROBE_EVERY - time.monotonic()))
            return n

        probes, *_ = await asyncio.gather(prober(), *(writer() for _ in range(connections)))
        return total, probes or 0, total / (time.monotonic() - started)


def lag(
    folder: Path, rate: float, seconds: float, streams: int, parallel: int
) -> tuple[list[float], list[float], float]:
    primary, secondary = NodeProcess(folder / "p", "p"), NodeProcess(folder / "s", "s")
    checkpoint = folder / "m" / "checkpoint.json"
    paths = MirrorPaths.of(checkpoint)
    mirror = MirrorProcess(
        primary.url, secondary.url, checkpoint, "--status-every", "0", "--parallel", str(parallel)
    )
    arrivals: dict[int, float] = {}  # probes on the secondary (through the mirror)
    direct: dict[int, float] = {}  # probes on the primary: one node's own subscription, the floor
    written: dict[int, float] = {}
    stop = threading.Event()

    def subscriber(url: str, into: dict[int, float]) -> None:
        try:
            with (
                httpx.Client(base_url=url, auth=("admin", "changeit"), timeout=None) as c,
                c.stream("GET", "/subscriptions/streams/probe") as r,
            ):
                for line in r.iter_lines():
                    if line.startswith("data:") and '"eventType": "Probe"' in line:
                        body = json.loads(line[5:])
                        into[body["eventNumber"]] = time.time()
                    if stop.is_set():
                        return
        except httpx.HTTPError:
            if not stop.is_set():
                raise

    try:
        wait_until(lambda: (s := read_status(paths.status)) and s["caughtUp"], 60, "the mirror to start")
        for url, into in ((secondary.url, arrivals), (primary.url, direct)):
            threading.Thread(target=subscriber, args=(url, into), daemon=True).start()
        _, probes, achieved = asyncio.run(paced_writer(primary.url, rate, seconds, streams, written))
        wait_until(lambda: len(arrivals) >= probes and len(direct) >= probes, 60, "every probe")
        stop.set()
        return (
            [arrivals[n] - written[n] for n in sorted(written)],
            [direct[n] - written[n] for n in sorted(written)],
            achieved,
        )
    finally:
        mirror.terminate()
        mirror.close()
        primary.close()
        secondary.close()


def percentiles(values: list[float]) -> tuple[float, float, float]:
    """p50, p99 and max, in ms."""
    values = sorted(values)
    return (
        values[len(values) // 2] * 1000,
        values[min(len(values) - 1, int(len(values) * 0.99))] * 1000,
        values[-1] * 1000,
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--streams", type=int, default=50)
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--parallel", default="1,8", help="the mirror's --parallel values to measure, comma-separated"
    )
    args = parser.parse_args()
    modes = [int(p) for p in args.parallel.split(",")]
    results: dict[int, dict[str, list[float]]] = {m: collections.defaultdict(list) for m in modes}
    cpus: dict[int, list[dict[str, float]]] = {m: [] for m in modes}
    for run in range(args.runs):
        with tempfile.TemporaryDirectory() as folder:
            primary = NodeProcess(Path(folder) / "p", "p")
            try:
                fill(primary, args.events, args.streams)
                for mode in modes:
                    with tempfile.TemporaryDirectory(dir=folder) as sub:
                        rate, cpu = catch_up(Path(sub), primary, args.events * 2, mode)
                    results[mode]["rate"].append(rate)
                    cpus[mode].append(cpu)
            finally:
                primary.close()
        for mode in modes:
            with tempfile.TemporaryDirectory() as folder:
                lags, floor, got = lag(Path(folder), args.rate, args.seconds, args.streams, mode)
            r = results[mode]
            for key, value in zip(("p50", "p99", "max"), percentiles(lags), strict=True):
                r[key].append(value)
            for key, value in zip(("d50", "d99"), percentiles(floor)[:2], strict=True):
                r[key].append(value)
            r["achieved"].append(got)
            cpu = cpus[mode][-1]
            print(
                f"run {run + 1}, --parallel {mode}: catch-up {r['rate'][-1]:.0f} events/s (CPU: "
                + ", ".join(f"{k} {v:.0%}" for k, v in cpu.items())
                + f"); load {load_average()}; at {got:.0f} events/s written, "
                f"lag p50 {r['p50'][-1]:.1f} ms, p99 {r['p99'][-1]:.1f} ms, max {r['max'][-1]:.1f} ms "
                f"(the primary's own subscription: p50 {r['d50'][-1]:.1f} ms, p99 {r['d99'][-1]:.1f} ms)",
                flush=True,
            )
    for mode in modes:
        r = results[mode]
        print(
            f"median of {args.runs}, --parallel {mode}: catch-up {statistics.median(r['rate']):.0f} events/s "
            f"({args.events * 2} events: half one per append over {args.streams} streams, half in runs of 10); "
            f"lag at {statistics.median(r['achieved']):.0f} events/s: p50 {statistics.median(r['p50']):.1f} ms, "
            f"p99 {statistics.median(r['p99']):.1f} ms, max {statistics.median(r['max']):.1f} ms "
            f"(the primary's own subscription: p50 {statistics.median(r['d50']):.1f} ms, "
            f"p99 {statistics.median(r['d99']):.1f} ms)"
        )


if __name__ == "__main__":
    main()
