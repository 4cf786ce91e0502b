"""The ``evdb`` command: one entry point with sub-commands.

Each sub-command lives next to the feature it drives and contributes itself through a
``register_cli(subparsers)`` function that adds its parser and sets ``func`` to a callable
taking the parsed ``argparse.Namespace`` and returning an exit code.
"""

from __future__ import annotations

import argparse
import importlib
import sys

__all__ = ["build_parser", "main"]

#: Modules that contribute sub-commands, in the order ``evdb --help`` lists them.
COMMAND_MODULES = (
    "evdb.node_cli",
    "evdb.cluster.cli",
    "evdb.admin_cli",
    "evdb.tls.cli",
    "evdb.licensing.cli",
    "evdb.backup.cli",
    "evdb.dashboard_cli",
    "evdb.mirror.cli",
    "evdb.scenario.cli",
    "evdb.demo",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="evdb",
        description="evdb: an event database server and its operations tooling.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register_cli(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
