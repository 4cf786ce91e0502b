"""``Options``: the effective options of one node, one attribute per option of the table.

The class is generated from :data:`~evdb.options.table.OPTIONS`, so adding an option to the table is
enough to add its attribute. Every value is checked when an ``Options`` is made (also by ``replace``),
so an ``Options`` never holds a value its option does not accept.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from evdb.options.spec import OptionSpec
from evdb.options.table import OPTIONS

__all__ = [
    "BY_ATTR",
    "BY_NAME",
    "SOURCES",
    "Options",
    "deprecation_warnings",
    "derived_index",
    "effective_configuration",
]

BY_NAME: dict[str, OptionSpec] = {o.name: o for o in OPTIONS}
BY_ATTR: dict[str, OptionSpec] = {o.attr: o for o in OPTIONS}

#: Where a value can come from, lowest precedence first ("code" = set with ``Options.replace``).
SOURCES = ("default", "yaml", "env", "command line", "code")


def derived_index(db: str) -> str:
    """The Index folder used when none is given: ``index`` inside the ``Db`` folder, as in KurrentDB."""
    return os.path.join(db, "index")


@dataclass(frozen=True)
class _OptionsBase:
    #: option name (PascalCase) -> "default", "yaml", "env", "command line" or "code"
    config_sources: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)
    #: what the node warns of at start about its environment (KURRENTDB_* variables it does not read)
    environment_warnings: tuple[str, ...] = field(default=(), compare=False, repr=False)

    def __post_init__(self) -> None:
        given = dict(self.config_sources)
        unknown = set(given) - set(BY_NAME)
        if unknown:
            raise TypeError(f"config_sources names unknown options: {', '.join(sorted(unknown))}")
        sources: dict[str, str] = {}
        for o in OPTIONS:
            value = getattr(self, o.attr)
            # a value passed to the constructor without a source was set in code
            source = sources[o.name] = given.get(o.name) or ("default" if value == o.default else "code")
            if value is not None or not o.optional:
                where = {"default": "default value", "code": "set in code"}.get(source, f"from {source}")
                object.__setattr__(self, o.attr, o.parse(value, where))
        if self.index is None:  # type: ignore[attr-defined]
            object.__setattr__(self, "index", derived_index(self.db))  # type: ignore[attr-defined]
        object.__setattr__(self, "config_sources", sources)

    def replace(self, **changes: Any) -> Options:
        """A copy with some values changed (attribute names); they are checked and their source is "code".

        An Index that was derived from Db follows a changed Db.
        """
        unknown = set(changes) - set(BY_ATTR)
        if unknown:
            raise TypeError(f"Options has no option {', '.join(sorted(unknown))}")
        sources = dict(self.config_sources)
        sources.update({BY_ATTR[attr].name: "code" for attr in changes})
        if "db" in changes and "index" not in changes and self.config_sources["Index"] == "default":
            changes["index"] = None
        return dataclasses.replace(self, config_sources=sources, **changes)  # type: ignore[return-value]

    def source_of(self, name: str) -> str:
        """Where the value of option ``name`` (PascalCase) came from."""
        return self.config_sources[name]


def _field(o: OptionSpec) -> tuple[str, Any, Any]:
    kind: Any = o.python_type | None if o.optional or o.name == "Index" else o.python_type
    return (o.attr, kind, field(default=o.default))


if TYPE_CHECKING:

    class Options(_OptionsBase):
        """The effective options of a node (one attribute per option, snake_case)."""

        def __init__(
            self,
            *,
            config_sources: Mapping[str, str] = ...,
            environment_warnings: tuple[str, ...] = ...,
            **values: Any,
        ) -> None: ...
        def __getattr__(self, name: str) -> Any: ...

else:
    Options = dataclasses.make_dataclass(
        "Options",
        [_field(o) for o in OPTIONS],
        bases=(_OptionsBase,),
        frozen=True,
        kw_only=True,
        namespace={"__doc__": "The effective options of a node (one attribute per option, snake_case)."},
    )
    Options.__module__ = "evdb.options"


def effective_configuration(options: Options) -> list[tuple[str, str, str]]:
    """``(name, value as text, source)`` for every option, sensitive values masked: for the start-up log."""
    rows = []
    for o in OPTIONS:
        value = getattr(options, o.attr)
        if o.sensitive and value:
            text = "****"
        elif value is None:
            text = f"<{o.default_note or 'not set'}>"
        elif isinstance(value, bool):
            text = str(value).lower()
        else:
            text = str(value)
        rows.append((o.name, text, options.config_sources[o.name]))
    return rows


def deprecation_warnings(options: Options) -> list[str]:
    """One message per deprecated option that was set (not left at its default), to be logged at start."""
    return [
        f"The option {o.name} is deprecated: {o.deprecated}."
        for o in OPTIONS
        if o.deprecated and options.config_sources[o.name] != "default"
    ]
