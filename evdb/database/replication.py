"""The writes a function run in the writer thread may make (:meth:`Database.call_in_writer`): the
typed seam through which evdb.cluster.replica writes a leader's records and chunk files, and through
which epochs and other maintenance writes keep the writer's order."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from evdb.database.answers import Append, Request
from evdb.database.appends import Pending, StreamWrites
from evdb.index.hashing import stream_hash
from evdb.index.table_index import TableIndex
from evdb.storage import records as rec
from evdb.storage.log import TransactionLog
from evdb.streams import ANY, AppendResult, NewEvent

__all__ = ["Call", "WriterContext", "WriterParts"]


class WriterParts(Protocol):
    """The writer, as a function run in it sees it (evdb.database.writer.GroupCommitWriter)."""

    log: TransactionLog
    index: TableIndex
    streams: StreamWrites

    @property
    def pending(self) -> Pending: ...

    def commit_segment(self) -> None: ...


class WriterContext:
    """What a function run by :meth:`Database.call_in_writer` may do inside the writer thread."""

    def __init__(self, writer: WriterParts) -> None:
        self._writer = writer

    @property
    def log(self) -> TransactionLog:
        return self._writer.log

    def append(self, stream: str, events: Sequence[NewEvent], expected_version: int = ANY) -> AppendResult:
        """Append within the current group (committed with it)."""
        return self._writer.streams.apply_append(
            Append(stream=stream, events=events, expected_version=expected_version)
        )

    def write_system(self, kind: int, payload: bytes) -> int:
        return self._writer.streams.write_system(kind, payload)

    def complete_active_chunk(self) -> None:
        """Commit what is written so far and complete the active chunk."""
        self._writer.commit_segment()
        self._writer.log.complete_active_chunk()

    def commit(self) -> None:
        """Make what is written durable, index it, and tell the listeners (readers, subscriptions)."""
        self._writer.commit_segment()

    def index(self, record: rec.EventRecord, *, follow_appends: bool = True) -> None:
        """Index an event record written (or installed) by replication at the next :meth:`commit`;
        ``follow_appends``: rebuild the recent-append cache from it (records in their log order)."""
        pending = self._writer.pending
        pending.entries.append((stream_hash(record.stream), record.event_number, record.log_position))
        pending.names.add(record.stream)
        if follow_appends:
            self._writer.streams.follow_replicated_append(record)

    def forget_stream_states(self, *, recent_appends: bool = True) -> None:
        """Drop the writer's cached stream states (and the recent appends' ids unless told not to)."""
        self._writer.streams.forget(recent_appends=recent_appends)

    def forget_append_in_progress(self) -> None:
        """The records that follow do not continue the append seen last (a chunk file replaced them)."""
        self._writer.streams.replicated_batch = None

    def index_up_to(self, position: int) -> None:
        """Nothing before ``position`` is left to index (a chunk file whose records are all indexed)."""
        index = self._writer.index
        if index.checkpoint < position:
            index.add([], position)

    def note_epoch(self, position: int, epoch_number: int) -> None:
        """An epoch record was written at ``position``: the epoch (and proposal) checkpoints follow it."""
        checkpoints = self._writer.log.checkpoints
        checkpoints.epoch.write(position)
        if epoch_number > checkpoints.proposal.value:
            checkpoints.proposal.write(epoch_number)


@dataclass
class Call(Request):
    """Run a function in the writer thread (for maintenance work that must see the writer's order)."""

    fn: Callable[[WriterContext], Any] = lambda ctx: None
