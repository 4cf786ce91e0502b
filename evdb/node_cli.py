"""``evdb node``: run one database node in the foreground."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Callable, Mapping

from evdb.errors import EvdbError, InvalidInput

__all__ = ["EVENT_LOOP_VARIABLE", "event_loop", "register_cli", "run_node"]

#: the environment variable that chooses the node's event loop (docs/operations/event-loop.md)
EVENT_LOOP_VARIABLE = "EVDB_EVENT_LOOP"


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

    from evdb.archive.settings import archive_settings
    from evdb.metrics_config import load_metrics_config
    from evdb.options import options_from_namespace

    try:
        options = options_from_namespace(args, os.environ)
        load_metrics_config(options.config)  # checked here too: a bad file is a usage error, not a crash
        archive_settings(options)  # the archive's options together (evdb/archive/settings.py)
    except EvdbError as exc:
        print(f"evdb node: {exc}", file=sys.stderr)
        return 2
    try:
        loop_name, loop_factory = event_loop(os.environ)
    except EvdbError as exc:
        print(f"evdb node: {exc}", file=sys.stderr)
        return 2
    try:
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            return runner.run(run_node(options, loop_name))
    except KeyboardInterrupt:
        return 0


def event_loop(environ: Mapping[str, str]) -> tuple[str, Callable[[], asyncio.AbstractEventLoop]]:
    """The event loop the node runs on, as ``EVDB_EVENT_LOOP`` chooses: ``uvloop`` (the default:
    libuv's loop, its transports and TLS in compiled code) or ``asyncio`` (Python's own selector
    loop, the fall-back). Returns its name (with uvloop's version) and a factory of new loops."""
    choice = environ.get(EVENT_LOOP_VARIABLE, "uvloop").strip().lower() or "uvloop"
    if choice == "asyncio":
        return "asyncio", asyncio.new_event_loop
    if choice != "uvloop":
        raise InvalidInput(
            f"{EVENT_LOOP_VARIABLE}={environ[EVENT_LOOP_VARIABLE]!r} is not an event loop: "
            "uvloop (the default) or asyncio."
        )
    try:
        import uvloop
    except ImportError as exc:
        raise InvalidInput(
            f"The uvloop event loop cannot be loaded ({exc}): install evdb's dependencies again, or "
            f"set {EVENT_LOOP_VARIABLE}=asyncio to run on Python's own event loop."
        ) from None
    return f"uvloop {uvloop.__version__}", uvloop.new_event_loop


async def run_node(options, loop_name: str = "asyncio") -> int:
    from evdb.node import Node

    node = Node(options)
    try:
        await node.start()
    except EvdbError as exc:
        print(f"evdb node: cannot start: {exc}", file=sys.stderr)
        node.logger.critical("Cannot start: %s", exc)
        await node.stop()
        return 1
    node.logger.info("Running on the %s event loop", loop_name)
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
