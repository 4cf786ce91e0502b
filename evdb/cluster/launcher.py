"""``evdb cluster up|status|down``: a local cluster of real node processes on loopback ports.

The data folder holds everything: ``certs/`` (a CA and one certificate per node, in generations
``certs/gen-N/`` read through the symlinks ``certs/ca`` and ``certs/nodeN/{ca,node.crt,node.key}``
that ``evdb certs rotate`` repoints), ``nodeN/`` (the
node's ``node.yaml``, ``db/``, ``log/`` and ``stdout.log``) and ``cluster.json``, which names the
nodes (http url, pid, folders), the CA file and the admin credentials. ``up`` on a folder whose
cluster is running reuses it; on a stopped one it starts the same nodes again on the same ports.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

__all__ = ["ClusterLaunchError", "LocalCluster", "default_data_dir"]

ADMIN = ("admin", "changeit")


class ClusterLaunchError(Exception):
    pass


def default_data_dir() -> Path:
    """Where ``evdb dashboard`` keeps its local cluster: ``$XDG_DATA_HOME/evdb/local-cluster``."""
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "evdb" / "local-cluster"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _pid_alive(pid: int, config: str | None = None) -> bool:
    """Whether ``pid`` is a live process, and (given ``config``) the evdb node started with that
    configuration file: a zombie (ours or another process's) is dead, and so is a pid that the system
    has given to another program since."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:  # a zombie child of ours: reap it
        waited, _ = os.waitpid(pid, os.WNOHANG)
        if waited:
            return False
    except ChildProcessError:
        pass
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] in ("Z", "X"):  # zombie or dead, whoever its parent is
            return False
        if config is not None and os.fsencode(config) not in Path(f"/proc/{pid}/cmdline").read_bytes():
            return False  # the pid now belongs to something else
    except FileNotFoundError:
        return False
    except OSError:  # no /proc here: what kill(0) said
        pass
    return True


def _reap_when_done(process: subprocess.Popen) -> None:
    """Wait for a started node in the background, so one that dies (kill -9, a crash) while this
    process (the dashboard, a test) lives on never lingers as a zombie."""
    threading.Thread(target=process.wait, name=f"reap-{process.pid}", daemon=True).start()


def _node_alive(node: dict) -> bool:
    pid = node.get("pid")
    return _pid_alive(int(pid), node.get("config")) if pid else False


