"""One option of the table: its names, type, default, range and meaning.

The three spellings come from the PascalCase name alone: ``ChunkSize`` is ``--chunk-size`` on the
command line, ``SERVICE_CHUNK_SIZE`` in the environment and ``ChunkSize`` in the YAML file; the
attribute of :class:`~evdb.options.Options` is ``chunk_size``.
"""

from __future__ import annotations

import builtins
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from evdb.errors import InvalidOption
from evdb.options.values import (
    BadValue,
    format_size,
    parse_bool,
    parse_float,
    parse_host,
    parse_int,
    parse_ip,
    parse_path,
    parse_size,
    parse_str,
)

__all__ = ["ENV_PREFIX", "GROUPS", "TYPES", "OptionSpec", "env_name", "words"]

ENV_PREFIX = "SERVICE_"

#: The groups of --help and docs/options.md, in the order they are shown.
GROUPS = (
    "Application",
    "Database",
    "Interface",
    "Certificates",
    "Scavenging",
    "AutoScavenge",
    "Cluster",
    "Projections",
    "Archive",
    "Logging",
    "Licensing",
)

_PARSERS: dict[str, Callable[[Any], Any]] = {
    "bool": parse_bool,
    "int": parse_int,
    "float": parse_float,
    "size": parse_size,
    "str": parse_str,
    "path": parse_path,
    "ip": parse_ip,
    "host": parse_host,
    "enum": parse_str,  # then matched against the choices
}
TYPES = tuple(_PARSERS)
_PYTHON_TYPES = {
    "bool": bool,
    "int": int,
    "float": float,
    "size": int,
    "str": str,
    "path": str,
    "ip": str,
    "host": str,
    "enum": str,
}
_TYPE_TEXT = {
    "bool": "boolean",
    "int": "integer",
    "float": "number",
    "size": "size in bytes",
    "str": "string",
    "path": "path",
    "ip": "IP address",
    "host": "host name or IP address",
    "enum": "enum",
}


