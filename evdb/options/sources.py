"""Where raw option values come from: the YAML file and the environment.

Both readers return ``{option name: (raw value, where)}`` and append a message to ``problems`` for
every name that is not an option, so that one run reports every mistake at once. ``where`` says
where the value was found, for error messages.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from typing import Any

import yaml

from evdb.options.spec import ENV_PREFIX, env_name
from evdb.options.table import OPTIONS

__all__ = [
    "FOREIGN_PREFIXES",
    "IGNORED_ENVIRONMENT",
    "RawValues",
    "foreign_environment",
    "option_name",
    "read_environment",
    "read_yaml_file",
    "suggest",
]

RawValues = dict[str, tuple[Any, str]]

_NAMES = {o.name.lower(): o.name for o in OPTIONS}
_NAMES.update({alias.lower(): o.name for o in OPTIONS for alias in o.aliases})
_ENV = {o.env: o.name for o in OPTIONS}
_ENV.update({env_name(alias): o.name for o in OPTIONS for alias in o.aliases})

#: Variables with the SERVICE_ prefix that are not options and are ignored rather than refused: the
#: service links Kubernetes injects into every pod for a Service named "service" (SERVICE_SERVICE_HOST,
#: SERVICE_SERVICE_PORT[_<name>], SERVICE_PORT=tcp://..., SERVICE_PORT_<n>_<proto>[_PROTO|_PORT|_ADDR]).
IGNORED_ENVIRONMENT = re.compile(
    r"^SERVICE_(SERVICE_HOST|SERVICE_PORT(_[A-Z0-9_]+)?|PORT_\d+_(TCP|UDP|SCTP)(_(PROTO|PORT|ADDR))?)$"
)
_KUBERNETES_PORT_URL = re.compile(r"^(tcp|udp|sctp)://", re.IGNORECASE)
#: KurrentDB's environment prefixes (and EventStoreDB's, which KurrentDB still reads): evdb reads neither
FOREIGN_PREFIXES = ("KURRENTDB_", "EVENTSTORE_")


def suggest(unknown: str, known: list[str], prefix: str = "") -> str:
    """`` (did you mean X?)`` for the closest known name, or nothing; a common ``prefix`` is not compared."""

    def bare(name: str) -> str:
        return name[len(prefix) :].lower() if name.startswith(prefix) else name.lower()

    by_bare = {bare(k): k for k in known}
    close = difflib.get_close_matches(bare(unknown), list(by_bare), n=1, cutoff=0.6)
    return f" (did you mean {by_bare[close[0]]}?)" if close else ""


def option_name(key: str) -> str | None:
    """The PascalCase name of the option ``key`` names as the YAML file would (any case, an alias, or
    a nested ``Section: Key`` / ``Section:Key`` written on one line), or None when no option has it."""
    return _NAMES.get(re.sub(r"[\s:]", "", key).lower())


def _ignored(key: str, value: str) -> bool:
    if IGNORED_ENVIRONMENT.match(key):
        return True
    return key == "SERVICE_PORT" and bool(_KUBERNETES_PORT_URL.match(value))


def read_environment(environ: Mapping[str, str], problems: list[str]) -> RawValues:
    """Every ``SERVICE_*`` variable; ``__`` (a nested section, KurrentDB style) is read as ``_``."""
    out: RawValues = {}
    for key, value in sorted(environ.items()):
        if not key.startswith(ENV_PREFIX) or _ignored(key, value):
            continue
        normal = ENV_PREFIX + re.sub(r"_+", "_", key[len(ENV_PREFIX) :]).strip("_")
        name = _ENV.get(normal)
        if name is None:
            problems.append(
                f"Unknown environment variable {key}: no option has that name{suggest(normal, list(_ENV), ENV_PREFIX)}."
            )
            continue
        where = f"environment variable {key}"
        if name in out:
            problems.append(f"{name} is given twice in the environment ({out[name][1]} and {key}).")
            continue
        out[name] = (value, where)
    return out


def foreign_environment(environ: Mapping[str, str]) -> list[str]:
    """One warning per ``KURRENTDB_*`` / ``EVENTSTORE_*`` variable: evdb ignores them, and the warning
    names the ``SERVICE_`` variable it reads for the same option (or says no option has that name)."""
    warnings = []
    for key in sorted(environ):
        prefix = next((p for p in FOREIGN_PREFIXES if key.upper().startswith(p)), None)
        if prefix is None:
            continue
        rest = re.sub(r"_+", "_", key[len(prefix) :].upper()).strip("_")
        name = _ENV.get(ENV_PREFIX + rest)
        if name is not None:
            warnings.append(
                f"The environment variable {key} is ignored: evdb reads {env_name(name)} for the option "
                f"{name}. Rename it to {env_name(name)}."
            )
        else:
            warnings.append(
                f"The environment variable {key} is ignored: evdb reads options from {ENV_PREFIX}* "
                f"variables, and no option is named {ENV_PREFIX}{rest}"
                f"{suggest(ENV_PREFIX + rest, list(_ENV), ENV_PREFIX)}."
            )
    return warnings


class _UniqueKeyLoader(yaml.SafeLoader):
    """A safe loader that refuses a key written twice in one mapping (PyYAML keeps the last silently)."""


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"the key {key!r} is written twice", key_node.start_mark
            )
        seen.add(key)
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _flatten(
    data: Mapping[Any, Any], prefix: tuple[str, ...], out: list[tuple[tuple[str, ...], Any]]
) -> None:
    for key, value in data.items():
        path = (*prefix, str(key))
        if isinstance(value, Mapping):
            _flatten(value, path, out)
        else:
            out.append((path, value))


def read_yaml_file(path: str, problems: list[str]) -> RawValues:
    """The options of a YAML file; nested mappings join their keys (``AutoScavenge: Enabled``)."""
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.load(f, Loader=_UniqueKeyLoader)  # a SafeLoader subclass
    except FileNotFoundError:
        problems.append(f"Config: the configuration file {path} does not exist.")
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        problems.append(f"Config: the configuration file {path} cannot be read: {exc}.")
        return {}
    except yaml.YAMLError as exc:
        problems.append(f"Config: {path} is not valid YAML: {exc}")
        return {}
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        problems.append(
            f"Config: {path} must hold a mapping of option names to values, not a {type(data).__name__}."
        )
        return {}
    entries: list[tuple[tuple[str, ...], Any]] = []
    _flatten(data, (), entries)
    out: RawValues = {}
    written_as: dict[str, str] = {}
    for keys, value in entries:
        written = ": ".join(keys)
        name = _NAMES.get("".join(keys).lower())
        if name is None:
            problems.append(
                f"Unknown option '{written}' in {path}{suggest(''.join(keys), [o.name for o in OPTIONS])}."
            )
            continue
        if name == "Config":
            problems.append(f"Config: the option cannot be set inside the configuration file {path}.")
            continue
        if name in written_as:
            problems.append(f"{name} is given twice in {path} ({written_as[name]} and {written}).")
            continue
        written_as[name] = written
        if value is None:  # "Key:" with no value leaves the option as if it were absent
            continue
        out[name] = (value, f"YAML file {path}, key {written}")
    return out
