"""The real-process fault soak: a seeded fault schedule on a new local cluster (separate node processes,
TLS), writers and a reader all along, then heal and check the invariants (invariants.py).

Used by tests/cluster/test_fault_schedule.py (bounded, CI) and bench/soak_cluster.py (many runs).

The schedule is drawn from the seed before the run (``plan``): the fault kinds, how long a node stays
down or paused, which follower is hit and the pause before the next fault; the first five faults are
the five kinds in a seeded order, so every run has each at least once. The nodes a fault hits are
resolved when it runs (the leader at that moment; followers in name order). Each fault waits,
bounded, for a settled cluster with a leader before it begins and ends with every node it touched
running again. The kinds:

- ``kill-leader``: SIGKILL the leader, restart it after ``hold`` seconds;
- ``pause-leader``: SIGSTOP the leader for ``hold`` seconds (the others elect another), then SIGCONT;
- ``kill-leader-and-follower``: SIGKILL the leader and a follower together (no majority is left),
  restart both after ``hold`` seconds, the follower ``gap`` seconds after the leader;
- ``kill-follower``: SIGKILL a follower (a read-only replica counts), restart it after ``hold``;
- ``resign``: ``POST /admin/node/resign`` on the leader.

Writers (``writers`` threads) append batches of 1-3 events with client event ids to shared streams
``soak-0..``, any expected version; a failed attempt (timeout, connection error, 5xx, 429) is retried
with the same event ids on the next node, so the server must answer retries idempotently. Each
append's answer is kept (invariants.AppendRecord). A reader thread reads random stream pages and the
head of ``$all`` on random nodes and keeps every event it was served with the node and the time.

Afterwards: heal (SIGCONT and restart anything not running), wait (bounded) until every node reports
the same writer checkpoint, read every node's ``$all`` and the clients' streams, run the checker.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import random
import signal
import ssl
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import httpx
from invariants import (
    ACKED,
    REFUSED,
    UNKNOWN,
    AppendRecord,
    LogEntry,
    ReadSample,
    Violation,
    check,
    summarize,
)

from evdb.cluster.launcher import ClusterLaunchError, LocalCluster

__all__ = ["FAULT_KINDS", "ClientLoad", "Fault", "SoakOptions", "SoakResult", "plan", "run_soak"]

FAULT_KINDS = ("kill-leader", "pause-leader", "kill-leader-and-follower", "kill-follower", "resign")
EVENTS_JSON = "application/vnd.kurrent.events+json"
#: answers that say the append was not written (at the first attempt); any other failure may have been
REFUSALS = (400, 409, 410, 413)
SETTLED = ("Leader", "Follower", "ReadOnlyReplica")


@dataclass(frozen=True, slots=True)
class Fault:
    kind: str
    hold: float  # seconds down or paused
    settle: float  # seconds after the cluster settled before the next fault
    pick: float  # which follower, as a fraction of the follower list
    gap: float  # kill-leader-and-follower: seconds between the leader's and the follower's restart


@dataclass(frozen=True)
class SoakOptions:
    seconds: float = 35.0  # how long new faults are started
    seed: int = 0
    min_faults: int = len(FAULT_KINDS)  # faults run even past ``seconds`` (every kind once)
    writers: int = 2
    streams: int = 3
    replicas: int = 0
    down: tuple[float, float] = (1.0, 3.0)
    pause: tuple[float, float] = (3.0, 6.0)
    settle: tuple[float, float] = (0.5, 1.5)
    settle_timeout: float = 90.0  # bound on waiting for a leader after a fault (and for healing)
    grace: float = 20.0  # after the schedule, how long a writer may retry the append it is in
    pace: float = 0.0  # seconds a writer waits after each answered append (0: none)


def plan(seed: int, count: int, options: SoakOptions = SoakOptions()) -> list[Fault]:
    """The first ``count`` faults of the seed's schedule (the same list for the same seed and ranges)."""
    rng = random.Random(seed)
    kinds = list(FAULT_KINDS)
    rng.shuffle(kinds)
    faults = []
    for i in range(count):
        kind = kinds[i] if i < len(kinds) else rng.choice(FAULT_KINDS)
        hold = rng.uniform(*(options.pause if kind == "pause-leader" else options.down))
        faults.append(
            Fault(
                kind,
                round(hold, 2),
                round(rng.uniform(*options.settle), 2),
                rng.random(),
                round(rng.uniform(0.0, 1.0), 2),
            )
        )
    return faults


