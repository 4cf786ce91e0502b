"""``evdb cluster up|status|down``: run a local cluster of real node processes (see launcher.py)."""

from __future__ import annotations

import argparse
import sys

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
    up = commands.add_parser("up", help="create (first time) or start the cluster and wait for a leader")
    up.add_argument("--data", default=str(default_data_dir()), help=data_help)
    up.add_argument("--nodes", type=int, default=3, help="voting nodes (default 3)")
    up.add_argument("--replicas", type=int, default=0, help="read-only replicas (default 0)")
    up.add_argument("--insecure", action="store_true", help="plain HTTP between everything (no certificates)")
    up.add_argument("--chunk-size", help="ChunkSize of every node, e.g. 1MiB (default: the node default)")
    up.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for a leader (default 60)")
    up.set_defaults(func=_up)
    status = commands.add_parser("status", help="show each node's state")
    status.add_argument("--data", default=str(default_data_dir()), help=data_help)
    status.set_defaults(func=_status)
    down = commands.add_parser("down", help="stop every node (graceful, then forced)")
    down.add_argument("--data", default=str(default_data_dir()), help=data_help)
    down.add_argument(
        "--timeout", type=float, default=15.0, help="seconds before a node is killed (default 15)"
    )
    down.set_defaults(func=_down)


def _up(args: argparse.Namespace) -> int:
    from evdb.cluster.launcher import ClusterLaunchError, LocalCluster

    cluster = LocalCluster(args.data)
    try:
        info = cluster.up(
            nodes=args.nodes,
            replicas=args.replicas,
            insecure=args.insecure,
            chunk_size=args.chunk_size,
            timeout=args.timeout,
        )
    except ClusterLaunchError as exc:
        print(f"evdb cluster up: {exc}", file=sys.stderr)
        return 1
    _print_status(cluster)
    print(f"\nCredentials: {info['user']} / {info['password']}")
    if info.get("ca"):
        print(f"CA certificate: {info['ca']}")
        first = info["nodes"][0]["url"]
        print(f"Try: curl --cacert {info['ca']} -u {info['user']}:{info['password']} {first}/gossip")
    return 0


def _print_status(cluster) -> None:
    for row in cluster.status():
        extra = f"  writer {row['writer']}  epoch {row['epoch']}" if "writer" in row else ""
        print(f"{row['name']:<10} {row['state']:<16} {row['url']}  pid {row['pid']}{extra}")


def _status(args: argparse.Namespace) -> int:
    from evdb.cluster.launcher import ClusterLaunchError, LocalCluster

    try:
        _print_status(LocalCluster(args.data))
    except ClusterLaunchError as exc:
        print(f"evdb cluster status: {exc}", file=sys.stderr)
        return 1
    return 0


def _down(args: argparse.Namespace) -> int:
    from evdb.cluster.launcher import ClusterLaunchError, LocalCluster

    try:
        LocalCluster(args.data).down(timeout=args.timeout)
    except ClusterLaunchError as exc:
        print(f"evdb cluster down: {exc}", file=sys.stderr)
        return 1
    return 0
