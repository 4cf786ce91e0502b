"""Helpers: real node processes (``evdb node --insecure --mem-db``, free ports) and ``evdb mirror`` processes."""

from __future__ import annotations

import os
import queue
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
import waiting

ADMIN = ("admin", "changeit")
READY = "Node is ready: "


def wait_until(probe: Callable[[], Any], timeout: float, what: str, interval: float = 0.05) -> Any:
    """tests/waiting.py's wait, taking a failed HTTP call or a half-written answer as "not yet"."""
    return waiting.wait_until(
        probe, timeout, what, interval=interval, tolerate=(httpx.HTTPError, ValueError, KeyError)
    )


class Process:
    """A child process whose output lines are collected by a thread (and kept in a file)."""

    def __init__(self, args: list[str], log_path: Path) -> None:
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self.lines: queue.Queue[str] = queue.Queue()
        self._log = open(log_path, "a")  # noqa: SIM115 - closed in wait/stop
        self.proc = subprocess.Popen(
            args,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
        self._thread = threading.Thread(target=self._pump, daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._log.write(line)
            self._log.flush()
            self.lines.put(line)

    def wait_for_line(self, prefix_in_line: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.1)
            except queue.Empty:
                if self.proc.poll() is not None:
                    break
                continue
            if prefix_in_line in line:
                return line
        raise AssertionError(f"no line with {prefix_in_line!r} in {timeout} s; output:\n{self.output()}")

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def terminate(self, timeout: float = 15) -> int:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(
                f"process {self.proc.pid} did not stop on SIGTERM:\n{self.output()}"
            ) from None

    def close(self) -> None:
        self.kill()
        self._thread.join(5)
        self._log.close()


class NodeProcess(Process):
    def __init__(self, folder: Path, name: str) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        super().__init__(
            [
                sys.executable,
                "-m",
                "evdb.cli",
                "node",
                "--insecure",
                "--mem-db",
                "--http-port",
                "0",
                "--stats-period-sec",
                "0",
                "--log",
                str(folder / "log"),
            ],
            folder / f"{name}.out",
        )
        line = self.wait_for_line(READY, 30)
        self.url = line.split(READY, 1)[1].strip()
        self.client = httpx.Client(base_url=self.url, auth=ADMIN, timeout=30)

    def append(self, stream: str, events: list[dict], expected: int | None = None) -> httpx.Response:
        headers = {"Content-Type": "application/vnd.kurrent.events+json"}
        if expected is not None:
            headers["Kurrent-ExpectedVersion"] = str(expected)
        r = self.client.post(f"/streams/{stream}", json=events, headers=headers)
        assert r.status_code == 201, (r.status_code, r.text)
        return r

    def read_all(self, embed: str = "raw") -> list[dict]:
        """Every event of $all, oldest first."""
        out: list[dict] = []
        position = 0
        while True:
            r = self.client.get(f"/streams/%24all/{position}/forward/4096", params={"embed": embed})
            assert r.status_code == 200, r.text
            body = r.json()
            entries = list(reversed(body["entries"]))
            out.extend(entries)
            previous = next(link["uri"] for link in body["links"] if link["relation"] == "previous")
            following = int(previous.rsplit("/", 3)[-3][:16], 16)
            if not entries or following <= position:
                return out
            position = following

    def close(self) -> None:
        self.client.close()
        super().close()


def new_events(n: int, event_type: str = "Happened", **data: Any) -> list[dict]:
    return [
        {
            "eventId": str(uuid.uuid4()),
            "eventType": event_type,
            "data": {"i": i, **data},
            "metadata": {"m": i},
        }
        for i in range(n)
    ]


class MirrorProcess(Process):
    def __init__(self, source: str, target: str, checkpoint: Path, *extra: str) -> None:
        super().__init__(
            [
                sys.executable,
                "-m",
                "evdb.cli",
                "mirror",
                "--from",
                source,
                "--to",
                target,
                "--checkpoint",
                str(checkpoint),
                *extra,
            ],
            checkpoint.with_name("mirror.out"),
        )


def write_deleted_and_recreated(primary: NodeProcess) -> None:
    """History the mirror tests copy: a stream soft-deleted and recreated (which writes ``$$recreated``
    with a new ``$tb``) and a tombstoned one."""
    primary.append("recreated", new_events(2))
    assert primary.client.delete("/streams/recreated").status_code == 204
    primary.append("recreated", new_events(2), expected=1)
    primary.append("gone-hard", new_events(2))
    r = primary.client.delete("/streams/gone-hard", headers={"Kurrent-HardDelete": "true"})
    assert r.status_code == 204


def mirror_until_caught_up(primary: NodeProcess, secondary: NodeProcess, checkpoint: Path, *args: str) -> int:
    """Run ``evdb mirror`` (with ``args``) until it has copied the primary's head, then stop it
    gracefully; returns that head's position."""
    from evdb.mirror.state import MirrorPaths, read_status

    paths = MirrorPaths.of(checkpoint)
    mirror = MirrorProcess(primary.url, secondary.url, checkpoint, "--status-every", "0", *args)
    try:
        head = primary.read_all()[-1]["position"]
        wait_until(
            lambda: (s := read_status(paths.status)) and s["position"] >= head and s["caughtUp"],
            30,
            "the mirror to catch up",
        )
        assert mirror.terminate() == 0
    finally:
        mirror.close()
    return head


def stop_mirror_after(
    primary: NodeProcess,
    secondary: NodeProcess,
    checkpoint: Path,
    seconds: float,
    *args: str,
    graceful: bool = False,
    wait_for_status: bool = False,
) -> int:
    """Start ``evdb mirror``, let it run ``seconds`` after it says it is mirroring (and, with
    ``wait_for_status``, after its status file names it), then kill -9 it (or stop it gracefully);
    returns the checkpoint's position, which is never torn (an atomic replace)."""
    from evdb.mirror.state import Checkpoint, MirrorPaths, read_status

    paths = MirrorPaths.of(checkpoint)
    mirror = MirrorProcess(primary.url, secondary.url, checkpoint, "--status-every", "0", *args)
    try:
        mirror.wait_for_line("Mirroring ", 15)
        if wait_for_status:
            pid = mirror.proc.pid
            wait_until(lambda: (read_status(paths.status) or {}).get("pid") == pid, 10, "status")
        time.sleep(seconds)  # the moment to stop it at
        if graceful:
            assert mirror.terminate() == 0  # a graceful stop saves the checkpoint
        else:
            mirror.kill()
    finally:
        mirror.close()
    saved = Checkpoint.load(paths.checkpoint)
    assert saved is not None
    return saved.position
