"""``evdb dashboard --record FILE``: the operator's session (keys, what was typed into dialogs, clicks,
and the pauses between them) written as a scenario that ``evdb scenario run`` replays."""

from __future__ import annotations

import weakref
from pathlib import Path
from typing import Any

import yaml

from evdb.clock import Clock

__all__ = ["Recorder", "cluster_settings"]

#: Keys that move between a dialog's fields or leave it; any other key typed into an input edits it,
#: and the recorder writes the input's final text as one ``fill`` step instead of the keys.
_NAVIGATION_KEYS = frozenset({"enter", "tab", "shift+tab", "escape", "up", "down"})
#: Pauses shorter than this are not written (the replay's own pace is enough).
_MIN_PAUSE = 0.5


class Recorder:
    """Observes the dashboard's input events (``DashboardApp.recorder``) and writes them as steps."""

    def __init__(self, clock: Clock) -> None:
        """``clock``: its monotonic time measures the pauses between steps."""
        self.clock = clock
        self.steps: list[dict[str, Any]] = []
        self.stopped = False
        self._last = clock.monotonic()
        self._inputs: weakref.WeakKeyDictionary[Any, dict[str, str]] = weakref.WeakKeyDictionary()

    # -- observing -------------------------------------------------------------------------------------
    def observe(self, app: Any, event: Any) -> None:
        from textual import events

        if self.stopped:
            return
        if isinstance(event, events.Key):
            self._key(app, event)
        elif isinstance(event, events.MouseDown):
            self._click(app, event)

    def _key(self, app: Any, event: Any) -> None:
        from textual.widgets import Input

        screen = app.screen
        self._baseline(screen)
        if isinstance(app.focused, Input) and event.key not in _NAVIGATION_KEYS:
            return  # editing: the text is written once, as a fill, before the next key that counts
        if len(app.screen_stack) == 1 and event.key == "q":
            self.stopped = True  # quitting the dashboard is not part of the scenario
            return
        self._flush_inputs(screen)
        self._add("press", {"keys": event.key})

    def _click(self, app: Any, event: Any) -> None:
        from textual.errors import NoWidget

        try:
            widget, _ = app.get_widget_at(event.x, event.y)
        except NoWidget:
            return
        while widget is not None and not widget.id and widget is not app.screen:
            widget = widget.parent
        if widget is None or not widget.id:
            return  # nothing a replay could name
        self._baseline(app.screen)
        self._flush_inputs(app.screen)
        self._add("click", {"target": f"#{widget.id}"})

    def _baseline(self, screen: Any) -> dict[str, str]:
        """The inputs' texts when the recorder first saw this screen (a dialog's initial values)."""
        from textual.widgets import Input

        if screen not in self._inputs:
            self._inputs[screen] = {w.id: w.value for w in screen.query(Input) if w.id}
        return self._inputs[screen]

    def _flush_inputs(self, screen: Any) -> None:
        from textual.widgets import Input

        seen = self._baseline(screen)
        for widget in screen.query(Input):
            if widget.id and seen.get(widget.id) != widget.value:
                seen[widget.id] = widget.value
                self._add("fill", {"field": f"#{widget.id}", "value": widget.value})

    def _add(self, kind: str, args: dict[str, Any]) -> None:
        now = self.clock.monotonic()
        pause = now - self._last
        self._last = now
        if pause >= _MIN_PAUSE:
            args["after"] = round(pause, 1)
        self.steps.append({kind: args})

    # -- writing ---------------------------------------------------------------------------------------
    def scenario(
        self, name: str, cluster: dict[str, Any], dashboard: dict[str, Any], note: str
    ) -> dict[str, Any]:
        steps: list[dict[str, Any]] = []
        for step in self.steps:
            ((kind, args),) = step.items()
            previous = steps[-1] if steps else None
            if kind == "press" and "after" not in args and previous and "press" in previous:
                keys = previous["press"]["keys"]
                previous["press"]["keys"] = [*(keys if isinstance(keys, list) else [keys]), args["keys"]]
                continue
            steps.append({kind: dict(args)})
        for step in steps:  # `- press: s` rather than `- press: {keys: s}` when there is nothing else
            ((kind, args),) = step.items()
            short = {"press": "keys", "click": "target"}.get(kind)
            if short and list(args) == [short]:
                step[kind] = args[short]
        steps.append({"screenshot": "end"})
        return {"name": name, "description": note, "cluster": cluster, "dashboard": dashboard, "steps": steps}

    def save(self, path: str | Path, cluster: dict[str, Any], dashboard: dict[str, Any], note: str) -> None:
        path = Path(path)
        name = "".join(ch if ch.isalnum() else "-" for ch in path.stem).strip("-") or "recorded"
        document = self.scenario(name, cluster, dashboard, note)
        header = (
            "# Recorded with evdb dashboard --record. Replay: evdb scenario run " + str(path) + "\n"
            "# Add wait_screen / expect_http steps to check outcomes (docs/scenarios.md).\n"
        )
        path.write_text(
            header + yaml.safe_dump(document, sort_keys=False, allow_unicode=True), encoding="utf-8"
        )


#: Keys the launcher writes into every node.yaml; any other key is an option the cluster was made with.
_LAUNCHER_KEYS = frozenset(
    {
        "Db",
        "Log",
        "HttpIp",
        "HttpPort",
        "ReplicationPort",
        "ClusterSize",
        "GossipSeed",
        "ReadOnlyReplica",
        "GossipIntervalMs",
        "GossipTimeoutMs",
        "StatsPeriodSec",
        "LicenseKey",
        "LicenseTrustedIssuers",
        "ChunkSize",
        "Insecure",
        "CertificateFile",
        "CertificatePrivateKeyFile",
        "TrustedRootCertificatesPath",
    }
)


def cluster_settings(info: dict[str, Any] | None, roles: list[str] | None = None) -> dict[str, Any]:
    """The ``cluster:`` section for a recording: from a launched cluster's ``cluster.json`` and its first
    node's ``node.yaml``, or (attached to other nodes) from the roles the dashboard saw."""
    if info is None:
        roles = roles or []
        replicas = sum(1 for r in roles if r == "ReadOnlyReplica")
        return {"nodes": max(1, len(roles) - replicas), "replicas": replicas}
    nodes = info["nodes"]
    replicas = sum(1 for n in nodes if n.get("read_only_replica"))
    settings: dict[str, Any] = {"nodes": len(nodes) - replicas, "replicas": replicas}
    try:
        config = yaml.safe_load(Path(nodes[0]["config"]).read_text()) or {}
    except (OSError, KeyError, IndexError, yaml.YAMLError):
        config = {}
    # the node's own default when node.yaml does not set it (a scenario's default is the smallest size)
    settings["chunk_size"] = str(config.get("ChunkSize") or "256MiB")
    if config.get("Insecure"):
        settings["insecure"] = True
    options = {k: v for k, v in config.items() if k not in _LAUNCHER_KEYS}
    if options:
        settings["options"] = options
    return settings
