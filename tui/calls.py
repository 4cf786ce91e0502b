"""The calls the dashboard can make that change something, built and validated before they are sent.

A :class:`PlannedCall` is what the confirmation dialog shows, byte for byte the request httpx sends.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

__all__ = [
    "STOP_AND_RESUME",
    "BackupForm",
    "FormError",
    "PlannedCall",
    "ScavengeForm",
    "answer_text",
    "configure_auto_scavenge",
    "cycle_now",
    "explain_backup_error",
    "next_cron_runs",
    "pause_auto_scavenge",
    "reload_config",
    "resign_leader",
    "resume_auto_scavenge",
    "stop_scavenge",
]


class FormError(ValueError):
    """A dialog field is invalid; the message names the field and the rule (the spec's wording)."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(message)
        self.field_name = field_name


@dataclass(frozen=True)
class PlannedCall:
    node_url: str
    method: str
    path: str
    params: tuple[tuple[str, str], ...] = ()
    json_body: Any = None
    headers: tuple[tuple[str, str], ...] = field(default=(("Accept", "application/json"),))
    title: str = ""
    node_label: str = ""  # the node's name as the cluster panel shows it (not sent)

    @property
    def url(self) -> str:
        query = f"?{urlencode(self.params)}" if self.params else ""
        return f"{self.node_url.rstrip('/')}{self.path}{query}"

    def describe(self, user: str | None = None) -> str:
        """The exact request: request line, headers (credentials masked), body."""
        lines = [f"{self.method} {self.url}"]
        if user:
            lines.append(f"Authorization: Basic <{user}:•••••>")
        lines.extend(f"{k}: {v}" for k, v in self.headers)
        if self.json_body is not None:
            lines.append("Content-Type: application/json")
            lines.append("")
            lines.append(json.dumps(self.json_body))
        return "\n".join(lines)

    def request_line(self) -> str:
        return f"{self.method} {self.url}"


#: the dialog's field of each scavenge parameter
_SCAVENGE_FIELDS = {"threads": "threads", "threshold": "threshold", "throttlePercent": "throttle_percent"}


@dataclass(frozen=True)
class ScavengeForm:
    """The start-scavenge dialog's fields, as typed."""

    threads: str = "1"
    threshold: str = "0"
    throttle_percent: str = "100"
    sync_only: bool = False

    def validate(self) -> tuple[int, int, int, bool]:
        """The node's own rules (evdb.scavenge.params: the spec's, with KurrentDB's messages)."""
        from evdb.scavenge.params import InvalidScavengeParameter, parse_scavenge_request

        try:
            request = parse_scavenge_request(
                threads=self.threads,
                threshold=self.threshold,
                throttle_percent=self.throttle_percent,
                sync_only=self.sync_only,
            )
        except InvalidScavengeParameter as exc:
            raise FormError(_SCAVENGE_FIELDS.get(exc.parameter, exc.parameter), str(exc)) from None
        return request.threads, request.threshold, request.throttle_percent, request.sync_only

    def call(self, node_url: str) -> PlannedCall:
        threads, threshold, throttle, sync_only = self.validate()
        return PlannedCall(
            node_url,
            "POST",
            "/admin/scavenge",
            (
                ("threads", str(threads)),
                ("threshold", str(threshold)),
                ("throttlePercent", str(throttle)),
                ("syncOnly", "true" if sync_only else "false"),
            ),
            title="Start a scavenge",
        )


#: the backup dialog's box that becomes the API's ``stopScavenge``
STOP_AND_RESUME = "stop it and resume it after the backup"


@dataclass(frozen=True)
class BackupForm:
    """The start-backup dialog's fields, as typed: a folder on the node's host."""

    destination: str = ""
    differential: bool = False
    stop_scavenge: bool = False

    def call(self, node_url: str, running_scavenge: str | None = None) -> PlannedCall:
        """The request; ``running_scavenge``: the scavenge the node reports running now, which a
        file-copy backup must not overlap (the node refuses it unless told to stop it)."""
        from evdb.backup.errors import InvalidBackupFolder
        from evdb.backup.layout import backup_target

        try:  # the node's own rule (evdb/backup/layout.py), checked before anything is sent
            destination = backup_target(self.destination.strip())
        except InvalidBackupFolder as exc:
            raise FormError("destination", str(exc)) from None
        if running_scavenge and not self.stop_scavenge:
            raise FormError(
                "stop_scavenge",
                f"A scavenge ({running_scavenge}) is running: tick “{STOP_AND_RESUME}”, or wait for it "
                "to end (a file-copy backup must not overlap it).",
            )
        return PlannedCall(
            node_url,
            "POST",
            "/admin/backup",
            json_body={
                "to": destination,
                "differential": self.differential,
                "stopScavenge": self.stop_scavenge,
            },
            title="Start a backup",
        )


_FLAG_ADVICE = re.compile(
    r"(give --node URL with|give|use|with) --stop-scavenge( to stop it and start it again after the backup)?",
    re.IGNORECASE,
)


def explain_backup_error(text: str) -> str:
    """A backup failure as the node words it for its command line, told in the dialog's words: the
    operator of the dashboard has the backup dialog's box, not the ``--stop-scavenge`` flag."""
    advice = f"tick “{STOP_AND_RESUME}” in the backup dialog (b)"
    text = _FLAG_ADVICE.sub(advice, text)
    return text.replace("--stop-scavenge", f"“{STOP_AND_RESUME}”")


def stop_scavenge(node_url: str, scavenge_id: str) -> PlannedCall:
    return PlannedCall(node_url, "DELETE", f"/admin/scavenge/{scavenge_id}", title="Stop the scavenge")


def resign_leader(node_url: str) -> PlannedCall:
    return PlannedCall(node_url, "POST", "/admin/node/resign", title="Resign the leader")


def reload_config(node_url: str) -> PlannedCall:
    return PlannedCall(node_url, "POST", "/admin/reloadconfig", title="Reload the configuration")


def pause_auto_scavenge(node_url: str) -> PlannedCall:
    return PlannedCall(node_url, "POST", "/auto-scavenge/pause", title="Pause auto-scavenge")


def resume_auto_scavenge(node_url: str) -> PlannedCall:
    return PlannedCall(node_url, "POST", "/auto-scavenge/resume", title="Resume auto-scavenge")


def cycle_now(node_url: str) -> PlannedCall:
    """evdb's extension: start a cluster scavenge at once, as if the schedule fired now."""
    return PlannedCall(node_url, "POST", "/auto-scavenge/cycle-now", title="Start a cluster scavenge now")


def answer_text(body: str) -> str:
    """A node's answer as words: a JSON string (how auto-scavenge refuses, ``"Cluster scavenge … is
    already in progress"``) without its quotes; anything else as it came."""
    text = body.strip()
    if text.startswith('"'):
        try:
            value = json.loads(text)
        except ValueError:
            return text
        if isinstance(value, str):
            return value
    return text


def next_cron_runs(schedule: str, now: float, count: int = 3) -> list[datetime]:
    """The next run times of a five-field CRON expression (UTC); FormError when it is not one. The rule
    is the node's own (evdb/autoscavenge/schedule.py, as ``POST /auto-scavenge/configure`` checks it)."""
    from evdb.autoscavenge.schedule import InvalidSchedule, parse_schedule

    try:
        parsed = parse_schedule(schedule.strip())
    except InvalidSchedule as exc:
        raise FormError(
            "schedule", f"{exc}: use five fields (minute hour day month weekday), as 0 3 * * *"
        ) from None
    runs: list[datetime] = []
    when = now
    for _ in range(count):
        when = parsed.next_after(when)
        runs.append(datetime.fromtimestamp(when, UTC))
    return runs


def configure_auto_scavenge(node_url: str, schedule: str, now: float) -> PlannedCall:
    next_cron_runs(schedule, now)
    return PlannedCall(
        node_url,
        "POST",
        "/auto-scavenge/configure",
        json_body={"schedule": schedule.strip()},
        title="Configure the auto-scavenge schedule",
    )
