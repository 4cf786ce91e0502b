"""The evdb side of the Node.js client suite's ``Cluster`` (tests/clients/nodejs_suite/Cluster.ts).

One launcher per ``Cluster`` of the suite: Cluster.ts starts it with the instance's folder, the node
count, TLS or not and the suite's ``setOption`` settings, and then speaks to it in JSON lines (one
request on stdin, one answer on stdout):

- at start: certificates as the suite's ``es-gencert-cli`` step writes them (``certs/ca``,
  ``certs/node<i>``, ``certs/user-admin``, ``certs/user-invalid``), the nodes started on free loopback
  ports (their databases in the folder, so a killed node comes back with its data), and once every
  node is live and, in a cluster, every node's gossip shows a leader and no unknown member:
  ``{"ready": true, "ports": [...]}``;
- ``{"kill": PORT}``: that node stopped (SIGTERM, SIGKILL after 10 s, as ``docker stop``);
- ``{"resurrect": true}``: every stopped node started again, answered once all are live;
- ``{"down": true}``: every node stopped and its database removed, then the launcher exits.

When its stdin closes (the jest worker that started it died) it stops its nodes and exits; each node
also gets SIGKILL if the launcher itself dies (``PR_SET_PDEATHSIG``). So nothing outlives the run.
An answer ``{"error": "..."}`` names what went wrong (and the node's log file).

A TLS node trusts the instance's CA, takes user certificates (KurrentDB's UserCertificates plugin,
which the suite's containers enable) with a demo licence granting them, and has the admin user's
certificate in ``certs/user-admin`` (``certs/user-invalid`` names a user that does not exist).
``EVENTSTORE_X=value`` settings become evdb's ``SERVICE_X`` (evdb refuses an option it lacks).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from evdb.free_port import free_port  # noqa: E402
from evdb.licensing.issuers import issue_demo_license  # noqa: E402
from evdb.tls.certs import create_ca, create_node_certificate  # noqa: E402
from tests.clients.user_certificates import CLIENT_USAGE, make_user_certificate  # noqa: E402

#: how long a node (or a cluster's election) may take to be ready on a loaded machine
READY_SECONDS = 120
#: docker stop's grace period before SIGKILL
STOP_SECONDS = 10
_PR_SET_PDEATHSIG = 1


def _die_with_launcher() -> None:
    """In the node's child process before exec: SIGKILL when the launcher dies."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def write_certificates(certs: Path, count: int) -> None:
    """What the suite's ``cert-gen`` container writes: a CA, a certificate per node (127.0.0.1 and
    localhost, where the nodes listen and what clients are told), and two user certificates."""
    ca_crt, ca_key = create_ca(certs / "ca", force=True)
    for i in range(count):
        create_node_certificate(ca_crt, ca_key, certs / f"node{i}", force=True)
    for user in ("admin", "invalid"):
        make_user_certificate(certs / "ca", certs / f"user-{user}", user, CLIENT_USAGE, stem=f"user-{user}")


