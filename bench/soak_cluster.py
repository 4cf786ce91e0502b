"""Cluster fault soaks on real processes (separate node processes, TLS), two modes.

Invariant soak (the default): tests/cluster/fault_soak.py's seeded schedule (leader kill -9 and
restart, leader SIGSTOP then SIGCONT, leader and follower killed together, follower kill -9, resign)
with two writers and a reader, then heal and tests/cluster/invariants.py's checks; ``--runs`` times,
each on a new cluster with seed ``--seed + run``. One summary line per run, the report (schedule,
violations, node log lines) of every run with a violation, then the totals. Exit code 1 when any run
had a violation or a harness error. Folders of clean runs are deleted, the others kept.

    .venv/bin/python bench/soak_cluster.py --runs 20 --seconds 90 --seed N [--keep DIR]
        [--writers 2] [--replicas 0] [--pause 5,20] [--down 1,4]

Replay one run: ``--runs 1 --seed <its seed>`` (the same faults in the same order; the timing of
the writes around them differs) or, bounded, ``EVDB_FAULT_SEED=<seed> pytest
tests/cluster/test_fault_schedule.py``.

Scavenge soak (``--scavenges``): the cluster issue's fault schedule (kill -9 and restart, pause,
resign) on a real 3-node cluster plus a read-only replica, with scavenges started on random nodes
and auto-scavenge cycles running while the faults run, and a client appending all along.

    .venv/bin/python bench/soak_cluster.py --scavenges --seconds 120 [--seed N] [--keep DIR]
        [--schedule "*/20 * * * * *"] [--no-auto-scavenge]

Besides the appends, some streams are written and hard-deleted before the schedule so every
scavenge has work. Auto-scavenge runs on a fast six-field schedule (AutoScavengeScheduleSeconds,
AutoScavengeAssessIntervalMs 500): each cycle scavenges the replica and followers one at a time, then
the leader resigns and is scavenged; the faults hit it like everything else. When the faults stop the
schedule is moved a year away and the cycle under way (if any) is let finish.

Afterwards: every node holds the same events in the same order, no acknowledged event is missing,
the deleted streams stay deleted (410) on every node, every scavenge started by hand ended Success,
Stopped or Interrupted (a kill) — never Errored (one that ran while its node knew no leader has no
history, which is written best effort: its node's log must say so); the auto-scavenge cycles that
started all completed, no node scavenge of theirs ended Errored, and no two of their node scavenges
overlapped in time (the start and completion events in each node's ``$scavenges-{id}`` stream). Prints the faults, the
scavenges, the cycles and their results. Exit code 1 when a check fails.
(tests/cluster/test_fault_schedule.py is the CI invariant soak; tests/autoscavenge/test_cluster.py
checks single cycles without faults.)
"""

from __future__ import annotations

import argparse
import collections
import datetime
import itertools
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "cluster"))

