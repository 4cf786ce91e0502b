"""Loading and saving the system projections' own streams: the registrations (``$projections-$all``),
each projection's persisted state and its last checkpoint (a worker thread runs these)."""

from __future__ import annotations

import json
import logging
from typing import Any

from evdb.clock import Clock
from evdb.database import Database
from evdb.errors import StreamDeleted, StreamNotFound
from evdb.projections.config import ProjectionConfig
from evdb.projections.model import (
    REGISTRATION_STREAM,
    SUBSYSTEM_VERSION,
    Persisted,
    Runtime,
    checkpoint_deleted_reason,
    checkpoint_stream,
    json_bytes,
    parse_tag,
    state_stream,
)
from evdb.projections.standard import STANDARD_PROJECTIONS, StandardProjection
from evdb.streams import NO_STREAM, NewEvent


class ProjectionStore:
    """The projections' streams in one database: what a leader loads when it takes office, and each
    ``$ProjectionUpdated`` it writes. ``registration_fault`` says why ``$projections-$all`` could not be
    used at the last load (None: it could)."""

    def __init__(self, *, clock: Clock, logger: logging.Logger, start_standard: bool) -> None:
        self._clock = clock
        self._log = logger
        self.start_standard = start_standard
        self.registration_fault: str | None = None

    def load(self, db: Database) -> dict[str, Runtime]:
        ids = self._register(db)
        runtimes: dict[str, Runtime] = {}
        for definition in STANDARD_PROJECTIONS:
            try:
                persisted = self._read_state(db, definition)
            except StreamDeleted:
                persisted = Persisted(False, -1, -1)
                rt = Runtime(definition, ids[definition.name], persisted)
                self._fault_at_load(rt, f"Its state stream {state_stream(rt.name)} is deleted (tombstoned).")
                runtimes[definition.name] = rt
                continue
            rt = Runtime(definition, ids[definition.name], persisted, checkpoint_at=self._clock.monotonic())
            checkpoints = db.stream_state(checkpoint_stream(rt.name))
            rt.checkpoint_metadata_written = checkpoints.metadata_version >= 0
            if checkpoints.tombstoned:
                # only this projection stops (the others load and run); a reset runs it again
                rt.checkpoint_deleted = True
                rt.start_at(-1)
                if not persisted.checkpoints_disabled:
                    self._fault_at_load(rt, checkpoint_deleted_reason(rt.name))
            else:
                rt.start_at(self._read_checkpoint(db, rt))
            runtimes[definition.name] = rt
        if self.start_standard:  # KurrentDB's StartStandardProjections: enable the stopped ones
            for rt in runtimes.values():
                if not rt.persisted.enabled and rt.status != "Faulted":
                    self.append_state(db, rt.definition, rt.persisted, enabled=True, reset=False)
        return runtimes

    def _fault_at_load(self, rt: Runtime, reason: str) -> None:
        rt.status = "Faulted"
        rt.reason = reason
        self._log.error("Projection %s faulted as it loaded: %s", rt.name, reason)

    def _register(self, db: Database) -> dict[str, int]:
        """``$projections-$all``: create it and the missing registrations; answer each projection's id.

        A tombstoned ``$projections-$all`` can be neither read nor written again: the subsystem loads
        anyway (:meth:`_ids_without_registration`), reports it (:attr:`registration_fault`, logged once
        per load) and every projection runs on from its checkpoint."""
        try:
            records = db.read_stream_forward(REGISTRATION_STREAM, 0, 4096).events
        except StreamNotFound:
            db.append(REGISTRATION_STREAM, [NewEvent("$ProjectionsInitialized", is_json=False)], NO_STREAM)
            records = db.read_stream_forward(REGISTRATION_STREAM, 0, 4096).events
        except StreamDeleted:
            return self._ids_without_registration(db)
        self.registration_fault = None
        ids: dict[str, int] = {}
        for record in records:
            if record.event_type == "$ProjectionCreated":
                ids.setdefault(record.data.decode("utf-8", "replace"), record.event_number)
        missing = [p.name for p in STANDARD_PROJECTIONS if p.name not in ids]
        if missing:
            result = db.append(
                REGISTRATION_STREAM, [NewEvent("$ProjectionCreated", n.encode()) for n in missing]
            )
            for offset, name in enumerate(missing):
                ids[name] = result.first_event_number + offset
        return ids

    def _ids_without_registration(self, db: Database) -> dict[str, int]:
        """Each projection's id when ``$projections-$all`` is tombstoned: the one its last checkpoint
        carries (so it goes on from that checkpoint, emitting nothing twice), else the id a first
        registration gives it (``$ProjectionsInitialized`` is event 0, the standard projections follow
        in order)."""
        ids: dict[str, int] = {}
        for offset, definition in enumerate(STANDARD_PROJECTIONS):
            ids[definition.name] = offset + 1
            try:
                page = db.read_stream_backward(checkpoint_stream(definition.name), None, 1)
            except (StreamNotFound, StreamDeleted):
                continue
            tag = parse_tag(page.events[0].metadata) if page.events else None
            if tag is not None:
                ids[definition.name] = tag.projection_id
        self.registration_fault = (
            f"The projections' registration stream {REGISTRATION_STREAM} is deleted (tombstoned): "
            "the projections run on with the ids their checkpoints carry; nothing can be registered again"
        )
        self._log.error("System projections: %s", self.registration_fault)
        return ids

    def _read_state(self, db: Database, definition: StandardProjection) -> Persisted:
        stream = state_stream(definition.name)
        try:
            page = db.read_stream_backward(stream, None, 1)
        except StreamNotFound:
            page = None
        if page is not None and page.events:
            record = page.events[0]
            try:
                body = json.loads(record.data)
            except (ValueError, UnicodeDecodeError, RecursionError):
                body = None
            if isinstance(body, dict):
                epoch = body.get("epoch")
                return Persisted(
                    bool(body.get("enabled")),
                    epoch if isinstance(epoch, int) and not isinstance(epoch, bool) else -1,
                    record.event_number,
                    ProjectionConfig.from_persisted(body),
                    body.get("checkpointsDisabled") is True,
                )
        # KurrentDB creates the system projections disabled
        persisted = Persisted(False, -1, -1)
        self.append_state(db, definition, persisted, enabled=False, reset=False)
        return persisted

    def _read_checkpoint(self, db: Database, rt: Runtime) -> int:
        try:
            page = db.read_stream_backward(checkpoint_stream(rt.name), None, 1)
        except StreamNotFound:
            return -1
        if not page.events:
            return -1
        tag = parse_tag(page.events[0].metadata)
        if tag is None or tag.projection_id != rt.projection_id or tag.version < rt.persisted.epoch:
            return -1  # written before the last reset
        return tag.position

    def append_state(
        self,
        db: Database,
        definition: StandardProjection,
        persisted: Persisted,
        *,
        enabled: bool,
        reset: bool,
        config: ProjectionConfig | None = None,
        checkpoints_disabled: bool | None = None,
    ) -> None:
        """Write a ``$ProjectionUpdated`` (KurrentDB's persisted state); its number is the new version,
        and a reset makes it the epoch too."""
        if checkpoints_disabled is None:
            checkpoints_disabled = persisted.checkpoints_disabled
        version = persisted.version + 1
        epoch = version if reset else persisted.epoch
        config = persisted.config if config is None else config
        body: dict[str, Any] = {
            "handlerType": definition.handler_type,
            "query": definition.query,
            "mode": "Continuous",
            "enabled": enabled,
            "checkpointsDisabled": checkpoints_disabled,
            "epoch": epoch,
            "version": version,
            "runAs": {"name": "$system", "roles": ["$admins"]},
            **config.to_persisted(),
            "projectionSubsystemVersion": SUBSYSTEM_VERSION,
            "engineVersion": 1,
        }
        expected = persisted.version if persisted.version >= 0 else NO_STREAM
        event = NewEvent("$ProjectionUpdated", json_bytes(body), is_json=True)
        db.append(state_stream(definition.name), [event], expected)
        persisted.enabled, persisted.epoch, persisted.version = enabled, epoch, version
        persisted.config = config
        persisted.checkpoints_disabled = checkpoints_disabled
