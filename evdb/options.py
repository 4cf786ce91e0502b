"""The node's options: one declarative table from which every form comes.

Each option has a PascalCase name (the YAML form), a ``--kebab-case`` command-line flag and a
``SERVICE_UPPER_SNAKE`` environment variable. Precedence: command line > environment > YAML file
(``--config FILE``) > default. Unknown names, wrong types and out-of-range values are errors that
name the option and what it accepts; a node does not start with them.

``python -m evdb.options --markdown`` prints docs/options.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from evdb.errors import InvalidOption

__all__ = [
    "OPTIONS",
    "OptionSpec",
    "Options",
    "add_arguments",
    "load_options",
    "options_from_namespace",
    "reload_options",
    "render_markdown",
]

ENV_PREFIX = "SERVICE_"
_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}
_SIZE = re.compile(r"^\s*(\d+)\s*(B|KB|KiB|MB|MiB|GB|GiB)?\s*$", re.IGNORECASE)
_UNITS = {
    None: 1,
    "b": 1,
    "kb": 1000,
    "kib": 1024,
    "mb": 1000**2,
    "mib": 1024**2,
    "gb": 1000**3,
    "gib": 1024**3,
}
LOG_LEVELS = ("Verbose", "Debug", "Information", "Warning", "Error", "Fatal")


@dataclass(frozen=True)
class OptionSpec:
    name: str
    kind: str  # bool, int, bytes, str, path, enum, optional-bool
    default: Any
    meaning: str
    group: str
    minimum: int | None = None
    maximum: int | None = None
    choices: tuple[str, ...] = ()
    reloadable: bool = False
    deprecated: str | None = None
    unit: str = ""

    @property
    def flag(self) -> str:
        return "--" + _words(self.name, "-")

    @property
    def env(self) -> str:
        return ENV_PREFIX + _words(self.name, "_").upper()

    @property
    def attr(self) -> str:
        return _words(self.name, "_")

    @property
    def type_text(self) -> str:
        text = {
            "bool": "boolean",
            "optional-bool": "boolean",
            "int": "integer",
            "bytes": "bytes",
            "str": "string",
            "path": "path",
            "enum": " | ".join(self.choices),
        }[self.kind]
        return f"{text} ({self.unit})" if self.unit else text

    @property
    def default_text(self) -> str:
        if self.default is None:
            return "(none)"
        if self.default == "":
            return "(empty)"
        if isinstance(self.default, bool):
            return str(self.default).lower()
        return str(self.default)

    def convert(self, value: Any, source: str) -> Any:
        """Coerce a value from YAML, the environment or the command line, and check it."""
        where = f"{self.name} (from {source})"
        kind = self.kind
        if value is None:
            if kind in ("path", "optional-bool") or self.default is None:
                return None
            raise InvalidOption(f"{where}: a value is required ({self.type_text}).")
        if kind in ("bool", "optional-bool"):
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in _TRUE:
                return True
            if text in _FALSE:
                return False
            raise InvalidOption(f"{where}: '{value}' is not a boolean; use true or false.")
        if kind in ("int", "bytes"):
            if isinstance(value, bool):
                raise InvalidOption(
                    f"{where}: '{value}' is not {'an integer' if kind == 'int' else 'a size'}."
                )
            if isinstance(value, int):
                number = value
            else:
                match = _SIZE.match(str(value)) if kind == "bytes" else re.match(r"^\s*-?\d+\s*$", str(value))
                if not match:
                    accepted = "an integer" if kind == "int" else "a size in bytes (e.g. 65536 or 64MiB)"
                    raise InvalidOption(f"{where}: '{value}' is not {accepted}.")
                number = (
                    int(match.group(1)) * _UNITS[(match.group(2) or "").lower() or None]
                    if kind == "bytes"
                    else int(value)
                )
            if (self.minimum is not None and number < self.minimum) or (
                self.maximum is not None and number > self.maximum
            ):
                raise InvalidOption(
                    f"{where}: {number} is out of range; accepted: {self.minimum} to {self.maximum}."
                )
            return number
        if kind == "enum":
            for choice in self.choices:
                if str(value).lower() == choice.lower():
                    return choice
            raise InvalidOption(f"{where}: '{value}' is not one of {', '.join(self.choices)}.")
        if not isinstance(value, str | int | float):
            raise InvalidOption(f"{where}: expected a {self.type_text}.")
        return str(value)


def _words(name: str, sep: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", sep, name).lower()


def _o(name, kind, default, meaning, group, **kw) -> OptionSpec:
    return OptionSpec(name, kind, default, meaning, group, **kw)


GiB = 1024**3
OPTIONS: tuple[OptionSpec, ...] = (
    # Application
    _o(
        "Config",
        "path",
        None,
        "YAML file with options (PascalCase keys; nested AutoScavenge: Enabled: is accepted).",
        "Application",
    ),
    _o(
        "Dev",
        "bool",
        False,
        "Developer mode: throw-away certificates are generated when none are given.",
        "Application",
    ),
    _o(
        "MemDb",
        "bool",
        False,
        "Keep the whole database in memory; nothing is written to disk.",
        "Application",
    ),
    _o(
        "LicenseKey",
        "str",
        "",
        "Licence key enabling licensed features (auto-scavenge, redaction).",
        "Application",
        reloadable=True,
    ),
    _o(
        "StatsPeriodSec",
        "int",
        30,
        "Seconds between statistics events in $stats-<endpoint> (kept 24 hours); 0 turns them off.",
        "Application",
        minimum=0,
        maximum=86400,
        unit="seconds",
    ),
    _o(
        "EnableUnixSocket",
        "bool",
        False,
        "Serve the redaction RPC on a unix domain socket in the database folder.",
        "Application",
    ),
    # Database
    _o("Db", "path", "./data/db", "Folder of the transaction log (chunk files and checkpoints).", "Database"),
    _o("Index", "path", None, "Folder of the index; default: <Db>/index.", "Database"),
    _o(
        "ChunkSize",
        "bytes",
        256 * 1024 * 1024,
        "Logical size of one chunk file; must not change once a database exists.",
        "Database",
        minimum=4096,
        maximum=GiB,
        unit="bytes",
    ),
    _o(
        "MaxMemTableSize",
        "int",
        1_000_000,
        "Index entries kept in memory before they are written to a PTable.",
        "Database",
        minimum=1,
        maximum=100_000_000,
    ),
    _o(
        "MaxAppendSize",
        "bytes",
        16 * 1024 * 1024,
        "Largest data + metadata of one append; larger appends are refused.",
        "Database",
        minimum=1,
        maximum=GiB,
        unit="bytes",
    ),
    _o(
        "SkipDbVerify",
        "bool",
        False,
        "Do not verify the checksums of completed chunks at start (sizes are still checked).",
        "Database",
    ),
    # Interface
    _o(
        "HttpIp",
        "str",
        "127.0.0.1",
        "Address the HTTP API listens on (loopback by default, for safety; 0.0.0.0 for all).",
        "Interface",
    ),
    _o(
        "HttpPort",
        "int",
        2113,
        "Port of the HTTP API (and gRPC); 0 picks a free port.",
        "Interface",
        minimum=0,
        maximum=65535,
    ),
    _o("Insecure", "bool", False, "Serve plain HTTP without TLS (logged as insecure).", "Interface"),
    # Certificates
    _o("CertificateFile", "path", None, "The node's certificate (PEM).", "Certificates", reloadable=True),
    _o(
        "CertificatePrivateKeyFile",
        "path",
        None,
        "The node certificate's private key (PEM).",
        "Certificates",
        reloadable=True,
    ),
    _o(
        "TrustedRootCertificatesPath",
        "path",
        None,
        "A CA certificate file, or a folder of them, that node certificates must chain to.",
        "Certificates",
        reloadable=True,
    ),
    _o(
        "CertificateReservedNodeCommonName",
        "str",
        "eventstoredb-node",
        "Common name that node certificates must carry.",
        "Certificates",
        reloadable=True,
    ),
    # Logging
    _o("Log", "path", "./data/log", "Folder of the JSON log files.", "Logging"),
    _o(
        "LogLevel",
        "enum",
        "Information",
        "Lowest level that is logged.",
        "Logging",
        choices=LOG_LEVELS,
        reloadable=True,
    ),
    _o("LogConsoleFormat", "enum", "Plain", "Console log format.", "Logging", choices=("Plain", "Json")),
    # Scavenging (the spec's table)
    _o(
        "DisableScavengeMerging",
        "bool",
        False,
        "When true, small scavenged chunks are not merged.",
        "Scavenging",
    ),
    _o(
        "ScavengeHistoryMaxAge",
        "int",
        30,
        "How long scavenge streams are kept.",
        "Scavenging",
        minimum=0,
        maximum=36500,
        unit="days",
    ),
    _o(
        "AlwaysKeepScavenged",
        "bool",
        False,
        "The newer chunk of a scavenge is always kept (no effect; kept for compatibility).",
        "Scavenging",
        deprecated="accepted and ignored: evdb always keeps the scavenged chunk",
    ),
    _o(
        "ScavengeBackendPageSize",
        "int",
        16,
        "Page size of the scavenge database.",
        "Scavenging",
        minimum=1,
        maximum=64,
        unit="KiB",
    ),
    _o(
        "ScavengeBackendCacheSize",
        "bytes",
        64 * 1024 * 1024,
        "Memory for scavenge-database caching.",
        "Scavenging",
        minimum=0,
        maximum=64 * GiB,
        unit="bytes",
    ),
    _o(
        "ScavengeHashUsersCacheCapacity",
        "int",
        100_000,
        "Stream hashes remembered when checking collisions; raise it if accumulation reports many cache misses.",
        "Scavenging",
        minimum=1,
        maximum=100_000_000,
    ),
    _o(
        "UnsafeIgnoreHardDelete",
        "bool",
        False,
        "UNSAFE: a scavenge also removes tombstones, so hard-deleted streams accept appends again.",
        "Scavenging",
    ),
    # Auto-scavenge
    _o(
        "AutoScavengeEnabled",
        "optional-bool",
        None,
        "Auto-scavenge on or off (YAML: AutoScavenge: Enabled:); default: on when the licence allows it.",
        "AutoScavenge",
    ),
)
_BY_NAME = {o.name: o for o in OPTIONS}
_BY_ENV = {o.env: o for o in OPTIONS}
_BY_ATTR = {o.attr: o for o in OPTIONS}


@dataclass(frozen=True)
class _OptionsBase:
    config_sources: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    def replace(self, **changes: Any) -> Options:
        return dataclasses.replace(self, **changes)  # type: ignore[return-value]

    def source_of(self, name: str) -> str:
        return self.config_sources.get(name, "default")


Options = dataclasses.make_dataclass(
    "Options",
    [(o.attr, Any, field(default=o.default)) for o in OPTIONS],
    bases=(_OptionsBase,),
    frozen=True,
    namespace={"__doc__": "The effective options of a node (one attribute per option, snake_case)."},
)
Options.__module__ = __name__


# -- parsing -----------------------------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add every option as ``--kebab-case``; help shows the other two names, type, default, meaning."""
    groups: dict[str, argparse._ArgumentGroup] = {}
    for o in OPTIONS:
        group = groups.get(o.group) or groups.setdefault(o.group, parser.add_argument_group(o.group))
        notes = []
        if o.reloadable:
            notes.append("reloadable")
        if o.deprecated:
            notes.append(f"deprecated: {o.deprecated}")
        note = f" ({'; '.join(notes)})" if notes else ""
        help_text = f"{o.meaning}{note} [YAML {o.name}, env {o.env}; {o.type_text}; default {o.default_text}]"
        kwargs: dict[str, Any] = {
            "dest": o.attr,
            "default": argparse.SUPPRESS,
            "help": help_text.replace("%", "%%"),
        }
        if o.kind in ("bool", "optional-bool"):
            kwargs.update(nargs="?", const="true", metavar="true|false")
        else:
            kwargs["metavar"] = o.kind.upper() if o.kind != "enum" else "{" + ",".join(o.choices) + "}"
        group.add_argument(o.flag, **kwargs)


