"""kill -9 of a node whose scavenge runs in its worker processes (chunks of 16 MiB: the default path),
also while a client appends and the scavenge paces its copies (issue 38).

A real ``evdb node`` process scavenges a database of 16 MiB chunks; it is killed with SIGKILL while a
worker writes a scavenged copy (a ``*.scavenge.tmp`` file exists). Then: every worker process (and
the resource tracker multiprocessing started) exits by itself, since its parent died; the restarted
node removes each temporary file the kill left, naming it in a log line; every acknowledged event
reads back whole; a new scavenge runs to its end with Success.
"""

from __future__ import annotations

import base64
import hashlib
import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
import waiting

from evdb.database import Database
from evdb.scavenge.workers import PROCESS_MIN_CHUNK_SIZE
from evdb.streams import NewEvent

pytestmark = pytest.mark.slow

CHUNK = PROCESS_MIN_CHUNK_SIZE  # the smallest chunk whose scavenge work goes to worker processes
EVENT_SIZE = 256 * 1024
CHUNKS = 2  # completed chunks: a copy for each of the two worker processes
ADMIN = ("admin", "changeit")
READY = "Node is ready: "


def wait_until(
    probe: Callable[[], Any], timeout: float, what: str, interval: float = 0.01, last=lambda: ""
) -> Any:
    return waiting.wait_until(probe, timeout, what, interval=interval, detail=last)


