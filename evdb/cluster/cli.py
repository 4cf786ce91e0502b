"""``evdb cluster up|status|down|stop-node|start-node|restore-node``: run a local cluster of node
processes (see launcher.py).

Exit codes: 0 done; 1 failed (no leader, a node that does not start); 2 usage (an unknown node name,
a bad ``--option``); 6 the node runs (restore-node); a refused restore exits with ``evdb restore``'s
codes (5 an unfinished backup, ...)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["register_cli"]


def register_cli(subparsers: argparse._SubParsersAction) -> None:
    from evdb.cluster.launcher import default_data_dir

    parser = subparsers.add_parser(
        "cluster",
        help="start, inspect and stop a local cluster of node processes",
        description="Run a local evdb cluster on loopback ports: one process per node, TLS with a generated CA.",
    )
    commands = parser.add_subparsers(dest="cluster_command", metavar="COMMAND", required=True)
    data_help = f"folder of the cluster (default: {default_data_dir()})"

    def command(
        name: str, helptext: str, func: Callable[[argparse.Namespace], int]
    ) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=helptext, description=helptext)
        sub.add_argument("--data", default=str(default_data_dir()), help=data_help)
        sub.set_defaults(func=func)
        return sub

    up = command("up", "create (first time) or start the cluster and wait for a leader", _up)
    up.add_argument("--nodes", type=int, default=3, help="voting nodes (default 3)")
    up.add_argument("--replicas", type=int, default=0, help="read-only replicas (default 0)")
    up.add_argument("--insecure", action="store_true", help="plain HTTP between everything (no certificates)")
    up.add_argument(
        "--chunk-size",
        help="ChunkSize of every node of a new cluster, e.g. 1MiB (default: 64KiB, for practice)",
    )
    up.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=(
            "a node option of every node by its KurrentDB name, e.g. EnableUnixSocket=true (repeatable; "
            "kept for later starts; KEY= brings the default back). Checked before anything is written"
        ),
    )
    up.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for a leader (default 60)")
    command("status", "show each node's state and the node options given with --option", _status)
    down = command("down", "stop every node (graceful, then forced)", _down)
    down.add_argument(
        "--timeout", type=float, default=15.0, help="seconds before a node is killed (default 15)"
    )
    stop = command("stop-node", "stop one node (graceful, then forced); the others keep running", _stop_node)
    stop.add_argument("name", metavar="NAME", help="the node, e.g. node2 (see evdb cluster status)")
    stop.add_argument(
        "--timeout", type=float, default=15.0, help="seconds before the node is killed (default 15)"
    )
    start = command("start-node", "start one stopped node and wait until it joins the cluster", _start_node)
    start.add_argument("name", metavar="NAME", help="the node, e.g. node2")
    start.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for it (default 60)")
    start.add_argument("--no-wait", action="store_true", help="return once its process is started")
    restore = command(
        "restore-node",
        "restore a stopped node from a backup folder, start it and wait until it follows again",
        _restore_node,
    )
    restore.add_argument("name", metavar="NAME", help="the node, e.g. node2 (it must be stopped)")
    restore.add_argument(
        "--from", dest="backup", required=True, metavar="FOLDER", help="the backup folder (evdb backup's)"
    )
    restore.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for it (default 60)")
    restore.add_argument("--no-start", action="store_true", help="leave the node stopped after the restore")


def _run(verb: str, action: Callable[[], int]) -> int:
    """Run one command; a refusal or failure is one line on stderr and the error's exit code."""
    from evdb.backup.errors import BackupError
    from evdb.cluster.launcher import ClusterLaunchError

    try:
        return action()
    except ClusterLaunchError as exc:
        print(f"evdb cluster {verb}: {exc}", file=sys.stderr)
        return exc.exit_code
    except BackupError as exc:
        print(f"evdb cluster {verb}: {exc}", file=sys.stderr)
        return int(getattr(exc, "exit_code", 1))


def _cluster(args: argparse.Namespace) -> Any:
    from evdb.cluster.launcher import LocalCluster

    return LocalCluster(args.data)


def _up(args: argparse.Namespace) -> int:
    from evdb.cluster.launcher import parse_option_assignments

    cluster = _cluster(args)

    def up() -> int:
        options = parse_option_assignments(args.option)
        info = cluster.up(
            nodes=args.nodes,
            replicas=args.replicas,
            insecure=args.insecure,
            chunk_size=args.chunk_size,
            options=options,
            timeout=args.timeout,
        )
        _print_status(cluster, pending=False)  # up logged what each node waits for
        print(f"\nCredentials: {info['user']} / {info['password']}")
        if info.get("ca"):
            print(f"CA certificate: {info['ca']}")
            first = info["nodes"][0]["url"]
            print(f"Try: curl --cacert {info['ca']} -u {info['user']}:{info['password']} {first}/gossip")
        return 0

    return _run("up", up)


def _print_status(cluster, *, pending: bool = True) -> None:
    for row in cluster.status():
        extra = f"  writer {row['writer']}  epoch {row['epoch']}" if "writer" in row else ""
        print(f"{row['name']:<10} {row['state']:<16} {row['url']}  pid {row['pid']}{extra}")
    options = cluster.node_options()
    if options:
        print("Node options (--option): " + ", ".join(f"{k}={v}" for k, v in options.items()))
    if pending:
        for note in cluster.pending_notes():  # what each running node's configuration still waits for
            print(note)


def _status(args: argparse.Namespace) -> int:
    def status() -> int:
        _print_status(_cluster(args))
        return 0

    return _run("status", status)


def _down(args: argparse.Namespace) -> int:
    def down() -> int:
        _cluster(args).down(timeout=args.timeout)
        return 0

    return _run("down", down)


def _stop_node(args: argparse.Namespace) -> int:
    def stop() -> int:
        if not _cluster(args).stop_node(args.name, timeout=args.timeout):
            print(f"{args.name} is not running")
        return 0

    return _run("stop-node", stop)


def _joined(cluster, name: str, timeout: float) -> None:
    row = cluster.wait_for_node(name, timeout)
    print(f"{name} is {row['state']} at {row['url']} (pid {row['pid']}, writer {row['writer']})")


def _start_node(args: argparse.Namespace) -> int:
    def start() -> int:
        cluster = _cluster(args)
        if cluster.is_running(args.name):
            print(f"{args.name} is already running")
            return 0
        pid = cluster.start_node(args.name)
        print(f"Started {args.name} (pid {pid})")
        if not args.no_wait:
            _joined(cluster, args.name, args.timeout)
        return 0

    return _run("start-node", start)


def _restore_node(args: argparse.Namespace) -> int:
    def restore() -> int:
        cluster = _cluster(args)
        result = cluster.restore_node(args.name, args.backup, start=not args.no_start)
        print(result.reminder)
        if not args.no_start:
            _joined(cluster, args.name, args.timeout)
        return 0

    return _run("restore-node", restore)
