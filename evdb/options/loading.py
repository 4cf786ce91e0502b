"""Building a node's ``Options`` from its sources, and reloading them.

Precedence: command line > environment > YAML file (``--config FILE``) > default. Every problem
found (unknown names in any source, wrong types, values out of range) is collected, and one
:class:`~evdb.errors.InvalidOption` names them all, so a node never starts with options it did not understand.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

from evdb.errors import InvalidOption
from evdb.options.arguments import add_arguments
from evdb.options.model import BY_NAME, Options
from evdb.options.sources import foreign_environment, read_environment, read_yaml_file, suggest
from evdb.options.table import OPTIONS

__all__ = ["configured_options", "load_options", "options_from_namespace", "reload_options"]

# name -> (raw value, where it was found, source label)
_Given = dict[str, tuple[Any, str, str]]
_FLAG_TO_NAME = {o.flag: o.name for o in OPTIONS}


def _raise(problems: list[str]) -> NoReturn:
    if len(problems) == 1:
        raise InvalidOption(problems[0])
    raise InvalidOption(
        f"{len(problems)} problems with the options:\n" + "\n".join(f"- {p}" for p in problems)
    )


def _build(given: _Given, environ: Mapping[str, str], problems: list[str]) -> Options:
    env = read_environment(environ, problems)
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}

    def take(name: str, raw: Any, where: str, label: str) -> None:
        try:
            values[name] = BY_NAME[name].parse(raw, where)
        except InvalidOption as exc:
            problems.append(str(exc))
            return
        sources[name] = label

    # the file to read is itself an option: command line, else environment
    config_entry = given.get("Config") or (
        (env["Config"][0], env["Config"][1], "env") if "Config" in env else None
    )
    if config_entry is not None:
        take("Config", *config_entry)
    if values.get("Config"):
        for name, (raw, where) in read_yaml_file(values["Config"], problems).items():
            take(name, raw, where, "yaml")
    for name, (raw, where) in env.items():
        if name != "Config":
            take(name, raw, where, "env")
    for name, (raw, where, label) in given.items():
        if name != "Config":
            take(name, raw, where, label)
    if problems:
        _raise(problems)
    return Options(
        config_sources=sources,
        environment_warnings=tuple(foreign_environment(environ)),
        **{BY_NAME[name].attr: value for name, value in values.items()},
    )


def _given_on_command_line(ns: argparse.Namespace) -> _Given:
    return {
        o.name: (getattr(ns, o.attr), f"command line {o.flag}", "command line")
        for o in OPTIONS
        if getattr(ns, o.attr, None) is not None
    }


def options_from_namespace(ns: argparse.Namespace, environ: Mapping[str, str] | None = None) -> Options:
    """Options from a namespace parsed by a parser that :func:`add_arguments` filled (the CLI path)."""
    return _build(_given_on_command_line(ns), os.environ if environ is None else environ, [])


class _Parser(argparse.ArgumentParser):
    """Turns argparse's own errors (a missing value, say) into InvalidOption instead of an exit."""

    def error(self, message: str) -> NoReturn:
        match = re.match(r"argument (--[\w-]+)", message)
        name = _FLAG_TO_NAME.get(match.group(1)) if match else None
        if name is not None and "expected one argument" in message:
            o = BY_NAME[name]
            raise InvalidOption(
                f"{name} (command line {o.flag}): a value is required. Accepted: {o.accepted}."
            )
        raise InvalidOption(f"Command line: {message}.")


def _unknown_arguments(extras: list[str]) -> list[str]:
    flags = [e.split("=", 1)[0] for e in extras if e.startswith("-")]
    if flags:
        return [
            f"Unknown command-line option {flag}: no option has that name{suggest(flag, list(_FLAG_TO_NAME), '--')}."
            for flag in flags
        ]
    return [f"Unexpected command-line argument {e!r}: options are written --name value." for e in extras]


def load_options(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> Options:
    """Parse ``argv`` (without the program name), read ``--config`` and the environment (default ``os.environ``)."""
    parser = _Parser(prog="evdb node", add_help=False, allow_abbrev=False)
    add_arguments(parser)
    ns, extras = parser.parse_known_args(list(argv or []))
    problems = _unknown_arguments(extras) if extras else []
    return _build(_given_on_command_line(ns), os.environ if environ is None else environ, problems)


def configured_options(current: Options, environ: Mapping[str, str] | None = None) -> Options:
    """The options the node's configuration gives now: the YAML file named by ``current.config`` and
    the environment read again, the values from the command line (and set in code) kept. Raises
    InvalidOption when the file or the environment is invalid."""
    kept: _Given = {
        o.name: (getattr(current, o.attr), f"{source} {o.flag}", source)
        for o in OPTIONS
        if (source := current.config_sources[o.name]) in ("command line", "code")
    }
    if current.config is not None:  # the same file, whichever source named it first
        kept["Config"] = (current.config, "Config", current.config_sources["Config"])
    return _build(kept, os.environ if environ is None else environ, [])


def reload_options(current: Options, environ: Mapping[str, str] | None = None) -> tuple[Options, list[str]]:
    """Read the YAML file named by ``current.config`` and the environment again
    (:func:`configured_options`).

    Returns the new options and the names of the options whose values changed. Raises InvalidOption,
    and nothing changes, when the file or the environment is invalid, or when an option that is not
    reloadable changed (it names them).
    """
    fresh = configured_options(current, environ)
    changed = [o.name for o in OPTIONS if getattr(fresh, o.attr) != getattr(current, o.attr)]
    needs_restart = [name for name in changed if not BY_NAME[name].reloadable]
    if needs_restart:
        reloadable = ", ".join(o.name for o in OPTIONS if o.reloadable)
        values = "; ".join(
            f"{name} runs with {_text(name, current)}, configured {_text(name, fresh)}"
            for name in needs_restart
        )
        raise InvalidOption(
            f"The configuration was not reloaded: {', '.join(needs_restart)} changed, which needs a "
            f"restart of the node ({values}). Restart it first, or set the running values back in its "
            f"configuration; only these options take effect on reload: {reloadable}."
        )
    return fresh, changed


def _text(name: str, options: Options) -> str:
    """An option's value as a message shows it (a sensitive one masked)."""
    spec = BY_NAME[name]
    value = getattr(options, spec.attr)
    if spec.sensitive and value:
        return "****"
    if isinstance(value, bool):
        return str(value).lower()
    return "<not set>" if value is None else str(value)
