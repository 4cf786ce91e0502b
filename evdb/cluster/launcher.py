"""``evdb cluster up|status|down|stop-node|start-node|restore-node``: a local cluster of real node
processes on loopback ports.

The data folder holds everything: ``certs/`` (a CA and one certificate per node, in generations
``certs/gen-N/`` read through the symlinks ``certs/ca`` and ``certs/nodeN/{ca,node.crt,node.key}``
that ``evdb certs rotate`` repoints), ``nodeN/`` (the
node's ``node.yaml``, ``db/``, ``log/`` and ``stdout.log``) and ``cluster.json``, which names the
nodes (http url, pid, folders), the CA file, the admin credentials and the node options given with
``--option`` (also written into every ``node.yaml``, so a restart keeps them). ``up`` on a folder whose
cluster is running reuses it; on a stopped one it starts the same nodes again on the same ports.

The jobs on one node (the dashboard's keys call these): :meth:`LocalCluster.stop_node`,
:meth:`LocalCluster.start_node`, :meth:`LocalCluster.wait_for_node` and
:meth:`LocalCluster.restore_node`; the node options: :func:`check_node_options`,
:meth:`LocalCluster.set_node_options`, :meth:`LocalCluster.node_options`. Each refuses with a
:class:`ClusterLaunchError` whose ``exit_code`` the CLI returns, before it changes anything.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import signal
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar, Unpack, cast

import httpx

from evdb.errors import InvalidOption
from evdb.free_port import free_port

if TYPE_CHECKING:
    from evdb.backup.restore import RestoreResult

__all__ = [
    "LAUNCHER_DEFAULTS",
    "LOCAL_CHUNK_SIZE",
    "MANAGED_OPTIONS",
    "ClusterLaunchError",
    "InvalidNodeOptions",
    "LocalCluster",
    "NodeIsRunning",
    "UnknownNode",
    "check_node_options",
    "default_data_dir",
    "parse_option_assignments",
]

ADMIN = ("admin", "changeit")

#: Options the local cluster writes into every node.yaml unless --option gives another value (an
#: empty --option value brings these back)
LAUNCHER_DEFAULTS: dict[str, Any] = {"GossipIntervalMs": 500, "GossipTimeoutMs": 2000, "StatsPeriodSec": 0}

#: ChunkSize of a new local cluster's nodes unless --chunk-size (or --option ChunkSize=) gives one: the
#: smallest a node takes, so that ``evdb demo-load``'s data spreads over hundreds of chunks and a scavenge
#: of it lasts long enough to watch each phase, stop and resume it (docs/dashboard.md). A practice
#: size: an append larger than a chunk is refused. Written into node.yaml when the cluster is created,
#: so an existing cluster's data folders keep the chunk size they were created with.
LOCAL_CHUNK_SIZE = "64KiB"

#: Options the local cluster sets itself for each node (its folders, ports, membership, certificates):
#: --option refuses them; the cluster's own flags (--nodes, --replicas, --insecure) decide them
MANAGED_OPTIONS = frozenset(
    {
        "Config",
        "Db",
        "Index",
        "Log",
        "HttpIp",
        "HttpPort",
        "ReplicationIp",
        "ReplicationPort",
        "ClusterSize",
        "GossipSeed",
        "ReadOnlyReplica",
        "Insecure",
        "CertificateFile",
        "CertificatePrivateKeyFile",
        "TrustedRootCertificatesPath",
        "CertificateReservedNodeCommonName",
    }
)

Log = Callable[[str], None]


class ClusterLayout(TypedDict, total=False):
    """What a new local cluster is made of (:meth:`LocalCluster.create`, :meth:`LocalCluster.up`)."""

    nodes: int  #: voting members (3); 1 to 9 with the replicas
    replicas: int  #: read-only replicas (0)
    insecure: bool  #: plain HTTP, no certificates (False: a generated CA and node certificates)
    chunk_size: str | None  #: every node's ChunkSize (the local cluster's small default)
    extra: dict[str, Any] | None  #: node.yaml settings written as given, after the local cluster's own
    options: Mapping[str, str] | None  #: node options by their KurrentDB names (check_node_options)


class ClusterLaunchError(Exception):
    """The local cluster cannot do what was asked; ``exit_code`` is what the CLI exits with."""

    exit_code = 1


class InvalidNodeOptions(ClusterLaunchError, InvalidOption):
    """A node option given to the local cluster is unknown, has a value its option refuses, or is one
    the cluster sets itself (exit code 2). Raised before any file is written."""

    exit_code = 2


class UnknownNode(ClusterLaunchError):
    """No node of the cluster has that name (exit code 2)."""

    exit_code = 2


class NodeIsRunning(ClusterLaunchError):
    """The node must be stopped for this (a restore); exit code 6, as ``evdb restore``'s."""

    exit_code = 6


