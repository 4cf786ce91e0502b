"""What may be redacted: the one place the rules of a redaction request live.

The node's socket service (``getEventPositions``, and ``switchChunk`` for a new chunk file) and the
``evdb-redact`` tool (before it connects) both call :func:`check_redaction_target`.

Events of *system streams* (names starting with ``$``: ``$$<stream>`` metadata, ``$user-<login>`` and
``$users``, ``$epochs``, ``$scavenges`` and ``$scavenges-<id>``, ...) are never redacted: they hold
the node's own state (users and their password hashes, stream metadata, epochs), which the node reads
back as JSON; blanking them out would break it (e.g. every authenticated request would fail).
"""

from __future__ import annotations

from evdb.redaction.protocol import RedactionError

__all__ = ["MAX_EVENT_NUMBER", "check_redaction_target", "is_system_stream", "system_stream_refusal"]

#: The largest event number a redaction request may name (below KurrentDB's deleted-stream marker).
MAX_EVENT_NUMBER = (1 << 63) - 2


def is_system_stream(stream: str) -> bool:
    """A system stream: its name starts with ``$`` (``$$`` metadata streams included)."""
    return stream.startswith("$")


def system_stream_refusal(event: str, stream: str) -> str:
    """Why event ``event`` (``<number>@<stream>``) of the system stream ``stream`` is not redacted."""
    return (
        f"event {event} belongs to the system stream {stream!r}: events of system streams (names "
        "starting with '$': stream metadata, users, epochs, scavenge history) hold the node's own state "
        "and cannot be redacted"
    )


def check_redaction_target(stream: object, event_number: object) -> tuple[str, int]:
    """Validate one event to redact; returns ``(stream, event_number)``.

    Raises RedactionError ``BadRequest`` for a malformed stream name or event number, and
    ``SystemStream`` for an event of a system stream.
    """
    if not isinstance(stream, str) or not stream:
        raise RedactionError("BadRequest", '"stream" must be a non-empty string.')
    if (
        not isinstance(event_number, int)
        or isinstance(event_number, bool)
        or not 0 <= event_number <= MAX_EVENT_NUMBER
    ):
        raise RedactionError("BadRequest", f'"eventNumber" must be an integer from 0 to {MAX_EVENT_NUMBER}.')
    if is_system_stream(stream):
        raise RedactionError("SystemStream", system_stream_refusal(f"{event_number}@{stream}", stream))
    return stream, event_number
