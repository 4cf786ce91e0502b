"""``evdb dashboard``: the operations dashboard (package ``tui``).

Without ``--attach`` it starts (or reuses) the local cluster in the user's data folder and attaches
to it; on quit it asks whether to stop that cluster.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from evdb.cluster.launcher import LocalCluster
    from tui.app import DashboardApp

__all__ = ["prepare", "register_cli"]


def register_cli(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "dashboard",
        help="watch and drive a cluster's maintenance from the terminal",
        description=(
            "The operations dashboard. With no arguments it launches the local cluster "
            "(evdb cluster up in the user's data folder, reused next time) and attaches to it."
        ),
    )
    parser.add_argument(
        "--attach",
        nargs="+",
        metavar="URL",
        help="attach to running nodes; the rest of the cluster is found through /gossip",
    )
    parser.add_argument("--user", help="user for the admin calls (admin or ops)")
    parser.add_argument("--password", help="password of --user")
    parser.add_argument("--ca", metavar="FILE", help="CA certificate that signed the nodes' certificates")
    parser.add_argument(
        "--insecure-skip-verify", action="store_true", help="do not verify the nodes' certificates"
    )
    parser.add_argument("--readonly", action="store_true", help="no key sends a call that changes anything")
    parser.add_argument("--no-discover", action="store_true", help="watch only the given nodes")
    parser.add_argument(
        "--logs", nargs="+", metavar="DIR", default=[], help="folders of log-*.json files to follow"
    )
    parser.add_argument(
        "--mirror",
        action="append",
        default=[],
        metavar="URL_OR_STATUS_FILE",
        help=(
            "show an evdb mirror under the cluster members: the URL of its --metrics-port (its /status) "
            "or its status file (<checkpoint>.status.json; a checkpoint file or the mirror's folder also "
            "do); repeat for several"
        ),
    )
    parser.add_argument("--data", help="folder of the local cluster (default: the user's data folder)")
    parser.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a node option of every local node, as evdb cluster up --option (repeatable; kept for later starts)",
    )
    parser.add_argument(
        "--interval", type=float, default=1.0, help="seconds between polls of a node (default 1)"
    )
    parser.add_argument(
        "--record",
        metavar="FILE",
        help="write this session (keys, dialog inputs, pauses) as a scenario for evdb scenario run",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    prepared = prepare(args)
    if isinstance(prepared, int):
        return prepared
    app, cluster = prepared
    recorder = None
    if args.record:
        from evdb.clock import SystemClock
        from evdb.scenario.recorder import Recorder

        recorder = app.recorder = Recorder(SystemClock())
    choice = app.run()
    if recorder is not None:
        from evdb.scenario.recorder import cluster_settings

        roles = [node.role for node in app.state.ordered() if node.role]
        note = (
            "Recorded from the local cluster."
            if cluster
            else f"Recorded attached to {', '.join(args.attach)}."
        )
        recorder.save(
            args.record,
            cluster_settings(cluster.info() if cluster else None, roles),
            {"interval": args.interval, "readonly": args.readonly},
            note,
        )
        print(f"Recorded {len(recorder.steps)} step(s) in {args.record}", file=sys.stderr)
    if cluster is not None:
        if choice == "stop":
            cluster.down(log=lambda text: print(text, file=sys.stderr))
        else:
            print(
                f"The local cluster keeps running; stop it with: {evdb_command()} cluster down "
                f"--data {shlex.quote(str(cluster.data_dir))}",
                file=sys.stderr,
            )
    return 0


def prepare(args: argparse.Namespace) -> tuple[DashboardApp, LocalCluster | None] | int:
    """What ``evdb dashboard`` does before the screen opens: check the arguments, launch (or find
    running) the local cluster unless ``--attach``, and build the app, given that cluster for its node
    jobs. The app and the cluster, or the exit code of a refusal (printed on stderr)."""
    from tui.app import Connection, DashboardApp, NodeSpec

    if args.interval < 0.2 or args.interval > 60:
        print("evdb dashboard: --interval must be between 0.2 and 60 seconds", file=sys.stderr)
        return 2
    if bool(args.user) != bool(args.password) and args.attach:
        print("evdb dashboard: give both --user and --password", file=sys.stderr)
        return 2
    cluster = None
    if args.attach:
        try:
            from tui.collector import normalise_url

            specs = [NodeSpec(normalise_url(url)) for url in args.attach]
        except ValueError as exc:
            print(f"evdb dashboard: {exc}", file=sys.stderr)
            return 2
        connection = Connection(args.user, args.password, args.ca, args.insecure_skip_verify)
    else:
        from evdb.cluster.launcher import (
            ClusterLaunchError,
            LocalCluster,
            check_node_options,
            default_data_dir,
            parse_option_assignments,
        )

        cluster = LocalCluster(args.data or default_data_dir())
        try:  # checked before anything is written: exit 2, as evdb cluster up
            options = check_node_options(parse_option_assignments(args.option))
        except ClusterLaunchError as exc:
            print(f"evdb dashboard: {exc}", file=sys.stderr)
            return exc.exit_code
        from tui.launch import launch_message

        print(launch_message(cluster), file=sys.stderr)  # "Attaching to" a cluster that runs
        try:
            info = cluster.up(options=options, log=lambda text: print(text, file=sys.stderr))
        except ClusterLaunchError as exc:
            print(f"evdb dashboard: {exc}", file=sys.stderr)
            return exc.exit_code
        specs = [NodeSpec(n["url"], n["name"], n.get("pid"), n.get("log_dir")) for n in info["nodes"]]
        connection = Connection(
            args.user or info["user"], args.password or info["password"], args.ca or info.get("ca")
        )
    app = DashboardApp(
        specs,
        connection=connection,
        readonly=args.readonly,
        discover=not args.no_discover,
        interval=args.interval,
        cluster_dir=str(cluster.data_dir) if cluster else None,
        log_dirs=args.logs,
        mirrors=args.mirror,
        local_cluster=cluster,
    )
    return app, cluster


def evdb_command() -> str:
    """How to run ``evdb`` from any shell: the script beside this interpreter (a virtual environment
    need not be active), else plain ``evdb``."""
    script = Path(sys.executable).with_name("evdb")
    return shlex.quote(str(script)) if script.exists() else "evdb"
