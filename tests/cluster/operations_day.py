"""An operations day on one real cluster (tests/cluster/test_operations_day.py).

One local cluster (three nodes and a read-only replica, TLS, separate node processes) under a steady
client write load the whole time (fault_soak.ClientLoad: appends with client event ids, retried on the
next node), and the maintenance jobs one after the other, as an operator would run them:

1. a rolling certificate update to a new CA (``evdb.tls.rotate.rotate_cluster``, what ``evdb certs
   rotate`` runs);
2. a configured auto-scavenge cycle over every node (the leader last, after it resigns), paused and
   resumed from a follower while a node is being scavenged;
3. a differential backup of a follower (``evdb backup --differential``; its full backup was taken at
   the start of the day, with one of every other voting node) and ``evdb backup verify``;
4. the redaction of one event on every node (``evdb-redact``);
5. kill -9 of that follower, ``evdb restore`` of it from its backup, restart, and catch-up.

After each step :meth:`OperationsDay.check` looks at the whole cluster:

- every acknowledged write is on every node, in the same ``$all`` order (invariants.check over every
  node's ``$all``; the writes go on, so a node's ``$all`` must be a prefix of the longest);
- every node that is not the leader answers each auto-scavenge endpoint it forwards to the leader, and
  a write it forwards;
- each node's scavenge history: its scavenges in ``$scavenges`` (by ``nodeEndpoint``) are the ones the
  day ran on it, with their results, and ``GET /admin/scavenge/last`` names its own last one;
- the dashboard's collectors (tui/collector.py), polling the real nodes in-process, show what the nodes
  report: each node's role, the auto-scavenge state, and no ``HTTP 500`` in any panel.

A failed check does not stop the day: it is recorded (:class:`Findings`) with the step, so one run
reports every failure. Every wait is a bounded poll on a condition (tests/waiting.py wait_until).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import glob
import io
import itertools
import json
import os
import re
import signal
import ssl
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
from fault_soak import ClientLoad, SoakOptions, stop_cluster
from invariants import ACKED, check
from waiting import wait_until

from evdb.cluster.launcher import LocalCluster

__all__ = ["Findings", "OperationsDay", "Trust"]

RESET_INTERVAL = 2  # ConnectionResetInterval, seconds
NODE_OPTIONS = {
    "ConnectionResetInterval": RESET_INTERVAL,
    "EnableUnixSocket": True,  # evdb-redact
    "AutoScavengeScheduleSeconds": True,  # a schedule due a few seconds from now
    "AutoScavengeAssessIntervalMs": 1000,
}
REDACTED_STREAM, REDACTED_NUMBER = "customer-1", 3
SETTLED = ("Leader", "Follower", "ReadOnlyReplica")
#: failures a wait takes as "not yet": a node restarting, an election, a half-written answer
TRANSIENT = (httpx.HTTPError, ValueError, KeyError, IndexError)
MAX_WRITE_GAP = 20.0  # seconds without an acknowledged append that still count as a steady load


class Trust:
    """One TLS context trusting every CA generation of the cluster (``certs/gen-*/ca/ca.crt``), so the
    clients reach every node throughout a rolling update; :meth:`refresh` adds a new generation."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.context = ssl.create_default_context()
        self.loaded: set[str] = set()
        self.refresh()

    def refresh(self) -> None:
        for path in sorted(glob.glob(str(self.data_dir / "certs" / "gen-*" / "ca" / "ca.crt"))):
            if path not in self.loaded:
                self.context.load_verify_locations(cafile=path)
                self.loaded.add(path)


@dataclass
class Findings:
    """Failed checks, each with the step after which it failed."""

    failures: list[str] = field(default_factory=list)
    step: str = "setup"

    def expect(self, ok: Any, message: str) -> bool:
        if not ok:
            self.failures.append(f"after {self.step}: {message}")
            print(f"  FAILED CHECK after {self.step}: {message}", flush=True)
        return bool(ok)

    def report(self) -> str:
        return "\n".join(self.failures)


class Miss:
    """What a condition answers while it does not hold: false, with what it saw (for the timeout message)."""

    def __init__(self, seen: str) -> None:
        self.seen = seen

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return self.seen


