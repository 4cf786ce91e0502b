"""Whether auto-scavenge runs on this node, and the start-up log lines that say so.

Two forms, as KurrentDB has had them:

**Built in** (KurrentDB 24.10 and later; version = evdb's version). ``AutoScavenge: Enabled`` in YAML
(``AutoScavengeEnabled``). Not set: on exactly when a valid licence with the ``AUTO_SCAVENGE``
entitlement is present. ``false``: off. Never in dev mode or on an in-memory database.

**Earlier plugin form** (plugin version 0.0.1). The *installation directory* is the
``InstallationDirectory`` option; by default the folder of the ``--config`` file, else the current
directory. The plugin is *present* when a subdirectory of ``{installation}/plugins`` (any name) holds
an evdb plugin manifest ``plugin.json`` with ``"name": "AutoScavenge"`` (and an optional
``"version"``), or KurrentDB's plugin assembly ``EventStore.AutoScavenge.dll`` /
``KurrentDB.AutoScavenge.dll``: evdb's auto-scavenge code is built in, so the subdirectory stands for
the plugin's binaries. It is enabled by any ``*.json`` file in ``{installation}/config`` holding
``{"Service": {"Plugins": {"AutoScavenge": {"Enabled": true}}}}``. Enabled without a valid licence,
the node logs an error and does not start (its process exits with status 1).

Log lines (searchable), as KurrentDB's plugin host writes them (``{PluginName} {Version} plugin
enabled.``, its string values quoted): ``"AutoScavenge" "{version}" plugin enabled.``,
``"AutoScavenge" "{version}" plugin disabled. "..."`` naming what to change, ``AutoScavenge is not compatible with dev mode`` /
``... with mem-db``, ``AutoScavenge is not licensed, stopping.``, ``Plugins found in ...``,
``Loaded plugin AutoScavenge ...``.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evdb.errors import EvdbError

__all__ = [
    "PLUGIN_VERSION",
    "AutoScavengeNotLicensed",
    "Enabling",
    "PluginForm",
    "decide",
    "find_plugin_form",
    "installation_directory",
]

PLUGIN_VERSION = "0.0.1"
PLUGIN_NAME = "AutoScavenge"
PLUGIN_ASSEMBLIES = ("EventStore.AutoScavenge.dll", "KurrentDB.AutoScavenge.dll")
#: KurrentDB's plugin host lines (KurrentDB.Plugins ``{PluginName} {Version} plugin enabled.``); its
#: logger renders string values in quotes, as its documentation shows them
PLUGIN_ENABLED = f'"{PLUGIN_NAME}" "%s" plugin enabled.'
PLUGIN_DISABLED = f'"{PLUGIN_NAME}" "%s" plugin disabled. "%s"'


class AutoScavengeNotLicensed(EvdbError):
    """The earlier plugin form is enabled but there is no valid licence: the node must not start."""


@dataclass(frozen=True)
class PluginForm:
    directory: Path  # the plugin's subdirectory of plugins/
    version: str
    enabled: bool  # Service > Plugins > AutoScavenge > Enabled in a config/*.json file
    enabled_by: Path | None  # the JSON file that enabled it


@dataclass(frozen=True)
class Enabling:
    mapped: bool  # the /auto-scavenge endpoints exist (404 otherwise)
    active: bool  # the feature runs (GET /auto-scavenge/enabled answers this)
    version: str
    plugin_form: bool = False  # earlier plugin rules for the endpoints' roles (see Versioning)


def installation_directory(options: Any) -> Path:
    given = getattr(options, "installation_directory", None)
    if given:
        return Path(given).expanduser().resolve()
    config = getattr(options, "config", None)
    if config:
        return Path(config).expanduser().resolve().parent
    return Path.cwd()


def _manifest_version(folder: Path) -> str | None:
    manifest = folder / "plugin.json"
    if manifest.is_file():
        try:
            body = json.loads(manifest.read_text())
        except (OSError, ValueError):
            return None
        if isinstance(body, dict) and str(body.get("name", "")).lower() == PLUGIN_NAME.lower():
            return str(body.get("version") or PLUGIN_VERSION)
        return None
    if any((folder / name).is_file() for name in PLUGIN_ASSEMBLIES):
        return PLUGIN_VERSION
    return None


def _json_enabled(value: Any) -> bool | None:
    """Service > Plugins > AutoScavenge > Enabled, keys matched without regard to case."""
    for key in ("service", "plugins", "autoscavenge", "enabled"):
        if not isinstance(value, dict):
            return None
        value = next((v for k, v in value.items() if str(k).lower() == key), None)
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    return None


def find_plugin_form(install: Path, logger: logging.Logger) -> PluginForm | None:
    """The earlier plugin form, if its plugin is present under ``{install}/plugins``."""
    plugins = install / "plugins"
    if not plugins.is_dir():
        return None
    found: list[tuple[Path, str]] = []
    for sub in sorted(p for p in plugins.iterdir() if p.is_dir()):
        version = _manifest_version(sub)
        if version is not None:
            found.append((sub, version))
        else:
            logger.info(
                "Plugin directory %s holds no evdb plugin (no plugin.json naming AutoScavenge); ignored", sub
            )
    if not found:
        logger.info("Plugins found in %s: none", plugins)
        return None
    logger.info(
        "Plugins found in %s: %s", plugins, ", ".join(f"{PLUGIN_NAME} {v} ({d.name})" for d, v in found)
    )
    directory, version = found[0]
    enabled: bool = False
    enabled_by: Path | None = None
    config = install / "config"
    if config.is_dir():
        for path in sorted(config.glob("*.json")):
            try:
                body = json.loads(path.read_text())
            except (OSError, ValueError) as exc:
                raise EvdbError(f"The plugin configuration file {path} is not valid JSON: {exc}") from None
            value = _json_enabled(body)
            if value is not None:
                enabled, enabled_by = value, path
    return PluginForm(directory, version, enabled, enabled_by)


def decide(options: Any, license: Any, now: float, logger: logging.Logger, version: str) -> Enabling:
    """Apply the rules above and log the outcome. Raises AutoScavengeNotLicensed (plugin form only)."""
    option = getattr(options, "auto_scavenge_enabled", None)
    dev, mem_db = bool(getattr(options, "dev", False)), bool(getattr(options, "mem_db", False))
    licensed = license is not None and license.allows("AUTO_SCAVENGE", now)
    install = installation_directory(options)
    plugin = find_plugin_form(install, logger)

    def disabled(v: str, why: str) -> Enabling:
        logger.info(PLUGIN_DISABLED, v, why)
        return Enabling(False, False, v)

    incompatible = None
    if dev:
        incompatible = (
            "AutoScavenge is not compatible with dev mode. To enable AutoScavenge: start the node without Dev"
        )
    elif mem_db:
        incompatible = (
            "AutoScavenge is not compatible with mem-db. To enable AutoScavenge: start the node without MemDb"
        )

    if plugin is not None:
        v = plugin.version
        logger.info("Loaded plugin %s %s from %s", PLUGIN_NAME, v, plugin.directory)
        if option is False:
            return disabled(v, "To enable AutoScavenge: Do not set 'AutoScavenge:Enabled' to 'false'")
        if not plugin.enabled:
            return disabled(
                v,
                "To enable AutoScavenge: set Service:Plugins:AutoScavenge:Enabled to true in a JSON file in "
                f"{install / 'config'}",
            )
        if incompatible:
            return disabled(v, incompatible)
        if not licensed:
            logger.error(
                "AutoScavenge is not licensed, stopping. The plugin is enabled by %s but %s",
                plugin.enabled_by,
                _licence_problem(license, now),
            )
            raise AutoScavengeNotLicensed(
                f"AutoScavenge is not licensed, stopping: the plugin is enabled by {plugin.enabled_by} "
                f"but {_licence_problem(license, now)}"
            )
        logger.info(PLUGIN_ENABLED, v)
        return Enabling(True, True, v, plugin_form=True)

    if option is False:
        return disabled(version, "To enable AutoScavenge: Do not set 'AutoScavenge:Enabled' to 'false'")
    if incompatible:
        return disabled(version, incompatible)
    if not licensed:
        if option is None:
            return disabled(
                version,
                f"To enable AutoScavenge: set LicenseKey to a valid licence key with the AUTO_SCAVENGE "
                f"entitlement ({_licence_problem(license, now)})",
            )
        # explicitly enabled: the endpoints exist but the feature is off (GET /enabled says false)
        logger.info(PLUGIN_ENABLED, version)
        logger.error(
            "AutoScavenge is not licensed, stopping. %s", _licence_problem(license, now).capitalize()
        )
        return Enabling(True, False, version)
    logger.info(PLUGIN_ENABLED, version)
    return Enabling(True, True, version)


def _licence_problem(license: Any, now: float) -> str:
    if license is None:
        return "no valid licence key is set (LicenseKey; the licence check at start says why)"
    if license.is_expired(now):
        return "the licence has expired"
    return "the licence does not grant the AUTO_SCAVENGE entitlement"


def describe_paths(options: Any) -> dict[str, str]:
    install = installation_directory(options)
    return {
        "installation": str(install),
        "config": str(install / "config"),
        "plugins": str(install / "plugins"),
    }
