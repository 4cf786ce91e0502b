"""The command-line form: every option as ``--kebab-case`` on an argparse parser."""

from __future__ import annotations

import argparse
from collections.abc import Collection

from evdb.options.spec import GROUPS, OptionSpec
from evdb.options.table import OPTIONS

__all__ = ["add_arguments", "help_text"]


def help_text(o: OptionSpec) -> str:
    """The --help line: meaning, (reloadable), (deprecated: ...), then the other names, type and default."""
    text = o.meaning
    if o.reloadable:
        text += " (reloadable)"
    if o.deprecated:
        text += f" (deprecated: {o.deprecated})"
    range_text = ""
    if o.choices and o.type != "enum":
        range_text = "; one of " + ", ".join(str(c) for c in o.choices)
    elif o.minimum is not None or o.maximum is not None:
        low = "" if o.minimum is None else o.minimum
        high = "" if o.maximum is None else o.maximum
        range_text = f"; range {low}..{high}"
    return f"{text} [YAML {o.yaml_key}; env {o.env}; {o.type_text}{range_text}; default {o.default_text}]"


def _metavar(o: OptionSpec) -> str:
    if o.type == "bool":
        return "true|false"
    if o.choices:
        return "{" + ",".join(str(c) for c in o.choices) + "}"
    return {
        "int": "INT",
        "float": "NUMBER",
        "size": "SIZE",
        "str": "TEXT",
        "path": "PATH",
        "ip": "IP",
        "host": "HOST",
    }[o.type]


def add_arguments(parser: argparse.ArgumentParser, only: Collection[str] | None = None) -> None:
    """Add every option (or those ``only`` names), one argument group per option group.

    Values are kept as given (strings; ``argparse.SUPPRESS`` when absent) and checked by
    :func:`~evdb.options.options_from_namespace`, so that errors name the option and what it accepts.
    A boolean flag alone means true (``--mem-db``); ``--mem-db=false`` and ``--mem-db false`` work too.
    """
    for group_name in GROUPS:
        members = [o for o in OPTIONS if o.group == group_name and (only is None or o.name in only)]
        if not members:
            continue
        group = parser.add_argument_group(group_name)
        for o in members:
            kwargs: dict[str, object] = {
                "dest": o.attr,
                "default": argparse.SUPPRESS,
                "metavar": _metavar(o),
                "help": help_text(o).replace("%", "%%"),
            }
            if o.type == "bool":
                kwargs.update(nargs="?", const="true")
            group.add_argument(o.flag, **kwargs)  # type: ignore[arg-type]