#: the node log lines a failed step prints (stdout.log): auto-scavenge, elections and leadership
LOG_PATTERN = re.compile(
    r"auto-?scavenge|cluster scavenge|node scavenge|SCAVENGING: Scavenge (Started|Completed|Stopped)|"
    r"Request scavenging|stop\w* (the )?scavenge|leader|resign|election|vote|epoch|take office|"
    r"caught up|truncat|starting \(instance|Shutting down",
    re.IGNORECASE,
)
LOG_TAIL = 80  # lines per node


def relevant_log_lines(text: str) -> list[str]:
    """The records of a node's stdout.log that match LOG_PATTERN; a record logged with a traceback
    (continuation lines) keeps its first line, the traceback's innermost place and the exception."""
    records: list[list[str]] = []
    for line in text.splitlines():
        if line.startswith("[") or not records:
            records.append([line])
        else:
            records[-1].append(line)
    out = []
    for record in records:
        if LOG_PATTERN.search(record[0]) or len(record) > 1:
            where = [line.strip() for line in record[1:] if line.strip().startswith("File ")][-1:]
            tail = " ".join([*where, record[-1].strip()])
            out.append(record[0] if len(record) == 1 else f"{record[0]} ... {tail}")
    return out


def endpoint(url: str) -> str:
    """``host:port`` of a node url, as the node names itself (``nodeEndpoint``, auto-scavenge members)."""
    parsed = httpx.URL(url)
    return f"{parsed.host}:{parsed.port}"