@dataclass
class SoakResult:
    seed: int
    root: str
    started_wall: float = 0.0  # wall-clock time of t = 0 (to find log lines)
    schedule: list[str] = field(default_factory=list)  # faults as they ran
    appends: list[AppendRecord] = field(default_factory=list)
    reads: list[ReadSample] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # the harness's own failures (not the server's)
    healed: bool = False
    readback: list[str] = field(default_factory=list)  # what the read-back saw (per node), for the report
    readback_rounds: int = 0  # how many times every node was read back before their $all agreed
    events_checked: int = 0  # events in the reference $all
    seconds: float = 0.0

    @property
    def faults(self) -> int:
        return len(self.schedule)

    def count(self, outcome: str) -> int:
        return sum(1 for a in self.appends if a.outcome == outcome)

    def summary_line(self) -> str:
        kinds = summarize(self.violations)
        return (
            f"seed {self.seed}: {self.faults} faults, {self.count(ACKED)} acknowledged appends "
            f"({sum(len(a.event_ids) for a in self.appends if a.outcome == ACKED)} events), "
            f"{self.count(UNKNOWN)} unknown, {self.count(REFUSED)} refused, {len(self.reads)} reads sampled, "
            f"{self.events_checked} events in $all, {len(self.violations)} violations"
            + (f" {kinds}" if kinds else "")
            + (f", {len(self.errors)} harness errors" if self.errors else "")
            + (f", $all read back {self.readback_rounds} times" if self.readback_rounds > 1 else "")
            + f" ({self.seconds:.0f} s)"
        )

    def report(self, limit: int = 10) -> str:
        """The seed, the schedule, the summary, then up to ``limit`` violations of each invariant with
        the node log lines around the first ones."""
        lines = [f"seed {self.seed}, folder {self.root}", "schedule:"]
        lines += [f"  {s}" for s in self.schedule]
        lines.append(self.summary_line())
        lines += [f"HARNESS ERROR: {e}" for e in self.errors]
        lines += [f"read back: {r}" for r in self.readback]
        shown: dict[str, int] = {}
        for v in self.violations:
            shown[v.invariant] = shown.get(v.invariant, 0) + 1
            if shown[v.invariant] <= limit:
                lines.append(f"VIOLATION {v}")
        for v in _firsts(self.violations):
            lines.append(
                f"log lines of {v.node} around [{v.invariant}]" + (f" at {v.at:.2f}s:" if v.at else ":")
            )
            lines += [f"  {line}" for line in log_context(Path(self.root), v.node, self.started_wall, v.at)]
        return "\n".join(lines)


def _firsts(violations: list[Violation]) -> list[Violation]:
    """The first violation of each invariant on each node (whose logs the report shows)."""
    seen, out = set(), []
    for v in violations:
        if (v.invariant, v.node) not in seen and v.node != "cluster":
            seen.add((v.invariant, v.node))
            out.append(v)
    return out[:6]


#: the log messages worth showing next to a violation (docs/cluster.md lists them)
_NOTABLE = (
    "LEADER",
    "leader",
    "election",
    "Truncat",
    "truncat",
    "epoch",
    "diverged",
    "Refused",
    "chunk file",
)