def environment(options: list[str]) -> dict[str, str]:
    """The suite's ``setOption("EVENTSTORE_X", value)`` as evdb's ``SERVICE_X`` variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SERVICE_", "EVENTSTORE_", "KURRENTDB_"))}
    for option in options:
        key, _, value = option.partition("=")
        for prefix in ("EVENTSTORE_", "KURRENTDB_"):
            if key.startswith(prefix):
                key = "SERVICE_" + key[len(prefix) :]
        env[key] = value
    return env


class Instance:
    """The nodes of one ``Cluster``: their command lines, processes and readiness."""

    def __init__(self, folder: Path, count: int, insecure: bool, options: list[str]) -> None:
        self.folder = folder
        self.count = count
        self.insecure = insecure
        self.env = environment(options)
        self.ports = [free_port() for _ in range(count)]
        self.replication = [free_port() for _ in range(count)]
        self.processes: list[subprocess.Popen[bytes] | None] = [None] * count
        self.ca = folder / "certs" / "ca" / "ca.crt"
        self.licence = (
            "" if insecure else issue_demo_license(time.time(), entitlements=("USER_CERTIFICATES",))
        )

    def arguments(self, i: int) -> list[str]:
        port = self.ports[i]
        args = [
            "--http-ip",
            "127.0.0.1",
            "--http-port",
            str(port),
            "--advertise-host-to-client-as",
            "localhost",
            "--advertise-node-port-to-client-as",
            str(port),
            "--run-projections",
            "All",
            "--stats-period-sec",
            "0",
            "--db",
            str(self.folder / f"node{i}-db"),
            "--log",
            str(self.folder / f"node{i}-log"),
        ]
        if self.count > 1:
            seeds = ",".join(f"127.0.0.1:{p}" for p in self.ports if p != port)
            args += [
                "--cluster-size",
                str(self.count),
                "--gossip-seed",
                seeds,
                "--replication-ip",
                "127.0.0.1",
            ]
            args += ["--replication-port", str(self.replication[i])]
        if self.insecure:
            return [*args, "--insecure"]
        certs = self.folder / "certs"
        return [
            *args,
            "--certificate-file",
            str(certs / f"node{i}" / "node.crt"),
            "--certificate-private-key-file",
            str(certs / f"node{i}" / "node.key"),
            "--trusted-root-certificates-path",
            str(certs / "ca"),
            "--user-certificates-enabled",
            "true",
            "--license-key",
            self.licence,
            "--license-trusted-issuers",
            "demo",
        ]

    def start(self, i: int) -> None:
        out = open(self.folder / f"node{i}.out", "ab")  # noqa: SIM115 - the child holds it
        self.processes[i] = subprocess.Popen(
            [sys.executable, "-m", "evdb.cli", "node", *self.arguments(i)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=self.env,
            cwd=ROOT,
            preexec_fn=_die_with_launcher,
        )
        out.close()

    def stop(self, i: int) -> None:
        process = self.processes[i]
        self.processes[i] = None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def _get(self, port: int, path: str) -> httpx.Response | None:
        scheme = "http" if self.insecure else "https"
        verify: ssl.SSLContext | bool = (
            False if self.insecure else ssl.create_default_context(cafile=str(self.ca))
        )
        try:
            return httpx.get(f"{scheme}://localhost:{port}{path}", verify=verify, timeout=5)
        except httpx.HTTPError:
            return None

    def live(self, i: int) -> bool:
        answer = self._get(self.ports[i], "/health/live")
        return answer is not None and answer.status_code in (200, 204)

    def led(self, i: int) -> bool:
        """This node's gossip shows every member known and one leader (the suite's ``leaderElected``)."""
        answer = self._get(self.ports[i], "/gossip")
        if answer is None or answer.status_code != 200:
            return False
        states = [m.get("state", "Unknown") for m in answer.json().get("members", [])]
        return len(states) == self.count and "Unknown" not in states and states.count("Leader") == 1

    def wait(self, what: str, ready: Callable[[int], bool], nodes: list[int]) -> None:
        deadline = time.monotonic() + READY_SECONDS
        waiting = set(nodes)
        while waiting:
            for i in sorted(waiting):
                process = self.processes[i]
                if process is not None and process.poll() is not None:
                    raise RuntimeError(
                        f"node{i} (port {self.ports[i]}) exited with {process.returncode}: "
                        f"see {self.folder / f'node{i}.out'}"
                    )
                if ready(i):
                    waiting.discard(i)
            if waiting and time.monotonic() > deadline:
                names = ", ".join(f"node{i} ({self.folder / f'node{i}.out'})" for i in sorted(waiting))
                raise RuntimeError(f"{what} not reached in {READY_SECONDS} s by {names}")
            if waiting:
                time.sleep(0.2)

    def up(self) -> dict[str, object]:
        write_certificates(self.folder / "certs", self.count)
        for i in range(self.count):
            self.start(i)
        every = list(range(self.count))
        self.wait("liveness", self.live, every)
        self.wait("a leader", self.led, every)
        return {"ready": True, "ports": self.ports}

    def kill(self, port: int) -> dict[str, object]:
        if port not in self.ports:
            raise RuntimeError(f"no node of this cluster listens on {port} (its ports: {self.ports})")
        self.stop(self.ports.index(port))
        return {"killed": port}

    def resurrect(self) -> dict[str, object]:
        stopped = [i for i, p in enumerate(self.processes) if p is None or p.poll() is not None]
        for i in stopped:
            self.start(i)
        self.wait("liveness", self.live, list(range(self.count)))
        return {"resurrected": [self.ports[i] for i in stopped]}

    def down(self) -> None:
        """Every node stopped and its database removed (a chunk file is 256 MiB); logs are kept."""
        for i in range(self.count):
            self.stop(i)
            shutil.rmtree(self.folder / f"node{i}-db", ignore_errors=True)


def serve(instance: Instance, requests, answers) -> None:
    def answer(message: dict[str, object]) -> None:
        answers.write(json.dumps(message) + "\n")
        answers.flush()

    try:
        answer(instance.up())
        for line in requests:
            if not line.strip():
                continue
            request = json.loads(line)
            try:
                if "kill" in request:
                    answer(instance.kill(int(request["kill"])))
                elif "resurrect" in request:
                    answer(instance.resurrect())
                elif "down" in request:
                    break
                else:
                    answer({"error": f"unknown request {line.strip()}"})
            except RuntimeError as error:
                answer({"error": str(error)})
    except RuntimeError as error:
        answer({"error": str(error)})
    finally:
        instance.down()
    answer({"down": True})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--folder", required=True, help="the instance's folder (certificates, data, logs)")
    parser.add_argument("--count", type=int, default=1)
    parser.add_argument("--insecure", action="store_true")
    parser.add_argument(
        "--option", action="append", default=[], help="EVENTSTORE_X=value (the suite's setOption)"
    )
    args = parser.parse_args(argv)
    folder = Path(args.folder).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    # a SIGTERM (the runner stopping) stops the nodes as stdin's end does
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    instance = Instance(folder, args.count, args.insecure, args.option)
    try:
        serve(instance, sys.stdin, sys.stdout)
    finally:
        instance.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
