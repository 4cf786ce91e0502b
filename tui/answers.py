"""The nodes' answers read into the dashboard's state: pure functions of a response or its JSON body
(no I/O), shared by the collectors (tui/collector.py, tui/collect_scavenge.py) and the calls."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import httpx

from tui.state import (
    AutoScavengeCycle,
    BackupState,
    MirrorState,
    NodeCertificates,
    PeerFailure,
    ScavengeHistoryEntry,
    SubscriptionConnection,
    SubscriptionGroup,
)

__all__ = [
    "backup_state",
    "check",
    "cycle_from_progress",
    "describe",
    "float_or_none",
    "history_entry",
    "int_or_none",
    "json_object",
    "json_or_text",
    "mirror_state",
    "node_certificates",
    "node_endpoint",
    "parse_iso",
    "status_error",
    "subscription_group",
    "text_or_none",
]

#: a backup in one of these states has ended
_BACKUP_ENDED = ("completed", "failed", "stopped")


def backup_state(before: BackupState | None, body: dict[str, Any]) -> BackupState:
    """``GET /admin/backup/current``'s answer, with what the dashboard saw of the same backup before: a
    backup that ended without a duration of its own (a failed one) keeps the elapsed time it had when
    the dashboard first saw it ended (the node's clock runs on after the end)."""
    same = before is not None and _backup_key(before.body) == _backup_key(body) and bool(before.body)
    running = body.get("state") == "running"
    seen_running = running or (same and before is not None and before.seen_running)
    ended_elapsed = None
    if body.get("state") in _BACKUP_ENDED and body.get("seconds") is None and same and before is not None:
        if before.ended_elapsed is not None:
            ended_elapsed = before.ended_elapsed
        elif before.body.get("state") == "running":  # the first sight of its end
            ended_elapsed = float_or_none(body.get("elapsedSeconds"))
    return BackupState(available=True, body=body, ended_elapsed=ended_elapsed, seen_running=seen_running)


def _backup_key(body: dict[str, Any]) -> tuple:
    return (body.get("backupId"), body.get("startedAt"), body.get("destination"), body.get("operation"))


def mirror_state(source: str, body: Any) -> MirrorState:
    """The fields of an ``evdb mirror`` status (Mirror.status() in evdb/mirror/mirror.py)."""
    if not isinstance(body, dict) or body.get("kind", "evdb-mirror") != "evdb-mirror":
        return MirrorState(source, error="not an evdb mirror status")
    return MirrorState(
        source,
        state=str(body.get("state") or ""),
        from_url=str(body.get("from") or ""),
        to_url=str(body.get("to") or ""),
        position=int_or_none(body.get("position")),
        primary_head=int_or_none(body.get("primaryHead")),
        lag_bytes=int_or_none(body.get("lagBytes")),
        lag_seconds=float_or_none(body.get("lagSeconds")),
        caught_up=bool(body.get("caughtUp")),
        events_copied=int_or_none(body.get("eventsCopied")) or 0,
        events_per_second=float_or_none(body.get("eventsPerSecond")),
        last_error=str(body["lastError"]) if body.get("lastError") else None,
        updated=parse_iso(body.get("updated")),
    )


def node_certificates(response: httpx.Response) -> NodeCertificates:
    """evdb's ``GET /admin/certificates`` answer (evdb/tls/reload.py ``ConfigReloader.describe``)."""
    if response.status_code in (404, 405):
        return NodeCertificates(available=False)
    if response.status_code in (401, 403):
        return NodeCertificates(
            available=True,
            error=f"HTTP {response.status_code}: reading it needs an admin or ops user (--user/--password)",
        )
    if response.status_code != 200:
        return NodeCertificates(available=True, error=f"HTTP {response.status_code} from /admin/certificates")
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        return NodeCertificates(available=True, error="/admin/certificates did not answer a JSON object")
    cert = json_object(body.get("certificate"))
    ca = json_object(body.get("ca"))
    last = json_object(body.get("lastReload"))
    return NodeCertificates(
        available=True,
        secure=bool(body.get("secure")),
        subject=str(cert.get("subject") or ""),
        dns_names=tuple(str(n) for n in cert.get("dnsNames") or ()),
        ip_addresses=tuple(str(n) for n in cert.get("ipAddresses") or ()),
        ca_subject=str(ca["subject"]) if ca.get("subject") else None,
        ca_fingerprint=str(ca["fingerprintSha256"]) if ca.get("fingerprintSha256") else None,
        loaded_at=parse_iso(body.get("loadedAt")),
        reload_at=parse_iso(last.get("time")),
        reload_trigger=str(last.get("trigger") or ""),
        reload_result=str(last.get("result") or ""),
        reload_error=str(last["error"]) if last.get("error") else None,
        certificate_changed=bool(last.get("certificateChanged")),
        peer_failures=tuple(
            PeerFailure(
                peer=str(f.get("peer") or "?"),
                reason=str(f.get("reason") or ""),
                certificate=bool(f.get("certificate")),
                since=parse_iso(f.get("since")),
                failures=int(f.get("failures") or 1),
            )
            for f in body.get("peerErrors") or ()
            if isinstance(f, dict)
        ),
    )


def cycle_from_progress(body: Any) -> AutoScavengeCycle | None:
    """evdb's ``GET /auto-scavenge/progress`` (``AutoScavengeState.describe`` in evdb/autoscavenge/state.py)."""
    if not isinstance(body, dict):
        return None
    done = json_object(body.get("done"))
    return AutoScavengeCycle(
        cycle_id=str(body["clusterScavengeId"]) if body.get("clusterScavengeId") else None,
        status=str(body.get("status") or ""),
        members=tuple(str(m) for m in body.get("members") or ()),
        done=tuple((str(k), str(v)) for k, v in done.items()),
        designated=str(body["designatedNode"]) if body.get("designatedNode") else None,
        node_scavenge_id=str(body["nodeScavengeId"]) if body.get("nodeScavengeId") else None,
        paused=bool(body.get("paused")),
        pause_requested=bool(body.get("pauseRequested")),
        started_at=parse_iso(body.get("startedAt")),
        last_problem=str(body["lastProblem"]) if body.get("lastProblem") else None,
    )


def subscription_group(
    summary: dict[str, Any], info: dict[str, Any] | None, error: str | None
) -> SubscriptionGroup:
    """A group from its ``/subscriptions`` summary and its ``/info`` (KurrentDB's JSON shapes)."""
    config = json_object(info.get("config")) if info is not None else {}
    connections = tuple(
        SubscriptionConnection(
            source=str(c.get("from") or ""),
            username=str(c.get("username") or ""),
            connection_name=str(c.get("connectionName") or ""),
            in_flight=int_or_none(c.get("inFlightMessages")) or 0,
            available_slots=int_or_none(c.get("availableSlots")) or 0,
            items_per_second=float_or_none(c.get("averageItemsPerSecond")) or 0.0,
            total_items=int_or_none(c.get("totalItemsProcessed")) or 0,
        )
        for c in (info.get("connections") or () if info is not None else ())
        if isinstance(c, dict)
    )
    source = info if info is not None else summary
    return SubscriptionGroup(
        stream=str(summary.get("eventStreamId", "")),
        group=str(summary.get("groupName", "")),
        status=str(source.get("status") or ""),
        connection_count=len(connections)
        if info is not None
        else int_or_none(summary.get("connectionCount")) or 0,
        in_flight=int_or_none(source.get("totalInFlightMessages")) or 0,
        last_known=text_or_none(source.get("lastKnownEventPosition")),
        last_checkpointed=text_or_none(source.get("lastCheckpointedEventPosition")),
        items_per_second=float_or_none(source.get("averageItemsPerSecond")) or 0.0,
        total_items=int_or_none(source.get("totalItemsProcessed")) or 0,
        strategy=str(config["namedConsumerStrategy"]) if config.get("namedConsumerStrategy") else None,
        parked=int_or_none(info.get("parkedMessageCount")) if info is not None else None,
        outstanding=int_or_none(info.get("outstandingMessagesCount")) if info is not None else None,
        connections=connections,
        detail_error=error,
    )


def node_endpoint(value: Any) -> str:
    """A node as ``$auto-scavenges`` names it (``{"address", "port"}``, or a string) as host:port."""
    if isinstance(value, dict) and value.get("address") and value.get("port"):
        host = str(value["address"])
        return f"[{host}]:{value['port']}" if ":" in host else f"{host}:{value['port']}"
    return str(value) if isinstance(value, str) else ""


def text_or_none(value: Any) -> str | None:
    return None if value is None or value == "" else str(value)


def json_object(value: Any) -> dict[str, Any]:
    """A JSON object of an answer, or an empty one when the answer has something else there."""
    return value if isinstance(value, dict) else {}


def parse_iso(text: Any) -> float | None:
    """ISO 8601 time (``Z`` or an offset; naive is UTC) to epoch seconds."""
    if not isinstance(text, str) or not text:
        return None
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


def int_or_none(value: Any) -> int | None:
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError):
        return None