def log_context(
    root: Path, node: str, started_wall: float, at: float | None, span: float = 3.0, limit: int = 25
) -> list[str]:
    """A node's log lines (all its runs, in time order) about elections, leadership and truncation, and
    its warnings and errors other than failed gossip, within ``span`` seconds of ``at`` (seconds into
    the run), or the last ``limit`` of the whole run when ``at`` is None."""
    folder = root / node / "log"
    if not folder.is_dir():
        return [f"(no log folder {folder})"]
    lines = []
    for path in folder.rglob("*.json"):
        for raw in path.read_text(errors="replace").splitlines():
            try:
                entry = json.loads(raw)
                when = datetime.fromisoformat(entry["@t"].replace("Z", "+00:00")).timestamp() - started_wall
            except (ValueError, KeyError):
                continue
            message = str(entry.get("@m", ""))
            if (at is not None and abs(when - at) > span) or message.startswith("Gossip with"):
                continue
            if entry.get("@l") in ("Warning", "Error", "Fatal") or any(w in message for w in _NOTABLE):
                lines.append(
                    (when, f"{when:8.2f}s {entry.get('@l', '?')[:4]} [{path.parent.name}] {message[:300]}")
                )
    lines.sort()
    return [text for _, text in (lines[-limit:] if at is None else lines[:limit])]


class _Nodes:
    """The cluster's nodes through one HTTP client per node and thread (keep-alive, TLS set up once)."""

    def __init__(self, local: LocalCluster, verify: ssl.SSLContext | None = None) -> None:
        self.local = local
        self.verify = verify  # None: the cluster's CA file as cluster.json names it now
        info = local.info()
        self.names = [n["name"] for n in info["nodes"]]
        self.urls = {n["name"]: n["url"] for n in info["nodes"]}
        self.replicas = {n["name"] for n in info["nodes"] if n.get("read_only_replica")}
        self._local = threading.local()
        self._all: list[httpx.Client] = []
        self._lock = threading.Lock()

    def client(self, name: str, timeout: float) -> httpx.Client:
        clients = self._local.__dict__.setdefault("clients", {})
        key = (name, timeout)
        if key not in clients:
            limits = httpx.Timeout(timeout, connect=2.0)
            if self.verify is None:
                clients[key] = self.local.client(self.urls[name], timeout=limits)
            else:
                info = self.local.info()
                clients[key] = httpx.Client(
                    base_url=self.urls[name],
                    auth=(info["user"], info["password"]),
                    verify=self.verify,
                    timeout=limits,
                )
            with self._lock:
                self._all.append(clients[key])
        return clients[key]

    def close(self) -> None:
        with self._lock:
            for c in self._all:
                with contextlib.suppress(Exception):
                    c.close()
            self._all.clear()

    def pid(self, name: str) -> int | None:
        return next(n.get("pid") for n in self.local.info()["nodes"] if n["name"] == name)

    def states(self) -> dict[str, dict]:
        return {r["name"]: r for r in self.local.status()}