from fault_soak import SoakOptions, run_soak, stop_cluster

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

    def entries(self, name: str, stream: str) -> list[dict]:
        """A stream's events (data decoded), oldest first; [] when it does not exist."""
        out: list[dict] = []
        with self.client(name) as c:
            while True:
                r = c.get(
                    f"/streams/{stream}/{len(out)}/forward/500?embed=body",
                    headers={"Accept": "application/json"},
                )
                if r.status_code in (404, 410):
                    return out
                r.raise_for_status()
                page = sorted(r.json()["entries"], key=lambda e: e["eventNumber"])
                for e in page:
                    data = e.get("data")
                    e["data"] = json.loads(data) if isinstance(data, str) and data else data
                out += page
                if len(page) < 500:
                    return out

    def wait_in_step(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            writers = {r["name"]: r.get("writer", -1) for r in self.local.status() if r["state"] != "Down"}
            if len(set(writers.values())) == 1 and -1 not in writers.values():
                return
            time.sleep(0.2)
        raise AssertionError(f"the nodes did not reach the same position: {self.local.status()}")


#: auto-scavenge on a fast schedule (docs/operations/auto-scavenge.md); the node timeout bounds a cycle
#: whose node stays away, well above the faults' 1-4 s
AUTO_SCAVENGE = {
    "AutoScavengeScheduleSeconds": True,
    "AutoScavengeAssessIntervalMs": 500,
    "AutoScavengeNodeTimeoutSec": 30,
}
FAR_AWAY = "0 0 1 1 *"  # once a year: no new cycle while the checks run


def _when(entry: dict) -> float:
    return datetime.datetime.fromisoformat(entry["updated"].replace("Z", "+00:00")).timestamp()


def auto_scavenge_report(soak: Soak, reader: str) -> dict:
    """The cycles in ``$auto-scavenges`` and, for each node scavenge they started, its run from the
    node's ``$scavenges-{id}`` stream: node, started, completed, result (a start or completion the node
    could not write, in an election say, is taken from the leader's ``$node-scavenge-*`` events)."""
    cycles: dict[str, dict] = {}
    seen: dict[str, list] = {}  # scavenge id -> [leader saw it start, leader saw it end, its result]
    current = None
    for e in soak.entries(reader, "$auto-scavenges"):
        d = e["data"] if isinstance(e["data"], dict) else {}
        kind = e["eventType"]
        if kind == "$cluster-scavenge-started":
            current = d["clusterScavengeId"]
            cycles[current] = {"started": _when(e), "completed": None, "nodes": [], "results": []}
        elif current is None:
            continue
        elif kind == "$node-scavenge-started":
            cycles[current]["nodes"].append(d["scavengeId"])
            seen[d["scavengeId"]] = [_when(e), None, None]
        elif kind == "$node-scavenge-completed":
            cycles[current]["results"].append(d.get("result"))
            if cycles[current]["nodes"]:  # it completes the node scavenge started last
                seen[cycles[current]["nodes"][-1]][1:] = [_when(e), d.get("result")]
        elif kind == "$cluster-scavenge-completed" and d.get("clusterScavengeId") == current:
            cycles[current]["completed"] = _when(e)
    runs = []
    for cycle_id, cycle in cycles.items():
        for scavenge_id in cycle["nodes"]:
            started = completed = None
            node, result = "?", None
            for e in soak.entries(reader, f"$scavenges-{scavenge_id}"):
                d = e["data"] if isinstance(e["data"], dict) else {}
                if e["eventType"] == "$scavengeStarted":
                    started, node = _when(e), d.get("nodeEndpoint", "?")
                elif e["eventType"] == "$scavengeCompleted":
                    completed, result = _when(e), d.get("result")
            # the node's history is written best effort: without it, the times the leader recorded
            started = started if started is not None else seen[scavenge_id][0]
            completed = completed if completed is not None else seen[scavenge_id][1]
            result = result if result is not None else f"{seen[scavenge_id][2]} (leader's record)"
            runs.append({"cycle": cycle_id, "scavenge": scavenge_id, "node": node, "started": started,
                         "completed": completed, "result": result})  # fmt: skip
    return {"cycles": cycles, "runs": runs}


def history_not_written(root: Path, node: str, scavenge_id: str) -> bool:
    """The scavenge history is written best effort (evdb/scavenge/events.py, as KurrentDB's): a node
    that ran a scavenge while no leader was known logs that its completion could not be written."""
    line = f"could not write $scavengeCompleted to $scavenges-{scavenge_id}"
    return any(line in f.read_text(errors="replace") for f in (root / node / "log").rglob("*.json"))


def overlaps(runs: list[dict]) -> list[str]:
    """Pairs of node scavenges whose [start, completion] intervals overlap (a run never completed
    counts as running until now)."""
    timed = sorted((r for r in runs if r["started"] is not None), key=lambda r: r["started"])
    out = []
    for a, b in itertools.combinations(timed, 2):
        a_end = a["completed"] if a["completed"] is not None else time.time()
        if b["started"] < a_end:
            out.append(f"{a['node']} {a['scavenge']} and {b['node']} {b['scavenge']}")
    return out


def run_scavenge_soak(root: str, seconds: float, seed: int, schedule: str | None = "*/20 * * * * *") -> dict:
    rng = random.Random(seed)
    local = LocalCluster(Path(root))
    extra = AUTO_SCAVENGE if schedule else {}
    local.up(nodes=3, replicas=1, chunk_size="256KiB", extra=extra, timeout=90, log=lambda *_: None)
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
        if schedule:
            with soak.client(leader) as c:
                r = c.post("/auto-scavenge/configure", json={"schedule": schedule})
            assert (r.status_code, r.json()) == (200, {}), r.text

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
        leader = soak.leader(90)
        auto_problems: list[str] = []
        if schedule:
            # no new cycle from now on; the one under way (if any) finishes
            deadline = time.monotonic() + 60
            while True:
                try:
                    with soak.client(soak.leader(90)) as c:
                        r = c.post("/auto-scavenge/configure", json={"schedule": FAR_AWAY})
                    if r.status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert time.monotonic() < deadline, "auto-scavenge could not be reconfigured"
                time.sleep(0.5)
            deadline = time.monotonic() + 180
            while True:
                try:
                    with soak.client(soak.leader(90)) as c:
                        state = c.get("/auto-scavenge/status").json()["state"]
                except (httpx.HTTPError, ValueError, KeyError):
                    state = "unknown"
                if state in ("Waiting", "NotConfigured", "Paused"):
                    break
                if time.monotonic() > deadline:
                    auto_problems.append(f"the last auto-scavenge cycle did not finish in 180 s ({state})")
                    break
                time.sleep(0.5)
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
                if result is None and history_not_written(Path(root), node, scavenge_id):
                    result = "not in the history (no leader at its end; the node logged it)"
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
        fine = ("Success", "Stopped", "Interrupted")
        bad = {k: v for k, v in results.items() if not v[1].startswith(fine)}
        if bad:
            problems.append(f"scavenges that did not end well: {bad}")
        auto: dict = {"cycles": {}, "runs": []}
        if schedule:
            auto = auto_scavenge_report(soak, soak.leader(90))
            problems += auto_problems
            unfinished = [i for i, c in auto["cycles"].items() if c["completed"] is None]
            if unfinished:
                problems.append(f"auto-scavenge cycles that never completed: {unfinished}")
            if not auto["cycles"]:
                problems.append("no auto-scavenge cycle started")
            errored = [r for r in auto["runs"] if r["result"] == "Errored"]
            errored += [
                {"cycle": i, "result": "Errored"}
                for i, c in auto["cycles"].items()
                if "Errored" in c["results"]
            ]
            if errored:
                problems.append(f"auto-scavenge node scavenges that ended Errored: {errored}")
            overlapping = overlaps(auto["runs"])
            if overlapping:
                problems.append(f"auto-scavenge node scavenges that overlapped: {overlapping}")
        return {
            "faults": faults,
            "acknowledged": len(acknowledged),
            "scavenges": {k: v for k, v in results.items()},
            "auto": auto,
            "problems": problems,
        }
    finally:
        stop_cluster(local)


def invariant_soak(args: argparse.Namespace) -> int:
    root = Path(args.keep or tempfile.mkdtemp(prefix="evdb-soak-cluster-"))
    root.mkdir(parents=True, exist_ok=True)
    print(f"{args.runs} runs of {args.seconds:.0f} s from seed {args.seed}, folder {root}", flush=True)
    totals: collections.Counter = collections.Counter()
    kinds: collections.Counter = collections.Counter()
    failed: list[int] = []
    for k in range(args.runs):
        seed = args.seed + k
        options = SoakOptions(
            seconds=args.seconds,
            seed=seed,
            writers=args.writers,
            replicas=args.replicas,
            pause=args.pause,
            down=args.down,
            settle=(0.5, 2.0),
            settle_timeout=120.0,
        )
        folder = root / f"run-{k + 1:02d}-seed-{seed}"
        result = run_soak(folder, options, log=lambda line: None)
        bad = bool(result.violations or result.errors)
        print(f"run {k + 1}/{args.runs} {'FAIL' if bad else 'ok  '} {result.summary_line()}", flush=True)
        if bad:
            failed.append(seed)
            print(result.report(limit=args.limit), flush=True)
        elif not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
        totals.update(
            runs=1,
            faults=result.faults,
            acknowledged=result.count("acked"),
            events=sum(len(a.event_ids) for a in result.appends if a.outcome == "acked"),
            unknown=result.count("unknown"),
            reads=len(result.reads),
            violations=len(result.violations),
            errors=len(result.errors),
        )
        kinds.update(line.split()[1] for line in result.schedule)
        for v in result.violations:
            kinds[f"violation {v.invariant}"] += 1
    print(
        f"totals: {totals['runs']} runs, {len(failed)} with violations or errors"
        + (f" (seeds {', '.join(map(str, failed))})" if failed else "")
        + f", {totals['violations']} violations, {totals['errors']} harness errors, {totals['faults']} faults, "
        f"{totals['acknowledged']} acknowledged appends ({totals['events']} events), "
        f"{totals['unknown']} unknown, {totals['reads']} reads sampled"
    )
    print("by kind: " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())))
    return 1 if failed else 0