class OperationsDay:
    def __init__(self, root: Path, log: Callable[[str], None] = print) -> None:
        self.root = root
        self.log = log
        self.local = LocalCluster(root / "cluster")
        self.findings = Findings()
        self.times: list[tuple[str, float]] = []
        self.trust: Trust | None = None
        self.load: ClientLoad | None = None
        self._clients: dict[str, httpx.Client] = {}
        # the day's scavenges, node name -> results in order (checked against $scavenges)
        self.scavenges: dict[str, list[str]] = {}
        self.backups: dict[str, Path] = {}  # node name -> its backup folder
        self.backed_up: str | None = None  # the follower whose differential backup was taken
        self.redacted_on: set[str] = set()
        self.scavenged_last: str | None = None  # the node scavenged last in the cycle
        self._logs_shown_at = 0  # how many findings there were when the node logs were last printed

    # -- the cluster -------------------------------------------------------------------------------------
    def info(self) -> dict:
        return self.local.info()

    def names(self) -> list[str]:
        return [n["name"] for n in self.info()["nodes"]]

    def node(self, name: str) -> dict:
        return next(n for n in self.info()["nodes"] if n["name"] == name)

    def client(self, name: str) -> httpx.Client:
        if name not in self._clients:
            info = self.info()
            assert self.trust is not None
            self._clients[name] = httpx.Client(
                base_url=self.node(name)["url"],
                auth=(info["user"], info["password"]),
                verify=self.trust.context,
                timeout=httpx.Timeout(15.0, connect=3.0),
                headers={"Accept": "application/json"},
            )
        return self._clients[name]

    def gossip_state(self, name: str) -> str:
        try:
            return self.client(name).get("/gossip", timeout=3).json()["members"][0]["state"]
        except (httpx.HTTPError, ValueError, KeyError, IndexError) as exc:
            return f"no answer ({type(exc).__name__})"

    def states(self) -> dict[str, str]:
        return {name: self.gossip_state(name) for name in self.names()}

    def settled(self) -> dict[str, str] | Miss:
        states = self.states()
        leaders = [n for n, s in states.items() if s == "Leader"]
        return (
            states if len(leaders) == 1 and all(s in SETTLED for s in states.values()) else Miss(str(states))
        )

    def wait_settled(self, timeout: float = 60.0) -> dict[str, str]:
        return wait_until(
            self.settled, timeout, "one leader and every node settled", interval=0.25, tolerate=TRANSIENT
        )

    def leader(self) -> str:
        return next(n for n, s in self.wait_settled().items() if s == "Leader")

    def followers(self) -> list[str]:
        """The voting followers now, by name."""
        return sorted(n for n, s in self.wait_settled().items() if s == "Follower")

    def endpoints(self) -> dict[str, str]:
        """node name -> ``host:port``."""
        return {n["name"]: endpoint(n["url"]) for n in self.info()["nodes"]}

    # -- steps ------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def step(self, name: str, under_load: bool = True) -> Iterator[None]:
        """Time the step; afterwards (``under_load``) check that the client load went on through it:
        acknowledged appends during it, and no gap between two of them longer than ``MAX_WRITE_GAP``."""
        self.findings.step = name
        self.log(f"-- {name}")
        began = time.monotonic()
        load_began = self.load.now() if self.load else 0.0
        try:
            yield
        finally:
            took = time.monotonic() - began
            self.times.append((name, took))
            if self.load is not None and under_load:
                acked = sorted(a.at for a in self.load.appends() if a.outcome == ACKED and a.at >= load_began)
                marks = [load_began, *acked, self.load.now()]
                gap = max(b - a for a, b in itertools.pairwise(marks))
                self.log(f"   {len(acked)} appends acknowledged during the step; longest gap {gap:.1f} s")
                self.findings.expect(
                    acked and gap < MAX_WRITE_GAP,
                    f"the client load stalled: {len(acked)} appends acknowledged, a gap of {gap:.1f} s",
                )
            self.log(f"   {name}: {took:.1f} s")

    def run_step(self, name: str, action: Callable[[], None]) -> None:
        """One step of the day and the checks after it. A step that fails is recorded and the day goes
        on (the later steps and checks then say what else broke); a check that fails is recorded too."""
        with self.step(name):
            try:
                action()
            except Exception as exc:
                self.findings.expect(False, f"the step failed: {type(exc).__name__}: {exc}")
            self.check()
        self.print_node_logs_after_failures()

    def print_node_logs_after_failures(self) -> None:
        """The nodes' logs (:meth:`print_node_logs`) when a step or check failed since they were last
        printed (before the cluster stops: call it before :meth:`close`)."""
        if len(self.findings.failures) > self._logs_shown_at:
            self._logs_shown_at = len(self.findings.failures)
            self.print_node_logs()

    def print_node_logs(self, tail: int = LOG_TAIL) -> None:
        """What each node said about auto-scavenge, elections and leadership (the last ``tail`` such
        lines of its stdout.log), so that a failure in CI can be understood from the CI log alone."""
        try:
            nodes = self.info()["nodes"]
        except Exception as exc:
            self.log(f"   (no node logs: {type(exc).__name__}: {exc})")
            return
        for node in nodes:
            path = Path(node["config"]).parent / "stdout.log"
            try:
                lines = relevant_log_lines(path.read_text(errors="replace"))
            except OSError as exc:
                self.log(f"   (no log of {node['name']}: {exc})")
                continue
            shown = lines[-tail:]
            self.log(
                f"   == {node['name']} ({endpoint(node['url'])}) {path}: the last {len(shown)} of "
                f"{len(lines)} lines about auto-scavenge, elections and leadership"
            )
            for line in shown:
                self.log(f"   | {line}")

    def up(self) -> None:
        """The cluster, the data the day works on, the client load and the followers' full backups."""
        self.local.up(
            nodes=3, replicas=1, chunk_size="64KiB", extra=NODE_OPTIONS, timeout=90, log=lambda *_: None
        )
        self.trust = Trust(self.local.data_dir)
        self.wait_settled()
        self.load = ClientLoad(
            self.local,
            SoakOptions(writers=1, streams=3, pace=0.02, grace=15.0, seed=1122),
            verify=self.trust.context,
            log=lambda *_: None,
        )
        self.load.start()
        leader = self.leader()
        # the event the redaction blanks, then a deleted stream that gives every node scavenge work
        self.append(leader, REDACTED_STREAM, 10, pad=200)
        self.append(leader, "old-1", 400, pad=1000)
        response = self.client(leader).delete("/streams/old-1")
        assert response.status_code == 204, response.text
        # a full backup of each voting node (each backup folder belongs to one node): which of them is a
        # follower by step 3 depends on the day's elections (the rotation and the resign may move the lead)
        for name in self.names():
            if not self.node(name)["read_only_replica"]:
                self.backups[name] = self.root / f"backup-{name}"
                self.backup(name, differential=False)

    def append(self, name: str, stream: str, count: int, pad: int = 0) -> None:
        for first in range(0, count, 50):
            batch = [
                {"eventId": str(uuid.uuid4()), "eventType": "DayEvent", "data": {"n": i, "pad": "x" * pad}}
                for i in range(first, min(count, first + 50))
            ]
            response = self.client(name).post(
                f"/streams/{stream}",
                content=json.dumps(batch),
                headers={"Content-Type": "application/vnd.kurrent.events+json"},
            )
            assert response.status_code == 201, f"appending to {stream} on {name}: {response.text}"

    def run_tool(self, *argv: str, timeout: float = 120.0) -> subprocess.CompletedProcess:
        """One of evdb's commands (``evdb ...`` or ``evdb-redact ...``) as its own process."""
        program = {"evdb": "evdb.cli", "evdb-redact": "evdb.redaction.tool"}[argv[0]]
        return subprocess.run(
            [sys.executable, "-c", f"import sys; from {program} import main; sys.exit(main())", *argv[1:]],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def backup(self, name: str, differential: bool) -> subprocess.CompletedProcess:
        node = self.node(name)
        argv = ["evdb", "backup", "--db", node["db"], "--to", str(self.backups[name])]
        argv += ["--node", node["url"], "--ca", self.info()["ca"]]
        if differential:
            argv.append("--differential")
        done = self.run_tool(*argv)
        assert done.returncode == 0, f"{' '.join(argv)} exited {done.returncode}: {done.stdout}{done.stderr}"
        return done

    def rotate_certificates(self) -> None:
        from evdb.tls.rotate import rotate_cluster

        def after_reload(name: str, index: int) -> None:
            assert self.trust is not None
            self.trust.refresh()  # the clients trust the new CA as soon as a node presents it

        report = rotate_cluster(
            self.local.data_dir, timeout=90, after_reload=after_reload, log=lambda *_: None
        )
        self.log(
            f"   reload order {', '.join(report.order)}; every node talked to every other again "
            f"{report.talking_again_after:.1f} s after the last reload"
        )
        new_ca = str(report.generation / "ca" / "ca.crt")
        self.findings.expect(
            os.path.realpath(self.info()["ca"]) == new_ca, f"certs/ca does not point at the new CA {new_ca}"
        )

    def auto_scavenge(self) -> None:
        """A schedule due in a few seconds (once a day, so no second cycle starts); pause from a
        follower once a node scavenge runs, resume from a follower, wait for the cycle to complete."""
        leader = self.leader()
        follower = self.followers()[0]
        due = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=5)
        schedule = f"{due.second} {due.minute} {due.hour} * * *"
        response = self.client(follower).post("/auto-scavenge/configure", json={"schedule": schedule})
        assert response.status_code == 200, (
            f"configure through {follower}: {response.status_code} {response.text}"
        )

        def a_node_scavenge_runs() -> dict | Miss:
            r = self.client(follower).get("/auto-scavenge/progress")
            body = r.json() if r.status_code == 200 else {}
            return body if body.get("nodeScavengeId") else Miss(f"{r.status_code} {r.text[:300]}")

        running = wait_until(
            a_node_scavenge_runs,
            30,
            "a node scavenge of the cluster scavenge",
            interval=0.2,
            tolerate=TRANSIENT,
        )
        pause = self.client(follower).post("/auto-scavenge/pause")
        self.log(
            f"   pause sent through {follower} while {running['designatedNode']} scavenged: "
            f"{pause.status_code}"
        )
        self.findings.expect(
            pause.status_code in (200, 202), f"POST /auto-scavenge/pause on {follower}: {pause.status_code}"
        )

        def paused_now() -> bool | Miss:
            r = self.client(follower).get("/auto-scavenge/status")
            return (r.status_code == 200 and r.json()["state"] == "Paused") or Miss(
                f"{r.status_code} {r.text}"
            )

        wait_until(paused_now, 60, "the cluster scavenge to be Paused", interval=0.2, tolerate=TRANSIENT)
        paused = self.client(follower).get("/auto-scavenge/progress").json()
        self.findings.expect(
            paused["clusterScavengeId"] and len(paused["members"]) == 4 and paused["paused"],
            f"paused mid-cycle with 4 members: {paused}",
        )
        self.findings.expect(
            len(paused["done"]) < 4, f"the pause came after the last node was done: {paused['done']}"
        )
        resume = self.client(follower).post("/auto-scavenge/resume")
        self.findings.expect(
            resume.status_code == 200, f"POST /auto-scavenge/resume on {follower}: {resume.status_code}"
        )

        def completed() -> dict | Miss:
            r = self.client(follower).get("/auto-scavenge/progress", timeout=5)
            body = r.json() if r.status_code == 200 else {}
            return body if body.get("lastCompletedAt") else Miss(f"{r.status_code} {r.text[:400]}")

        wait_until(completed, 120, "the cluster scavenge to complete", interval=0.2, tolerate=TRANSIENT)
        # what the day expects of each node's scavenge history, from the leader's own record of the
        # cycle: each node scavenge's result; one that a $paused follows before its result was stopped
        # by the pause (and started again on resume). The pause may stop another node's scavenge than
        # the one seen running before it was sent (the leader may have gone on to the next node first)
        # or none (it ended on its own before the stop reached it: its result is recorded first).
        by_endpoint = {e: n for n, e in self.endpoints().items()}
        events = self.auto_scavenges()

        def name_of(data: dict) -> str:
            return str(by_endpoint.get(f"{data['nodeId']['address']}:{data['nodeId']['port']}"))

        completions = []
        started: str | None = None  # the node whose scavenge runs (started, no result yet)
        for e in events:
            if e["eventType"] == "$node-scavenge-started":
                started = name_of(e["data"])
            elif e["eventType"] == "$node-scavenge-completed":
                completions.append((name_of(e["data"]), e["data"]))
                self.scavenges.setdefault(name_of(e["data"]), []).append(e["data"]["result"])
                started = None
            elif e["eventType"] == "$paused" and started is not None:
                self.log(f"   the pause stopped the node scavenge of {started}")
                self.scavenges.setdefault(started, []).append("Stopped")
                started = None
        results = [data["result"] for _, data in completions]
        self.findings.expect(
            results == ["Success"] * 4, f"$node-scavenge-completed results in $auto-scavenges: {results}"
        )
        kinds = [e["eventType"] for e in events]
        pausing = [k for k in kinds if k in ("$pause-requested", "$paused", "$resumed")]
        expected = ["$pause-requested"] * (pause.status_code == 202) + ["$paused", "$resumed"]
        self.findings.expect(pausing == expected, f"the pause and resume in $auto-scavenges: {kinds}")
        order = [str(name) for name, _ in completions]
        self.scavenged_last = order[-1] if order else None
        self.log(f"   scavenged in order {', '.join(order)}; the leader was {leader}")
        self.findings.expect(
            order and order[-1] == leader and sorted(order) == sorted(self.names()),
            f"every node scavenged once, the leader {leader} last: {order}",
        )
        self.findings.expect(self.leader() != leader, f"{leader} still leads after the cycle")

    def auto_scavenges(self) -> list[dict]:
        """``$auto-scavenges`` on the leader, oldest first."""
        leader = self.leader()
        page = self.client(leader).get("/streams/%24auto-scavenges/0/forward/200?embed=body").json()
        return page["entries"][::-1]

    def differential_backup(self) -> None:
        """Of the followers, the one whose scavenge was not the cycle's last (the leader's): restarted in
        step 5, its ``/admin/scavenge/last`` must still name its own scavenge, not the newest of all."""
        followers = sorted(self.followers(), key=lambda n: n == self.scavenged_last)
        name = self.backed_up = followers[0]
        done = self.backup(name, differential=True)
        self.log(f"   differential backup of {name}: {(done.stderr.strip().splitlines() or [''])[-1]}")
        verify = self.run_tool("evdb", "backup", "verify", str(self.backups[name]))
        self.findings.expect(
            verify.returncode == 0, f"evdb backup verify {self.backups[name]}: {verify.stdout}{verify.stderr}"
        )

    def redact(self) -> None:
        for name in self.names():
            self.redact_on(name)

    def redact_on(self, name: str) -> None:
        events = f"{REDACTED_NUMBER}@{REDACTED_STREAM}"
        done = self.run_tool("evdb-redact", "--db", self.node(name)["db"], "--events", events)
        self.findings.expect(
            done.returncode == 0,
            f"evdb-redact on {name} exited {done.returncode}: {done.stdout}{done.stderr}",
        )
        self.redacted_on.add(name)

    def redaction_state(self, name: str) -> bool | None:
        path = f"/streams/{REDACTED_STREAM}/{REDACTED_NUMBER}/forward/1?embed=body"
        entries = self.client(name).get(path).json().get("entries") or [{}]
        return entries[0].get("isRedacted")

    def kill_and_restore(self) -> None:
        name = self.backed_up
        assert name is not None
        self.findings.expect(
            self.gossip_state(name) == "Follower", f"{name} is not a follower any more: {self.states()}"
        )
        pid = self.node(name)["pid"]
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: name not in {n["name"] for n in self.local.running_nodes()}, 10, f"{name} to end")
        done = self.run_tool(
            "evdb", "restore", "--from", str(self.backups[name]), "--db", self.node(name)["db"], "--overwrite"
        )
        assert done.returncode == 0, f"evdb restore into {name}: {done.stdout}{done.stderr}"
        self.local.start_node(name)
        self._clients.pop(name, None)
        wait_until(
            lambda: (state := self.gossip_state(name)) == "Follower" or Miss(state),
            60,
            f"{name} to follow",
            interval=0.2,
        )
        # caught up: every node's log ends at the same position (the writes go on: bounded retries)
        self.wait_caught_up(name)
        state = self.redaction_state(name)
        self.log(f"   the redacted event on the restored {name}: isRedacted {state}")
        if state is not True:  # the backup was taken before the redaction: run it again there
            self.redacted_on.discard(name)
            self.redact_on(name)
        # the restored node was the backup's source: a full backup into a new folder (spec rule 6)
        self.backups[name] = self.root / f"backup-{name}-after-restore"
        self.backup(name, differential=False)
        verify = self.run_tool("evdb", "backup", "verify", str(self.backups[name]))
        self.findings.expect(verify.returncode == 0, f"evdb backup verify: {verify.stdout}{verify.stderr}")

    def wait_caught_up(self, name: str, timeout: float = 60.0) -> None:
        leader = self.leader()

        def close_enough() -> bool | Miss:
            ours = self.client(name).get("/gossip").json()["members"][0]["writerCheckpoint"]
            theirs = self.client(leader).get("/gossip").json()["members"][0]["writerCheckpoint"]
            # less than a chunk behind the moving head (check_acknowledged then waits for every write)
            return theirs - ours < 64 * 1024 or Miss(f"{name} at {ours}, the leader at {theirs}")

        wait_until(
            close_enough, timeout, f"{name} to catch up with {leader}", interval=0.2, tolerate=TRANSIENT
        )

    # -- checks -----------------------------------------------------------------------------------------
    def check(self) -> None:
        began = time.monotonic()
        for one in (
            self.check_acknowledged,
            self.check_forwarding,
            self.check_scavenge_history,
            self.check_redaction,
            self.check_dashboard,
        ):
            try:
                one()
            except Exception as exc:
                self.findings.expect(False, f"{one.__name__} could not run: {type(exc).__name__}: {exc}")
        self.log(f"   checks: {time.monotonic() - began:.1f} s")

    def check_acknowledged(self, timeout: float = 30.0) -> None:
        """Every append acknowledged so far is on every node at its stream, number and position; each
        node's ``$all`` is a prefix of the longest (same events, same order)."""
        assert self.load is not None
        appends = self.load.appends()
        acknowledged = sum(1 for a in appends if a.outcome == ACKED)
        deadline = time.monotonic() + timeout
        while True:
            logs = {}
            for name in self.names():
                try:
                    logs[name], _ = self.load.read_all(name)
                except (httpx.HTTPError, ValueError, KeyError, StopIteration) as exc:
                    logs = None
                    problem = f"reading $all on {name}: {type(exc).__name__}: {exc}"
                    break
            if logs is not None:
                violations = check(appends, logs, healed=False)
                if not violations:
                    sizes = ", ".join(f"{n} {len(v)}" for n, v in logs.items())
                    self.log(f"   {acknowledged} acknowledged appends on every node ($all events: {sizes})")
                    return
                problem = "; ".join(str(v) for v in violations[:5]) + f" ({len(violations)} violations)"
            if time.monotonic() >= deadline:
                self.findings.expect(False, f"acknowledged writes: {problem}")
                return
            time.sleep(0.5)

    def check_forwarding(self) -> None:
        """Every node that is not the leader answers what it forwards to the leader as the leader does."""
        leader = self.leader()
        own = self.client(leader).get("/auto-scavenge/status")
        self.findings.expect(
            own.status_code == 200,
            f"GET /auto-scavenge/status on the leader {leader}: {own.status_code} {own.text[:200]}",
        )
        for name in self.names():
            if name == leader:
                continue
            for path in ("/auto-scavenge/status", "/auto-scavenge/progress"):
                r = self.client(name).get(path)
                self.findings.expect(
                    r.status_code == 200, f"GET {path} on {name}: {r.status_code} {r.text[:200]}"
                )
            r = self.client(name).get("/auto-scavenge/status")
            if r.status_code == 200 and own.status_code == 200:
                self.findings.expect(
                    r.json()["state"] == own.json()["state"],
                    f"{name} forwards /auto-scavenge/status: {r.json()} but the leader says {own.json()}",
                )
                if r.json()["state"] in ("Waiting", "NotConfigured"):  # nothing to resume: a no-op
                    r = self.client(name).post("/auto-scavenge/resume")
                    self.findings.expect(
                        r.status_code == 200,
                        f"POST /auto-scavenge/resume on {name}: {r.status_code} {r.text[:200]}",
                    )
            r = self.client(name).post(
                f"/streams/forwarded-{name}",
                json={"through": name},
                headers={"Kurrent-EventType": "Forwarded", "Kurrent-EventId": str(uuid.uuid4())},
            )
            self.findings.expect(
                r.status_code == 201, f"a write forwarded by {name}: {r.status_code} {r.text[:200]}"
            )

    def scavenge_records(self, name: str) -> list[dict]:
        """The scavenges linked in ``$scavenges`` on node ``name``, oldest first: id, node, result."""
        c = self.client(name)
        # the links themselves ("0@$scavenges-{id}"), not the events they point to (stream reads
        # resolve links by default, as KurrentDB's)
        page = c.get(
            "/streams/%24scavenges/0/forward/200?embed=body", headers={"Kurrent-ResolveLinkTos": "false"}
        )
        if page.status_code == 404:
            return []
        page.raise_for_status()
        ids: list[str] = []
        for entry in page.json()["entries"][::-1]:
            target = str(entry.get("data", "")).partition("@")[2]
            scavenge_id = target.removeprefix("$scavenges-")
            if scavenge_id and scavenge_id not in ids:
                ids.append(scavenge_id)
        records = []
        for scavenge_id in ids:
            stream = quote(f"$scavenges-{scavenge_id}", safe="")
            events = c.get(f"/streams/{stream}/0/forward/4096?embed=body").json()["entries"][::-1]
            last = events[-1] if events else {}
            data = last.get("data") if isinstance(last.get("data"), dict) else {}
            records.append(
                {
                    "id": scavenge_id,
                    "node": (events[0].get("data") or {}).get("nodeEndpoint") if events else None,
                    "result": data.get("result") if last.get("eventType") == "$scavengeCompleted" else None,
                }
            )
        return records

    def check_scavenge_history(self) -> None:
        endpoints = self.endpoints()
        by_endpoint = {e: n for n, e in endpoints.items()}
        reference = None
        for name in self.names():
            records = self.scavenge_records(name)
            if reference is None:
                reference = records
                for node in self.names():
                    theirs = [r["result"] for r in records if r["node"] == endpoints[node]]
                    expected = self.scavenges.get(node, [])
                    self.findings.expect(
                        theirs == expected,
                        f"the scavenges of {node} in $scavenges: {theirs}, expected {expected}",
                    )
                strangers = [r for r in records if r["node"] not in by_endpoint]
                self.findings.expect(not strangers, f"scavenges of unknown nodes: {strangers}")
            else:
                self.findings.expect(
                    records == reference, f"$scavenges on {name} differs: {records} vs {reference}"
                )
            last = self.client(name).get("/admin/scavenge/last")
            body = last.json() if last.status_code == 200 else {}
            own = [r for r in records if r["node"] == endpoints[name]]
            if own:
                named = next((r for r in records if r["id"] == body.get("scavengeId")), None)
                why = ""
                if named and named["node"] != endpoints[name]:
                    why = (
                        f"; it names {named['node']}'s scavenge: a restarted node answers the newest "
                        "scavenge linked in $scavenges, whichever node ran it "
                        "(evdb/scavenge/service.py ScavengeService._last_from_streams)"
                    )
                self.findings.expect(
                    body.get("scavengeId") == own[-1]["id"]
                    and body.get("scavengeResult") == own[-1]["result"],
                    f"GET /admin/scavenge/last on {name} answers {last.status_code} {body}, its own last "
                    f"scavenge is {own[-1]}{why}",
                )

    def check_redaction(self) -> None:
        for name in self.names():
            state = self.redaction_state(name)
            expected = name in self.redacted_on
            self.findings.expect(
                state is expected,
                f"{REDACTED_NUMBER}@{REDACTED_STREAM} on {name}: isRedacted {state}, expected {expected}",
            )

    def check_dashboard(self, timeout: float = 20.0) -> None:
        """The dashboard's collectors, polling the real nodes: every node's role as the node reports it,
        the auto-scavenge state the leader reports, and no ``HTTP 500`` in any panel."""
        problems: list[str] = []

        def looks_right() -> bool:
            problems[:] = asyncio.run(self._dashboard_problems())
            return not problems

        try:
            wait_until(
                looks_right,
                timeout,
                "the dashboard to show what the nodes report",
                interval=0.5,
                tolerate=TRANSIENT,
            )
        except AssertionError:
            self.findings.expect(False, "the dashboard: " + "; ".join(problems))

    async def _dashboard_problems(self) -> list[str]:
        from rich.console import Console

        from evdb.clock import SystemClock
        from tui.collector import NodeCollector, normalise_url
        from tui.panels import (
            render_auto_scavenge,
            render_backup,
            render_certificates,
            render_chunks,
            render_cluster,
            render_scavenge,
        )
        from tui.state import DashboardState, NodeState

        info = self.info()
        assert self.trust is not None
        state = DashboardState()
        clock = SystemClock()
        async with httpx.AsyncClient(
            auth=(info["user"], info["password"]), verify=self.trust.context
        ) as client:
            collectors = []
            for node in info["nodes"]:
                url = normalise_url(node["url"])
                state.nodes[url] = NodeState(url=url, name=node["name"], pid=node.get("pid"))
                collectors.append(
                    NodeCollector(state.nodes[url], client, clock, timeout=5.0, ca_file=info["ca"])
                )
            await asyncio.gather(*(c.poll_once() for c in collectors))
        reported = self.states()
        leader = next((n for n, s in reported.items() if s == "Leader"), None)
        auto = self.client(leader).get("/auto-scavenge/status").json().get("state") if leader else None

        def text(renderable) -> str:
            console = Console(width=200, file=io.StringIO(), record=True)
            console.print(renderable)
            return console.export_text()

        problems = []
        panels = {
            "cluster": text(render_cluster(state, clock.time())),
            "certificates": text(render_certificates(state, clock.time())),
        }
        for node in state.ordered():
            state.selected = node.url
            panels[f"scavenge of {node.name}"] = text(render_scavenge(node))
            panels[f"chunks of {node.name}"] = text(render_chunks(node))
            panels[f"backup of {node.name}"] = text(render_backup(node))
            panels[f"auto-scavenge on {node.name}"] = text(render_auto_scavenge(state, clock.monotonic()))
            if node.role != reported[node.name]:
                problems.append(f"{node.name} shown as {node.role!r}, it reports {reported[node.name]!r}")
            if node.error:
                problems.append(f"{node.name} shown with the error {node.error!r}")
            shown = node.auto_scavenge.state if node.auto_scavenge else None
            if shown != auto:
                problems.append(
                    f"auto-scavenge on {node.name} shown as {shown!r}, the leader reports {auto!r}"
                )
        for panel, shown in panels.items():
            if "HTTP 500" in shown:
                line = next(line for line in shown.splitlines() if "HTTP 500" in line)
                problems.append(f"the {panel} panel shows {line.strip()!r}")
        return problems

    # -- the end ----------------------------------------------------------------------------------------
    def finish(self, timeout: float = 30.0) -> None:
        """Stop the client load; every node's ``$all`` then becomes the same log (bounded wait), which
        holds every acknowledged append (invariants.check, healed)."""
        assert self.load is not None
        self.load.stop()
        appends = self.load.appends()
        logs: dict[str, list] = {}

        def the_same() -> bool | Miss:
            logs.clear()
            logs.update({name: self.load.read_all(name)[0] for name in self.names()})
            sizes = {name: len(log) for name, log in logs.items()}
            return len({tuple(log) for log in logs.values()}) == 1 or Miss(f"$all events: {sizes}")

        try:
            wait_until(
                the_same, timeout, "every node's $all to be the same", interval=0.5, tolerate=TRANSIENT
            )
        except AssertionError as exc:
            self.findings.expect(False, str(exc))
        violations = check(appends, logs, healed=True)
        self.findings.expect(
            not violations, "; ".join(str(v) for v in violations[:5]) + f" ({len(violations)} violations)"
        )
        acknowledged = sum(1 for a in appends if a.outcome == ACKED)
        events = max((len(log) for log in logs.values()), default=0)
        self.log(f"   {acknowledged} acknowledged appends; $all: {events} events, the same on every node")

    def close(self) -> None:
        if self.load is not None:
            self.load.stop()
            self.load.close()
        for c in self._clients.values():
            with contextlib.suppress(Exception):
                c.close()
        if self.local.exists():
            stop_cluster(self.local)