def _flatten_yaml(data: Any, path: str) -> dict[str, Any]:
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise InvalidOption(f"{path}: the file must hold a mapping of option names to values.")
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            for sub, inner in value.items():
                out[f"{key}{sub}"] = inner
        else:
            out[str(key)] = value
    return out


def read_yaml(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except FileNotFoundError:
        raise InvalidOption(f"Config: the file {path} does not exist.") from None
    except OSError as exc:
        raise InvalidOption(f"Config: the file {path} cannot be read: {exc}") from None
    except yaml.YAMLError as exc:
        raise InvalidOption(f"Config: {path} is not valid YAML: {exc}") from None
    return _flatten_yaml(data, path)


def _resolve(cli: Mapping[str, Any], environ: Mapping[str, str]) -> Options:
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    env_values: dict[str, Any] = {}
    for key, value in environ.items():
        if not key.startswith(ENV_PREFIX):
            continue
        spec = _BY_ENV.get(key)
        if spec is None:
            raise InvalidOption(
                f"Unknown environment variable {key}: no option has that name (see evdb node --help)."
            )
        env_values[spec.name] = value
    config = cli.get("config") or env_values.get("Config")
    if config:
        for key, value in read_yaml(str(config)).items():
            spec = _BY_NAME.get(key)
            if spec is None:
                raise InvalidOption(f"Unknown option '{key}' in {config} (see evdb node --help).")
            values[spec.name] = spec.convert(value, f"YAML {config}")
            sources[spec.name] = "yaml"
    for name, value in env_values.items():
        spec = _BY_NAME[name]
        values[name] = spec.convert(value, f"environment {spec.env}")
        sources[name] = "environment"
    for attr, value in cli.items():
        spec = _BY_ATTR[attr]
        values[spec.name] = spec.convert(value, f"command line {spec.flag}")
        sources[spec.name] = "command line"
    kwargs = {_BY_NAME[name].attr: value for name, value in values.items()}
    if not kwargs.get("index"):
        kwargs["index"] = os.path.join(kwargs.get("db") or _BY_NAME["Db"].default, "index")
    return Options(config_sources=sources, **kwargs)


def options_from_namespace(ns: argparse.Namespace, environ: Mapping[str, str] | None = None) -> Options:
    cli = {o.attr: getattr(ns, o.attr) for o in OPTIONS if hasattr(ns, o.attr)}
    return _resolve(cli, os.environ if environ is None else environ)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # unknown flags become InvalidOption, not SystemExit
        raise InvalidOption(f"{message} (see evdb node --help)")


def load_options(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> Options:
    parser = _Parser(prog="evdb node", add_help=False)
    add_arguments(parser)
    ns = parser.parse_args(list(argv or []))
    return options_from_namespace(ns, environ)


def reload_options(current: Options, environ: Mapping[str, str] | None = None) -> tuple[Options, list[str]]:
    """Read the configuration again (YAML file + environment; the command line keeps its values).

    Returns the new options and the names of those that changed. Raises InvalidOption when the
    file is invalid or when an option that needs a restart changed.
    """
    cli = {o.attr: getattr(current, o.attr) for o in OPTIONS if current.source_of(o.name) == "command line"}
    fresh = _resolve(cli, os.environ if environ is None else environ)
    changed = [o.name for o in OPTIONS if getattr(fresh, o.attr) != getattr(current, o.attr)]
    frozen = [name for name in changed if not _BY_NAME[name].reloadable]
    if frozen:
        raise InvalidOption(f"These options changed but need a restart: {', '.join(frozen)}.")
    return fresh, changed


# -- documentation -----------------------------------------------------------------------------------
def render_markdown() -> str:
    lines = [
        "# Node options",
        "",
        "Generated from the option table in `evdb/options.py` (`python -m evdb.options --markdown`);",
        "`evdb node --help` shows the same. Every option has three forms: `--kebab-case` on the command",
        "line, `SERVICE_UPPER_SNAKE` in the environment, `PascalCase` in the YAML file given by `--config`.",
        "The command line wins over the environment, which wins over the file. An unknown name, a wrong",
        "type or a value out of range stops the node at start with a message naming the option.",
        "",
        "Booleans accept true/false, yes/no, on/off, 1/0; a bare `--flag` means true. Sizes accept a plain",
        "number of bytes or a number with KB, KiB, MB, MiB, GB or GiB. *Reloadable* options take effect on",
        "`POST /admin/reloadconfig` or SIGHUP without a restart.",
        "",
    ]
    group = None
    for o in OPTIONS:
        if o.group != group:
            group = o.group
            lines += [
                f"## {group}",
                "",
                "| YAML | command line | environment | type | default | meaning |",
                "|---|---|---|---|---|---|",
            ]
        meaning = o.meaning
        if o.reloadable:
            meaning += " *Reloadable.*"
        if o.deprecated:
            meaning += f" *Deprecated: {o.deprecated}.*"
        if o.minimum is not None:
            meaning += f" Range {o.minimum} to {o.maximum}."
        lines.append(
            f"| `{o.name}` | `{o.flag}` | `{o.env}` | {o.type_text} | `{o.default_text}` | {meaning} |"
        )
        following = OPTIONS.index(o) + 1
        if following == len(OPTIONS) or OPTIONS[following].group != group:
            lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    if sys.argv[1:] == ["--markdown"]:
        sys.stdout.write(render_markdown())
    else:
        print("usage: python -m evdb.options --markdown", file=sys.stderr)
        sys.exit(2)