class LocalCluster:
    def __init__(self, data_dir: str | os.PathLike[str]) -> None:
        self.data_dir = Path(data_dir).expanduser().resolve()
        self.info_path = self.data_dir / "cluster.json"

    # -- facts -----------------------------------------------------------------------------------------
    def info(self) -> dict[str, Any]:
        try:
            return json.loads(self.info_path.read_text())
        except FileNotFoundError:
            raise ClusterLaunchError(
                f"No cluster in {self.data_dir} (run: evdb cluster up --data {self.data_dir})"
            ) from None

    def exists(self) -> bool:
        return self.info_path.exists()

    def running_nodes(self) -> list[dict]:
        return [n for n in self.info().get("nodes", []) if _node_alive(n)]

    def client(self, url: str, timeout: float = 5.0) -> httpx.Client:
        info = self.info()
        verify: Any = ssl.create_default_context(cafile=info["ca"]) if info.get("ca") else False
        return httpx.Client(
            base_url=url, auth=(info["user"], info["password"]), verify=verify, timeout=timeout
        )

    def status(self) -> list[dict]:
        """Each node's name, url, pid and its own gossip state (or why it could not be read)."""
        out = []
        for node in self.info()["nodes"]:
            alive = _node_alive(node)  # a dead or reused pid is never shown as the node's
            row = {
                "name": node["name"],
                "url": node["url"],
                "pid": node.get("pid") if alive else None,
                "state": "Down",
            }
            if alive:
                try:
                    with self.client(node["url"], timeout=2) as c:
                        body = c.get("/gossip").json()
                    own = body["members"][0]
                    row.update(state=own["state"], writer=own["writerCheckpoint"], epoch=own["epochNumber"])
                except (httpx.HTTPError, ValueError, KeyError, IndexError) as exc:
                    row["state"] = f"Unreachable ({type(exc).__name__})"
            out.append(row)
        return out

    # -- up --------------------------------------------------------------------------------------------
    def up(
        self,
        *,
        nodes: int = 3,
        replicas: int = 0,
        insecure: bool = False,
        chunk_size: str | None = None,
        extra: dict[str, Any] | None = None,
        timeout: float = 60.0,
        log=print,
    ) -> dict[str, Any]:
        """Start the cluster (creating it on first use) and wait until it has a leader."""
        if not self.exists():
            self._create(nodes, replicas, insecure, chunk_size, extra or {})
            log(
                f"Created a {nodes}-node cluster{f' with {replicas} read-only replica(s)' if replicas else ''} in {self.data_dir}"
            )
        info = self.info()
        for node in info["nodes"]:
            if _node_alive(node):  # exactly the nodes that are not running are started
                continue
            node["pid"] = self._start_node(node)
            log(f"Started {node['name']} (pid {node['pid']}) at {node['url']}")
        self._write_info(info)
        self.wait_for_leader(timeout)
        return info

    def create(
        self,
        *,
        nodes: int = 3,
        replicas: int = 0,
        insecure: bool = False,
        chunk_size: str | None = None,
        extra: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Write the cluster's folders, certificates and node configurations without starting it (to
        restore a backup into every node's folders first, say); ``up`` then starts it."""
        if self.exists():
            raise ClusterLaunchError(f"A cluster already exists in {self.data_dir}.")
        self._create(nodes, replicas, insecure, chunk_size, extra or {})
        return self.info()

    def _create(self, nodes: int, replicas: int, insecure: bool, chunk_size: str | None, extra: dict) -> None:
        if nodes < 1 or replicas < 0 or nodes + replicas > 9:
            raise ClusterLaunchError("A local cluster has 1 to 9 nodes and replicas in all.")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        ca_file = None
        if not insecure:
            from evdb.tls.certs import create_ca, create_node_certificate, repoint_link

            # certificates live in generations (certs/gen-1/...); the nodes and cluster.json read them
            # through symlinks (certs/ca, certs/nodeN/{ca,node.crt,node.key}) that `evdb certs rotate`
            # repoints to the next generation
            certs = self.data_dir / "certs"
            generation = certs / "gen-1"
            ca_cert, ca_key = create_ca(generation / "ca", force=True)
            repoint_link(certs / "ca", os.path.relpath(generation / "ca", certs))
            ca_file = str(certs / "ca" / "ca.crt")
        members = []
        for i in range(nodes + replicas):
            members.append({"http": _free_port(), "replication": _free_port(), "replica": i >= nodes})
        seeds = [f"127.0.0.1:{m['http']}" for m in members]
        from evdb.licensing.issuers import issue_demo_license

        demo_license = issue_demo_license(time.time())  # so the local cluster shows every feature
        entries = []
        for i, member in enumerate(members):
            name = f"node{i + 1}" if not member["replica"] else f"replica{i - nodes + 1}"
            folder = self.data_dir / name
            folder.mkdir(parents=True, exist_ok=True)
            config: dict[str, Any] = {
                "Db": str(folder / "db"),
                "Log": str(folder / "log"),
                "HttpIp": "127.0.0.1",
                "HttpPort": member["http"],
                "ReplicationPort": member["replication"],
                "ClusterSize": nodes,
                "GossipSeed": ",".join(s for j, s in enumerate(seeds) if j != i),
                "ReadOnlyReplica": member["replica"],
                "GossipIntervalMs": 500,
                "GossipTimeoutMs": 2000,
                "StatsPeriodSec": 0,
                "LicenseKey": demo_license,
                "LicenseTrustedIssuers": "demo",  # a local cluster only: anyone can sign demo licences
                **extra,
            }
            if chunk_size:
                config["ChunkSize"] = chunk_size
            if insecure:
                config["Insecure"] = True
            else:
                cert, key = create_node_certificate(
                    ca_cert, ca_key, generation / name, ip_addresses=["127.0.0.1"], force=True
                )
                links = certs / name
                links.mkdir(parents=True, exist_ok=True)
                for link, target in (("ca", generation / "ca"), ("node.crt", cert), ("node.key", key)):
                    repoint_link(links / link, os.path.relpath(target, links))
                config.update(
                    CertificateFile=str(links / "node.crt"),
                    CertificatePrivateKeyFile=str(links / "node.key"),
                    TrustedRootCertificatesPath=str(links / "ca"),
                )
            import yaml

            (folder / "node.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
            scheme = "http" if insecure else "https"
            entries.append(
                {
                    "name": name,
                    "url": f"{scheme}://127.0.0.1:{member['http']}",
                    "config": str(folder / "node.yaml"),
                    "db": str(folder / "db"),
                    "log_dir": str(folder / "log"),
                    "read_only_replica": member["replica"],
                    "pid": None,
                }
            )
        self._write_info({"nodes": entries, "ca": ca_file, "user": ADMIN[0], "password": ADMIN[1]})

    def _write_info(self, info: dict) -> None:
        tmp = self.info_path.with_suffix(".json.tmp")
        with open(tmp, "w") as f:
            json.dump(info, f, indent=2)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.info_path)

    def _start_node(self, node: dict) -> int:
        folder = Path(node["config"]).parent
        with open(folder / "stdout.log", "ab") as out:
            process = subprocess.Popen(
                [sys.executable, "-m", "evdb.cli", "node", "--config", node["config"]],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                cwd=folder,
            )
        _reap_when_done(process)
        return process.pid

    def start_node(self, name: str) -> int:
        """(Re)start one node of the cluster; returns its pid."""
        info = self.info()
        node = next(n for n in info["nodes"] if n["name"] == name)
        if _node_alive(node):
            return node["pid"]
        node["pid"] = self._start_node(node)
        self._write_info(info)
        return node["pid"]

    def wait_for_leader(self, timeout: float = 60.0) -> str:
        """Wait until one running node is Leader and every other running node follows it; its url."""
        deadline = time.monotonic() + timeout
        last = "no answer yet"
        while time.monotonic() < deadline:
            rows = [r for r in self.status() if r["state"] != "Down"]
            leaders = [r for r in rows if r["state"] == "Leader"]
            settled = all(r["state"] in ("Leader", "Follower", "ReadOnlyReplica") for r in rows)
            if len(leaders) == 1 and settled and self._credentials_work(leaders[0]["url"]):
                return leaders[0]["url"]
            last = ", ".join(f"{r['name']}: {r['state']}" for r in rows)
            time.sleep(0.2)
        raise ClusterLaunchError(
            f"No leader elected within {timeout:.0f} s ({last}); see the nodes' stdout.log"
        )

    def _credentials_work(self, url: str) -> bool:
        """The new leader creates the default users just after taking office: wait for them too."""
        try:
            with self.client(url, timeout=2) as c:
                return c.get("/users/admin").status_code == 200
        except httpx.HTTPError:
            return False

    # -- down ------------------------------------------------------------------------------------------
    def down(self, timeout: float = 15.0, log=print) -> None:
        """Stop every node: /admin/shutdown, then SIGTERM, then SIGKILL for any still running."""
        info = self.info()
        running = [n for n in info["nodes"] if _node_alive(n)]
        for node in running:
            try:
                with self.client(node["url"], timeout=2) as c:
                    c.post("/admin/shutdown")
            except httpx.HTTPError:
                os.kill(node["pid"], signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(_pid_alive(n["pid"]) for n in running):
            time.sleep(0.1)
        for node in running:
            if _pid_alive(node["pid"]):
                log(f"{node['name']} did not stop in {timeout:.0f} s: killing it")
                os.kill(node["pid"], signal.SIGKILL)
        for node in info["nodes"]:
            node["pid"] = None
        self._write_info(info)
        log(f"Stopped {len(running)} node(s)")
