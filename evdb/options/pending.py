"""Which options a node runs with, which its configuration now gives, and which wait for a restart.

A node reads its configuration (the YAML file, the environment) at start; a reload
(``POST /admin/reloadconfig``, SIGHUP) applies the *reloadable* options again and refuses when any other
option's configured value differs from the one the node runs with: that option waits for a restart.
:func:`option_states` says so option by option (``GET /info/options``), so that a tool can tell each node
exactly what it needs: nothing, a reload, or a restart.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import PurePath
from typing import Any

from evdb.errors import InvalidOption
from evdb.options.loading import configured_options
from evdb.options.model import Options
from evdb.options.spec import OptionSpec
from evdb.options.table import OPTIONS

__all__ = ["MASK", "option_states", "restart_pending"]

#: what a sensitive option's value is shown as (a licence key, say)
MASK = "****"


def _shown(spec: OptionSpec, value: Any) -> Any:
    """An option value as JSON carries it; a sensitive one masked."""
    if spec.sensitive and value:
        return MASK
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, list | tuple):
        return [v if isinstance(v, bool | int | float | str) else str(v) for v in value]
    return str(value)


def option_states(running: Options, environ: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """One object per option: ``name``, ``value`` (in effect), ``configured`` (what the configuration
    gives now), ``restartPending`` (a restart-only option whose configured value differs from the one in
    effect), ``reloadPending`` (a reloadable one: the next reload applies it), ``reloadable``, ``source``
    and ``group``. When the configuration cannot be read now, ``configured`` is null, nothing is pending
    and ``configurationError`` says why. Reads the file: call it off the event loop."""
    try:
        configured: Options | None = configured_options(running, environ)
        error = None
    except InvalidOption as exc:
        configured, error = None, str(exc)
    rows = []
    for spec in OPTIONS:
        value = getattr(running, spec.attr)
        row: dict[str, Any] = {
            "name": spec.name,
            "value": _shown(spec, value),
            "group": spec.group,
            "source": running.config_sources[spec.name],
            "reloadable": spec.reloadable,
        }
        if configured is None:
            row.update(configured=None, restartPending=False, reloadPending=False, configurationError=error)
        else:
            now = getattr(configured, spec.attr)
            row["configured"] = _shown(spec, now)
            row["restartPending"] = not spec.reloadable and now != value
            row["reloadPending"] = spec.reloadable and now != value
        rows.append(row)
    return rows


def restart_pending(states: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of :func:`option_states` (or of a node's ``GET /info/options``) that wait for a restart."""
    return [row for row in states if row.get("restartPending")]