class NodeProcess:
    """``evdb node`` on a database folder; its output lines are collected by a thread."""

    def __init__(self, root: Path, name: str) -> None:
        self.out_path = root / f"{name}.out"
        self.lines: queue.Queue[str] = queue.Queue()
        self._out = open(self.out_path, "w")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(
            [
                sys.executable, "-m", "evdb.cli", "node", "--insecure",
                "--db", str(root / "db"), "--log", str(root / "log"),
                "--chunk-size", str(CHUNK), "--http-port", "0", "--stats-period-sec", "0",
            ],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
            start_new_session=True,
        )  # fmt: skip
        self._thread = threading.Thread(target=self._pump, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 60
        while True:
            try:
                line = self.lines.get(timeout=0.1)
            except queue.Empty:
                line = ""
            if READY in line:
                break
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the node did not become ready:\n{self.output()}")
        self.client = httpx.Client(base_url=line.split(READY, 1)[1].strip(), auth=ADMIN, timeout=30)

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._out.write(line)
            self._out.flush()
            self.lines.put(line)

    def output(self) -> str:
        return self.out_path.read_text(errors="replace")

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(60) == 0, self.output()[-3000:]

    def close(self) -> None:
        self.client.close()
        self.kill()
        self._thread.join(5)
        self._out.close()


def build_database(db_dir: str) -> tuple[dict[str, list[tuple[str, str]]], list[str]]:
    """Completed 16 MiB chunks in which every chunk holds events a scavenge removes (hard-deleted
    streams). Returns each kept stream's (event id, data digest) in order, and the deleted streams."""
    rng = random.Random(20261124)
    kept: dict[str, list[tuple[str, str]]] = {f"keep-{k}": [] for k in range(3)}
    gone = [f"gone-{k}" for k in range(2)]
    db = Database.open(db_dir, chunk_size=CHUNK, existence_filter_capacity=10_000)
    try:
        n = 0
        while db.committed_position < CHUNKS * CHUNK:
            stream = (list(kept) + gone)[n % (len(kept) + len(gone))]
            data = rng.randbytes(EVENT_SIZE)
            event_id = uuid.UUID(int=rng.getrandbits(128))
            db.append(stream, [NewEvent("Blob", data, event_id=event_id, is_json=False)])
            if stream in kept:
                kept[stream].append((str(event_id), hashlib.sha256(data).hexdigest()))
            n += 1
        for stream in gone:
            db.delete_stream(stream, hard=True)
    finally:
        db.close()
    return kept, gone


def workers_of(pid: int) -> list[tuple[psutil.Process, str]]:
    """The node's spawned multiprocessing children (pool workers and the resource tracker), with
    their command lines."""
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    out = []
    for child in children:
        try:
            command = " ".join(child.cmdline())
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
        if "multiprocessing" in command:
            out.append((child, command))
    return out


def alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def temp_files(root: Path) -> list[str]:
    return sorted(str(p) for p in root.rglob("*.tmp"))


def read_stream(client: httpx.Client, stream: str) -> list[tuple[int, str, str]]:
    """(event number, id, data digest) of every event of ``stream``, through the node's HTTP API."""
    out: list[tuple[int, str, str]] = []
    while True:
        r = client.get(
            f"/streams/{stream}/{len(out)}/forward/20",
            params={"embed": "raw"},
            headers={"Accept": "application/vnd.kurrent.atom+json"},
        )
        assert r.status_code == 200, (stream, r.status_code, r.text[:300])
        entries = sorted(r.json()["entries"], key=lambda e: e["eventNumber"])
        out += [
            (e["eventNumber"], e["eventId"], hashlib.sha256(base64.b64decode(e["dataBase64"])).hexdigest())
            for e in entries
        ]
        if len(entries) < 20:
            return out


def scavenge_result(client: httpx.Client) -> str:
    headers = {"Accept": "application/json"}
    if client.get("/admin/scavenge/current", headers=headers).json()["scavengeId"]:
        return ""
    return client.get("/admin/scavenge/last", headers=headers).json()["scavengeResult"]


def test_kill_9_during_worker_copies_leaves_no_orphans_and_no_temp_files(tmp_path):
    db_dir = tmp_path / "db"
    kept, gone = build_database(str(db_dir))
    seen: list[psutil.Process] = []
    commands: dict[int, str] = {}
    node = NodeProcess(tmp_path, "first")
    try:
        # acknowledged over HTTP just before the scavenge starts
        extra = [{"eventId": str(uuid.uuid4()), "eventType": "Small", "data": {"i": i}} for i in range(5)]
        r = node.client.post(
            "/streams/late", json=extra, headers={"Content-Type": "application/vnd.kurrent.events+json"}
        )
        assert r.status_code == 201, r.text

        def start() -> None:
            # threshold -1: every chunk is copied again, so a second scavenge has copies to make too
            r = node.client.post(
                "/admin/scavenge",
                params={"threads": "2", "threshold": "-1"},
                headers={"Accept": "application/json"},
            )
            assert r.status_code == 200, r.text

        start()
        starts = 1

        def look() -> None:
            for w, command in workers_of(node.proc.pid):
                if w not in seen:
                    seen.append(w)
                    commands[w.pid] = command

        def copying() -> bool:
            nonlocal starts
            look()
            if any(p.endswith(".scavenge.tmp") for p in temp_files(db_dir)):
                return True
            if scavenge_result(node.client):  # it ended between two looks: scavenge again
                start()
                starts += 1
            return False

        wait_until(copying, 120, "a worker process writing a scavenged copy", interval=0.01)
        print(f"scavenges started until a copy was seen: {starts}")
        look()
        assert any("spawn_main" in c for c in commands.values()), f"no scavenge worker among {commands}"
        node.kill()
        # usually the kill leaves the copy a worker was writing (the restart below must delete it); a
        # copy that finished between the look and the kill leaves none, and the rest still holds
        left = temp_files(tmp_path)
        print(f"temporary files left by the kill: {left}")
        # every worker notices its parent died and exits
        try:
            wait_until(
                lambda: not [w for w in seen if alive(w)],
                15,
                "the orphaned worker processes to exit; still running:",
                last=lambda: [(w.pid, commands[w.pid]) for w in seen if alive(w)],
            )
        finally:
            for w in seen:  # never leave an orphan on the machine, even when the check fails
                if alive(w):
                    w.kill()
    finally:
        node.close()

    node = NodeProcess(tmp_path, "restarted")
    try:
        # every temporary file the kill left is gone, each named in a log line
        output = node.output()
        for path in left:
            assert not os.path.exists(path)
            assert any(
                "Removing leftover temporary file" in line and path in line for line in output.splitlines()
            ), (
                path,
                output[-3000:],
            )
        assert not temp_files(tmp_path)
        # every acknowledged event reads back whole
        for stream, events in kept.items():
            got = read_stream(node.client, stream)
            assert [(n, i, d) for n, (i, d) in enumerate(events)] == got, stream
        assert [e[1] for e in read_stream(node.client, "late")] == [e["eventId"] for e in extra]
        for stream in gone:
            assert node.client.get(f"/streams/{stream}").status_code == 410
        # a new scavenge runs to its end
        r = node.client.post(
            "/admin/scavenge", params={"threads": "2"}, headers={"Accept": "application/json"}
        )
        assert r.status_code == 200, r.text
        assert (
            wait_until(lambda: scavenge_result(node.client), 120, "the new scavenge to end", 0.1) == "Success"
        )
        assert not temp_files(tmp_path)
        for stream, events in kept.items():
            assert [(n, i, d) for n, (i, d) in enumerate(events)] == read_stream(node.client, stream)
        node.stop()
    finally:
        node.close()


class Appender:
    """A client appending one small event at a time over HTTP while it runs (so the scavenge's
    automatic pacing sees client flushes); remembers the ids the node acknowledged."""

    def __init__(self, base_url: str, stream: str) -> None:
        self.acknowledged: list[str] = []
        self._stop = threading.Event()
        self._client = httpx.Client(base_url=base_url, auth=ADMIN, timeout=10)
        self._stream = stream
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.003):
            event_id = str(uuid.uuid4())
            try:
                r = self._client.post(
                    f"/streams/{self._stream}",
                    json=[{"eventId": event_id, "eventType": "Load", "data": {"n": len(self.acknowledged)}}],
                    headers={"Content-Type": "application/vnd.kurrent.events+json"},
                )
            except httpx.HTTPError:
                return  # the node was killed
            if r.status_code == 201:
                self.acknowledged.append(event_id)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(15)
        self._client.close()