def _range(text: str) -> tuple[float, float]:
    low, _, high = text.partition(",")
    values = (float(low), float(high or low))
    if not 0 <= values[0] <= values[1]:
        raise argparse.ArgumentTypeError(f"'{text}' is not a range 'low,high' of seconds")
    return values


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--seconds",
        type=float,
        default=None,
        help="faults are started for this long (90; 120 with --scavenges)",
    )
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--keep", default=None, help="folder to work in (kept); default a temporary one")
    parser.add_argument("--runs", type=int, default=1, help="invariant soak: runs, each on a new cluster")
    parser.add_argument("--writers", type=int, default=2, help="invariant soak: writer threads")
    parser.add_argument("--replicas", type=int, default=0, help="invariant soak: read-only replicas")
    parser.add_argument(
        "--pause", type=_range, default=(5.0, 20.0), help="invariant soak: SIGSTOP seconds low,high"
    )
    parser.add_argument(
        "--down", type=_range, default=(1.0, 4.0), help="invariant soak: seconds a killed node stays down"
    )
    parser.add_argument(
        "--limit", type=int, default=10, help="invariant soak: violations shown per invariant"
    )
    parser.add_argument("--scavenges", action="store_true", help="the scavenge soak instead")
    parser.add_argument("--schedule", default="*/20 * * * * *", help="auto-scavenge CRON (six fields)")
    parser.add_argument("--no-auto-scavenge", action="store_true")
    args = parser.parse_args()
    if args.runs < 1 or args.writers < 1 or args.replicas < 0:
        parser.error("--runs and --writers must be 1 or more, --replicas 0 or more")
    if not args.scavenges:
        args.seconds = 90.0 if args.seconds is None else args.seconds
        return invariant_soak(args)
    seconds = 120.0 if args.seconds is None else args.seconds
    root = args.keep or tempfile.mkdtemp(prefix="evdb-soak-cluster-")
    print(f"seed {args.seed}, folder {root}", flush=True)
    result = run_scavenge_soak(root, seconds, args.seed, None if args.no_auto_scavenge else args.schedule)
    print(f"{len(result['faults'])} faults: {', '.join(result['faults'])}")
    print(f"{result['acknowledged']} acknowledged appends")
    for scavenge_id, (node, outcome) in result["scavenges"].items():
        print(f"scavenge {scavenge_id} on {node}: {outcome}")
    cycles, runs = result["auto"]["cycles"], result["auto"]["runs"]
    done = [c for c in cycles.values() if c["completed"] is not None]
    print(f"auto-scavenge: {len(cycles)} cycles started, {len(done)} completed, {len(runs)} node scavenges")
    for cycle_id, cycle in cycles.items():
        took = f"{cycle['completed'] - cycle['started']:.1f} s" if cycle["completed"] else "not completed"
        print(f"  cycle {cycle_id}: {took}, node results {cycle['results']}")
    for r in sorted(runs, key=lambda r: r["started"] or 0):
        span = f"{r['completed'] - r['started']:.2f} s" if r["started"] and r["completed"] else "-"
        print(f"    {r['node']} {r['scavenge']}: {r['result']} ({span})")
    for problem in result["problems"]:
        print(f"PROBLEM: {problem}")
    return 1 if result["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
