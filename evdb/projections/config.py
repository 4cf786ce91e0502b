"""A projection's configuration (KurrentDB's ``ProjectionConfig``): the one rule set for reading it from
a request, keeping it in ``$projections-<name>`` and answering ``GET /projection/{name}/config``.

KurrentDB keeps these fields in the projection's persisted state (``$ProjectionUpdated``) and creates
the system projections with ``emitEnabled: true``, ``trackEmittedStreams: false`` and the defaults of
``ProjectionConsts``. ``PUT /projection/{name}/config`` replaces all of them: a field the body leaves
out becomes ``false`` or ``0``, as KurrentDB's ``ProjectionConfigData`` reads it.

What evdb's system projections do with them: ``emitEnabled`` false faults a projection at its first
write ("'emit' is not allowed by the projection/configuration/mode", as KurrentDB);
``checkpointHandledThreshold`` (events handled) and ``checkpointUnhandledBytesThreshold`` (bytes of
``$all`` passed without one handled) suggest a checkpoint, no sooner than ``checkpointAfterMs`` after
the last one (0 or less turns a threshold off); ``maxWriteBatchLength`` is the most events of one
append to an emitted stream. ``pendingEventsThreshold`` and ``maxAllowedWritesInFlight`` are kept and
shown: evdb writes a batch's output in one writer call, so it has no queue for them to bound.
``projectionExecutionTimeout`` applies to JavaScript handlers only. ``trackEmittedStreams`` true is
refused: evdb does not write ``$projections-<name>-emittedstreams``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from evdb.errors import InvalidInput

__all__ = ["DEFAULT_CONFIG", "ProjectionConfig", "parse_config_update"]

_INT32 = (-(2**31), 2**31 - 1)
#: KurrentDB's Json.NET label of the message a config is answered in (its JSON codec writes it)
_CONFIG_LABEL = "ProjectionMessage-Management-ProjectionConfig"


@dataclass(frozen=True, slots=True)
class ProjectionConfig:
    emit_enabled: bool = True
    track_emitted_streams: bool = False
    checkpoint_after_ms: int = 0
    checkpoint_handled_threshold: int = 4000
    checkpoint_unhandled_bytes_threshold: int = 10_000_000
    pending_events_threshold: int = 5000
    max_write_batch_length: int = 500
    max_allowed_writes_in_flight: int = 0  # KurrentDB's AllowedWritesInFlight.Unbounded
    projection_execution_timeout: int | None = None

    def to_persisted(self) -> dict[str, Any]:
        """The keys of KurrentDB's persisted state (``$ProjectionUpdated``)."""
        return {_KEYS[f.name]: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_persisted(cls, body: dict[str, Any]) -> ProjectionConfig:
        """Read back from a ``$ProjectionUpdated`` body; a key missing or of the wrong kind keeps its
        default (KurrentDB's ``PersistedState`` constructor)."""
        values: dict[str, Any] = {}
        for f in fields(cls):
            value = body.get(_KEYS[f.name])
            if f.name in _BOOLS:
                if isinstance(value, bool):
                    values[f.name] = value
            elif isinstance(value, int) and not isinstance(value, bool):
                values[f.name] = value
        return cls(**values)

    def to_http(self) -> dict[str, Any]:
        """``GET /projection/{name}/config`` as KurrentDB writes it: Json.NET with camel case, false,
        zero and null left out (``DefaultValueHandling.Ignore``), then the message's ``label``."""
        body = {k: v for k, v in self.to_persisted().items() if v is not None and v is not False and v != 0}
        body["label"] = _CONFIG_LABEL
        return body


DEFAULT_CONFIG = ProjectionConfig()

_KEYS = {
    "emit_enabled": "emitEnabled",
    "track_emitted_streams": "trackEmittedStreams",
    "checkpoint_after_ms": "checkpointAfterMs",
    "checkpoint_handled_threshold": "checkpointHandledThreshold",
    "checkpoint_unhandled_bytes_threshold": "checkpointUnhandledBytesThreshold",
    "pending_events_threshold": "pendingEventsThreshold",
    "max_write_batch_length": "maxWriteBatchLength",
    "max_allowed_writes_in_flight": "maxAllowedWritesInFlight",
    "projection_execution_timeout": "projectionExecutionTimeout",
}
_BOOLS = frozenset({"emit_enabled", "track_emitted_streams"})
_PARSE_FAILED = "Failed to parse the projection config"


def parse_config_update(body: Any) -> ProjectionConfig:
    """The config a ``PUT /projection/{name}/config`` body sets (KurrentDB's ``ProjectionConfigData``:
    names matched without regard to case, unknown ones ignored, a missing field false or 0). Raises
    InvalidInput (400) with KurrentDB's reason, and the field, for anything else."""
    if not isinstance(body, dict):
        raise InvalidInput(f"{_PARSE_FAILED}: the body must be a JSON object")
    by_lower = {key.lower(): value for key, value in body.items() if isinstance(key, str)}
    values: dict[str, Any] = {}
    for f in fields(ProjectionConfig):
        key = _KEYS[f.name]
        value = by_lower.get(key.lower())
        if f.name in _BOOLS:
            if value is None:
                value = False
            if not isinstance(value, bool):
                raise InvalidInput(f"{_PARSE_FAILED}: {key} must be true or false")
        elif f.name == "projection_execution_timeout":
            if value is not None:
                _check_int(key, value)
                if value <= 0:
                    raise InvalidInput(f"projectionExecutionTimeout should be positive. Found : {value}")
        else:
            if value is None:
                value = 0
            _check_int(key, value)
        values[f.name] = value
    config = ProjectionConfig(**values)
    if config.track_emitted_streams:
        raise InvalidInput(
            "trackEmittedStreams is not supported: evdb's system projections do not track the streams "
            "they write to"
        )
    if config.max_write_batch_length <= 0:
        raise InvalidInput(
            f"maxWriteBatchLength must be positive (a projection writes at most that many events at a "
            f"time). Found : {config.max_write_batch_length}"
        )
    return config


def _check_int(key: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not _INT32[0] <= value <= _INT32[1]:
        raise InvalidInput(f"{_PARSE_FAILED}: {key} must be a 32-bit integer")
