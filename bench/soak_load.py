"""Load soak: N writers and M readers over HTTP on loopback while a scavenge and a backup run.

    .venv/bin/python bench/soak_load.py --writers 16 --readers 8 --seconds 60 [--keep DIR]

One in-process node (plain HTTP on 127.0.0.1, a free port). Each writer appends one event at a time
to its own streams and records what was acknowledged (201); each reader reads streams and $all.
Part way through, a scavenge starts (POST /admin/scavenge: there are deleted streams to remove),
then a backup (POST /admin/backup with stopScavenge, the documented way to back up while a scavenge
runs: the backup stops it and starts it again after). At the end every acknowledged event is read
back, the backup is verified, and the latencies (p50/p95/p99/max, ms) are printed as JSON.

Any answer other than 201 for an append or 200 for a read is counted as an error; the only
documented ones under load would be 429 (HttpMaxConcurrentRequestsPerClient, not reached with
these counts) and 503 (database reopening after a truncation, not part of this run).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx

ADMIN = ("admin", "changeit")


def _percentiles(samples: list[float]) -> dict[str, float]:
    if not samples:
        return {}
    ordered = sorted(samples)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 2)

    return {
        "count": len(ordered),
        "p50_ms": at(0.50),
        "p95_ms": at(0.95),
        "p99_ms": at(0.99),
        "max_ms": round(ordered[-1] * 1000, 2),
        "mean_ms": round(statistics.fmean(ordered) * 1000, 2),
    }


async def _wait_json(client: httpx.AsyncClient, path: str, done, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = await client.get(path, headers={"Accept": "application/json"})
        body = r.json() if r.status_code == 200 else {}
        if done(body):
            return body
        await asyncio.sleep(0.05)
    raise TimeoutError(f"{path} did not finish in {timeout} s")


async def run_load(root: str, *, writers: int, readers: int, seconds: float, seed: int = 1) -> dict:
    from evdb.backup import verify_backup
    from evdb.node import Node
    from evdb.options import load_options

    options = load_options(
        [
            "--db", os.path.join(root, "db"), "--log", os.path.join(root, "log"), "--insecure",
            "--http-port", "0", "--chunk-size", str(256 * 1024), "--max-mem-table-size", "2000",
            "--stats-period-sec", "0",
        ],
        {},
    )  # fmt: skip
    rng = random.Random(seed)
    acked: dict[str, list[str]] = {}
    latencies: dict[str, list[float]] = {"append": [], "read stream": [], "read $all": []}
    errors: dict[str, int] = {}
    stop = asyncio.Event()
    outcome: dict = {}

    def error(kind: str) -> None:
        errors[kind] = errors.get(kind, 0) + 1

    async with Node(options, name="load") as node:
        url = node.http_url
        async with httpx.AsyncClient(base_url=url, auth=ADMIN, timeout=60) as admin:
            # something for the scavenge to remove
            for i in range(20):
                events = [{"eventId": str(uuid.uuid4()), "eventType": "Old", "data": {"pad": "x" * 2000}}
                          for _ in range(20)]  # fmt: skip
                r = await admin.post(f"/streams/old-{i}", json=events,
                                     headers={"Content-Type": "application/vnd.eventstore.events+json"})  # fmt: skip
                assert r.status_code == 201, r.text
                r = await admin.delete(f"/streams/old-{i}", headers={"Kurrent-HardDelete": "true"})
                assert r.status_code == 204, r.text

            async def writer(w: int) -> None:
                local = random.Random(seed * 1000 + w)
                async with httpx.AsyncClient(base_url=url, auth=ADMIN, timeout=60) as c:
                    while not stop.is_set():
                        stream = f"load-w{w}-{local.randrange(4)}"
                        eid = str(uuid.uuid4())
                        started = time.perf_counter()
                        r = await c.post(
                            f"/streams/{stream}",
                            json={"w": w, "pad": "y" * local.randrange(50, 1500)},
                            headers={"Kurrent-EventType": "Load", "Kurrent-EventId": eid},
                        )
                        latencies["append"].append(time.perf_counter() - started)
                        if r.status_code == 201:
                            acked.setdefault(stream, []).append(eid)
                        else:
                            error(f"append {r.status_code}")

            async def reader(n: int) -> None:
                local = random.Random(seed * 7000 + n)
                async with httpx.AsyncClient(base_url=url, auth=ADMIN, timeout=60) as c:
                    while not stop.is_set():
                        if local.random() < 0.8 and acked:
                            stream = local.choice(list(acked))
                            path, kind = f"/streams/{stream}/0/forward/20?embed=body", "read stream"
                        else:
                            path, kind = "/streams/%24all/head/backward/20?embed=body", "read $all"
                        started = time.perf_counter()
                        r = await c.get(path, headers={"Accept": "application/json"})
                        latencies[kind].append(time.perf_counter() - started)
                        if r.status_code != 200:
                            error(f"{kind} {r.status_code}")

            async def maintenance() -> None:
                await asyncio.sleep(seconds * 0.2)
                started = time.perf_counter()
                r = await admin.post("/admin/scavenge?threads=2")
                outcome["scavenge start"] = r.status_code
                dest = os.path.join(root, "backup")
                r = await admin.post("/admin/backup", json={"to": dest, "stopScavenge": True})
                outcome["backup start"] = r.status_code
                body = await _wait_json(admin, "/admin/backup/current",
                                        lambda b: b.get("state") in ("completed", "failed"), 300)  # fmt: skip
                outcome["backup"] = {k: body.get(k) for k in ("state", "error")}
                outcome["backup seconds"] = round(time.perf_counter() - started, 2)
                report = await asyncio.to_thread(verify_backup, dest)
                outcome["backup verifies"] = report.ok
                outcome["backup problems"] = report.problems[:3]

            tasks = [asyncio.create_task(writer(w)) for w in range(writers)]
            tasks += [asyncio.create_task(reader(n)) for n in range(readers)]
            chores = asyncio.create_task(maintenance())
            await asyncio.sleep(seconds)
            await chores  # the backup finishes under load if it has not yet
            stop.set()
            await asyncio.gather(*tasks)
            # the scavenge (restarted by the backup) runs to the end
            last = await _wait_json(
                admin, "/admin/scavenge/current", lambda b: b.get("scavengeId") == "", 300
            )
            r = await admin.get("/admin/scavenge/last", headers={"Accept": "application/json"})
            outcome["scavenge"] = r.json().get("scavengeResult") if r.status_code == 200 else r.status_code
            del last
            # every acknowledged event is there, in order
            lost = 0
            for stream, ids in acked.items():
                r = await admin.get(f"/streams/{stream}/0/forward/4096?embed=body",
                                    headers={"Accept": "application/json"})  # fmt: skip
                got = [e["eventId"] for e in reversed(r.json()["entries"])] if r.status_code == 200 else []
                lost += len(set(ids) - set(got))
                if got != ids:
                    error("order or duplicate")
            for i in range(20):
                r = await admin.get(f"/streams/old-{i}", headers={"Accept": "application/json"})
                if r.status_code != 410:
                    error(f"deleted stream answered {r.status_code}")
    rng.random()
    return {
        "writers": writers,
        "readers": readers,
        "seconds": seconds,
        "acknowledged": sum(len(v) for v in acked.values()),
        "lost": lost,
        "errors": errors,
        "latency": {k: _percentiles(v) for k, v in latencies.items()},
        **outcome,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writers", type=int, default=16)
    parser.add_argument("--readers", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", default=None)
    args = parser.parse_args()
    if not (1 <= args.writers <= 256 and 0 <= args.readers <= 256 and 1 <= args.seconds <= 3600):
        parser.error("writers 1..256, readers 0..256, seconds 1..3600")
    root = args.keep or tempfile.mkdtemp(prefix="evdb-soak-load-")
    result = asyncio.run(
        run_load(root, writers=args.writers, readers=args.readers, seconds=args.seconds, seed=args.seed)
    )
    print(json.dumps(result, indent=2))
    ok = not result["lost"] and not result["errors"] and result.get("backup verifies")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    sys.exit(main())
