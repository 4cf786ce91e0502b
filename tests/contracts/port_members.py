"""The meta-test of the contract suites: which members of a port a fake lacks, or takes otherwise,
of those its real implementation has."""

from __future__ import annotations

import inspect
from typing import Any


def port_members(port: type) -> list[str]:
    own = {name for name in vars(port) if not name.startswith("_")}
    return sorted(own | set(getattr(port, "__annotations__", {})))


def drift(port: type, real: type, fake: type) -> list[str]:
    """What ``fake`` lacks of the members of ``port`` that ``real`` has, or takes otherwise."""
    out = []
    for name in port_members(port):
        assert hasattr(real, name) or name in _instance_attributes(real), f"{real.__name__} lacks {name}"
        if not (hasattr(fake, name) or name in _instance_attributes(fake)):
            out.append(f"{fake.__name__} lacks {port.__name__}.{name}")
            continue
        method = getattr(port, name, None)
        callable_member = callable(method) and not isinstance(method, property)
        if callable_member and _parameters(getattr(fake, name)) != _parameters(getattr(real, name)):
            out.append(f"{fake.__name__}.{name} takes {_parameters(getattr(fake, name))}")
    return out


def _instance_attributes(cls: type) -> set[str]:
    """The attributes an instance sets in ``__init__`` (self.name = ...)."""
    try:
        source = inspect.getsource(cls.__init__)  # type: ignore[misc]
    except TypeError:  # no __init__ of its own (object's, written in C): no instance attributes set
        return set()
    return {line.split("self.", 1)[1].split(":")[0].split("=")[0].strip() for line in source.splitlines()
            if line.strip().startswith("self.") and "=" in line}  # fmt: skip


def _parameters(method: Any) -> list[tuple[str, Any]]:
    return [(p.name, p.kind) for p in inspect.signature(method).parameters.values()]
