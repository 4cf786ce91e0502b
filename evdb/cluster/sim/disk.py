"""The simulated disk: a log of records in memory, written, then synced after a delay (SimDatabase,
the cluster's database port and ReplicationLog); completed chunks sent whole as files (SimChunk)."""

from __future__ import annotations

import concurrent.futures
import contextlib
import uuid
from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Any

from evdb.cluster.sim.records import SIM_CHUNK, SimChunk, SimRecord
from evdb.cluster.sim.world import DiskNode, DiskWorld
from evdb.errors import EvdbError, NotLeader, StorageError, WrongExpectedVersion
from evdb.streams import AppendResult, NewEvent

ANY = -2


class _Checkpoint:
    def __init__(self, value: int) -> None:
        self.value = value

    def write(self, value: int, *, flush: bool = True) -> None:
        self.value = value


class _Durable:
    """What survives a crash of one node: the synced records, the checkpoints, the read limit."""

    def __init__(self) -> None:
        self.records: list[SimRecord] = []
        self.proposal = -1
        self.read_limit = 0


class SimDatabase:
    """The part of evdb.database.Database the cluster uses, over a list of records. Writes are synced
    after a random delay; answers (and the replication gate) wait for the sync, as the real writer's
    group commit does."""

    def __init__(self, sim: DiskWorld, node: DiskNode, durable: _Durable) -> None:
        self.sim = sim
        self.node = node
        self.durable = durable
        self.records: list[SimRecord] = list(durable.records)
        self._scanned_list: list[SimRecord] | None = None  # _epoch_indices: the list scanned, how far
        self._scanned = 0
        self._epoch_at: list[int] = []
        self.synced = len(self.records)
        proposal = _Checkpoint(durable.proposal)
        chaser = _Checkpoint(0)
        self.log = SimpleNamespace(
            checkpoints=SimpleNamespace(proposal=_ProposalCheckpoint(proposal, durable), chaser=chaser)
        )
        self.remote_writer: Any = None
        self.replication_gate: Any = None
        self.write_permit: Any = None
        self.before_sync: Any = None
        #: the end of the records read_raw handed out (shipped), synced or not
        self.shipped = 0
        self.fail_next_sync = False  # the next sync fails (an I/O error): its records are rolled back
        self._read_limit: int | None = None
        self._listeners: list = []
        self._watches: list = []  # told of a client's writes as they are written (the real writer: at commit)
        self._pending: list[tuple[concurrent.futures.Future, Any]] = []
        self._sync_scheduled = False
        self.closed = False
        self.config = SimpleNamespace(db_dir=None, chunk_size=SIM_CHUNK)

    # -- facts
    @property
    def end(self) -> int:
        return self.records[-1].end if self.records else 0

    @property
    def committed_position(self) -> int:
        return self.records[self.synced - 1].end if self.synced else 0

    @property
    def readable_position(self) -> int:
        limit = self._read_limit
        committed = self.committed_position
        return committed if limit is None or limit > committed else limit

    def epochs(self, max_count: int = 64) -> list[dict]:
        out = []
        records, synced = self.records, self.synced
        for index in reversed(self._epoch_indices()):
            if index >= synced:
                continue
            number, epoch_id, leader, previous = records[index].epoch
            out.append(
                {
                    "epochNumber": number,
                    "epochId": epoch_id,
                    "leaderInstanceId": leader,
                    "previousEpochPosition": previous,
                    "position": records[index].position,
                }
            )
            if len(out) >= max_count:
                break
        return out

    def _epoch_indices(self) -> list[int]:
        """The indices of the epoch records in ``records``, kept as the log grows (the list only grows
        in place; a cut makes a new list, which is scanned afresh): gossip asks for the last epoch
        several times a simulated second, and a scan back through the events since cost 2% of a seed."""
        records = self.records
        if records is not self._scanned_list:
            self._scanned_list, self._scanned, self._epoch_at = records, 0, []
        for index in range(self._scanned, len(records)):
            if records[index].kind == "epoch":
                self._epoch_at.append(index)
        self._scanned = len(records)
        return self._epoch_at

    def _epoch_number(self) -> int:
        epochs = self.epochs(1)
        return epochs[0]["epochNumber"] if epochs else -1

    # -- listeners and limits
    def add_commit_listener(self, callback: Callable[[int], None]) -> None:
        self._listeners.append(callback)

    def add_visibility_watch(self, watch: Any) -> None:
        self._watches.append(watch)

    def remove_commit_listener(self, callback: Callable[[int], None]) -> None:
        with contextlib.suppress(ValueError):
            self._listeners.remove(callback)

    def _notify(self) -> None:
        for listener in list(self._listeners):
            listener(self.readable_position)

    def set_read_limit(self, position: int) -> None:
        self._read_limit = max(position, 0)
        self.durable.read_limit = max(self.durable.read_limit, self._read_limit)
        self.sim.check_visible(self.node)
        self._notify()

    def commit_limit_at_open(self) -> int:
        return self.durable.read_limit

    def forget_stream_states(self, *, recent_appends: bool = True) -> None:
        pass

    # -- writing
    def _write(self, records: list[SimRecord]) -> None:
        self.records.extend(records)
        if self.before_sync is not None:
            self.before_sync(self.end)  # written, not yet synced: a leader ships them meanwhile
        if not self._sync_scheduled:
            self._sync_scheduled = True
            self.sim.loop.call_later(self.sim.rng.uniform(0.0005, 0.004), self._sync, self.node.incarnation)

    def _sync(self, incarnation: int) -> None:
        self._sync_scheduled = False
        if self.closed or incarnation != self.node.incarnation:
            return
        if self.fail_next_sync and self.synced < len(self.records):
            self._fail_sync()
            return
        self.synced = len(self.records)
        self.durable.records = list(self.records)
        pending, self._pending = self._pending, []
        if self.replication_gate is not None and pending:
            self.replication_gate(self.committed_position, pending)
        else:
            for future, result in pending:
                if not future.done():
                    future.set_result(result)
        self._notify()

    def _fail_sync(self) -> None:
        """What the real writer does when its fdatasync fails: tell the hook, roll the unsynced records
        back, refuse their answers (Database._commit_segment and _fail_segment)."""
        self.fail_next_sync = False
        if self.before_sync is not None:
            self.before_sync(-1)
        lost = self.records[self.synced :]
        self.records = self.records[: self.synced]
        self.sim.check_truncation(self.node, lost)
        pending, self._pending = self._pending, []
        for future, _ in pending:
            if not future.done():
                future.set_exception(EvdbError("the sync of this write failed"))
        self._notify()

    def _sync_now(self) -> None:
        """What the real writer does for epochs and replicated records: write and fsync in one call."""
        self.synced = len(self.records)
        self.durable.records = list(self.records)

    def _flush_pending(self) -> None:
        """The real writer runs one group at a time: a group written before this one is synced and
        answered first."""
        if self.synced < len(self.records) or self._pending:
            self._sync(self.node.incarnation)

    def _place(self, records: list[SimRecord], size: int) -> int:
        """Where the writer puts a record of ``size`` after ``records`` (already in the log or about to
        be): the chunk it does not fit in is completed first (a pad record to the chunk's end)."""
        end = records[-1].end if records else 0
        if end % SIM_CHUNK + size > SIM_CHUNK:
            records.append(SimRecord(end, SIM_CHUNK - end % SIM_CHUNK, "pad"))
            end = records[-1].end
        return end

    def _next(self, kind: str, size: int, **fields: Any) -> SimRecord:
        return SimRecord(self._place(self.records, size), size, kind, **fields)

    def write_epoch(self, epoch_number: int, leader_instance_id: uuid.UUID, extra: dict | None = None) -> int:
        self._flush_pending()
        previous = self.epochs(1)
        record = self._next(
            "epoch",
            256,
            epoch=(
                epoch_number,
                str(uuid.UUID(int=self.sim.rng.getrandbits(128))),
                str(leader_instance_id),
                previous[0]["position"] if previous else -1,
            ),
        )
        self.records.append(record)
        self._sync_now()
        if epoch_number > self.durable.proposal:
            self.log.checkpoints.proposal.write(epoch_number)
        self._notify()
        return record.position

    def _stream_last(self, stream: str) -> int:
        for record in reversed(self.records):
            if record.kind == "event" and record.stream == stream:
                return record.number
        return -1

    def append_async(
        self, stream: str, events: Sequence[NewEvent], expected_version: int = ANY
    ) -> concurrent.futures.Future:
        request = SimpleNamespace(stream=stream, events=list(events), expected_version=expected_version)
        if self.remote_writer is not None:
            return self.remote_writer(request)
        future: concurrent.futures.Future = concurrent.futures.Future()
        try:
            if self.closed:
                raise NotLeader()
            if self.write_permit is not None and not self.write_permit():
                raise NotLeader()
            ids = [str(e.event_id) for e in events]
            seen = self.sim.find_in_log(self, stream, ids)
            if seen is not None:  # a retry of an append this log holds: the original answer, once
                # a majority holds the log (the real writer's duplicates wait in the gate too)
                last_seen = self.sim.find_in_log(self, stream, ids[-1:]) or seen
                result = AppendResult(seen.number + len(ids) - 1, last_seen.position, seen.number, True)
                self._pending.append((future, result))
                self._write([])
                return future
            last = self._stream_last(stream)
            if expected_version >= -1 and expected_version != last:
                raise WrongExpectedVersion(stream, expected_version, last)
            records: list[SimRecord] = []
            placed = list(self.records[-1:])
            for i, event_id in enumerate(ids):
                record = SimRecord(self._place(placed, 160), 160, "event", stream, last + 1 + i, event_id)
                placed.append(record)
            records = placed[1:] if self.records else placed
            for watch in self._watches:
                if stream.startswith(watch.prefixes):
                    watch.changing(frozenset([stream]))
            self._write(records)
            written = [r for r in records if r.kind == "event"]
            # the position of the last record written, as the real writer's answer
            result = AppendResult(last + len(ids), written[-1].position, last + 1)
            self.sim.note_write(self.node, self._epoch_number(), written)
            self._pending.append((future, result))
        except EvdbError as exc:
            future.set_exception(exc)
        return future

    def delete_stream_async(
        self, stream: str, expected_version: int = ANY, *, hard: bool = False
    ) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        future.set_exception(EvdbError("deletes are not simulated"))
        return future

    # -- replication
    def replication_chunk(self, position: int) -> SimChunk | None:
        """As the real one, for chunks that were never scavenged: a follower whose log ends at the start
        of a completed, committed chunk takes the whole file."""
        if position % SIM_CHUNK or position + SIM_CHUNK > self.committed_position:
            return None
        start = self._index_at(position)
        if start is None:
            return None
        data = []
        for record in self.records[start : self.synced]:
            if record.position >= position + SIM_CHUNK or record.kind == "pad":
                break
            data.append(record.frame())
        return SimChunk(position // SIM_CHUNK, b"".join(data))

    def _index_at(self, position: int, count: int | None = None) -> int | None:
        """The index of the record at ``position`` among the first ``count`` (the synced ones)."""
        count = self.synced if count is None else count
        lo, hi = 0, count
        while lo < hi:
            mid = (lo + hi) // 2
            if self.records[mid].position < position:
                lo = mid + 1
            else:
                hi = mid
        if lo < count and self.records[lo].position == position:
            return lo
        return None

    def read_raw(
        self, position: int, max_bytes: int, upto: int | None = None
    ) -> tuple[int, bytes, int | None]:
        # with ``upto``: also what is written and not yet synced (as the real one, never past the end)
        count = self.synced
        if upto is not None:
            while count < len(self.records) and self.records[count].end <= upto:
                count += 1
        end = self.records[count - 1].end if count else 0
        if position >= end:
            return position, b"", None
        index = self._index_at(position, count)
        if index is None:
            raise StorageError(f"{position} is not a record boundary of this log")
        if self.records[index].kind == "pad":  # the end of a completed chunk: the follower completes its own
            return self.records[index].end, b"", self.records[index].end
        batch = self.records[index : min(count, index + 1 + self.sim.rng.randrange(8))]
        batch = batch[: next((i for i, r in enumerate(batch) if r.kind == "pad"), len(batch))]
        self.shipped = max(self.shipped, batch[-1].end)
        # each record framed in exactly its size, as the real log's frames are
        return position, b"".join(r.frame() for r in batch), None

    def apply_replicated(self, position: int, frames: bytes) -> int:
        return self.apply_replicated_batch([(position, frames)])

    async def write_replicated_batch(self, pieces: list[tuple[int, bytes]]) -> int:
        """A follower's batch from its event loop: a blocking call, as every other of the simulation
        (the real log's goes to its writer thread)."""
        return await self.sim.blocking(self.apply_replicated_batch, pieces)

    def apply_replicated_batch(self, pieces: list[tuple[int, bytes]]) -> int:
        """As the real one: every piece checked whole before it is written, all of them synced in one
        go (the pieces before a refused one are kept and synced, then the refusal raises)."""
        self._flush_pending()
        written: list[SimRecord] = []
        try:
            for position, frames in pieces:
                if position != self.end:
                    raise StorageError(
                        f"Replicated records start at {position} but this log ends at {self.end}."
                    )
                records = SimRecord.parse_frames(frames)
                expected = position
                for record in records:
                    if record.position != expected:
                        raise StorageError(
                            f"Replicated record at {record.position} was expected at {expected}."
                        )
                    expected = record.end
                self.records.extend(records)
                written += records
        finally:
            self._sync_now()
            for record in written:
                if record.kind == "epoch" and record.epoch[0] > self.durable.proposal:
                    self.log.checkpoints.proposal.write(record.epoch[0])
            self._notify()
        return self.committed_position

    def complete_replicated_chunk(self, chunk_end: int) -> None:
        """The leader completed the chunk ending at ``chunk_end``: complete ours at the same point."""
        self._flush_pending()
        end = self.end
        if end < chunk_end and (end // SIM_CHUNK + 1) * SIM_CHUNK == chunk_end:
            self.records.append(SimRecord(end, chunk_end - end, "pad"))
            self._sync_now()
            self._notify()

    def install_replicated_chunk(
        self, source: str | bytes, *, start_number: int, end_number: int, checksum: bytes | None = None
    ) -> int:
        """A chunk file from the leader: checked whole (checksums, every record in its place) before
        anything changes; this log must end at its start. Durable at once (the rename of the real
        one), the chunk completed as the leader's."""
        assert isinstance(source, bytes)  # the simulated database is in memory
        self._flush_pending()
        try:
            if end_number != start_number:
                raise ValueError("merged chunks are not simulated")
            records = SimChunk.records(source, checksum, start_number)
        except ValueError as exc:
            raise StorageError(f"Refused chunk file {start_number}: {exc}") from None
        if self.end != start_number * SIM_CHUNK:
            raise StorageError(
                f"chunk {start_number} starts at {start_number * SIM_CHUNK}, this log ends at {self.end}"
            )
        self.records.extend(records)
        if self.end < (start_number + 1) * SIM_CHUNK:
            self.records.append(SimRecord(self.end, (start_number + 1) * SIM_CHUNK - self.end, "pad"))
        self._sync_now()
        for record in records:
            if record.kind == "epoch" and record.epoch[0] > self.durable.proposal:
                self.log.checkpoints.proposal.write(record.epoch[0])
        self.sim.chunk_files += 1
        self._notify()
        return self.committed_position

    def record_checks(self, point: int, floor: int, max_count: int) -> list[tuple[int, int, int]]:
        out = []
        for record in reversed(self.records[: self.synced]):
            if record.position < floor:
                break
            if record.end > point or record.kind == "pad":
                continue
            out.append((record.position, record.size, record.fingerprint()))
            if len(out) >= max_count:
                break
        return out

    def completed_chunk_ends(self, floor: int, point: int) -> list[tuple[int, int]]:
        return [
            (r.position, r.end)
            for r in self.records[: self.synced]
            if r.kind == "pad" and floor < r.end <= point
        ]

    def local_start(self) -> int:
        return 0  # no archive is simulated: every chunk is local

    def reads_archive(self) -> bool:
        return False

    def chunk_end_after(self, position: int) -> int | None:
        index = self._index_at(position)
        record = None if index is None else self.records[index]
        return record.end if record is not None and record.kind == "pad" else None

    def record_commit_position(self, position: int) -> None:
        pass

    def has_record(self, position: int, size: int, fingerprint: int) -> bool:
        index = self._index_at(position)
        if index is None:
            return False
        record = self.records[index]
        return record.kind != "pad" and record.size == size and record.fingerprint() == fingerprint

    def truncate(self, position: int) -> None:
        if position != 0 and self._index_at(position) is None and position != self.committed_position:
            self.sim.violation(f"{self.node.name}: truncation to {position}, which is not a record boundary")
            return
        keep = [r for r in self.records[: self.synced] if r.end <= position]
        cut = self.records[len(keep) :]
        self.sim.check_truncation(self.node, cut)
        self.records = keep
        self.synced = len(keep)
        self.durable.records = list(keep)
        self._read_limit = min(self._read_limit or 0, position)
        self.durable.read_limit = min(self.durable.read_limit, position)
        self.sim.check_cut_below_served(self.node, position)

    def visible(self) -> list[SimRecord]:
        limit = self.readable_position
        out = []
        for record in self.records[: self.synced]:
            if record.position >= limit:
                break
            out.append(record)
        return out


class _ProposalCheckpoint:
    def __init__(self, inner: _Checkpoint, durable: _Durable) -> None:
        self._inner = inner
        self._durable = durable

    @property
    def value(self) -> int:
        return self._inner.value

    def write(self, value: int, *, flush: bool = True) -> None:
        self._inner.value = value
        self._durable.proposal = value
