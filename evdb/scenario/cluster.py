"""The nodes a scenario drives: the launched local cluster (``evdb.cluster.launcher``), nodes restored
from backups, and the HTTP calls, kills and restarts the steps make on them."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from evdb.cluster.launcher import LocalCluster
from evdb.scenario.schema import EVDB_PROGRAMS
from evdb.tls.trust import FollowedTrust

__all__ = ["ScenarioCluster", "ScenarioNode", "StepFailed", "program", "substitution_values"]


#: how long a step naming a role (leader, follower2, ...) waits for a node in it
ROLE_WAIT_SECONDS = 30.0


class StepFailed(Exception):
    """A step could not do what it says, or what it checks did not hold."""


@dataclass
class ScenarioNode:
    name: str
    url: str
    cluster: LocalCluster
    db: str
    log_dir: str
    read_only_replica: bool = False

    @property
    def pid(self) -> int | None:
        for node in self.cluster.info()["nodes"]:
            if node["name"] == self.name or (node["url"] == self.url):
                return node.get("pid")
        return None


class ScenarioCluster:
    """The main cluster (folder ``cluster/`` of the work folder) and any restored single nodes."""

    def __init__(self, workdir: Path, settings: dict[str, Any]) -> None:
        self.workdir = workdir
        self.settings = settings
        self.main = LocalCluster(workdir / "cluster")
        self.clusters: list[LocalCluster] = [self.main]
        self.nodes: dict[str, ScenarioNode] = {}
        self.clients: dict[Path, httpx.AsyncClient] = {}
        self.trust: dict[Path, FollowedTrust] = {}
        self.killed: ScenarioNode | None = None
        self.names: dict[str, ScenarioNode] = {}  # given by name_node steps

    # -- lifecycle -------------------------------------------------------------------------------------
    def up(self) -> dict[str, Any]:
        s = self.settings
        extra = dict(s.get("options") or {})
        archive = s.get("archive") or {}
        if archive:  # every node reads the archive; the first read-only replica uploads to it
            folder = self.workdir / "archive"
            folder.mkdir(exist_ok=True)
            extra["Archive"] = {
                "Enabled": True,
                "StorageType": "FileSystem",
                "FileSystem": {"Path": str(folder)},
            }
            extra["Archive"].update(archive)
        self.main.create(
            nodes=s["nodes"],
            replicas=s["replicas"],
            insecure=s["insecure"],
            chunk_size=s["chunk_size"],
            extra=extra,
        )
        if archive:
            self._make_archiver()
        info = self.main.up(timeout=s["timeout"], log=lambda *_: None)
        self._register(self.main, info)
        return info

    def _make_archiver(self) -> None:
        """``Archiver: true`` in the first read-only replica's node.yaml (one archiver per cluster)."""
        import yaml

        replica = next(n for n in self.main.info()["nodes"] if n["read_only_replica"])
        config = Path(replica["config"])
        settings = yaml.safe_load(config.read_text())
        settings["Archiver"] = True
        config.write_text(yaml.safe_dump(settings, sort_keys=False))

    def client(self, cluster: LocalCluster) -> httpx.AsyncClient:
        """An admin client that trusts the cluster's own CA (a restored node has another one)."""
        if cluster.data_dir not in self.clients:
            info = cluster.info()
            verify: Any = False
            if info.get("ca"):
                self.trust[cluster.data_dir] = FollowedTrust(info["ca"])
                verify = self.trust[cluster.data_dir].context
            self.clients[cluster.data_dir] = httpx.AsyncClient(
                auth=(info["user"], info["password"]),
                verify=verify,
                timeout=10.0,
                headers={"Accept": "application/json"},
            )
        trust = self.trust.get(cluster.data_dir)
        if trust is not None:
            trust.refresh()  # a rolling certificate update repoints certs/ca: trust the old and the new CA
        return self.clients[cluster.data_dir]

    def _register(self, cluster: LocalCluster, info: dict[str, Any], rename: str | None = None) -> None:
        for node in info["nodes"]:
            name = rename or node["name"]
            self.nodes[name] = ScenarioNode(
                name, node["url"], cluster, node["db"], node["log_dir"], node.get("read_only_replica", False)
            )

    def stopped_nodes(self) -> str:
        """For a failure's message: each node whose process is not running, with the end of its
        stdout.log (a scenario's work folder is gone once a CI run ends)."""
        parts = []
        for cluster in self.clusters:
            if not cluster.exists():
                continue
            for row in cluster.status():
                if row["state"] == "Down":
                    parts.append(f"{row['name']} is not running. {cluster.stdout_tail(row['name'], 12)}")
        return "\n".join(parts)

    async def close(self) -> None:
        for client in self.clients.values():
            await client.aclose()
        for cluster in self.clusters:
            if cluster.exists():
                await asyncio.to_thread(cluster.down, 15.0, lambda *_: None)

    # -- naming nodes ----------------------------------------------------------------------------------
    async def gossip_state(self, node: ScenarioNode) -> str | None:
        try:
            response = await self.client(node.cluster).get(node.url + "/gossip", timeout=2.0)
            return response.json()["members"][0]["state"]
        except (httpx.HTTPError, ValueError, KeyError, IndexError):
            return None

    async def resolve(self, name: str) -> ScenarioNode:
        """A node by name, or by role (``leader``, ``follower``, ``replica``) as the nodes report it now."""
        if name in self.nodes:
            return self.nodes[name]
        if name in self.names:
            return self.names[name]
        if name == "killed":
            if self.killed is None:
                raise StepFailed("no node was killed before this step")
            return self.killed
        roles = {"leader": "Leader", "follower": "Follower", "replica": "ReadOnlyReplica"}
        match = re.fullmatch(r"(leader|follower|replica)([1-9]?)", name)
        if match is None:
            raise StepFailed(f"there is no node {name!r} (nodes: {', '.join(self.nodes)})")
        role, nth = roles[match.group(1)], int(match.group(2) or 1)
        main_nodes = [n for n in self.nodes.values() if n.cluster is self.main]
        # a role may be vacant for a moment (an election after a resign or a kill): wait, bounded
        deadline = asyncio.get_running_loop().time() + ROLE_WAIT_SECONDS
        while True:
            states = await asyncio.gather(*(self.gossip_state(n) for n in main_nodes))
            found = [node for node, state in zip(main_nodes, states, strict=True) if state == role]
            if len(found) >= nth:
                return found[nth - 1]
            if asyncio.get_running_loop().time() >= deadline:
                break
            await asyncio.sleep(0.25)
        seen = ", ".join(f"{n.name}: {s or 'no answer'}" for n, s in zip(main_nodes, states, strict=True))
        raise StepFailed(
            f"there is no {'' if nth == 1 else f'{nth}th '}{role} after {ROLE_WAIT_SECONDS:.0f} s ({seen})"
        )

    def name_node(self, name: str, node: ScenarioNode) -> None:
        if name in self.nodes or name in ("leader", "follower", "replica", "killed"):
            raise StepFailed(f"{name!r} already names a node or a role; choose another name")
        self.names[name] = node

    # -- calls -----------------------------------------------------------------------------------------
    async def request(
        self,
        node_name: str,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        headers: dict | None = None,
        content: bytes | None = None,
        timeout: float = 30.0,
    ) -> httpx.Response:
        node = await self.resolve(node_name)
        try:
            return await self.client(node.cluster).request(
                method, node.url + path, json=json_body, headers=headers, content=content, timeout=timeout
            )
        except httpx.HTTPError as exc:
            raise StepFailed(
                f"{method} {path} on {node.name}: no answer ({exc or type(exc).__name__})"
            ) from exc

    def kill(self, node: ScenarioNode) -> int:
        pid = node.pid
        if not pid:
            raise StepFailed(f"{node.name} is not running")
        os.kill(pid, signal.SIGKILL)
        self.killed = node
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # reap it, so its pid reads as gone
            try:
                waited, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                break
            if waited:
                break
            time.sleep(0.02)
        return pid

    async def restart(self, node: ScenarioNode, timeout: float) -> int:
        pid = await asyncio.to_thread(node.cluster.start_node, self._launcher_name(node))
        deadline = time.monotonic() + timeout
        while await self.gossip_state(node) is None:
            if time.monotonic() > deadline:
                raise StepFailed(f"{node.name} (pid {pid}) did not answer /gossip within {timeout:g} s")
            await asyncio.sleep(0.2)
        return pid

    def _launcher_name(self, node: ScenarioNode) -> str:
        for entry in node.cluster.info()["nodes"]:
            if entry["url"] == node.url:
                return entry["name"]
        raise StepFailed(f"{node.name} is not a launched node")

    async def restore_node(self, name: str, backup: str, timeout: float) -> ScenarioNode:
        """A new one-node cluster whose database is the backup (``evdb restore``), started and leading."""
        if name in self.nodes or name in ("leader", "follower", "replica"):
            raise StepFailed(f"a node named {name!r} exists already")
        cluster = LocalCluster(self.workdir / f"restored-{name}")
        s = self.settings
        info = await asyncio.to_thread(
            cluster.create,
            nodes=1,
            insecure=s["insecure"],
            chunk_size=s["chunk_size"],
            extra=dict(s.get("options") or {}),
        )
        self.clusters.append(cluster)
        db = info["nodes"][0]["db"]
        process = await asyncio.create_subprocess_exec(
            *program("evdb"),
            "restore",
            "--from",
            backup,
            "--db",
            db,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        output, _ = await asyncio.wait_for(process.communicate(), timeout)
        if process.returncode != 0:
            raise StepFailed(
                f"evdb restore --from {backup} exited {process.returncode}: {output.decode(errors='replace')[-800:]}"
            )
        try:
            info = await asyncio.to_thread(cluster.up, timeout=timeout, log=lambda *_: None)
        except Exception as exc:
            raise StepFailed(f"the restored node did not start: {exc}") from exc
        self._register(cluster, info, rename=name)
        return self.nodes[name]


def program(name: str) -> list[str]:
    """How to start one of evdb's commands with the interpreter that runs the scenario."""
    module, function = EVDB_PROGRAMS[name]
    return [sys.executable, "-c", f"import sys; from {module} import {function}; sys.exit({function}())"]


def substitution_values(cluster: ScenarioCluster) -> dict[str, str]:
    values = {"workdir": str(cluster.workdir), "cluster_dir": str(cluster.main.data_dir)}
    for name, node in (*cluster.nodes.items(), *cluster.names.items()):
        values[f"{name}.url"] = node.url
        values[f"{name}.db"] = node.db
        values[f"{name}.log"] = node.log_dir
    ca = cluster.main.info().get("ca") if cluster.main.exists() else None
    if ca:
        values["ca"] = ca
    return values