class _Run:
    def __init__(
        self,
        local: LocalCluster,
        options: SoakOptions,
        result: SoakResult,
        log,
        verify: ssl.SSLContext | None = None,
    ) -> None:
        self.local = local
        self.options = options
        self.result = result
        self.log = log
        self.nodes = _Nodes(local, verify)
        self.t0 = time.monotonic()
        self.stop = threading.Event()
        self.stopped_at: float | None = None
        self.lock = threading.Lock()
        self.heads: dict[str, int] = {}  # stream -> highest acknowledged number (for the reader)
        self.paused: set[int] = set()

    def now(self) -> float:
        return time.monotonic() - self.t0

    # -- the clients ---------------------------------------------------------------------------------
    def writer(self, k: int) -> None:
        rng = random.Random(f"{self.options.seed}-writer-{k}")
        names = self.nodes.names
        i = 0
        while not self.stop.is_set():
            stream = f"soak-{rng.randrange(self.options.streams)}"
            ids = tuple(str(uuid.uuid4()) for _ in range(rng.choice((1, 1, 1, 2, 3))))
            body = json.dumps(
                [
                    {"eventId": e, "eventType": "SoakEvent", "data": {"writer": k, "i": i + j}}
                    for j, e in enumerate(ids)
                ]
            )
            start = rng.randrange(len(names))
            attempts: list[str] = []
            record = None
            for attempt in itertools.count():
                if self.stop.is_set() and self.now() > (self.stopped_at or 0) + self.options.grace:
                    break
                name = names[(start + attempt) % len(names)]
                try:
                    r = self.nodes.client(name, 6.0).post(
                        f"/streams/{stream}", content=body, headers={"Content-Type": EVENTS_JSON}
                    )
                except httpx.HTTPError as exc:
                    attempts.append(f"{name}: {type(exc).__name__}")
                else:
                    if r.status_code == 201:
                        first = int(r.headers["Location"].rsplit("/", 1)[1])
                        position = int(r.json()["position"])
                        record = AppendRecord(
                            stream, ids, ACKED, first, position, name, self.now(), "; ".join(attempts[-5:])
                        )
                        with self.lock:
                            self.heads[stream] = max(self.heads.get(stream, -1), first + len(ids) - 1)
                        break
                    attempts.append(f"{name}: {r.status_code} {r.text[:80]}")
                    if r.status_code in REFUSALS:  # after an earlier attempt that may have written: unknown
                        outcome = REFUSED if attempt == 0 else UNKNOWN
                        detail = "; ".join(attempts[-5:])
                        record = AppendRecord(stream, ids, outcome, node=name, at=self.now(), detail=detail)
                        break
                self.stop.wait(0.05 if attempt < 3 else 0.2)  # pacing between attempts
            if record is None:
                record = AppendRecord(
                    stream, ids, UNKNOWN, node="", at=self.now(), detail="; ".join(attempts[-5:])
                )
            with self.lock:
                self.result.appends.append(record)
            i += len(ids)
            if self.options.pace:
                self.stop.wait(self.options.pace)

    def reader(self) -> None:
        rng = random.Random(f"{self.options.seed}-reader")
        names = self.nodes.names
        while not self.stop.is_set():
            name = rng.choice(names)
            with self.lock:
                heads = dict(self.heads)
            if heads and rng.random() < 0.7:
                stream = rng.choice(sorted(heads))
                start = max(0, heads[stream] - rng.randrange(40))
                path, source = f"/streams/{stream}/{start}/forward/10?embed=body", "stream"
            else:
                path, source = "/streams/%24all/head/backward/20?embed=body", "$all"
            at = self.now()
            try:
                r = self.nodes.client(name, 3.0).get(path, headers={"Accept": "application/json"})
                entries = r.json()["entries"] if r.status_code == 200 else []
            except (httpx.HTTPError, ValueError, KeyError):
                entries = []
            samples = [
                ReadSample(
                    name, at, e["streamId"], int(e["eventNumber"]), e["eventId"], int(e["position"]), source
                )
                for e in entries
            ]
            with self.lock:
                self.result.reads.extend(samples)
            self.stop.wait(0.05)  # pacing

    # -- the faults -------------------------------------------------------------------------------------
    def settled(self, timeout: float) -> dict[str, dict] | None:
        """Wait (bounded) until one node leads and every running node is settled; the states, or None."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            states = self.nodes.states()
            up = [s for s in states.values() if s["state"] != "Down"]
            if sum(s["state"] == "Leader" for s in up) == 1 and all(s["state"] in SETTLED for s in up):
                return states
            time.sleep(0.2)
        return None

    def kill(self, name: str) -> None:
        pid = self.nodes.pid(name)
        if pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def run_fault(self, fault: Fault, states: dict[str, dict]) -> str:
        leader = next(n for n, s in states.items() if s["state"] == "Leader")
        followers = sorted(n for n, s in states.items() if s["state"] in ("Follower", "ReadOnlyReplica"))
        voters = [n for n in followers if n not in self.nodes.replicas]
        pool = voters if fault.kind == "kill-leader-and-follower" else followers
        follower = pool[int(fault.pick * len(pool))] if pool else None
        when = f"{self.now():7.2f}s"
        if fault.kind == "kill-leader":
            self.kill(leader)
            time.sleep(fault.hold)
            self.local.start_node(leader)
            return f"{when} kill-leader {leader} (down {fault.hold:.1f} s)"
        if fault.kind == "pause-leader":
            pid = self.nodes.pid(leader)
            os.kill(pid, signal.SIGSTOP)
            self.paused.add(pid)
            try:
                time.sleep(fault.hold)
            finally:
                os.kill(pid, signal.SIGCONT)
                self.paused.discard(pid)
            return f"{when} pause-leader {leader} (SIGSTOP {fault.hold:.1f} s, then SIGCONT)"
        if fault.kind == "kill-leader-and-follower" and follower:
            self.kill(leader)
            self.kill(follower)
            time.sleep(fault.hold)
            self.local.start_node(leader)
            time.sleep(fault.gap)
            self.local.start_node(follower)
            return (
                f"{when} kill-leader-and-follower {leader}+{follower} (down {fault.hold:.1f} s, "
                f"{follower} restarted {fault.gap:.1f} s later)"
            )
        if fault.kind == "kill-follower" and follower:
            self.kill(follower)
            time.sleep(fault.hold)
            self.local.start_node(follower)
            return f"{when} kill-follower {follower} (down {fault.hold:.1f} s)"
        if fault.kind == "resign":
            try:
                r = self.nodes.client(leader, 10.0).post("/admin/node/resign")
                answer = str(r.status_code)
            except httpx.HTTPError as exc:
                answer = type(exc).__name__
            return f"{when} resign {leader} ({answer})"
        return f"{when} skipped {fault.kind}: no follower ({states})"

    def schedule(self) -> None:
        o = self.options
        faults = plan(o.seed, 10_000, o)
        deadline = self.t0 + o.seconds
        for i, fault in enumerate(faults):
            if time.monotonic() >= deadline and i >= o.min_faults:
                return
            states = self.settled(o.settle_timeout)
            if states is None:
                self.result.violations.append(
                    Violation(
                        "no-leader",
                        "cluster",
                        f"no settled leader {o.settle_timeout:.0f} s after the last fault: "
                        f"{ {n: s['state'] for n, s in self.nodes.states().items()} }",
                        at=self.now(),
                    )
                )
                return
            line = self.run_fault(fault, states)
            self.result.schedule.append(line)
            self.log(line)
            time.sleep(fault.settle)

    # -- heal and read back -------------------------------------------------------------------------------
    def heal(self) -> bool:
        for pid in list(self.paused):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        for name in self.nodes.names:
            self.local.start_node(name)
        deadline = time.monotonic() + self.options.settle_timeout * 2
        last = {}
        while time.monotonic() < deadline:
            last = self.nodes.states()
            writers = {s.get("writer") for s in last.values()}
            leaders = sum(s["state"] == "Leader" for s in last.values())
            if (
                leaders == 1
                and writers != {None}
                and len(writers) == 1
                and all(s["state"] in SETTLED for s in last.values())
            ):
                return True
            time.sleep(0.25)
        self.result.violations.append(
            Violation(
                "not-healed",
                "cluster",
                f"the nodes did not reach one writer checkpoint in "
                f"{self.options.settle_timeout * 2:.0f} s: "
                f"{ {n: (s['state'], s.get('writer')) for n, s in last.items()} }",
            )
        )
        return False

    def read_back(self) -> tuple[dict[str, list[LogEntry]], dict[str, dict[str, list[LogEntry]]]]:
        """Every node's ``$all`` and clients' streams. A member serves only what it knows the cluster
        committed, which may trail its writer checkpoint for a moment after the heal: read again
        (bounded) until all ``$all`` agree; what is read last is what gets checked."""
        streams_read = sorted({a.stream for a in self.result.appends})
        began = time.monotonic()
        deadline = began + self.options.settle_timeout / 3
        for round_ in itertools.count(1):
            logs: dict[str, list[LogEntry]] = {}
            streams: dict[str, dict[str, list[LogEntry]]] = {}
            notes: list[str] = []
            for name in self.nodes.names:
                try:
                    logs[name], note = self.read_all(name)
                    streams[name] = {s: self.read_stream(name, s) for s in streams_read}
                except (httpx.HTTPError, ValueError, KeyError, StopIteration) as exc:
                    notes.append(f"reading back {name} failed: {type(exc).__name__}: {exc}")
                    continue
                if note:
                    notes.append(f"{name}: {note}")
            agreed = len(logs) == len(self.nodes.names) and len({tuple(v) for v in logs.values()}) == 1
            if agreed or time.monotonic() >= deadline:
                self.result.readback_rounds = round_
                took = f"{round_} reading(s) over {time.monotonic() - began:.1f} s"
                self.result.readback = [f"all $all {'agreed' if agreed else 'still differed'} after {took}"]
                self.result.readback += notes + [
                    f"{n}: {len(v)} events in $all, last position {v[-1].position if v else None}"
                    for n, v in logs.items()
                ]
                self.result.errors += [n for n in notes if "failed" in n]
                return logs, streams
            time.sleep(1.0)

    def read_all(self, name: str) -> tuple[list[LogEntry], str]:
        """The node's whole $all, oldest first, paging forward with the page's own ``previous`` link;
        and a note when it ended on an empty page that was not the head of ``$all``."""
        client = self.nodes.client(name, 30.0)
        out: list[LogEntry] = []
        url = "/streams/%24all/0/forward/500?embed=body"
        while True:
            r = client.get(url, headers={"Accept": "application/json"})
            r.raise_for_status()
            page = r.json()
            entries = page["entries"][::-1]  # a forward page lists the newest first
            out += [
                LogEntry(int(e["position"]), e["eventId"], e["streamId"], int(e["eventNumber"]))
                for e in entries
            ]
            if page["headOfStream"]:
                return out, ""
            if not entries:
                at = out[-1].position if out else 0
                return out, f"$all ended after position {at} on an empty page that is not its head"
            url = next(link["uri"] for link in page["links"] if link["relation"] == "previous")

    def read_stream(self, name: str, stream: str) -> list[LogEntry]:
        client = self.nodes.client(name, 30.0)
        out: list[LogEntry] = []
        url = f"/streams/{stream}/0/forward/500?embed=body"
        while True:
            r = client.get(url, headers={"Accept": "application/json"})
            if r.status_code == 404:
                return out
            r.raise_for_status()
            page = r.json()
            entries = page["entries"][::-1]
            out += [
                LogEntry(int(e["position"]), e["eventId"], e["streamId"], int(e["eventNumber"]))
                for e in entries
            ]
            if page["headOfStream"] or not entries:
                return out
            url = next(link["uri"] for link in page["links"] if link["relation"] == "previous")


def _guarded(target: Callable[[], None], errors: list[str], what: str) -> Callable[[], None]:
    def run() -> None:
        try:
            target()
        except Exception as exc:  # a harness bug must fail the run, not vanish with its thread
            errors.append(f"{what} failed: {type(exc).__name__}: {exc}")

    return run


class ClientLoad:
    """The soak's writers (``options.writers`` threads, ``options.pace`` apart) on a cluster that someone
    else drives (tests/cluster/operations_day.py): ``start``; ``appends`` (what they were answered so
    far) and ``read_all`` (a node's ``$all``) for the checker at any moment; ``stop``. ``verify``: the
    TLS trust of the clients (one that follows a certificate rotation), else the cluster's CA file."""

    def __init__(
        self,
        local: LocalCluster,
        options: SoakOptions,
        verify: ssl.SSLContext | None = None,
        log: Callable[[str], None] = print,
    ) -> None:
        self.result = SoakResult(options.seed, str(local.data_dir))
        self._run = _Run(local, options, self.result, log, verify)
        self._threads = [
            threading.Thread(
                target=_guarded(lambda k=k: self._run.writer(k), self.result.errors, f"writer {k}"),
                name=f"load-writer-{k}",
                daemon=True,
            )
            for k in range(options.writers)
        ]

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def now(self) -> float:
        """Seconds since the load was made (``AppendRecord.at`` counts from there)."""
        return self._run.now()

    def appends(self) -> list[AppendRecord]:
        with self._run.lock:
            return list(self.result.appends)

    def read_all(self, name: str) -> tuple[list[LogEntry], str]:
        return self._run.read_all(name)

    def stop(self) -> None:
        self._run.stopped_at = self._run.now()
        self._run.stop.set()
        for t in self._threads:
            t.join(self._run.options.grace + 30)
            if t.is_alive():
                self.result.errors.append(f"{t.name} did not stop")

    def close(self) -> None:
        self._run.nodes.close()


def run_soak(
    root: str | os.PathLike[str], options: SoakOptions, log: Callable[[str], None] = print
) -> SoakResult:
    """Create a 3-node cluster (plus ``options.replicas``) in ``root``, run the seeded schedule with
    writers and a reader, heal, check. Every node process is gone when this returns or raises."""
    began = time.monotonic()
    result = SoakResult(options.seed, str(root))
    local = LocalCluster(root)
    run: _Run | None = None
    try:
        local.up(nodes=3, replicas=options.replicas, chunk_size="256KiB", timeout=120, log=lambda *_: None)
        run = _Run(local, options, result, log)
        result.started_wall = time.time() - (time.monotonic() - run.t0)
        threads = [
            threading.Thread(
                target=_guarded(lambda k=k: run.writer(k), result.errors, f"writer {k}"),
                name=f"soak-writer-{k}",
            )
            for k in range(options.writers)
        ]
        threads.append(
            threading.Thread(target=_guarded(run.reader, result.errors, "reader"), name="soak-reader")
        )
        for t in threads:
            t.start()
        try:
            run.schedule()
        finally:
            run.stopped_at = run.now()
            run.stop.set()
            for t in threads:
                t.join(options.grace + 30)
                if t.is_alive():
                    result.errors.append(f"{t.name} did not stop")
        result.healed = run.heal()
        logs, streams = run.read_back()
        result.violations += check(
            result.appends, logs, reads=result.reads, streams=streams, healed=result.healed
        )
        if logs:
            result.events_checked = max(len(v) for v in logs.values())
        return result
    finally:
        if run is not None:
            run.nodes.close()
        result.seconds = time.monotonic() - began
        stop_cluster(local, run.paused if run else set())


def _running_child(pid: int) -> bool:
    """Whether ``pid`` is a node process this process started that has not ended (a paused one
    counts); an ended one is reaped here, so a pid is never signalled after the system may reuse it."""
    try:
        return os.waitpid(pid, os.WNOHANG) == (0, 0)
    except ChildProcessError:
        return False


def stop_cluster(local: LocalCluster, paused: set[int] = frozenset()) -> None:
    """Stop every node of ``local``: SIGCONT the paused, ``down`` (shutdown, SIGTERM, then SIGKILL),
    and SIGKILL any node process still running, so no node outlives the run."""
    try:
        pids = {n["pid"] for n in local.info()["nodes"] if n.get("pid")} | set(paused)
    except ClusterLaunchError:
        return
    for pid in pids:
        if _running_child(pid):
            os.kill(pid, signal.SIGCONT)
    with contextlib.suppress(Exception):
        local.down(timeout=15, log=lambda *_: None)
    for pid in pids:
        if _running_child(pid):
            os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