def parse_option_assignments(texts: Iterable[str]) -> dict[str, str]:
    """``["Key=Value", ...]`` (the ``--option`` arguments) as a dict, in order; ``Key=`` (nothing after
    the ``=``) asks for the option's default again. Raises InvalidNodeOptions for text without a key
    and an ``=``. The names and values are checked by :func:`check_node_options`."""
    out: dict[str, str] = {}
    for text in texts:
        key, equals, value = text.partition("=")
        if not equals or not key.strip():
            raise InvalidNodeOptions(
                f"--option {text!r}: write a node option as Key=Value (e.g. --option EnableUnixSocket=true)."
            )
        if key.strip() in out:
            raise InvalidNodeOptions(f"{key.strip()} is given twice with --option.")
        out[key.strip()] = value.strip()
    return out


def check_node_options(options: Mapping[str, Any]) -> dict[str, str]:
    """The rule for node options given to a local cluster (``--option``, ``LocalCluster.up(options=)``,
    the dashboard's launcher): each key names an option of the node's table (any case, an alias or
    the nested ``AutoScavenge:Enabled`` form), each value is one that option accepts, read as the node
    reads it from its YAML file, and none is an option the cluster sets itself (MANAGED_OPTIONS). An
    empty value asks for the default again. Returns ``{PascalCase name: value}``; raises
    InvalidNodeOptions naming every problem at once."""
    from evdb.options.model import BY_NAME
    from evdb.options.sources import option_name, suggest
    from evdb.options.table import OPTIONS

    problems: list[str] = []
    out: dict[str, str] = {}
    given_as: dict[str, str] = {}
    for key, raw in options.items():
        value = _option_text(raw)
        name = option_name(str(key))
        if name is None:
            known = [o.name for o in OPTIONS if o.name not in MANAGED_OPTIONS]
            problems.append(
                f"Unknown node option {str(key)!r}{suggest(str(key), known)}; see docs/options.md for the "
                "options and what they accept."
            )
            continue
        if name in MANAGED_OPTIONS:
            problems.append(
                f"{name} is set by the local cluster itself (its folders, ports, membership and "
                "certificates); it cannot be given with --option."
            )
            continue
        if name in given_as:
            problems.append(f"{name} is given twice ({given_as[name]!r} and {str(key)!r}).")
            continue
        given_as[name] = str(key)
        if value != "":
            try:
                BY_NAME[name].parse(value, f"--option {key}")
            except InvalidOption as exc:
                problems.append(str(exc))
                continue
        out[name] = value
    if problems:
        if len(problems) == 1:
            raise InvalidNodeOptions(problems[0])
        raise InvalidNodeOptions(
            f"{len(problems)} problems with the node options:\n" + "\n".join(f"- {p}" for p in problems)
        )
    return out


def _option_text(raw: Any) -> str:
    if isinstance(raw, bool):
        return "true" if raw else "false"
    return "" if raw is None else str(raw).strip()


def _yaml_value(name: str, value: str) -> Any:
    """A checked option value as node.yaml holds it (``true``, ``1048576``, ``Debug``)."""
    from evdb.options.model import BY_NAME

    return BY_NAME[name].parse(value, f"--option {name}")


def _set_yaml_option(config: dict[str, Any], name: str, value: Any) -> None:
    """Set option ``name`` in a node.yaml mapping (``None``: remove it), whatever spelling it had."""
    from evdb.options.sources import option_name

    for key in list(config):
        inner = config[key]
        if isinstance(inner, dict):
            for sub in list(inner):
                if option_name(f"{key}{sub}") == name:
                    del inner[sub]
            if not inner:
                del config[key]
        elif option_name(str(key)) == name:
            del config[key]
    if value is not None:
        config[name] = value


def default_data_dir() -> Path:
    """Where ``evdb dashboard`` keeps its local cluster: ``$XDG_DATA_HOME/evdb/local-cluster``."""
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "evdb" / "local-cluster"


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