def _kill_during_a_paced_scavenge(tmp_path: Path, name: str, moment: float | None) -> list[str]:
    """Start a node and a client appending to it, start a scavenge of every chunk and kill -9 the
    node ``moment`` seconds later (None: as soon as a copy is being written); check every worker
    process exits. Returns the ids of the events the node acknowledged."""
    db_dir = tmp_path / "db"
    node = NodeProcess(tmp_path, name)
    seen: list[psutil.Process] = []
    appender = Appender(str(node.client.base_url), "load")
    try:
        wait_until(lambda: len(appender.acknowledged) >= 5, 60, "the client's first appends")
        r = node.client.post(
            "/admin/scavenge", params={"threshold": "-1"}, headers={"Accept": "application/json"}
        )
        assert r.status_code == 200, r.text

        def look() -> None:
            seen.extend(w for w, _ in workers_of(node.proc.pid) if w not in seen)

        def copying() -> bool:
            look()
            return any(p.endswith(".scavenge.tmp") for p in temp_files(db_dir)) or bool(
                scavenge_result(node.client)
            )

        if moment is None:
            wait_until(copying, 120, "a copy being written (or the scavenge's end)")
        else:
            deadline = time.monotonic() + moment
            while time.monotonic() < deadline:
                look()
                time.sleep(0.02)
        look()
        node.kill()
        try:
            wait_until(lambda: not [w for w in seen if alive(w)], 15, "the orphaned workers to exit")
        finally:
            for w in seen:  # never leave an orphan on the machine, even when the check fails
                if alive(w):
                    w.kill()
    finally:
        appender.stop()
        node.close()
    return appender.acknowledged


def test_kill_9_at_moments_of_a_paced_scavenge_leaves_no_orphan_and_the_next_one_completes(tmp_path):
    """A client appends throughout, so the copies are paced (each waits for its writes and rests);
    the node is killed once while a copy is written and once at a random moment after a start; after
    each kill no worker is left running; the restarted node removes what the kills left, every
    acknowledged event reads back, and a paced scavenge completes."""
    kept, _ = build_database(str(tmp_path / "db"))
    moment = random.Random(38).uniform(0.0, 1.5)
    acknowledged = _kill_during_a_paced_scavenge(tmp_path, "first", None)
    acknowledged += _kill_during_a_paced_scavenge(tmp_path, "second", moment)
    node = NodeProcess(tmp_path, "last")
    appender = Appender(str(node.client.base_url), "load")
    try:
        assert not temp_files(tmp_path)
        # the client is writing before the scavenge starts, and the scavenge copies every chunk
        # (a killed run may have ended before its kill): there are copies to pace
        wait_until(lambda: len(appender.acknowledged) >= 5, 60, "the client's first appends")
        r = node.client.post(
            "/admin/scavenge", params={"threshold": "-1"}, headers={"Accept": "application/json"}
        )
        assert r.status_code == 200, r.text
        assert wait_until(lambda: scavenge_result(node.client), 120, "the scavenge to end", 0.1) == "Success"
        appender.stop()
        acknowledged += appender.acknowledged
        paced = [line for line in node.output().splitlines() if "Automatic pacing:" in line]
        assert paced and " 0 client flushes" not in paced[-1], paced
        assert not temp_files(tmp_path)
        for stream, events in kept.items():
            assert [(n, i, d) for n, (i, d) in enumerate(events)] == read_stream(node.client, stream)
        assert set(acknowledged) <= {e[1] for e in read_stream(node.client, "load")}
        node.stop()
    finally:
        appender.stop()
        node.close()
