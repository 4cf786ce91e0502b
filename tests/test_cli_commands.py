"""The ``evdb`` command's table of sub-commands (evdb/cli.py COMMANDS) and its lazy imports."""

import argparse
import importlib
import subprocess
import sys

from evdb import cli


def test_the_table_names_exactly_what_each_module_registers():
    registered: dict[str, str] = {}
    for module in cli.COMMAND_MODULES:
        parser = argparse.ArgumentParser()
        subparsers = parser.add_subparsers()
        importlib.import_module(module).register_cli(subparsers)
        for command in subparsers.choices:
            registered[command] = module
    assert registered == cli.COMMANDS


def test_help_lists_every_command(capsys):
    try:
        cli.main(["--help"])
    except SystemExit as exc:
        assert exc.code == 0
    out = capsys.readouterr().out
    for command in cli.COMMANDS:
        assert command in out


def test_a_command_imports_only_its_own_module():
    # `evdb backup` must not pay for the node, the cluster or the dashboard at start-up
    code = (
        "import sys\n"
        "from evdb.cli import main\n"
        "try:\n"
        "    main(['backup', '--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "loaded = [m for m in ('evdb.node', 'evdb.cluster.service', 'tui', 'aiohttp.web') if m in sys.modules]\n"
        "print('LOADED', loaded)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "LOADED []" in result.stdout, result.stdout + result.stderr


def test_an_unknown_command_gets_the_full_usage_and_exit_2(capsys):
    try:
        cli.main(["no-such-command"])
    except SystemExit as exc:
        assert exc.code == 2
    assert "invalid choice" in capsys.readouterr().err
