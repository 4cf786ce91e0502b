"""How long a resign leaves a cluster without a leader and without writes (issue 32).

    .venv/bin/python bench/bench_resign.py [--resigns 4] [--nodes 3] [--data DIR]

Launches a local cluster (`evdb cluster up`: TLS, one process per node, this machine), then, per resign,
`POST /admin/node/resign` on the leader, polls every node's state until another node is Leader, and
appends to a probe stream on it until one append is answered 201. Prints the seconds from the resign's
answer to each, per resign and as medians. Each resign waits out the old leader's stay-out window
before the next (so every resign has every other node eligible).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import uuid

import httpx

from evdb.cluster.launcher import LocalCluster


def _first_write(cluster: LocalCluster, url: str) -> None:
    body = json.dumps([{"eventId": str(uuid.uuid4()), "eventType": "probe", "data": {}}])
    while True:
        try:
            with cluster.client(url, timeout=5) as client:
                answer = client.post(
                    "/streams/resign-probe",
                    content=body,
                    headers={"Content-Type": "application/vnd.eventstore.events+json"},
                )
            if answer.status_code == 201:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.02)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--resigns", type=int, default=4)
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--data", help="the cluster's folder (default: a new temporary one)")
    args = parser.parse_args()
    cluster = LocalCluster(args.data or tempfile.mkdtemp(prefix="evdb-bench-resign-"))
    cluster.up(nodes=args.nodes, log=lambda *_: None)
    leaders, writes = [], []
    try:
        for n in range(args.resigns):
            url = cluster.wait_for_leader(60)
            with cluster.client(url, timeout=10) as client:
                client.post("/admin/node/resign").raise_for_status()
            resigned = time.monotonic()
            while not any(r["state"] == "Leader" and r["url"] != url for r in cluster.status()):
                time.sleep(0.02)
            leaders.append(time.monotonic() - resigned)
            new = next(r["url"] for r in cluster.status() if r["state"] == "Leader")
            _first_write(cluster, new)
            writes.append(time.monotonic() - resigned)
            print(
                f"resign {n + 1}: new leader after {leaders[-1]:.2f} s, first write after {writes[-1]:.2f} s"
            )
            time.sleep(6)  # past the resigned node's stay-out (max(3 x GossipTimeoutMs, 5 s))
    finally:
        cluster.down(log=lambda *_: None)
    print(
        f"medians of {args.resigns}: new leader {statistics.median(leaders):.2f} s, "
        f"first write {statistics.median(writes):.2f} s"
    )


if __name__ == "__main__":
    main()
