"""Cluster fault soak with scavenges: the cluster issue's fault schedule (kill -9 and restart, pause,
resign) on a real 3-node cluster plus a read-only replica, with scavenges started on random nodes
while the faults run, and a client appending all along.

    .venv/bin/python bench/soak_cluster.py --seconds 120 [--seed N] [--keep DIR]

Besides the appends, some streams are written and hard-deleted before the schedule so every
scavenge has work. Afterwards: every node holds the same events in the same order, no acknowledged
event is missing, the deleted streams stay deleted (410) on every node, and every scavenge ended
Success, Stopped or Interrupted (a kill) — never Errored. Prints the faults, the scavenges and their
results. Exit code 1 when a check fails. (tests/cluster/test_fault_schedule.py is the CI version
without scavenges.)
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from evdb.cluster.launcher import LocalCluster


class Soak:
    def __init__(self, local: LocalCluster) -> None:
        self.local = local

    def nodes(self) -> list[dict]:
        return self.local.info()["nodes"]

    def url(self, name: str) -> str:
        return next(n["url"] for n in self.nodes() if n["name"] == name)

    def client(self, name: str) -> httpx.Client:
        return self.local.client(self.url(name), timeout=10.0)

    def states(self) -> dict[str, str]:
        return {r["name"]: r["state"] for r in self.local.status()}

    def leader(self, timeout: float = 60) -> str:
        url = self.local.wait_for_leader(timeout)
        return next(n["name"] for n in self.nodes() if n["url"] == url)

    def append(self, name: str, stream: str, event_id: uuid.UUID, data: dict | None = None) -> int:
        with self.client(name) as c:
            r = c.post(
                f"/streams/{stream}",
                json=data or {"n": 1},
                headers={"Kurrent-EventType": "Soak", "Kurrent-EventId": str(event_id)},
            )
            return r.status_code

    def read_ids(self, name: str, stream: str) -> list[str] | None:
        ids: list[str] = []
        with self.client(name) as c:
            while True:
                r = c.get(
                    f"/streams/{stream}/{len(ids)}/forward/500?embed=body",
                    headers={"Accept": "application/json"},
                )
                if r.status_code == 404:
                    return ids
                if r.status_code == 410:
                    return None
                r.raise_for_status()
                entries = sorted(r.json()["entries"], key=lambda e: e["eventNumber"])
                ids += [e["eventId"] for e in entries]
                if len(entries) < 500:
                    return ids

    def wait_in_step(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            writers = {r["name"]: r.get("writer", -1) for r in self.local.status() if r["state"] != "Down"}
            if len(set(writers.values())) == 1 and -1 not in writers.values():
                return
            time.sleep(0.2)
        raise AssertionError(f"the nodes did not reach the same position: {self.local.status()}")


def run(root: str, seconds: float, seed: int) -> dict:
    rng = random.Random(seed)
    local = LocalCluster(Path(root))
    local.up(nodes=3, replicas=1, chunk_size="256KiB", timeout=90, log=lambda *_: None)
    soak = Soak(local)
    names = [n["name"] for n in soak.nodes()]
    voters = [n for n in names if not n.startswith("replica")]
    acknowledged: list[str] = []
    stop = threading.Event()
    faults: list[str] = []
    scavenges: list[tuple[str, str]] = []  # (node, scavenge id)
    try:
        leader = soak.leader(90)
        for i in range(6):  # work for the scavenges: deleted streams in completed chunks
            for _ in range(40):
                assert soak.append(leader, f"doomed-{i}", uuid.uuid4(), {"pad": "x" * 3000}) == 201
            with soak.client(leader) as c:
                assert (
                    c.delete(f"/streams/doomed-{i}", headers={"Kurrent-HardDelete": "true"}).status_code
                    == 204
                )

        def append_forever() -> None:
            i = 0
            while not stop.is_set():
                event_id = uuid.uuid4()
                for attempt in range(200):
                    name = names[(i + attempt) % len(names)]
                    try:
                        if soak.append(name, "soak", event_id, {"i": i, "pad": "y" * 500}) == 201:
                            acknowledged.append(str(event_id))
                            break
                    except httpx.HTTPError:
                        pass
                    if stop.is_set():
                        return
                    time.sleep(0.05)
                i += 1

        thread = threading.Thread(target=append_forever)
        thread.start()
        try:
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                fault = rng.choice(["kill", "pause", "resign", "scavenge", "scavenge"])
                states = soak.states()
                if fault == "scavenge":
                    target = rng.choice([n for n, s in states.items() if s != "Down"])
                    try:
                        with soak.client(target) as c:
                            r = c.post("/admin/scavenge?threads=2", headers={"Accept": "application/json"})
                        if r.status_code == 200:
                            scavenges.append((target, r.json()["scavengeId"]))
                            faults.append(f"scavenge {target}")
                    except httpx.HTTPError:
                        pass
                elif fault == "resign":
                    leader = next((n for n, s in states.items() if s == "Leader"), None)
                    if leader:
                        with soak.client(leader) as c:
                            c.post("/admin/node/resign")
                        faults.append(f"resign {leader}")
                else:
                    victim = rng.choice(voters if rng.random() < 0.8 else names)
                    pid = next(n["pid"] for n in soak.nodes() if n["name"] == victim)
                    if fault == "kill":
                        os.kill(pid, signal.SIGKILL)
                        time.sleep(rng.uniform(1, 4))
                        local.start_node(victim)
                    else:
                        os.kill(pid, signal.SIGSTOP)
                        time.sleep(rng.uniform(1, 4))
                        os.kill(pid, signal.SIGCONT)
                    faults.append(f"{fault} {victim}")
                soak.leader(90)
                time.sleep(rng.uniform(0.5, 2))
        finally:
            stop.set()
            thread.join()
        soak.leader(90)
        soak.wait_in_step(90)
        # every scavenge has ended: Success, Stopped, or Interrupted by a kill
        results = {}
        for name in names:
            with soak.client(name) as c:
                deadline = time.monotonic() + 120
                while c.get("/admin/scavenge/current", headers={"Accept": "application/json"}).json()[
                    "scavengeId"
                ]:
                    assert time.monotonic() < deadline, f"a scavenge on {name} never finished"
                    time.sleep(0.2)
            for node, scavenge_id in scavenges:
                if node != name:
                    continue
                with soak.client(name) as c:
                    r = c.get(f"/streams/$scavenges-{scavenge_id}/head/backward/1?embed=body",
                              headers={"Accept": "application/json"})  # fmt: skip
                entries = r.json().get("entries", []) if r.status_code == 200 else []
                data = entries[0].get("data") if entries else None
                result = data.get("result") if isinstance(data, dict) else None
                results[scavenge_id] = (node, result or f"no completion event ({r.status_code})")
        problems = []
        held = {name: soak.read_ids(name, "soak") for name in names}
        reference = held[names[0]]
        for name, ids in held.items():
            if ids is None or len(ids) != len(set(ids)):
                problems.append(f"{name}: duplicates or deleted")
                continue
            lost = [i for i in acknowledged if i not in set(ids)]
            if lost:
                problems.append(f"{name}: {len(lost)} acknowledged events missing")
            if ids != reference:
                problems.append(f"{name} disagrees with {names[0]}")
            for i in range(6):
                if soak.read_ids(name, f"doomed-{i}") is not None:
                    problems.append(f"{name}: doomed-{i} is readable again")
        bad = {k: v for k, v in results.items() if v[1] not in ("Success", "Stopped", "Interrupted")}
        if bad:
            problems.append(f"scavenges that did not end well: {bad}")
        return {
            "faults": faults,
            "acknowledged": len(acknowledged),
            "scavenges": {k: v for k, v in results.items()},
            "problems": problems,
        }
    finally:
        local.down(timeout=15, log=lambda *_: None)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=120)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--keep", default=None)
    args = parser.parse_args()
    root = args.keep or tempfile.mkdtemp(prefix="evdb-soak-cluster-")
    print(f"seed {args.seed}, folder {root}", flush=True)
    result = run(root, args.seconds, args.seed)
    print(f"{len(result['faults'])} faults: {', '.join(result['faults'])}")
    print(f"{result['acknowledged']} acknowledged appends")
    for scavenge_id, (node, outcome) in result["scavenges"].items():
        print(f"scavenge {scavenge_id} on {node}: {outcome}")
    for problem in result["problems"]:
        print(f"PROBLEM: {problem}")
    return 1 if result["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
