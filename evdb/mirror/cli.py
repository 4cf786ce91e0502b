"""``evdb mirror``: run a mirror, show its status, or fail over to the secondary (manually)."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
import time
from urllib.parse import urlparse

__all__ = ["register_cli"]

FAILOVER_STEPS = """\
Steps to make the secondary the primary (the mirror does not do them for you):
  1. Fence the old primary: stop its nodes, or block clients from reaching it. Anything written to
     it from now on is not on the secondary, and two writable stores diverge (split brain).
  2. Repoint every client from {source} to {target}: change the connection string (for gRPC clients
     e.g. kurrentdb://{target_host}?tls={tls}) and restart or reload the clients.
  3. Catch-up subscribers that keep a stream event number can resume as they are (the mirror keeps
     event numbers); those that keep an $all position must restart from the stream they follow or
     from the start of $all: positions on the secondary differ from the primary's.
  4. Users, passwords and persistent subscriptions are not copied: create them on {target}.
  5. To protect the new primary again, start a new mirror from it with a new checkpoint file, e.g.
     evdb mirror --from {target} --to <fresh-node-url> --checkpoint <new-file>"""


def _endpoint_args(parser: argparse.ArgumentParser, side: str, what: str) -> None:
    env = f"EVDB_MIRROR_{side.upper()}_PASSWORD"
    parser.add_argument(f"--{side}-user", default="admin", help=f"user on the {what} (default admin)")
    parser.add_argument(
        f"--{side}-password",
        default=os.environ.get(env, "changeit"),
        help=f"password on the {what} (default: ${env}, else changeit)",
    )
    parser.add_argument(
        f"--{side}-ca", metavar="FILE", help=f"CA certificate that signed the {what}'s certificate"
    )


def register_cli(subparsers: argparse._SubParsersAction) -> None:
    from evdb.mirror.state import default_checkpoint_path

    checkpoint_help = f"checkpoint file (default {default_checkpoint_path()})"
    parser = subparsers.add_parser(
        "mirror",
        help="copy every event of a primary to a secondary (durable $all subscription)",
        description=(
            "Copy every event of the primary's $all to the secondary, in order, keeping stream names, "
            "event numbers, ids, types, data and metadata; follows deletes, tombstones and metadata; "
            "skips the primary's system streams ($-prefixed). Resumes from its checkpoint without "
            "copying anything twice. 'evdb mirror status' shows its lag, 'evdb mirror failover' stops it "
            "for a manual failover."
        ),
    )
    parser.add_argument("--from", dest="source", metavar="URL", help="the primary's HTTP URL")
    parser.add_argument("--to", dest="target", metavar="URL", help="the secondary's HTTP URL")
    parser.add_argument("--checkpoint", help=checkpoint_help)
    _endpoint_args(parser, "from", "primary")
    _endpoint_args(parser, "to", "secondary")
    parser.add_argument("--ca", metavar="FILE", help="CA certificate for both sides (when they share one)")
    parser.add_argument(
        "--insecure-skip-verify", action="store_true", help="do not verify the nodes' TLS certificates"
    )
    parser.add_argument(
        "--start-from",
        type=int,
        metavar="POSITION",
        help=(
            "with no checkpoint yet, copy the events from this $all position on (for a secondary seeded "
            "from a backup of the primary: the backup's chaser position, in backup.json)"
        ),
    )
    parser.add_argument(
        "--parallel",
        type=int,
        default=1,
        metavar="N",
        help=(
            "append to N streams of the secondary at once (default 1: one append at a time, in $all order). "
            "With N > 1 each stream's events keep their order and the mirror is many times faster, but "
            "events of different streams copied close together may reach the secondary's $all in "
            "another order"
        ),
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        metavar="PORT",
        help="serve /metrics and /status on this port (0: a free one)",
    )
    parser.add_argument("--metrics-host", default="127.0.0.1", help="address of the metrics endpoint")
    parser.add_argument(
        "--status-every",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="log a status line this often (0: never)",
    )
    parser.set_defaults(func=_run)
    commands = parser.add_subparsers(dest="mirror_command", metavar="COMMAND")
    status = commands.add_parser("status", help="show the mirror's position and lag (from its status file)")
    status.add_argument("--checkpoint", help=checkpoint_help)
    status.add_argument("--json", action="store_true", help="print the status file as it is")
    status.set_defaults(func=_status)
    failover = commands.add_parser(
        "failover",
        help="stop the mirror, record the last position copied, print the steps to repoint clients",
    )
    failover.add_argument("--checkpoint", help=checkpoint_help)
    failover.add_argument(
        "--timeout", type=float, default=30.0, help="seconds to wait for the mirror to stop"
    )
    _endpoint_args(failover, "from", "primary")
    failover.add_argument("--ca", metavar="FILE", help="CA certificate of the primary")
    failover.add_argument(
        "--insecure-skip-verify", action="store_true", help="do not verify the primary's certificate"
    )
    failover.set_defaults(func=_failover)


def _fail(message: str, code: int = 1) -> int:
    print(f"evdb mirror: {message}", file=sys.stderr)
    return code


def _check_url(name: str, url: str | None) -> str | None:
    if not url:
        return f"{name} is required"
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        return f"{name} must be an http:// or https:// URL, not '{url}'"
    return None


def _paths(args: argparse.Namespace):
    from evdb.mirror.state import MirrorPaths, default_checkpoint_path

    return MirrorPaths.of(args.checkpoint or default_checkpoint_path())


def _logger() -> logging.Logger:
    logger = logging.getLogger("evdb.mirror")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(logging.Formatter("[%(process)5d,%(asctime)s,%(levelname).3s] %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
    return logger


def _run(args: argparse.Namespace) -> int:
    from evdb.mirror.mirror import Endpoint, Mirror, MirrorError, MirrorSettings
    from evdb.mirror.state import CheckpointError

    for name, url in (("--from", args.source), ("--to", args.target)):
        problem = _check_url(name, url)
        if problem:
            return _fail(problem, 2)
    if args.source.rstrip("/") == args.target.rstrip("/"):
        return _fail("--from and --to are the same node", 2)
    if args.metrics_port is not None and not 0 <= args.metrics_port <= 65535:
        return _fail("--metrics-port must be between 0 and 65535", 2)
    if args.start_from is not None and args.start_from < 0:
        return _fail("--start-from must be a position >= 0", 2)
    if not 1 <= args.parallel <= 64:
        return _fail("--parallel must be between 1 and 64", 2)
    verify = not args.insecure_skip_verify
    settings = MirrorSettings(
        source=Endpoint(args.source, args.from_user, args.from_password, args.from_ca or args.ca, verify),
        target=Endpoint(args.target, args.to_user, args.to_password, args.to_ca or args.ca, verify),
        paths=_paths(args),
        start_from=args.start_from,
        metrics_port=args.metrics_port,
        metrics_host=args.metrics_host,
        status_line_seconds=max(0.0, args.status_every),
        parallel=args.parallel,
    )
    mirror = Mirror(settings, _logger())

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await mirror.run(stop)

    try:
        asyncio.run(main())
    except CheckpointError as exc:
        return _fail(str(exc))
    except MirrorError:
        return 1  # logged by the mirror
    return 0


def _describe(status: dict) -> str:
    lag_b, lag_s = status.get("lagBytes"), status.get("lagSeconds")
    lag = "unknown" if lag_b is None else f"{lag_b} bytes" + ("" if lag_s is None else f" / {lag_s} s")
    line = (
        f"{status.get('state')}: {status.get('from')} -> {status.get('to')}, position {status.get('position')} "
        f"(checkpoint {status.get('checkpointPosition')}), primary head {status.get('primaryHead')}, lag {lag}, "
        f"{status.get('eventsCopied')} events copied ({status.get('eventsPerSecond')} events/s), "
        f"{status.get('eventsSkipped')} skipped"
    )
    if status.get("lastError"):
        line += f"\nlast error: {status['lastError']}"
    return line


def _status(args: argparse.Namespace) -> int:
    from evdb.mirror.state import MirrorLock, read_status

    paths = _paths(args)
    status = read_status(paths.status)
    if status is None:
        return _fail(f"no status file at {paths.status} (has a mirror run with this checkpoint?)")
    pid = MirrorLock(paths.lock).holder()
    if args.json:
        print(json.dumps(status, indent=2))
    else:
        running = f"running (pid {pid})" if pid else "not running"
        print(f"Mirror {running}, as of {status.get('updated')}\n{_describe(status)}")
    return 0


def _primary_head(args: argparse.Namespace, url: str) -> tuple[int | None, str]:
    """The position of the primary's newest event, or None and why it could not be read."""
    import httpx

    verify = args.ca if args.ca else not args.insecure_skip_verify
    try:
        with httpx.Client(
            base_url=url, auth=(args.from_user, args.from_password), verify=verify, timeout=3.0
        ) as client:
            response = client.get("/streams/$all/head/backward/1", headers={"Accept": "application/json"})
    except httpx.HTTPError as exc:
        return None, f"{type(exc).__name__}: {exc}"
    if response.status_code != 200:
        return None, f"it answered {response.status_code}"
    entries = response.json().get("entries") or []
    return (int(entries[0]["position"]) if entries else -1), ""


def _failover(args: argparse.Namespace) -> int:
    from evdb.mirror.state import Checkpoint, CheckpointError, MirrorLock, read_status, utc_now, write_status

    paths = _paths(args)
    lock = MirrorLock(paths.lock)
    pid = lock.holder()
    if pid and pid > 0:
        print(f"Stopping the mirror (pid {pid}) …")
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + args.timeout
        while lock.holder() and time.monotonic() < deadline:
            time.sleep(0.05)
        if lock.holder():
            print(f"The mirror did not stop in {args.timeout:.0f} s: killing it (its checkpoint may lag)")
            os.kill(pid, signal.SIGKILL)
            while lock.holder():
                time.sleep(0.05)
    else:
        print("No mirror is running with this checkpoint.")
    try:
        checkpoint = Checkpoint.load(paths.checkpoint)
    except CheckpointError as exc:
        return _fail(str(exc))
    if checkpoint is None:
        return _fail(f"no mirror checkpoint at {paths.checkpoint}")
    if checkpoint.failover:
        record = checkpoint.failover
        print(f"Already failed over at {record.get('at')}: last position copied {record.get('position')}.")
    else:
        head, why = _primary_head(args, checkpoint.source)
        record = {
            "at": utc_now(),
            "position": checkpoint.position,
            "eventsCopied": checkpoint.events_copied,
            "primaryHead": head,
            "primaryReachable": head is not None,
        }
        checkpoint.failover = record
        checkpoint.save(paths.checkpoint)
        status = read_status(paths.status) or {}
        status.update(state="failed-over", failover=record, updated=utc_now())
        write_status(paths.status, status)
        print(
            f"Failed over: the last $all position copied from the primary is {checkpoint.position} "
            f"({checkpoint.events_copied} events copied in all); recorded in {paths.checkpoint}."
        )
        if head is None:
            print(
                f"The primary {checkpoint.source} is unreachable ({why}): events it committed after "
                f"position {checkpoint.position}, if any, are not on the secondary."
            )
        elif head > checkpoint.position:
            print(
                f"WARNING: the primary {checkpoint.source} is still reachable and its newest event is at "
                f"position {head}: what it holds after {checkpoint.position} was not copied. Stop writes "
                "to it before repointing clients."
            )
        else:
            print(f"The primary {checkpoint.source} is reachable and everything it holds was copied.")
    target = urlparse(checkpoint.target)
    print()
    print(
        FAILOVER_STEPS.format(
            source=checkpoint.source,
            target=checkpoint.target,
            target_host=target.netloc,
            tls="true" if target.scheme == "https" else "false",
        )
    )
    return 0
