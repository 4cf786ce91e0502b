"""Reading option values written as text (environment, command line) or as YAML scalars.

Each parser takes the raw value and returns the typed value, or raises :class:`BadValue` with a short
description of the problem; the caller adds which option and which source it came from.
"""

from __future__ import annotations

import ipaddress
import os
import re
from typing import Any

__all__ = [
    "FALSE_WORDS",
    "SIZE_UNITS",
    "TRUE_WORDS",
    "BadValue",
    "format_size",
    "parse_bool",
    "parse_float",
    "parse_host",
    "parse_int",
    "parse_ip",
    "parse_path",
    "parse_size",
    "parse_str",
]

TRUE_WORDS = ("true", "yes", "on", "1")
FALSE_WORDS = ("false", "no", "off", "0")

#: Size suffixes (case-insensitive): binary ones are powers of 1024, decimal ones powers of 1000.
SIZE_UNITS = {
    "b": 1,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "tb": 1000**4,
}
_INT = re.compile(r"^[+-]?\d+$")
_SIZE = re.compile(r"^(\d+)\s*([a-z]*)$", re.IGNORECASE)


_HOST_LABEL = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")


class BadValue(ValueError):
    """A raw value does not have the shape its option's type needs."""


def _scalar_text(value: Any) -> str:
    if isinstance(value, dict | list | tuple | set):
        raise BadValue(f"a {type(value).__name__} was given where a single value is needed")
    return str(value).strip()


def parse_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = _scalar_text(value).lower()
    if text in TRUE_WORDS:
        return True
    if text in FALSE_WORDS:
        return False
    raise BadValue(f"{value!r} is not a boolean")


def parse_int(value: Any) -> int:
    if isinstance(value, bool):  # YAML's yes/no must not become 1/0 here
        raise BadValue(f"{value!r} is not an integer")
    if isinstance(value, int):
        return value
    text = _scalar_text(value)
    if not _INT.match(text):
        raise BadValue(f"{value!r} is not an integer")
    return int(text)


def parse_float(value: Any) -> float:
    if isinstance(value, bool):
        raise BadValue(f"{value!r} is not a number")
    if isinstance(value, int | float):
        number = float(value)
    else:
        try:
            number = float(_scalar_text(value))
        except ValueError:
            raise BadValue(f"{value!r} is not a number") from None
    if number != number or number in (float("inf"), float("-inf")):
        raise BadValue(f"{value!r} is not a finite number")
    return number


def parse_host(value: Any) -> str:
    """A host name (``db1.example.com``, ``localhost``) or an IP address, as clients and other nodes
    are to be told (the ``*AdvertiseAs`` options). An IPv6 address is given without brackets."""
    text = _scalar_text(value)
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        pass
    name = text[:-1] if text.endswith(".") else text
    if not name or len(name) > 253 or not all(_HOST_LABEL.match(label) for label in name.split(".")):
        raise BadValue(f"{value!r} is not a host name or an IP address")
    return text


def parse_size(value: Any) -> int:
    """A byte count: a plain integer, or an integer with a suffix such as ``64MiB`` or ``1 GB``."""
    if isinstance(value, bool):
        raise BadValue(f"{value!r} is not a size")
    if isinstance(value, int):
        return value
    text = _scalar_text(value)
    if _INT.match(text):
        return int(text)
    match = _SIZE.match(text)
    if not match or match.group(2).lower() not in SIZE_UNITS:
        raise BadValue(f"{value!r} is not a size in bytes")
    return int(match.group(1)) * SIZE_UNITS[match.group(2).lower()]


def parse_str(value: Any) -> str:
    if isinstance(value, bool):  # YAML turns a bare yes/no into a bool; give back its spelling
        return "true" if value else "false"
    if isinstance(value, dict | list | tuple | set):
        raise BadValue(f"a {type(value).__name__} was given where a string is needed")
    return str(value)


def parse_path(value: Any) -> str:
    text = parse_str(value).strip()
    if not text:
        raise BadValue("the path is empty")
    if "\x00" in text:
        raise BadValue("the path contains a NUL character")
    return os.path.expanduser(text)


def parse_ip(value: Any) -> str:
    text = _scalar_text(value)
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        raise BadValue(f"{value!r} is not an IPv4 or IPv6 address") from None


def format_size(number: int) -> str:
    """``67108864`` → ``64 MiB``; sizes that are not a whole number of a binary unit stay in bytes."""
    for unit in ("TiB", "GiB", "MiB", "KiB"):
        factor = SIZE_UNITS[unit.lower()]
        if number >= factor and number % factor == 0:
            return f"{number // factor} {unit}"
    return f"{number} bytes"
