"""``evdb node``: run one database node in the foreground."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

from evdb.errors import EvdbError

__all__ = ["register_cli", "run_node"]


def register_cli(subparsers: argparse._SubParsersAction) -> None:
    from evdb.options import add_arguments

    parser = subparsers.add_parser(
        "node",
        help="run one database node in the foreground",
        description=(
            "Run one evdb node. Every option has three forms: --kebab-case on the command line, "
            "SERVICE_UPPER_SNAKE in the environment, PascalCase in the YAML file given by --config. "
            "The command line wins over the environment, which wins over the file."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(parser)
    parser.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    import os

    from evdb.options import options_from_namespace

    try:
        options = options_from_namespace(args, os.environ)
    except EvdbError as exc:
        print(f"evdb node: {exc}", file=sys.stderr)
        return 2
    try:
        return asyncio.run(run_node(options))
    except KeyboardInterrupt:
        return 0


async def run_node(options) -> int:
    from evdb.node import Node

    node = Node(options)
    try:
        await node.start()
    except EvdbError as exc:
        print(f"evdb node: cannot start: {exc}", file=sys.stderr)
        node.logger.critical("Cannot start: %s", exc)
        await node.stop()
        return 1
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, node.shutdown_requested.set)
    # SIGHUP reloads the configuration file and the certificates (as POST /admin/reloadconfig does)
    loop.add_signal_handler(signal.SIGHUP, node.request_reload, "SIGHUP")
    try:
        await node.run_until_shutdown()
    finally:
        node.logger.info("Shutting down")
        await node.stop()
    return 0