def words(name: str, separator: str) -> str:
    """``StatsPeriodSec`` → ``stats<sep>period<sep>sec``."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", separator, name).lower()


@dataclass(frozen=True)
class OptionSpec:
    """A node option. ``default=None`` makes the option optional ("not set" is a valid value)."""

    name: str
    type: str
    default: Any
    meaning: str
    group: str
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[Any, ...] = ()
    unit: str = ""
    reloadable: bool = False
    deprecated: str | None = None  # the note logged and shown when the option is set
    sensitive: bool = False  # its value is masked when the configuration is logged
    yaml_section: str = ""  # the option is also written nested: AutoScavenge: {Enabled: ...}
    aliases: tuple[str, ...] = ()  # other PascalCase names accepted in YAML and the environment
    default_note: str = ""  # how a None default is filled in, for help and docs
    details: str = ""  # more than the one-sentence meaning, for docs/options.md

    def __post_init__(self) -> None:
        if self.type not in _PARSERS:
            raise ValueError(f"{self.name}: unknown option type {self.type!r}; use one of {', '.join(TYPES)}")
        if self.group not in GROUPS:
            raise ValueError(f"{self.name}: unknown group {self.group!r}; use one of {', '.join(GROUPS)}")
        if self.type == "enum" and not self.choices:
            raise ValueError(f"{self.name}: an enum needs choices")
        if self.yaml_section and not self.name.startswith(self.yaml_section):
            raise ValueError(f"{self.name}: the name must start with its YAML section {self.yaml_section}")

    # -- the three spellings -------------------------------------------------------------------------
    @property
    def flag(self) -> str:
        return "--" + words(self.name, "-")

    @property
    def env(self) -> str:
        return env_name(self.name)

    @property
    def attr(self) -> str:
        return words(self.name, "_")

    @property
    def yaml_key(self) -> str:
        """How the YAML file spells it: ``ChunkSize``, or ``AutoScavenge: Enabled`` for a nested one."""
        if self.yaml_section:
            return f"{self.yaml_section}: {self.name[len(self.yaml_section) :]}"
        return self.name

    # -- descriptions --------------------------------------------------------------------------------
    @property
    def python_type(self) -> builtins.type:  # `type` is also a field of this class
        return _PYTHON_TYPES[self.type]

    @property
    def optional(self) -> bool:
        return self.default is None

    @property
    def type_text(self) -> str:
        if self.type == "enum":
            return "one of " + ", ".join(str(c) for c in self.choices)
        text = _TYPE_TEXT[self.type]
        return f"{text} ({self.unit})" if self.unit else text

    @property
    def default_text(self) -> str:
        if self.default is None:
            return self.default_note or "not set"
        if isinstance(self.default, bool):
            return str(self.default).lower()
        if self.default == "":
            return "empty"
        if self.type == "size":
            return f"{self.default} ({format_size(self.default)})"
        return str(self.default)

    def _bound_text(self, bound: float) -> str:
        if self.type == "size" and isinstance(bound, int) and bound >= 1024:
            return f"{bound} ({format_size(bound)})"
        return str(bound)

    @property
    def accepted(self) -> str:
        """What the option accepts, in words; every error message about a value ends with it."""
        if self.choices:
            text = "one of " + ", ".join(str(c) for c in self.choices)
            if self.type == "size":
                text += " (bytes)"
        elif self.type == "bool":
            text = "true or false (also yes/no, on/off, 1/0)"
        elif self.type in ("int", "float", "size"):
            text = {
                "int": "an integer",
                "float": "a number",
                "size": "a size in bytes, as an integer or with a suffix (KiB, MiB, GiB, KB, MB, GB)",
            }[self.type]
            if self.minimum is not None and self.maximum is not None:
                text += f" from {self._bound_text(self.minimum)} to {self._bound_text(self.maximum)}"
            elif self.minimum is not None:
                text += f" of at least {self._bound_text(self.minimum)}"
            elif self.maximum is not None:
                text += f" of at most {self._bound_text(self.maximum)}"
        elif self.type == "ip":
            text = "an IPv4 or IPv6 address"
        elif self.type == "host":
            text = "a host name or an IPv4 or IPv6 address"
        elif self.type == "path":
            text = "a file or folder path"
        else:
            text = "a string"
        if self.optional:
            text += ", or nothing to leave it unset"
        return text

    # -- reading a value -----------------------------------------------------------------------------
    def parse(self, raw: Any, where: str) -> Any:
        """The typed, checked value of ``raw`` (from YAML, env, command line or code).

        ``where`` says where the value came from, for the error message. ``None`` (and an empty
        string, for every type but ``str``) means "not set", which only optional options accept.
        """
        if raw is None or (isinstance(raw, str) and raw.strip() == "" and self.type != "str"):
            if self.optional:
                return None
            raise InvalidOption(f"{self.name} ({where}): a value is required. Accepted: {self.accepted}.")
        try:
            value = _PARSERS[self.type](raw)
        except BadValue as exc:
            raise InvalidOption(f"{self.name} ({where}): {exc}. Accepted: {self.accepted}.") from None
        if self.choices:
            value = self._choose(value, raw, where)
        if self.type in ("int", "float", "size") and (
            (self.minimum is not None and value < self.minimum)
            or (self.maximum is not None and value > self.maximum)
        ):
            raise InvalidOption(f"{self.name} ({where}): {value} is out of range. Accepted: {self.accepted}.")
        return value

    def _choose(self, value: Any, raw: Any, where: str) -> Any:
        for choice in self.choices:
            if value == choice or (isinstance(choice, str) and str(value).lower() == choice.lower()):
                return choice  # the canonical spelling
        raise InvalidOption(f"{self.name} ({where}): {raw!r} is not allowed. Accepted: {self.accepted}.")


def env_name(name: str) -> str:
    return ENV_PREFIX + words(name, "_").upper()
