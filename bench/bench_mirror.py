"""`evdb mirror`: catch-up throughput (events/s) and lag under a steady write load.

    .venv/bin/python bench/bench_mirror.py [--events 5000] [--streams 50] [--rate 1000] [--seconds 20] [--runs 3]

Two real nodes (`evdb node --insecure --mem-db`, separate processes) and `evdb mirror` between them.

1. Catch-up: the primary holds `--events` events written one per append, round-robin over `--streams`
   streams (the worst case: every event is its own append on the secondary), and the same number
   again written 10 per append to one stream per batch (runs of 10). A mirror starts with no
   checkpoint; events/s = events copied / time from its start line until it reports caught up.
   The CPU of the mirror and of both nodes over the catch-up is printed beside it.
2. Lag: the mirror is live; a writer appends `--rate` events/s for `--seconds` seconds (one event per
   append, round-robin over the streams, paced from 8 aiohttp connections: event i is sent at
   start + i / rate) and every 0.2 s a probe event to `probe`, stamped with its
   write time; a subscriber on the secondary (`/subscriptions/streams/probe`) records when each probe
   arrives. Lag = arrival - write time (same machine clock), p50/p99/max.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import aiohttp
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "mirror"))
from mirror_helpers import MirrorProcess, NodeProcess, wait_until

from evdb.mirror.state import MirrorPaths, read_status

sys.path.insert(0, str(Path(__file__).resolve().parent))
from netbench import BASIC, cpu_seconds, load_average

EVENTS_JSON = {"Content-Type": "application/vnd.kurrent.events+json"}


def event(i: int, **extra) -> dict:
    return {"eventId": str(uuid.uuid4()), "eventType": "Bench", "data": {"i": i, "pad": "x" * 100, **extra}}


def fill(node: NodeProcess, events: int, streams: int) -> None:
    with httpx.Client(base_url=node.url, auth=("admin", "changeit"), timeout=30) as c:
        for i in range(events):
            c.post(f"/streams/single-{i % streams}", json=[event(i)], headers=EVENTS_JSON).raise_for_status()
        for i in range(0, events, 10):
            batch = [event(i + k) for k in range(10)]
            c.post(f"/streams/runs-{i // 10 % streams}", json=batch, headers=EVENTS_JSON).raise_for_status()


def catch_up(folder: Path, events: int, streams: int) -> tuple[float, dict[str, float]]:
    primary, secondary = NodeProcess(folder / "p", "p"), NodeProcess(folder / "s", "s")
    try:
        fill(primary, events, streams)
        head = primary.read_all()[-1]["position"]
        checkpoint = folder / "m" / "checkpoint.json"
        paths = MirrorPaths.of(checkpoint)
        mirror = MirrorProcess(primary.url, secondary.url, checkpoint, "--status-every", "0")
        try:
            mirror.wait_for_line("Mirroring ", 30)
            started = time.monotonic()
            pids = {"mirror": mirror.proc.pid, "primary": primary.proc.pid, "secondary": secondary.proc.pid}
            before = {k: cpu_seconds(v) for k, v in pids.items()}
            status = wait_until(
                lambda: (s := read_status(paths.status)) and s["position"] >= head and s,
                600,
                "the mirror to catch up",
                interval=0.02,
            )
            elapsed = time.monotonic() - started
            cpu = {k: (cpu_seconds(v) - before[k]) / elapsed for k, v in pids.items()}
            assert mirror.terminate() == 0
        finally:
            mirror.close()
        return status["eventsCopied"] / elapsed, cpu
    finally:
        primary.close()
        secondary.close()


async def paced_writer(
    url: str, rate: float, seconds: float, streams: int, written: dict[int, float], connections: int = 8
) -> tuple[int, int, float]:
    """Appends one event per request at ``rate`` events/s for ``seconds`` (round-robin over the streams,
    from ``connections`` connections: request i is sent at start + i / rate, or as soon as a connection
    is free), and a probe event to `probe` every 0.2 s, its write time kept in ``written``. Returns
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
                await asyncio.sleep(max(0.0, started + n * 0.2 - time.monotonic()))
            return n

        probes, *_ = await asyncio.gather(prober(), *(writer() for _ in range(connections)))
        return total, probes or 0, total / (time.monotonic() - started)


def lag(folder: Path, rate: float, seconds: float, streams: int) -> tuple[list[float], float]:
    primary, secondary = NodeProcess(folder / "p", "p"), NodeProcess(folder / "s", "s")
    checkpoint = folder / "m" / "checkpoint.json"
    paths = MirrorPaths.of(checkpoint)
    mirror = MirrorProcess(primary.url, secondary.url, checkpoint, "--status-every", "0")
    arrivals: dict[int, float] = {}
    written: dict[int, float] = {}
    stop = threading.Event()

    def subscriber() -> None:
        try:
            with (
                httpx.Client(base_url=secondary.url, auth=("admin", "changeit"), timeout=None) as c,
                c.stream("GET", "/subscriptions/streams/probe") as r,
            ):
                for line in r.iter_lines():
                    if line.startswith("data:") and '"eventType": "Probe"' in line:
                        body = json.loads(line[5:])
                        arrivals[body["eventNumber"]] = time.time()
                    if stop.is_set():
                        return
        except httpx.HTTPError:
            if not stop.is_set():
                raise

    try:
        wait_until(lambda: (s := read_status(paths.status)) and s["caughtUp"], 60, "the mirror to start")
        reader = threading.Thread(target=subscriber, daemon=True)
        reader.start()
        _, probes, achieved = asyncio.run(paced_writer(primary.url, rate, seconds, streams, written))
        wait_until(lambda: len(arrivals) >= probes, 60, "every probe on the secondary")
        stop.set()
        return [arrivals[n] - written[n] for n in sorted(written)], achieved
    finally:
        mirror.terminate()
        mirror.close()
        primary.close()
        secondary.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--streams", type=int, default=50)
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    rates, p50s, p99s, maxes, achieved = [], [], [], [], []
    for run in range(args.runs):
        with tempfile.TemporaryDirectory() as folder:
            rate, cpu = catch_up(Path(folder), args.events, args.streams)
            rates.append(rate)
        with tempfile.TemporaryDirectory() as folder:
            lags, got = lag(Path(folder), args.rate, args.seconds, args.streams)
        lags.sort()
        p50s.append(lags[len(lags) // 2] * 1000)
        p99s.append(lags[min(len(lags) - 1, int(len(lags) * 0.99))] * 1000)
        maxes.append(lags[-1] * 1000)
        achieved.append(got)
        print(
            f"run {run + 1}: catch-up {rates[-1]:.0f} events/s (CPU: "
            + ", ".join(f"{k} {v:.0%}" for k, v in cpu.items())
            + f"); load {load_average()}; at {got:.0f} events/s written, "
            f"lag p50 {p50s[-1]:.0f} ms, p99 {p99s[-1]:.0f} ms, max {maxes[-1]:.0f} ms",
            flush=True,
        )
    print(
        f"median of {args.runs}: catch-up {statistics.median(rates):.0f} events/s "
        f"({args.events * 2} events: half one per append over {args.streams} streams, half in runs of 10); "
        f"lag at {statistics.median(achieved):.0f} events/s: p50 {statistics.median(p50s):.0f} ms, "
        f"p99 {statistics.median(p99s):.0f} ms, max {statistics.median(maxes):.0f} ms"
    )


if __name__ == "__main__":
    main()