#: one change to a cluster's folder at a time within this process (threads; the dashboard runs its jobs
#: on worker threads), by folder; the file lock below serialises processes
F = TypeVar("F", bound=Callable[..., Any])
_FOLDER_LOCKS: dict[Path, threading.RLock] = {}
_FOLDER_LOCKS_GUARD = threading.Lock()
_HELD = threading.local()


def _one_change(method: F) -> F:
    """The method runs holding the cluster's lock (:meth:`LocalCluster._changing`)."""

    @functools.wraps(method)
    def locked(self: LocalCluster, *args: Any, **kwargs: Any) -> Any:
        with self._changing():
            return method(self, *args, **kwargs)

    return cast(F, locked)


def _folder_lock(folder: Path) -> threading.RLock:
    with _FOLDER_LOCKS_GUARD:
        return _FOLDER_LOCKS.setdefault(folder, threading.RLock())


class LocalCluster:
    """The local cluster in one data folder: create, start, inspect and stop it, and act on one node."""

    def __init__(self, data_dir: str | os.PathLike[str]) -> None:
        self.data_dir = Path(data_dir).expanduser().resolve()
        self.info_path = self.data_dir / "cluster.json"
        self.lock_path = self.data_dir / "cluster.lock"

    @contextlib.contextmanager
    def _changing(self) -> Iterator[None]:
        """Hold the cluster's lock for one change: starting, stopping or restoring nodes and every
        read-modify-write of cluster.json happen one at a time, across threads and across processes
        (``evdb cluster`` commands and dashboards at once), so no pid is lost and no node starts twice.
        Re-entrant within a thread. Creating a cluster is not locked: it refuses a folder that has one."""
        if not self.data_dir.is_dir():
            yield  # nothing to lock, and nothing is created: reading cluster.json says there is no cluster
            return
        held: dict[Path, int] = _HELD.__dict__.setdefault("depth", {})
        with _folder_lock(self.data_dir):
            if held.get(self.data_dir):
                held[self.data_dir] += 1
                try:
                    yield
                finally:
                    held[self.data_dir] -= 1
                return
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                held[self.data_dir] = 1
                try:
                    yield
                finally:
                    held.pop(self.data_dir, None)
            finally:
                os.close(fd)  # closing releases the lock

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
        self, *, timeout: float = 60.0, log: Log = print, **layout: Unpack[ClusterLayout]
    ) -> dict[str, Any]:
        """Start the cluster (creating it on first use, :meth:`create`) and wait until it has a leader.

        ``options`` are node options by their KurrentDB names (``{"EnableUnixSocket": "true"}``),
        checked (:func:`check_node_options`) before any file is written and kept in the cluster's
        configuration. On an existing cluster they change its stored options (an empty value removes
        one); nodes already running keep theirs until restarted: ``log`` says, node by node, what each
        one still waits for (:meth:`pending_notes`)."""
        existed = self.exists()
        options = layout.get("options")
        if not existed:
            self._create(**layout)
            members = self.info()["nodes"]
            replicas = sum(1 for node in members if node["read_only_replica"])
            nodes = len(members) - replicas
            log(
                f"Created a {nodes}-node cluster{f' with {replicas} read-only replica(s)' if replicas else ''} in {self.data_dir}"
            )
        elif options:
            self.set_node_options(options, notes=False)
        with self._changing():
            info = self.info()
            for node in info["nodes"]:
                if _node_alive(node):  # exactly the nodes that are not running are started
                    continue
                node["pid"] = self._start_node(node)
                log(f"Started {node['name']} (pid {node['pid']}) at {node['url']}")
            self._write_info(info)
        self.wait_for_leader(timeout)
        if existed:
            for note in self.pending_notes():
                log(note)
        return info

    def create(self, **layout: Unpack[ClusterLayout]) -> dict[str, Any]:
        """Write the cluster's folders, certificates and node configurations without starting it (to
        restore a backup into every node's folders first, say); ``up`` then starts it."""
        if self.exists():
            raise ClusterLaunchError(f"A cluster already exists in {self.data_dir}.")
        self._create(**layout)
        return self.info()

    def _create(
        self,
        *,
        nodes: int = 3,
        replicas: int = 0,
        insecure: bool = False,
        chunk_size: str | None = None,
        extra: dict[str, Any] | None = None,
        options: Mapping[str, str] | None = None,
    ) -> None:
        extra, options = extra or {}, options or {}
        if nodes < 1 or replicas < 0 or nodes + replicas > 9:
            raise ClusterLaunchError("A local cluster has 1 to 9 nodes and replicas in all.")
        given = check_node_options(options)  # before any file is written
        if chunk_size and given.get("ChunkSize"):
            if _yaml_value("ChunkSize", chunk_size) != _yaml_value("ChunkSize", given["ChunkSize"]):
                raise InvalidNodeOptions(
                    f"ChunkSize is given twice: --chunk-size {chunk_size} and --option "
                    f"ChunkSize={given['ChunkSize']}; give one."
                )
        elif chunk_size:
            _yaml_value("ChunkSize", chunk_size)  # checked as the option is
        given = {name: value for name, value in given.items() if value != ""}
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
            members.append({"http": free_port(), "replication": free_port(), "replica": i >= nodes})
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
                **LAUNCHER_DEFAULTS,
                "LicenseKey": demo_license,
                "LicenseTrustedIssuers": "demo",  # a local cluster only: anyone can sign demo licences
                **extra,
            }
            if chunk_size:
                config["ChunkSize"] = chunk_size
            else:
                config.setdefault("ChunkSize", LOCAL_CHUNK_SIZE)  # an --option ChunkSize= wins, below
            for option, value in given.items():
                _set_yaml_option(config, option, _yaml_value(option, value))
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
        self._write_info(
            {"nodes": entries, "ca": ca_file, "user": ADMIN[0], "password": ADMIN[1], "options": given}
        )

    # -- node options ----------------------------------------------------------------------------------
    def node_options(self) -> dict[str, str]:
        """The node options given with ``--option`` (``options=``), as given: what the cluster's nodes
        run with beyond the local cluster's own settings."""
        return dict(self.info().get("options") or {})

    @_one_change
    def set_node_options(self, options: Mapping[str, str], *, notes: bool = True) -> list[str]:
        """Change the stored node options of an existing cluster and every node's node.yaml (an empty
        value removes an option: the node's default, or the local cluster's own value, again). Checked
        first (InvalidNodeOptions, nothing written). Returns (``notes``) what each running node then
        waits for (:meth:`pending_notes`): a node runs with its earlier options until it is restarted."""
        given = check_node_options(options)
        info = self.info()
        stored = dict(info.get("options") or {})
        changed = {name: value for name, value in given.items() if stored.get(name, "") != value}
        if not changed:
            return self.pending_notes() if notes else []
        import yaml

        for node in info["nodes"]:
            path = Path(node["config"])
            config = yaml.safe_load(path.read_text()) or {}
            for name, value in changed.items():
                if value == "":
                    _set_yaml_option(config, name, LAUNCHER_DEFAULTS.get(name))
                else:
                    _set_yaml_option(config, name, _yaml_value(name, value))
            tmp = path.with_suffix(".yaml.tmp")
            tmp.write_text(yaml.safe_dump(config, sort_keys=False))
            os.replace(tmp, path)
        for name, value in changed.items():
            if value == "":
                stored.pop(name, None)
            else:
                stored[name] = value
        info["options"] = stored
        self._write_info(info)
        return self.pending_notes() if notes else []

    def option_states(self, name: str) -> list[dict[str, Any]]:
        """A running node's ``GET /info/options``: each option's value in effect, what its node.yaml
        now gives, and whether that waits for a restart or a reload. ClusterLaunchError when the node
        does not answer it."""
        node = self._node(self.info(), name)
        try:
            with self.client(node["url"], timeout=5) as c:
                answer = c.get("/info/options")
            answer.raise_for_status()
            rows = answer.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise ClusterLaunchError(f"{name} did not say which options it runs with: {exc}") from None
        if not isinstance(rows, list):
            raise ClusterLaunchError(
                f"{name} answered GET /info/options with {type(rows).__name__}, not a list"
            )
        return rows

    def pending_notes(self) -> list[str]:
        """For each running node, exactly what its configuration still waits for: the restart-only
        options it runs with other values of (a restart), the reloadable ones (a reload), or nothing."""
        notes = []
        for node in self.running_nodes():
            name = node["name"]
            try:
                rows = self.option_states(name)
            except ClusterLaunchError as exc:
                notes.append(f"{exc}; restart it to be sure it runs with its node.yaml")
                continue
            restart = [r for r in rows if r.get("restartPending")]
            reload = [r for r in rows if r.get("reloadPending")]
            if restart:
                notes.append(
                    f"{name} runs with {_values(restart, 'value')}; its node.yaml says "
                    f"{_values(restart, 'configured')}: restart it for that to take effect (evdb cluster "
                    f"stop-node {name} --data {self.data_dir}, then start-node {name}); until then it "
                    "refuses every configuration reload"
                )
            if reload:
                notes.append(
                    f"{name}: {_values(reload, 'configured')} takes effect at its next reload "
                    "(POST /admin/reloadconfig) or restart"
                )
        return notes

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

    # -- one node --------------------------------------------------------------------------------------
    def _node(self, info: dict[str, Any], name: str) -> dict[str, Any]:
        for node in info["nodes"]:
            if node["name"] == name:
                return node
        names = ", ".join(n["name"] for n in info["nodes"])
        raise UnknownNode(f"No node named {name!r} in the cluster in {self.data_dir}; its nodes are {names}.")

    @_one_change
    def _set_pid(self, name: str, pid: int | None) -> None:
        info = self.info()  # read again: only this node's entry changes
        self._node(info, name)["pid"] = pid
        self._write_info(info)

    def is_running(self, name: str) -> bool:
        """Whether node ``name``'s process runs (UnknownNode for a name the cluster does not have)."""
        return _node_alive(self._node(self.info(), name))

    @_one_change
    def start_node(self, name: str) -> int:
        """(Re)start one node of the cluster with its node.yaml; returns its pid (the running one's
        when it runs already). It does not wait: :meth:`wait_for_node` does. UnknownNode for a name
        the cluster does not have."""
        node = self._node(self.info(), name)
        if _node_alive(node):
            return int(node["pid"])
        pid = self._start_node(node)
        self._set_pid(name, pid)
        return pid

    @_one_change
    def stop_node(self, name: str, *, timeout: float = 15.0, log: Log = print) -> bool:
        """Stop one node: ask it to shut down (``POST /admin/shutdown``; SIGTERM when it does not
        answer), wait up to ``timeout`` seconds, then kill it (SIGKILL). Returns once its process has
        ended; False when it was not running. UnknownNode for a name the cluster does not have."""
        node = self._node(self.info(), name)
        if not _node_alive(node):
            self._set_pid(name, None)
            return False
        self._stop([node], timeout, log)
        self._set_pid(name, None)
        log(f"Stopped {name}")
        return True

    def wait_for_node(
        self,
        name: str,
        timeout: float = 60.0,
        states: tuple[str, ...] = ("Leader", "Follower", "ReadOnlyReplica"),
    ) -> dict[str, Any]:
        """Wait until node ``name`` reports one of ``states`` in its own gossip; its status row
        (:meth:`status`). ClusterLaunchError when its process ends (with the end of its stdout.log)
        or after ``timeout`` seconds (naming the state it was in)."""
        node = self._node(self.info(), name)
        deadline = time.monotonic() + timeout
        row: dict[str, Any] = {}
        while True:
            row = next(r for r in self.status() if r["name"] == name)
            if row["state"] in states:
                return row
            if row["state"] == "Down":
                raise ClusterLaunchError(f"{name} is not running. {self._stdout_tail(node)}")
            if time.monotonic() > deadline:
                raise ClusterLaunchError(
                    f"{name} did not become {' or '.join(states)} within {timeout:.0f} s (it is "
                    f"{row['state']}). {self._stdout_tail(node)}"
                )
            time.sleep(0.2)

    def stdout_tail(self, name: str, lines: int = 5) -> str:
        """The last ``lines`` lines of node ``name``'s stdout.log, introduced by the file's path."""
        return self._stdout_tail(self._node(self.info(), name), lines)

    @staticmethod
    def _stdout_tail(node: dict[str, Any], lines: int = 5) -> str:
        path = Path(node["config"]).parent / "stdout.log"
        try:
            tail = path.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            return f"See {path}."
        return f"The end of {path}:\n" + "\n".join(tail) if tail else f"{path} is empty."

    @_one_change
    def restore_node(
        self, name: str, backup_folder: str | os.PathLike[str], *, start: bool = True, log: Log = print
    ) -> RestoreResult:
        """Restore a stopped node from a backup folder with ``evdb restore``'s procedure
        (evdb/backup/restore.py: the node's files are replaced, ``chaser.chk`` is copied over
        ``truncate.chk``), then (``start``) start it: it truncates to the backup's position and catches
        up from the leader by replication (:meth:`wait_for_node` waits for it to follow).

        Refuses before any file is touched: UnknownNode, NodeIsRunning (stop it first), and the
        restore's own BackupError (exit codes as ``evdb restore``: a folder that is not a finished,
        whole backup, or a process that holds the node's database)."""
        from evdb.backup.restore import restore_backup

        node = self._node(self.info(), name)
        if _node_alive(node):
            raise NodeIsRunning(
                f"{name} is running (pid {node['pid']}): stop it first (evdb cluster stop-node {name} "
                f"--data {self.data_dir}); nothing was restored."
            )
        folder = os.fspath(backup_folder)
        result = restore_backup(folder, node["db"], overwrite=True)
        log(
            f"Restored {name} from {folder}: {result.files_copied} files, {result.bytes_copied} bytes; it "
            f"truncates its log to {result.truncate_to} at start"
        )
        if start:
            pid = self.start_node(name)
            log(f"Started {name} (pid {pid}); it catches up from the leader")
        return result

    def wait_for_leader(self, timeout: float = 60.0) -> str:
        """Wait until one running node is Leader and every other running node follows it; its url."""
        deadline = time.monotonic() + timeout
        last = "no answer yet"
        unsettled: list[str] = []
        while time.monotonic() < deadline:
            rows = [r for r in self.status() if r["state"] != "Down"]
            leaders = [r for r in rows if r["state"] == "Leader"]
            settled = all(r["state"] in ("Leader", "Follower", "ReadOnlyReplica") for r in rows)
            if len(leaders) == 1 and settled and self._credentials_work(leaders[0]["url"]):
                return leaders[0]["url"]
            last = ", ".join(f"{r['name']}: {r['state']}" for r in rows)
            unsettled = [
                r["name"] for r in rows if r["state"] not in ("Leader", "Follower", "ReadOnlyReplica")
            ]
            time.sleep(0.2)
        tails = "".join(f"\n{self.stdout_tail(name, 15)}" for name in unsettled)
        raise ClusterLaunchError(
            f"No leader elected within {timeout:.0f} s ({last}); see the nodes' stdout.log{tails}"
        )

    def _credentials_work(self, url: str) -> bool:
        """The new leader creates the default users just after taking office: wait for them too."""
        try:
            with self.client(url, timeout=2) as c:
                return c.get("/users/admin").status_code == 200
        except httpx.HTTPError:
            return False

    # -- down ------------------------------------------------------------------------------------------
    @_one_change
    def down(self, timeout: float = 15.0, log: Log = print) -> None:
        """Stop every node: /admin/shutdown, then SIGTERM, then SIGKILL for any still running."""
        info = self.info()
        running = [n for n in info["nodes"] if _node_alive(n)]
        self._stop(running, timeout, log)
        for node in info["nodes"]:
            node["pid"] = None
        self._write_info(info)
        log(f"Stopped {len(running)} node(s)")

    def _stop(self, nodes: list[dict[str, Any]], timeout: float, log: Log) -> None:
        """Ask each node to shut down (SIGTERM when it does not answer), wait up to ``timeout`` s,
        kill those still running, and return once every process has ended."""
        for node in nodes:
            try:
                with self.client(node["url"], timeout=2) as c:
                    c.post("/admin/shutdown")
            except httpx.HTTPError:
                _signal(node["pid"], signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(_pid_alive(n["pid"]) for n in nodes):
            time.sleep(0.1)
        killed = [n for n in nodes if _pid_alive(n["pid"])]
        for node in killed:
            log(f"{node['name']} did not stop in {timeout:.0f} s: killing it")
            _signal(node["pid"], signal.SIGKILL)
        deadline = time.monotonic() + 10  # SIGKILL is not refused: only the kernel's own time
        while time.monotonic() < deadline and any(_pid_alive(n["pid"]) for n in killed):
            time.sleep(0.05)


def _values(rows: list[dict[str, Any]], field: str) -> str:
    """``EnableUnixSocket=true, LogLevel=Debug``: options of ``GET /info/options`` rows, one field."""

    def text(value: Any) -> str:
        if isinstance(value, bool):
            return str(value).lower()
        return "<not set>" if value is None else str(value)

    return ", ".join(f"{row['name']}={text(row.get(field))}" for row in rows)


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass  # it ended meanwhile
