"""A rule-based state machine: the on-disk engine against a small in-memory model of stream semantics."""

from __future__ import annotations

import json
import shutil
import tempfile
import uuid
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from evdb.clock import ManualClock
from evdb.database import Database
from evdb.errors import StreamDeleted, StreamNotFound, WrongExpectedVersion
from evdb.streams import ANY, MAX_EVENT_NUMBER, NO_STREAM, STREAM_EXISTS, NewEvent

STREAMS = ["a", "b", "c"]


@dataclass
class ModelStream:
    events: list[tuple[int, str]] = field(default_factory=list)  # (number, id)
    tombstoned: bool = False
    metadata: dict = field(default_factory=dict)
    meta_count: int = 0

    @property
    def last(self) -> int:
        return self.events[-1][0] if self.events else -1

    @property
    def soft_deleted(self) -> bool:
        return self.metadata.get("$tb") == MAX_EVENT_NUMBER

    def visible(self) -> list[tuple[int, str]]:
        first = self.metadata.get("$tb", 0)
        if "$maxCount" in self.metadata:
            first = max(first, self.last - self.metadata["$maxCount"] + 1)
        return [e for e in self.events if e[0] >= first]


class StreamMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="evdb-model-")
        self.clock = ManualClock()
        self.db = self._open()
        self.model = {s: ModelStream() for s in STREAMS}
        self.all: list[tuple[str, str]] = []  # (stream, event type) in log order

    def _open(self) -> Database:
        return Database.open(
            self.dir + "/db",
            clock=self.clock,
            chunk_size=8192,
            existence_filter_capacity=10_000,
            max_memtable_entries=16,
        )

    def teardown(self) -> None:
        self.db.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _expected_ok(self, m: ModelStream, expected: int) -> bool:
        visible_last = -1 if m.soft_deleted else m.last
        return (
            expected == ANY
            or (expected == NO_STREAM and visible_last == -1)
            or (expected == STREAM_EXISTS and visible_last >= 0)
            or (expected >= 0 and expected == m.last)
        )

    def _write_meta(self, stream: str, metadata: dict) -> None:
        m = self.model[stream]
        m.metadata = metadata
        m.meta_count += 1
        self.all.append(("$$" + stream, "$metadata"))

    @rule(
        stream=st.sampled_from(STREAMS),
        count=st.integers(1, 3),
        expected=st.sampled_from([ANY, NO_STREAM, STREAM_EXISTS, 0, 1, 2, 3, 5]),
    )
    def append(self, stream, count, expected):
        m = self.model[stream]
        ids = [uuid.uuid4() for _ in range(count)]
        events = [
            NewEvent("E", json.dumps({"i": i}).encode(), event_id=ids[i], is_json=True) for i in range(count)
        ]
        if m.tombstoned:
            with pytest.raises(StreamDeleted):
                self.db.append(stream, events, expected)
            return
        if not self._expected_ok(m, expected):
            with pytest.raises(WrongExpectedVersion):
                self.db.append(stream, events, expected)
            return
        result = self.db.append(stream, events, expected)
        first = m.last + 1
        assert result.first_event_number == first
        m.events.extend((first + i, str(ids[i])) for i in range(count))
        self.all.extend((stream, "E") for _ in range(count))
        if m.soft_deleted:
            self._write_meta(stream, {**m.metadata, "$tb": first})

    @rule(stream=st.sampled_from(STREAMS), max_count=st.integers(1, 4))
    def set_max_count(self, stream, max_count):
        m = self.model[stream]
        metadata = {k: v for k, v in m.metadata.items() if k != "$tb"} | {"$maxCount": max_count}
        if m.tombstoned:
            self.db.append(
                "$$" + stream, [NewEvent("$metadata", json.dumps(metadata).encode(), is_json=True)]
            )
        else:
            self.db.set_stream_metadata(stream, metadata)
        self._write_meta(stream, metadata)

    @rule(stream=st.sampled_from(STREAMS), tb=st.integers(0, 6))
    def set_truncate_before(self, stream, tb):
        m = self.model[stream]
        if m.tombstoned:
            return
        metadata = dict(m.metadata) | {"$tb": tb}
        self.db.set_stream_metadata(stream, metadata)
        self._write_meta(stream, metadata)

    @rule(stream=st.sampled_from(STREAMS))
    def soft_delete(self, stream):
        m = self.model[stream]
        if m.tombstoned:
            with pytest.raises(StreamDeleted):
                self.db.delete_stream(stream)
            return
        if m.last < 0 and m.meta_count == 0:  # neither events nor metadata (KurrentDB's writer: not found)
            with pytest.raises(StreamNotFound):
                self.db.delete_stream(stream)
            return
        self.db.delete_stream(stream)
        self._write_meta(stream, dict(m.metadata) | {"$tb": MAX_EVENT_NUMBER})

    @rule(stream=st.sampled_from(STREAMS))
    def hard_delete(self, stream):
        m = self.model[stream]
        if m.tombstoned:
            with pytest.raises(StreamDeleted):
                self.db.delete_stream(stream, hard=True)
            return
        self.db.delete_stream(stream, hard=True)
        m.tombstoned = True
        self.all.append((stream, "$streamDeleted"))

    @precondition(lambda self: len(self.all) > 0)
    @rule()
    def reopen(self):
        self.db.close()
        self.db = self._open()

    @invariant()
    def stream_reads_match(self):
        for stream, m in self.model.items():
            if m.tombstoned:
                with pytest.raises(StreamDeleted):
                    self.db.read_stream_forward(stream)
                continue
            visible = m.visible()
            if m.last < 0 or m.soft_deleted:
                with pytest.raises(StreamNotFound):
                    self.db.read_stream_forward(stream)
                continue
            forward = self.db.read_stream_forward(stream, 0, 100)
            assert [(e.event_number, str(e.id)) for e in forward.events] == visible
            backward = self.db.read_stream_backward(stream, None, 100)
            assert [(e.event_number, str(e.id)) for e in backward.events] == list(reversed(visible))
            assert forward.last_event_number == m.last

    @invariant()
    def all_reads_match(self):
        forward = [(e.stream, e.event_type) for e in self.db.read_all_forward(0, 10_000).events]
        assert forward == self.all
        backward = [(e.stream, e.event_type) for e in self.db.read_all_backward(None, 10_000).events]
        assert backward == list(reversed(self.all))


StreamMachine.TestCase.settings = settings(
    max_examples=40, stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestStreamSemantics = StreamMachine.TestCase