def float_or_none(value: Any) -> float | None:
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return None


def history_entry(
    scavenge_id: str, data: dict[str, Any], started: str, node: str | None = None
) -> ScavengeHistoryEntry:
    return ScavengeHistoryEntry(
        scavenge_id=scavenge_id,
        result=str(data.get("result", "Unknown")),
        started=started,
        time_taken=str(data.get("timeTaken", "")),
        space_saved=data.get("spaceSaved"),
        error=data.get("error") or None,
        node=str(data.get("nodeEndpoint") or node or ""),
    )


def json_or_text(response: httpx.Response) -> dict[str, Any]:
    """KurrentDB answers ``Key: value`` text when it ignores the Accept header."""
    try:
        body = response.json()
        return body if isinstance(body, dict) else {}
    except ValueError:
        out: dict[str, Any] = {}
        for line in response.text.splitlines():
            key, _, value = line.partition(":")
            if key:
                out[key[0].lower() + key[1:].strip()] = value.strip()
        return out


def check(response: httpx.Response) -> None:
    if response.status_code >= 300:
        raise status_error(response)


def status_error(response: httpx.Response) -> httpx.HTTPStatusError:
    return httpx.HTTPStatusError(f"HTTP {response.status_code}", request=response.request, response=response)


def describe(exc: BaseException) -> str:
    """What failed, as the operator needs it: the node's status and what it said (the body)."""
    if isinstance(exc, httpx.HTTPStatusError):
        text = f"HTTP {exc.response.status_code} from {exc.request.url.path}"
        try:
            body = " ".join(exc.response.text.split())
        except (UnicodeDecodeError, httpx.ResponseNotRead):
            body = ""
        return f"{text}: {body[:300]}" if body else text
    if isinstance(exc, httpx.TimeoutException):
        return "timed out"
    if isinstance(exc, httpx.ConnectError):
        return f"cannot connect ({exc})" if str(exc) else "cannot connect"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
