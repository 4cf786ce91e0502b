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

#: The module that contributes each sub-command, in the order ``evdb --help`` lists them. A command
#: line that names one imports only its module: ``evdb backup`` does not load the node, the cluster
#: and the dashboard (tests/cli/test_cli_commands.py checks this table against what each registers).
COMMANDS = {
    "node": "evdb.node_cli",
    "cluster": "evdb.cluster.cli",
    "scavenge": "evdb.admin_cli",
    "user": "evdb.admin_cli",
    "certs": "evdb.tls.cli",
    "license": "evdb.licensing.cli",
    "backup": "evdb.backup.cli",
    "restore": "evdb.backup.cli",
    "archive": "evdb.archive.cli",
    "dashboard": "evdb.dashboard_cli",
    "mirror": "evdb.mirror.cli",
    "scenario": "evdb.scenario.cli",
    "demo-load": "evdb.demo",
}

#: Modules that contribute sub-commands, in order.
COMMAND_MODULES = tuple(dict.fromkeys(COMMANDS.values()))


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``evdb`` parser with every sub-command, or with only the module that contributes
    ``command`` (the one a command line names)."""
    parser = argparse.ArgumentParser(
        prog="evdb",
        description="evdb: an event database server and its operations tooling.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    modules = (COMMANDS[command],) if command in COMMANDS else COMMAND_MODULES
    for name in modules:
        importlib.import_module(name).register_cli(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    named = next((arg for arg in arguments[:1] if not arg.startswith("-")), None)
    parser = build_parser(named)
    args = parser.parse_args(arguments)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
