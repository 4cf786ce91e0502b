"""Deterministic simulation of a cluster: the real ClusterService of every node, in one process, under a seed.

What is real and what is simulated:

- **Real**: evdb/cluster/service.py, all of it (gossip, elections, votes, taking office, the write permit,
  the replication gate, the common point and its record-by-record verification, replication, acks,
  the commit position that bounds reads, resigning), evdb/cluster/election.py and forwarding.py.
- **Simulated**, behind the ports the service already has: time (an asyncio event loop whose clock
  jumps to the next timer instead of waiting), the random source (one ``random.Random(seed)`` for
  everything), the network (:class:`SimTransport`: delay, loss, reordering through random delays,
  partitions, paused processes) and the disk (:class:`SimDatabase`: a log of records that are written,
  then synced after a delay; a crash keeps a random prefix of what was not synced, as a power cut or a
  torn write would; chunks of SIM_CHUNK bytes that a record never straddles, completed on followers by
  the leader's "complete" message, and sent whole as files (:class:`SimChunk`) to a follower with none
  of a completed chunk, through the service's real chunk-file sender and receiver).

After every step the checker asserts: no acknowledged write is ever lost (a majority of voters hold it
durably at its position); the parts of the logs that nodes serve to readers are prefixes of one
history; at most one leader per epoch acknowledges writes; every truncation falls on a record boundary;
every read answered a record of that one history at that position; and once healed, every node's log
is the same. A seed replays exactly: ``python -m evdb.cluster.sim --seed N --verbose``.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import contextvars
import gc
import hashlib
import heapq
import json
import logging
import math
import random
import selectors
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from contextvars import Context
from dataclasses import dataclass, field
from itertools import combinations
from types import SimpleNamespace
from typing import Any, TypeVarTuple, Unpack

from evdb.cluster.election import majority
from evdb.cluster.lease import is_security_stream
from evdb.cluster.service import ClusterService
from evdb.cluster.transport import Message, PeerError
from evdb.errors import EvdbError, NotLeader, StorageError, WrongExpectedVersion
from evdb.storage.chunk import FOOTER_SIZE, HEADER_SIZE
from evdb.streams import AppendResult, NewEvent

__all__ = ["SimulationResult", "run_seed", "run_seeds"]

ANY = -2
_Ts = TypeVarTuple("_Ts")
#: the simulated log's chunk size (bytes of log positions): a record never straddles two chunks; the
#: writer completes a chunk a record does not fit in, and followers catch up by whole chunk files
SIM_CHUNK = 2048
Schedule = Callable[["Simulation", float], Coroutine[Any, Any, None]]
#: simulated seconds a majority must be connected both ways, undisturbed, before the liveness check
#: requires it to have exactly one leader that stays and acknowledges writes (about six times the
#: longest wait before a node stands: GossipTimeoutMs 500 + LeaderElectionTimeoutMs 300)
LIVENESS_GRACE = 5.0
#: GossipTimeoutMs of the simulated nodes (seconds): also their sign-in lease
GOSSIP_TIMEOUT = 0.5
#: how often (simulated seconds) the liveness check has that leader acknowledge a write, and how long
#: the write may take
PROBE_EVERY = 1.0
PROBE_TIMEOUT = 2.0


# -- time ------------------------------------------------------------------------------------------------
class SimDeadlock(RuntimeError):
    """Nothing is scheduled and nothing is ready: the simulated cluster can never move again."""


class _VirtualSelector(selectors.BaseSelector):
    """A selector with no I/O: waiting ``timeout`` seconds moves the virtual clock by that much."""

    def __init__(self) -> None:
        self.now = 0.0
        self._map: dict[int, selectors.SelectorKey] = {}

    def register(self, fileobj, events, data=None):  # type: ignore[no-untyped-def]
        fd = fileobj if isinstance(fileobj, int) else fileobj.fileno()
        key = selectors.SelectorKey(fileobj, fd, events, data)
        self._map[fd] = key
        return key

    def unregister(self, fileobj):  # type: ignore[no-untyped-def]
        fd = fileobj if isinstance(fileobj, int) else fileobj.fileno()
        return self._map.pop(fd)

    def select(self, timeout=None):  # type: ignore[no-untyped-def]
        if timeout is None:
            raise SimDeadlock("nothing is scheduled")
        self.now += max(timeout, 0.0)
        return []

    def get_map(self):  # type: ignore[no-untyped-def]
        return self._map

    def close(self) -> None:
        self._map.clear()


class _Due(float):
    """A timer's due time as its key in the loop's heap: a float, so the heap compares keys in C where
    it compared TimerHandle._when through TimerHandle.__lt__ (the same comparisons, so the same order,
    ties included); ``timer`` is the handle."""

    __slots__ = ("timer",)
    timer: Any


class _Handle(asyncio.Handle):
    """asyncio's Handle without its debug-mode checks (the simulated loop never runs in debug mode)."""

    __slots__ = ()

    def __init__(
        self, callback: Callable[..., object], args: Sequence[Any], loop: Any, context: Any = None
    ) -> None:
        me: Any = self  # Handle's slots, which typeshed does not declare
        me._context = contextvars.copy_context() if context is None else context
        me._loop = loop
        me._callback = callback
        me._args = args
        me._cancelled = False
        me._repr = None
        me._source_traceback = None


class _Timer(asyncio.TimerHandle):
    __slots__ = ()

    def __init__(
        self,
        when: float,
        callback: Callable[..., object],
        args: Sequence[Any],
        loop: Any,
        context: Any = None,
    ) -> None:
        _Handle.__init__(self, callback, args, loop, context)  # type: ignore[arg-type]
        me: Any = self
        me._when = when
        me._scheduled = False


class SimLoop(asyncio.SelectorEventLoop):
    """An asyncio loop on virtual time: sleeps and timeouts take no real time, in a replayable order.

    It schedules and runs callbacks as asyncio's own loop does (the same heap operations, the same
    order), with less work per step: no debug-mode checks, timers keyed by their due time in C
    (:class:`_Due`), and no wake-up byte through the self-pipe for a loop that never waits on it."""

    def __init__(self) -> None:
        self._virtual = _VirtualSelector()
        super().__init__(selector=self._virtual)
        self._clock_resolution = 1e-9
        #: BaseEventLoop's private state, which typeshed does not declare
        self._base: Any = self

    def time(self) -> float:
        return self._virtual.now

    def _write_to_self(self) -> None:
        pass  # one thread, and a selector that never blocks while callbacks are ready

    def call_soon(
        self, callback: Callable[[Unpack[_Ts]], object], *args: *_Ts, context: Context | None = None
    ) -> asyncio.Handle:
        if self._base._closed:
            raise RuntimeError("Event loop is closed")
        handle = _Handle(callback, args, self, context)
        self._base._ready.append(handle)
        return handle

    def _call_soon(
        self, callback: Callable[..., object], args: Sequence[Any], context: Context | None
    ) -> asyncio.Handle:
        handle = _Handle(callback, args, self, context)
        self._base._ready.append(handle)
        return handle

    def call_later(
        self,
        delay: float,
        callback: Callable[[Unpack[_Ts]], object],
        *args: *_Ts,
        context: Context | None = None,
    ) -> asyncio.TimerHandle:
        if delay is None:
            raise TypeError("delay must not be None")
        return self.call_at(self._virtual.now + delay, callback, *args, context=context)

    def call_at(
        self,
        when: float,
        callback: Callable[[Unpack[_Ts]], object],
        *args: *_Ts,
        context: Context | None = None,
    ) -> asyncio.TimerHandle:
        if when is None:
            raise TypeError("when cannot be None")
        if self._base._closed:
            raise RuntimeError("Event loop is closed")
        timer = _Timer(when, callback, args, self, context)
        due = _Due(when)
        due.timer = timer
        heapq.heappush(self._base._scheduled, due)
        timer._scheduled = True  # type: ignore[attr-defined]
        return timer

    def _run_once(self) -> None:
        """asyncio's BaseEventLoop._run_once (3.11) over :class:`_Due` keys, step for step."""
        base = self._base
        scheduled: list[Any] = base._scheduled
        sched_count = len(scheduled)
        if sched_count > 100 and base._timer_cancelled_count / sched_count > 0.5:
            kept = []
            for due in scheduled:
                if due.timer._cancelled:
                    due.timer._scheduled = False
                else:
                    kept.append(due)
            heapq.heapify(kept)
            base._scheduled = scheduled = kept
            base._timer_cancelled_count = 0
        else:
            while scheduled and scheduled[0].timer._cancelled:
                base._timer_cancelled_count -= 1
                heapq.heappop(scheduled).timer._scheduled = False
        virtual = self._virtual
        ready = base._ready
        if ready or base._stopping:
            pass  # no time passes
        elif scheduled:
            virtual.now += max(min(max(0, scheduled[0] - virtual.now), 24 * 3600), 0.0)
        else:
            raise SimDeadlock("nothing is scheduled")
        end_time = virtual.now + 1e-9
        while scheduled:
            if scheduled[0] >= end_time:
                break
            timer = heapq.heappop(scheduled).timer
            timer._scheduled = False
            ready.append(timer)
        for _ in range(len(ready)):
            handle = ready.popleft()
            if not handle._cancelled:
                handle._run()


# -- the disk: a log of records ----------------------------------------------------------------------------
@dataclass(frozen=True)
class SimRecord:
    position: int
    size: int
    kind: str  # "event", "epoch", or "pad": the rest of a completed chunk, which holds no record
    stream: str = ""
    number: int = -1
    event_id: str = ""
    epoch: tuple = ()  # (epochNumber, epochId, leaderInstanceId, previousEpochPosition)

    @property
    def end(self) -> int:
        return self.position + self.size

    def fingerprint(self) -> int:
        return hash(
            (self.position, self.size, self.kind, self.stream, self.number, self.event_id, self.epoch)
        )

    def to_json(self) -> list:
        return [
            self.position,
            self.size,
            self.kind,
            self.stream,
            self.number,
            self.event_id,
            list(self.epoch),
        ]

    @classmethod
    def from_json(cls, v: list) -> SimRecord:
        return cls(v[0], v[1], v[2], v[3], v[4], v[5], tuple(v[6]))

    def frame(self) -> bytes:
        body = json.dumps(self.to_json(), separators=(",", ":")).encode()
        if len(body) > self.size:
            raise ValueError(f"record {body!r} does not fit its {self.size} bytes")
        return body.ljust(self.size)

    @staticmethod
    def parse_frames(frames: bytes) -> list[SimRecord]:
        out, offset, decoder, text = [], 0, json.JSONDecoder(), frames.decode()
        while offset < len(text):
            value, _end = decoder.raw_decode(text, offset)
            record = SimRecord.from_json(value)
            out.append(record)
            offset += record.size
        return out


@dataclass
class SimChunk:
    """A completed chunk of the simulated log as a file, for a follower with none of it: a header, the
    records' frames, a footer whose last 16 bytes are the checksum of the rest (as the real file's)."""

    start_number: int
    data: bytes
    is_scavenged: bool = False

    def __post_init__(self) -> None:
        body = b"H" * HEADER_SIZE + self.data + b"F" * (FOOTER_SIZE - 16)
        self.footer = SimpleNamespace(checksum=hashlib.blake2b(body, digest_size=16).digest())
        self.buffer = body + self.footer.checksum

    @property
    def end_number(self) -> int:
        return self.start_number

    @property
    def file_name(self) -> str:
        return f"chunk-{self.start_number:06d}.000000"

    @property
    def file_size(self) -> int:
        return len(self.buffer)

    @property
    def start_position(self) -> int:
        return self.start_number * SIM_CHUNK

    @property
    def end_position(self) -> int:
        return self.start_position + SIM_CHUNK

    @staticmethod
    def records(source: bytes, checksum: bytes | None, start_number: int) -> list[SimRecord]:
        """The records of a received file, checked as the real install checks one (or ValueError)."""
        body, footer = source[:-16], source[-16:]
        if (
            len(source) < HEADER_SIZE + FOOTER_SIZE
            or hashlib.blake2b(body, digest_size=16).digest() != footer
        ):
            raise ValueError("the footer checksum does not match the file")
        if checksum is not None and checksum != footer:
            raise ValueError("the file's checksum is not the one the leader announced")
        records = SimRecord.parse_frames(source[HEADER_SIZE : len(source) - FOOTER_SIZE])
        expected = start_number * SIM_CHUNK
        for record in records:
            if record.position != expected or record.end > (start_number + 1) * SIM_CHUNK:
                raise ValueError(f"a record at {record.position} where {expected} was expected")
            expected = record.end
        return records


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

    def __init__(self, sim: Simulation, node: SimNode, durable: _Durable) -> None:
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
        self._watches: list = []  # told of a client's writes as they land (as the real writer does)
        #: (answer, result, how many records it waits for, the stream it wrote)
        self._pending: list[tuple[concurrent.futures.Future, Any, int, str]] = []
        self._sync_scheduled = False
        #: the records the scheduled sync covers: those written before it began (the real writer syncs
        #: one group while it writes and ships the next: evdb/database/writer.py)
        self._sync_covers = 0
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
    def add_commit_listener(self, callback) -> None:  # type: ignore[no-untyped-def]
        self._listeners.append(callback)

    def add_visibility_watch(self, watch: Any) -> None:
        self._watches.append(watch)

    def remove_commit_listener(self, callback) -> None:  # type: ignore[no-untyped-def]
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
            self._schedule_sync()

    def _schedule_sync(self) -> None:
        self._sync_scheduled = True
        self._sync_covers = len(self.records)
        self.sim.loop.call_later(self.sim.rng.uniform(0.0005, 0.004), self._sync, self.node.incarnation)

    def _sync(self, incarnation: int) -> None:
        self._sync_scheduled = False
        if self.closed or incarnation != self.node.incarnation:
            return
        if self.fail_next_sync and self.synced < len(self.records):
            self._fail_sync()
            return
        self.synced = max(self.synced, min(self._sync_covers, len(self.records)))
        self.durable.records = self.records[: self.synced]
        landing = [entry for entry in self._pending if entry[2] <= self.synced]
        self._pending = [entry for entry in self._pending if entry[2] > self.synced]
        for watch in self._watches:
            streams = frozenset(entry[3] for entry in landing if entry[3].startswith(watch.prefixes))
            if streams:
                watch.changing(streams)
        ready = [(future, result) for future, result, *_ in landing]
        if self.replication_gate is not None and ready:
            self.replication_gate(self.committed_position, ready)
        else:
            for future, result in ready:
                if not future.done():
                    future.set_result(result)
        if self.synced < len(self.records):  # written during this sync: the next sync covers them
            self._schedule_sync()
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
        for future, *_ in pending:
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
            self._sync_covers = len(self.records)
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

    def append_async(self, stream: str, events: list[NewEvent], expected_version: int = ANY):  # type: ignore[no-untyped-def]
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
                self._pending.append((future, result, len(self.records), ""))
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
            self._write(records)
            written = [r for r in records if r.kind == "event"]
            # the position of the last record written, as the real writer's answer
            result = AppendResult(last + len(ids), written[-1].position, last + 1)
            self.sim.note_write(self.node, self._epoch_number(), written)
            self._pending.append((future, result, len(self.records), stream))
        except EvdbError as exc:
            future.set_exception(exc)
        return future

    def delete_stream_async(self, stream: str, expected_version: int = ANY, *, hard: bool = False):  # type: ignore[no-untyped-def]
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
        served = self.sim._served_up_to.get(self.node.name, 0)
        if served > position:
            self.sim.violation(f"{self.node.name} cut its log to {position}, below what it served ({served})")
            self.sim._served_up_to[self.node.name] = position

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


# -- the network -----------------------------------------------------------------------------------------
class SimChannel:
    """One end of a replication stream; messages arrive after the network's delay, in order."""

    def __init__(self, sim: Simulation, owner: SimNode, opener: SimNode) -> None:
        self.sim = sim
        self.owner = owner
        #: the node that opened the connection, and when (a certificate split lets connections opened
        #: before it linger until the connection reset: Simulation.reaches)
        self.opener = opener
        self.opened_at = sim.loop.time()
        self.peer: SimChannel | None = None
        self._inbox: asyncio.Queue = asyncio.Queue()
        self._closed = False
        self._last_arrival = 0.0
        #: (commit position, arrival time) of each commit message sent on this end, in order
        self.commits: list[tuple[int, float]] = []
        #: a message sent on this end was lost: the other end was closed, or the link cut (the stream is
        #: breaking; the follower takes nothing more from it)
        self.lost = False

    @property
    def closed(self) -> bool:
        return self._closed

    def _deliver(self, message: Message | None) -> None:
        target = self.peer
        if target is None or target._closed:
            self.lost = True
            return
        if message is not None and not self.sim.reaches(
            self.owner, target.owner, opener=self.opener, opened_at=self.opened_at
        ):
            # a link that is cut loses what is on it, and the connection breaks at both ends (the
            # WebSocket heartbeat notices on either side)
            self.lost = True
            self.sim.loop.call_soon(target.break_now)
            self.sim.loop.call_soon(self.break_now)
            return
        # strictly after the previous message: timers due at the same instant may run in any order
        arrival = max(
            self.sim.loop.time() + self.sim.delay(self.owner, target.owner), self._last_arrival + 1e-7
        )
        self._last_arrival = arrival
        if message is not None and message.binary is not None and len(message.binary) == 8:
            self.commits.append((int.from_bytes(message.binary, "little", signed=True), arrival))
        self.sim.loop.call_at(arrival, target._inbox.put_nowait, message)

    def commit_arrival(self, end: int) -> float | None:
        """When the first commit message sent on this end that covers ``end`` reaches the other end."""
        for commit, arrival in self.commits:
            if commit >= end:
                return arrival
        return None

    async def send_json(self, value: Any) -> None:
        if self._closed:
            raise PeerError("the replication stream is closed")
        self._deliver(Message(text=json.loads(json.dumps(value))))

    async def send_bytes(self, data: bytes) -> None:
        self.post_bytes(data)

    def post_bytes(self, data: bytes) -> None:
        if self._closed:
            raise PeerError("the replication stream is closed")
        self._deliver(Message(binary=bytes(data)))

    async def receive(self, timeout: float | None = None) -> Message | None:
        if self._closed:
            return None
        try:
            async with asyncio.timeout(timeout):
                message = await self._inbox.get()
        except TimeoutError:
            return None
        if message is None:
            self._closed = True
        return message

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._deliver(None)

    def break_now(self) -> None:
        if not self._closed:
            self._closed = True
            self._inbox.put_nowait(None)


class SimTransport:
    def __init__(self, sim: Simulation, node: SimNode) -> None:
        self.sim = sim
        self.node = node
        self.channels: list[SimChannel] = []
        # a dict, not a set: a crash cancels them in the order they started, not in the order of their
        # addresses in memory (which differ from run to run in one process)
        self.handler_tasks: dict[asyncio.Task, None] = {}

    def forget_handler(self, task: asyncio.Task) -> None:
        self.handler_tasks.pop(task, None)

    async def start(self, handlers: Any) -> int:
        return self.node.replication_port

    async def stop(self) -> None:
        pass

    async def reset(self) -> None:
        pass

    async def _call(self, target_port: int, timeout: float, call) -> Any:  # type: ignore[no-untyped-def]
        target = self.sim.by_port.get(target_port)
        loop = self.sim.loop
        if (
            target is None
            or not self.sim.reaches(self.node, target, opener=self.node)
            or self.sim.rng.random() < self.sim.loss
        ):
            await asyncio.sleep(min(timeout, self.sim.rng.uniform(0.001, timeout)))
            raise PeerError(f"no answer from port {target_port}")
        await asyncio.sleep(self.sim.delay(self.node, target))
        if not target.alive or not self.alive_self():
            raise PeerError(f"port {target_port} is down")
        task = loop.create_task(call(target))
        target.transport.handler_tasks[task] = None
        task.add_done_callback(target.transport.forget_handler)
        try:
            async with asyncio.timeout(timeout):
                answer = await asyncio.shield(task)
        except TimeoutError as exc:
            raise PeerError(f"timed out calling port {target_port}") from exc
        except asyncio.CancelledError:
            if not task.cancelled():
                raise
            raise PeerError(f"port {target_port} went down during the call") from None
        await asyncio.sleep(self.sim.delay(target, self.node))
        if not self.sim.reaches(target, self.node, opener=self.node):
            raise PeerError(f"the answer from port {target_port} was lost")
        return answer

    def alive_self(self) -> bool:
        return self.node.alive

    async def gossip(self, seed: tuple[str, int], timeout: float) -> dict:
        async def call(target: SimNode) -> dict:
            return target.gossip_answer()

        return await self._call(seed[1], timeout, call)

    async def vote(self, endpoint: tuple[str, int], body: dict, timeout: float) -> dict:
        async def call(target: SimNode) -> dict:
            return await target.service.handle_vote(json.loads(json.dumps(body)))

        return await self._call(endpoint[1] - 1000, timeout, call)

    async def write(self, endpoint: tuple[str, int], body: dict, timeout: float) -> dict:
        async def call(target: SimNode) -> dict:
            return await target.service.handle_write(json.loads(json.dumps(body)))

        return await self._call(endpoint[1] - 1000, timeout, call)

    @contextlib.asynccontextmanager
    async def replicate(self, endpoint: tuple[str, int], heartbeat: float) -> AsyncIterator[SimChannel]:
        target = self.sim.by_port.get(endpoint[1] - 1000)
        await asyncio.sleep(self.sim.delay(self.node, target) if target else 0.01)
        if (
            target is None
            or not target.alive
            or not self.sim.reaches(self.node, target, opener=self.node, opened_at=self.sim.loop.time())
            or not self.sim.reaches(target, self.node, opener=self.node, opened_at=self.sim.loop.time())
        ):
            raise PeerError(f"cannot connect to port {endpoint[1]}")
        mine, theirs = SimChannel(self.sim, self.node, self.node), SimChannel(self.sim, target, self.node)
        mine.peer, theirs.peer = theirs, mine
        self.channels.append(mine)
        target.transport.channels.append(theirs)
        task = self.sim.loop.create_task(target.service.handle_replication(theirs))
        target.transport.handler_tasks[task] = None
        task.add_done_callback(target.transport.forget_handler)
        task.add_done_callback(lambda _t: self.sim.loop.create_task(theirs.close()))
        try:
            yield mine
        finally:
            await mine.close()
            with contextlib.suppress(ValueError):
                self.channels.remove(mine)


# -- nodes -----------------------------------------------------------------------------------------------
@dataclass
class SimNode:
    sim: Simulation
    index: int
    name: str
    instance_id: uuid.UUID
    durable: _Durable = field(default_factory=_Durable)
    alive: bool = False
    incarnation: int = 0
    clock_offset: float = 0.0
    service: Any = None
    db: Any = None
    transport: Any = None

    @property
    def port(self) -> int:
        return 2000 + self.index

    @property
    def replication_port(self) -> int:
        return 3000 + self.index

    def monotonic(self) -> float:
        return self.sim.loop.time() + self.clock_offset

    def gossip_answer(self) -> dict:
        return {"members": self.service.members(), "serverIp": "127.0.0.1", "serverPort": self.port}


class _Host:
    """The ClusterHost port for one simulated node."""

    def __init__(self, node: SimNode, options: Any, logger: logging.Logger) -> None:
        self._node = node
        self.options = options
        self.logger = logger
        self.instance_id = node.instance_id
        self.tls = None
        self.host = "127.0.0.1"
        self.advertised_host = "127.0.0.1"
        self.port = self.advertised_port = node.port
        self.client_endpoint = (self.advertised_host, node.port)
        self.name = node.name
        self.clock = SimpleNamespace(time=lambda: 1_700_000_000.0 + node.sim.loop.time())

    @property
    def db(self) -> SimDatabase:
        return self._node.db

    def replication_log(self) -> SimDatabase:
        return self._node.db  # the simulated log replicates itself (a ReplicationLog of records)

    async def on_became_leader(self) -> None:
        pass

    async def truncate_and_reopen(self, position: int) -> None:
        node = self._node
        await node.service.detach_database()
        node.db.truncate(position)
        old = node.db
        db = SimDatabase(node.sim, node, node.durable)
        node.service.attach_database(db)
        node.db = db
        old.closed = True


# -- the simulation ----------------------------------------------------------------------------------------
@dataclass
class SimulationResult:
    seed: int
    nodes: int
    violations: list[str]
    acknowledged: int
    elections: int
    faults: list[str]
    virtual_seconds: float
    chunk_files: int = 0  # whole chunk files followers installed (catch-up by files)

    @property
    def ok(self) -> bool:
        return not self.violations

    @property
    def replay_key(self) -> tuple[list[str], int, int, float]:
        """What running the same seed again must reproduce exactly: the faults in order, the writes
        acknowledged, the elections and the virtual time it took."""
        return (self.faults, self.acknowledged, self.elections, self.virtual_seconds)


class Simulation:
    def __init__(self, seed: int, nodes: int = 3, *, verbose: bool = False) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.loop = SimLoop()
        self.size = nodes
        self.verbose = verbose
        self.nodes: list[SimNode] = []
        self.by_port: dict[int, SimNode] = {}
        self.partition: dict[int, int] = {}  # node index -> side; nodes on different sides cannot talk
        self.cuts: set[tuple[int, int]] = set()  # (a, b): messages from node a to node b are lost
        #: a certificate split: node index -> (when it reloaded new certificates, when the connections
        #: opened before then are reset); the others trust only the old ones
        self.reloaded: dict[int, tuple[float, float]] = {}
        self.paused: set[int] = set()
        #: the liveness check (check_liveness): majority -> since when it has been connected both ways;
        #: node index -> when a fault last disturbed it; majority -> the (leader, epoch) it must keep
        self._connected_since: dict[frozenset[int], float] = {}
        self._disturbed: dict[int, float] = {}
        self._kept_leader: dict[frozenset[int], tuple[str, int]] = {}
        self._linked: set[frozenset[int]] = set()
        self._probing = False
        self._checking_liveness = False
        self.liveness_checks = 0  # how many times a majority was required to have its one leader
        self.loss = 0.0
        self.slow = 0.0
        self.violations: list[str] = []
        self.acknowledged: dict[str, tuple[int, int]] = {}  # event id -> (position, acknowledged at)
        self._streams: dict[str, str] = {}  # event id -> the stream a client wrote it to
        self.writers_by_epoch: dict[int, set[str]] = {}
        self.written_by: dict[str, tuple[str, int]] = {}  # event id -> (node, epoch) that wrote it first
        self.reads: list[tuple[str, int, str]] = []  # (node, position, event id)
        self.history: dict[int, SimRecord] = {}  # what nodes served at each position (one history)
        self._served_up_to: dict[str, int] = {}
        self.faults: list[str] = []
        self.elections = 0
        self.chunk_files = 0  # chunk files followers installed
        #: sign-in leases (evdb/cluster/lease.py): the end of the last write of a user stream acknowledged,
        #: when a node's clock last jumped (leases assume clocks that run steadily: check_sign_ins), and
        #: how many times a node's sign-in decision was checked against the acknowledged user changes
        self.security_acked = 0
        self._clock_jumped_at = -math.inf
        self.sign_in_checks = 0
        for i in range(nodes):
            node = SimNode(self, i, f"node{i + 1}", uuid.UUID(int=self.rng.getrandbits(128)))
            self.nodes.append(node)
            self.by_port[node.port] = node
        self._pairs = list(combinations(self.nodes, 2))
        self._majorities = [
            frozenset(members)
            for k in range(majority(nodes), nodes + 1)
            for members in combinations(range(nodes), k)
        ]
        self._probe_due = 0.0

    # -- faults and the network
    def link_up(self, a: SimNode, b: SimNode) -> bool:
        """Whether the wire carries ``a``'s messages to ``b`` (partitions, one-way cuts, pauses)."""
        if a.index in self.paused or b.index in self.paused:
            return False
        if self.partition.get(a.index, 0) != self.partition.get(b.index, 0):
            return False
        return (a.index, b.index) not in self.cuts

    def trusted(self, a: SimNode, b: SimNode) -> bool:
        """Whether ``a`` and ``b`` accept each other's certificates now (a certificate split: the nodes
        that reloaded trust only the new CA, the others only the old one)."""
        return (a.index in self.reloaded) == (b.index in self.reloaded)

    def reaches(self, a: SimNode, b: SimNode, *, opener: SimNode, opened_at: float | None = None) -> bool:
        """Whether a message from ``a`` reaches ``b`` on a connection ``opener`` opened at ``opened_at``
        (None: a pooled connection of ``opener``'s peer client, as gossip and votes use). Across a
        certificate split no new connection is made; one opened before the reload lingers until its
        ConnectionResetInterval-like reset, and a node that did not reload keeps using its pooled
        connections until then (a node that reloaded makes new ones, which the others refuse)."""
        if not self.link_up(a, b):
            return False
        if self.trusted(a, b):
            return True
        reloaded = a if a.index in self.reloaded else b
        started, linger_until = self.reloaded[reloaded.index]
        if self.loop.time() >= linger_until:
            return False
        if opened_at is not None:
            return opened_at < started
        return opener.index not in self.reloaded

    def both_ways(self, a: SimNode, b: SimNode) -> bool:
        """Connected both ways with nothing lingering: what the liveness check counts as connected."""
        return (
            a.alive
            and b.alive
            and not self.loss
            and not self.slow
            and self.link_up(a, b)
            and self.link_up(b, a)
            and self.trusted(a, b)
        )

    def disturb(self, node: SimNode) -> None:
        """A fault that may rightly cost an election: ``node`` crashed, paused, its clock jumped, it
        resigned or its sync failed. The liveness check gives every majority with ``node`` in it (all
        of them, when ``node`` leads) a fresh grace period."""
        now = self.loop.time()
        if node.service is not None and node.service.state in ("Leader", "ResigningLeader", "PreLeader"):
            for other in self.nodes:
                self._disturbed[other.index] = now
        self._disturbed[node.index] = now

    def delay(self, a: SimNode | None, b: SimNode | None) -> float:
        base = self.rng.uniform(0.0002, 0.003)
        if self.rng.random() < self.slow:
            base += self.rng.uniform(0.01, 0.3)  # a late message: reordered behind later ones
        return base

    def violation(self, text: str) -> None:
        line = f"t={self.loop.time():.3f}s {text}"
        if line not in self.violations:
            self.violations.append(line)

    def log(self, text: str) -> None:
        self.faults.append(f"t={self.loop.time():.3f}s {text}")
        if self.verbose:
            print(self.faults[-1], file=sys.stderr)

    def _stamp(self, record: logging.LogRecord) -> bool:
        """(--verbose) Each node's log line starts with the simulated time."""
        record.msg = f"t={self.loop.time():.3f}s {record.msg}"
        return True

    async def blocking(self, fn, *args):  # type: ignore[no-untyped-def]
        """A blocking call (a thread in a real node) takes a little time, and other work of the node
        goes on meanwhile: a node taking office may meet client writes while it writes its epoch."""
        await asyncio.sleep(self.rng.uniform(0.0, 0.003))
        return fn(*args)

    # -- node lifecycle
    def _options(self, node: SimNode) -> Any:
        seeds = ",".join(f"127.0.0.1:{n.port}" for n in self.nodes if n is not node)
        return SimpleNamespace(
            cluster_size=self.size,
            read_only_replica=False,
            node_priority=0,
            gossip_seed=seeds,
            gossip_interval_ms=100,
            gossip_timeout_ms=int(GOSSIP_TIMEOUT * 1000),
            leader_election_timeout_ms=300,
            connection_reset_interval=1_000_000,
            replication_ip="127.0.0.1",
            replication_port=node.replication_port,
            replication_host_advertise_as=None,
            replication_tcp_port_advertise_as=0,
            certificate_reserved_node_common_name="eventstoredb-node",
        )

    async def start_node(self, node: SimNode) -> None:
        node.incarnation += 1
        node.alive = True
        node.db = SimDatabase(self, node, node.durable)
        node.transport = SimTransport(self, node)
        logger = logging.getLogger(f"evdb.sim.{node.name}")
        logger.disabled = not self.verbose
        if self.verbose and not logger.filters:
            logger.addFilter(self._stamp)
        host = _Host(node, self._options(node), logger)
        node.service = ClusterService(
            host,  # type: ignore[arg-type]
            transport=node.transport,  # type: ignore[arg-type]
            monotonic=node.monotonic,
            rng=random.Random(self.rng.getrandbits(64)),
            run_blocking=self.blocking,
        )
        await node.service.start()

    async def crash(self, node: SimNode) -> None:
        """kill -9 (or a power cut): every task of the node stops where it is; of what was written and
        not yet synced, a random prefix survives."""
        if not node.alive:
            return
        self.disturb(node)
        node.alive = False
        service = node.service
        tasks = [*service._tasks, *([service._follow_task] if service._follow_task else [])]
        tasks += list(node.transport.handler_tasks)
        for channel in node.transport.channels:
            channel.break_now()
            if channel.peer is not None:
                self.loop.call_soon(channel.peer.break_now)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=1.0)
        stuck = [t for t in tasks if not t.done()]
        if stuck:
            chain, coro = [], stuck[0].get_coro()
            while coro is not None:
                frame = getattr(coro, "cr_frame", None) or getattr(coro, "ag_frame", None)
                if frame is not None:
                    chain.append(f"{frame.f_code.co_name}:{frame.f_lineno}")
                coro = getattr(coro, "cr_await", None) or getattr(coro, "ag_await", None)
            self.violation(
                f"{node.name}: {len(stuck)} task(s) did not stop when cancelled: {' > '.join(chain)}"
            )
        service._fail_gate(NotLeader())
        db = node.db
        db.closed = True
        unsynced = db.records[db.synced :]
        keep = self.rng.randrange(len(unsynced) + 1) if unsynced else 0
        node.durable.records = db.records[: db.synced] + unsynced[:keep]
        self.check_truncation(node, unsynced[keep:])
        node.durable.read_limit = min(node.durable.read_limit, db.committed_position)
        node.incarnation += 1

    # -- bookkeeping for the checker
    def find_in_log(self, db: SimDatabase, stream: str, ids: list[str]) -> SimRecord | None:
        for record in reversed(db.records):
            if record.kind == "event" and record.event_id == ids[0] and record.stream == stream:
                return record
        return None

    def note_write(self, node: SimNode, epoch: int, records: list[SimRecord]) -> None:
        for record in records:
            self.written_by.setdefault(record.event_id, (node.name, epoch))

    def check_visible(self, node: SimNode) -> None:
        """What a node serves to readers must be one history: every record it newly serves is the one
        every node served (or will serve) at that position."""
        db = node.db
        limit = db.readable_position
        start = self._served_up_to.get(node.name, 0)
        if limit <= start:
            self._served_up_to[node.name] = min(start, limit)
            return
        index = db._index_at(start) if start else 0
        records = db.records
        while index is not None and index < db.synced and records[index].position < limit:
            record = records[index]
            seen = self.history.setdefault(record.position, record)
            if seen != record:
                self.violation(
                    f"{node.name} serves {record.kind} {record.stream}/{record.number} {record.event_id[:8]} at "
                    f"position {record.position}, where another node served {seen.kind} {seen.stream}/"
                    f"{seen.number} {seen.event_id[:8]}"
                )
                return
            index += 1
        self._served_up_to[node.name] = limit

    def check_truncation(self, node: SimNode, cut: list[SimRecord]) -> None:
        for record in cut:
            if (
                record.event_id in self.acknowledged
                and self.acknowledged[record.event_id][0] == record.position
            ):
                holders = self._holders(record)
                if holders < majority(self.size):
                    self.violation(
                        f"{node.name} cut acknowledged event {record.event_id[:8]} at {record.position}; "
                        f"only {holders} nodes still hold it"
                    )

    def _holders(self, record: SimRecord, exclude: SimNode | None = None) -> int:
        count = 0
        for node in self.nodes:
            if node is exclude:
                continue
            recs = node.durable.records
            lo, hi = 0, len(recs)
            while lo < hi:
                mid = (lo + hi) // 2
                if recs[mid].position < record.position:
                    lo = mid + 1
                else:
                    hi = mid
            if (
                lo < len(recs)
                and recs[lo].event_id == record.event_id
                and recs[lo].position == record.position
            ):
                count += 1
        return count

    def check_acknowledged(self, event_ids: list[str]) -> None:
        for event_id in event_ids:
            position = self.acknowledged[event_id][0]
            record = SimRecord(position, 160, "event", event_id=event_id)
            if self._holders(record) < majority(self.size):
                self.violation(f"acknowledged event {event_id[:8]} at {position} is held by no majority")

    # -- clients
    async def client(self, k: int, until: float) -> None:
        n = 0
        while self.loop.time() < until:
            await asyncio.sleep(self.rng.uniform(0.002, 0.05))
            event_id = str(uuid.UUID(int=self.rng.getrandbits(128)))
            # one write in five changes a user (the leases hold its answer: check_sign_ins)
            stream = f"$user-c{k}" if n % 5 == 4 else f"s{k}-{n % 3}"
            self._streams[event_id] = stream
            n += 1
            for _attempt in range(6):
                node = self.rng.choice(self.nodes)
                result = await self._append(node, stream, event_id)
                if result is not None:
                    self._acknowledge(node, event_id, result)
                    break
                await asyncio.sleep(self.rng.uniform(0.01, 0.1))

    async def _append(
        self, node: SimNode, stream: str, event_id: str, *, timeout: float = 2.0
    ) -> AppendResult | None:
        if not node.alive or node.index in self.paused:
            await asyncio.sleep(0.05)
            return None
        try:
            event = NewEvent("E", b"{}", b"", uuid.UUID(event_id), True)
            future = node.db.append_async(stream, [event], ANY)
            async with asyncio.timeout(timeout):
                return await asyncio.wrap_future(future)
        except (EvdbError, TimeoutError, PeerError, asyncio.CancelledError):
            return None

    def _acknowledge(self, node: SimNode, event_id: str, result: AppendResult) -> None:
        if event_id in self.acknowledged and self.acknowledged[event_id][0] != result.position:
            self.violation(
                f"event {event_id[:8]} acknowledged at {result.position} and earlier at "
                f"{self.acknowledged[event_id][0]}"
            )
        self.acknowledged.setdefault(event_id, (result.position, int(self.loop.time() * 1000)))
        writer = self.written_by.get(event_id)
        if writer is not None:
            leaders = self.writers_by_epoch.setdefault(writer[1], set())
            leaders.add(writer[0])
            if len(leaders) > 1:
                self.violation(f"two leaders acknowledged writes in epoch {writer[1]}: {sorted(leaders)}")
        self.check_acknowledged([event_id])
        if is_security_stream(self._streams.get(event_id, "")):
            self.security_acked = max(self.security_acked, result.position + 160)
            self.check_sign_ins()
        if node.service.is_leader:
            self.check_read_your_writes(node, event_id, result.position)

    def check_sign_ins(self) -> None:
        """Sign-in leases (evdb/cluster/lease.py): once a user change is acknowledged, no node would sign
        anyone in with the credentials before it: a node whose decision (ClusterService.admits_sign_in,
        with whether it holds a user record its readers cannot see yet) admits shows the change. Leases
        assume monotonic clocks that run steadily: for two leases after a node's clock jumped forward
        (the simulator's clock fault) the check is off (a leader's jump ends its members' leases early
        in its eyes only)."""
        if self.security_acked == 0 or self.loop.time() < self._clock_jumped_at + 2 * GOSSIP_TIMEOUT:
            return
        for node in self.nodes:
            if not node.alive or node.service is None or node.db is None:
                continue
            db = node.db
            readable = db.readable_position
            unseen = False  # a user record this node holds and does not show (newest first)
            for r in reversed(db.records):
                if r.end <= readable:
                    break
                if r.kind == "event" and is_security_stream(r.stream):
                    unseen = True
                    break
            self.sign_in_checks += 1
            if node.service.admits_sign_in(unseen) and readable < self.security_acked:
                self.violation(
                    f"{node.name} ({node.service.state}) would sign callers in showing up to {readable}, "
                    f"before the user change acknowledged up to {self.security_acked}"
                )

    def check_read_your_writes(self, leader: SimNode, event_id: str, position: int) -> None:
        """Read your writes on followers (evdb/cluster/service.py, the rule at the top): when a leader
        answers a write, every follower streaming from it that holds the write durably has been sent a
        commit message covering it, and shows the write the moment that message arrives (a read that
        reaches it later sees the write). A follower still syncing it is not held to this here."""
        service = leader.service
        epoch = service.standing().epoch_number
        end = position + 160  # the clients append one event (a SimRecord of 160 bytes)
        for node in self.nodes:
            link = service._followers.get(str(node.instance_id))
            if node is leader or not node.alive or link is None or link.channel is None:
                continue
            if link.channel.closed or link.channel.lost or node.db.committed_position < end:
                continue  # the stream broke (the follower takes nothing more from it), or no durable copy
            arrival = link.channel.commit_arrival(end)
            if arrival is None:
                self.violation(
                    f"{leader.name} answered event {event_id[:8]} at {position} before sending {node.name}, "
                    f"which holds it, a commit message covering it"
                )
                continue
            self.loop.call_at(
                arrival + 1e-6, self._check_shown, node, node.incarnation, link.channel, epoch, event_id, end
            )

    def _check_shown(
        self, node: SimNode, incarnation: int, channel: SimChannel, epoch: int, event_id: str, end: int
    ) -> None:
        if node.incarnation != incarnation or not node.alive or channel.peer is None or channel.peer.closed:
            return  # restarted, or the stream broke before the message was read: nothing was promised
        if node.service.term > epoch:
            return  # it voted in a newer term meanwhile: it takes nothing more from this leader
        if node.db.readable_position < end:
            self.violation(
                f"{node.name} did not show event {event_id[:8]} (ending at {end}) when the leader's commit "
                f"message covering it arrived: it shows up to {node.db.readable_position}"
            )

    async def reader(self, until: float) -> None:
        while self.loop.time() < until:
            await asyncio.sleep(self.rng.uniform(0.01, 0.1))
            node = self.rng.choice(self.nodes)
            if not node.alive or node.index in self.paused or node.db is None:
                continue
            for record in node.db.visible()[-5:]:
                if record.kind == "event":
                    self.reads.append((node.name, record.position, record.event_id))

    # -- liveness
    def check_liveness(self) -> None:
        """Once a majority has been connected both ways, with no fault touching its members, for
        LIVENESS_GRACE, it has exactly one leader; that leader stays (same node, same epoch) while the
        majority stays connected, and acknowledges writes (:meth:`_probe`). A fault may rightly cost
        an election only when it touches the majority or its leader (:meth:`disturb`, and a link to the
        leader that goes down): a minority that is cut off, one-way links, a certificate split with
        lingering connections, flapping links to others and restarts outside it must not."""
        now = self.loop.time()
        linked = {frozenset((a.index, b.index)) for a, b in self._pairs if self.both_ways(a, b)}
        for pair in self._linked - linked:
            # a link to the leader went down: the member at its other end may rightly elect another
            a, b = (self.nodes[i] for i in sorted(pair))
            for one, other in ((a, b), (b, a)):
                if one.alive and one.service.state == "Leader":
                    self._disturbed[other.index] = now
        self._linked = linked
        since: dict[frozenset[int], float] = {}
        for members in self._majorities:
            if all(frozenset(pair) in linked for pair in combinations(sorted(members), 2)):
                since[members] = self._connected_since.get(members, now)
        self._connected_since = since
        required = [
            members
            for members, at in since.items()
            if now - max(at, *(self._disturbed.get(i, 0.0) for i in members)) >= LIVENESS_GRACE
        ]
        for members in list(self._kept_leader):
            if members not in required:
                del self._kept_leader[members]
        if not required:
            return
        self.liveness_checks += 1
        # the majority's leader may be outside it (a member a fault touched) while connected both ways
        # to every node of it
        covered = sorted(
            set().union(*required)
            | {
                n.index
                for n in self.nodes
                if any(all(n.index == i or frozenset((n.index, i)) in linked for i in m) for m in required)
            }
        )
        leaders = [self.nodes[i] for i in covered if self.nodes[i].service.state == "Leader"]
        if len(leaders) != 1:
            names = [self.nodes[i].name for i in covered]
            self.violation(
                f"liveness: {names}, a majority connected both ways for {LIVENESS_GRACE:.0f}s, has "
                f"{len(leaders)} leaders ({[n.name for n in leaders]}; states "
                f"{[self.nodes[i].service.state for i in covered]})"
            )
            for members in required:  # reported once per grace period
                self._connected_since[members] = now
            return
        leader = leaders[0]
        key = (leader.name, leader.service.standing().epoch_number)
        for members in required:
            kept = self._kept_leader.setdefault(members, key)
            if kept != key:
                self.violation(
                    f"liveness: the leader of {[self.nodes[i].name for i in sorted(members)]} changed from "
                    f"{kept[0]} (epoch {kept[1]}) to {key[0]} (epoch {key[1]}) while that majority stayed "
                    f"connected both ways"
                )
                self._kept_leader[members] = key
        if not self._probing and now >= self._probe_due:
            self._probing = True
            self.loop.create_task(self._probe(leader, key, required))

    async def _probe(self, leader: SimNode, key: tuple[str, int], required: list[frozenset[int]]) -> None:
        """The majority's one leader acknowledges a write within PROBE_TIMEOUT (unless the majority
        stopped being required meanwhile)."""
        try:
            started = self.loop.time()
            event_id = str(uuid.UUID(int=self.rng.getrandbits(128)))
            result = await self._append(leader, "liveness", event_id, timeout=PROBE_TIMEOUT)
            untouched = all(self._disturbed.get(i, 0.0) < started for m in required for i in m)
            if result is not None:
                self._acknowledge(leader, event_id, result)
            elif (
                self._checking_liveness
                and untouched  # a fault since the write began (a failed sync, say) may refuse it
                and all(self._kept_leader.get(m) == key for m in required)
            ):
                self.violation(
                    f"liveness: {leader.name}, the leader of a majority connected both ways, did not "
                    f"acknowledge a write within {PROBE_TIMEOUT:.0f}s"
                )
        finally:
            self._probing = False
            self._probe_due = self.loop.time() + PROBE_EVERY

    async def liveness_loop(self) -> None:
        self._checking_liveness = True
        try:
            while True:
                await asyncio.sleep(0.05)
                self.check_liveness()
                self.check_sign_ins()
        finally:
            self._checking_liveness = False

    # -- network faults
    def _reload(self, nodes: list[SimNode], linger: float) -> None:
        now = self.loop.time()
        for node in nodes:
            self.reloaded[node.index] = (now, now + linger)
        self.loop.call_at(now + linger + 1e-6, self._reset_lingering)

    def _reset_lingering(self) -> None:
        """The ConnectionResetInterval-like reset: streams across the certificate split break."""
        for node in self.nodes:
            if node.transport is None:
                continue
            for channel in list(node.transport.channels):
                peer = channel.peer
                if peer is not None and not self.reaches(
                    channel.owner, peer.owner, opener=channel.opener, opened_at=channel.opened_at
                ):
                    channel.break_now()
                    self.loop.call_soon(peer.break_now)

    async def certificate_split(self) -> None:
        """Some nodes reload new certificates (from another CA): they and the others refuse each
        other's new connections; connections opened before linger until a reset. Either the rest
        reload later all at once, or one by one (a rolling update)."""
        rng = self.rng
        linger = rng.uniform(0.3, 3.0)
        order = rng.sample(self.nodes, len(self.nodes))
        first = rng.randrange(1, len(self.nodes))
        self._reload(order[:first], linger)
        self.log(
            f"certificate split: {[n.name for n in order[:first]]} reload new certificates "
            f"(old connections linger {linger:.2f}s)"
        )
        if rng.random() < 0.5:
            for node in order[first:-1]:
                await asyncio.sleep(rng.uniform(0.5, 3.0))
                self._reload([node], linger)
                self.log(f"certificate split: {node.name} reloads too")
            await asyncio.sleep(rng.uniform(0.5, 3.0))
        else:
            await asyncio.sleep(rng.uniform(1.0, 5.0))
        self.reloaded = {}
        self.log("certificate split ends: every node trusts the same certificates")

    async def wait_for_leader(self, within: float) -> SimNode | None:
        deadline = self.loop.time() + within
        while self.loop.time() < deadline:
            for node in self.nodes:
                if node.alive and node.service.state == "Leader":
                    return node
            await asyncio.sleep(0.01)
        return None

    async def wait_for_candidate(self, within: float) -> SimNode | None:
        deadline = self.loop.time() + within
        while self.loop.time() < deadline:
            for node in self.nodes:
                if node.alive and node.service.campaigning:
                    return node
            await asyncio.sleep(0.002)
        return None

    # -- the fault schedule
    async def wait_for_shipped_unsynced(self, node: SimNode, within: float, *, held: bool) -> bool:
        """Wait (at most ``within`` simulated seconds) for ``node`` to have shipped records it has not
        synced yet (``held``: and another node to have synced some of them); whether it did."""
        deadline = self.loop.time() + within
        while self.loop.time() < deadline:
            db = node.db
            shipped = node.alive and not db.closed and db.committed_position < db.shipped <= db.end
            if shipped and (
                not held
                or any(
                    n is not node and n.durable.records and n.durable.records[-1].end > db.committed_position
                    for n in self.nodes
                )
            ):
                return True
            await asyncio.sleep(0.0002)
        return False

    async def faults_loop(self, until: float) -> None:
        rng = self.rng
        while self.loop.time() < until:
            await asyncio.sleep(rng.uniform(0.2, 1.5))
            kind = rng.choice(
                [
                    "crash",
                    "crash",
                    "crash-leader",
                    "crash-shipped",
                    "partition",
                    "pause",
                    "clock",
                    "loss",
                    "resign",
                    "double",
                    "one-way",
                    "asymmetric",
                    "certificate-split",
                    "flap",
                    "restart-in-election",
                ]
            )
            alive = [n for n in self.nodes if n.alive]
            leader = next((n for n in alive if n.service.state == "Leader"), None)
            if kind == "crash-shipped" and leader is not None:
                # a power cut of the leader after it shipped records to followers and before its own
                # sync of them: followers hold records its log may lose (a random part survives)
                shipped = await self.wait_for_shipped_unsynced(
                    leader, rng.uniform(0.1, 1.0), held=rng.random() < 0.7
                )
                if shipped and leader.alive and rng.random() < 0.3:
                    # or its sync of them fails (an I/O error): they are rolled back on the leader
                    self.log(f"the sync of {leader.name}'s records shipped up to {leader.db.shipped} fails")
                    self.disturb(leader)
                    leader.db.fail_next_sync = True
                elif shipped and leader.alive:
                    sent = leader.db.shipped
                    await self.crash(leader)
                    kept = leader.durable.records[-1].end if leader.durable.records else 0
                    held = max(n.durable.records[-1].end if n.durable.records else 0 for n in self.nodes)
                    self.log(
                        f"crash {leader.name} between shipping and syncing: it shipped up to {sent}, "
                        f"its disk kept up to {kept}, a follower's disk holds up to {held}"
                    )
                    await asyncio.sleep(rng.uniform(0.05, 1.0))
                    if not leader.alive:
                        self.log(f"restart {leader.name}")
                        await self.start_node(leader)
                continue
            if kind in ("crash", "crash-leader", "double"):
                victims = [leader] if kind == "crash-leader" and leader else [rng.choice(self.nodes)]
                if kind == "double":
                    victims = rng.sample(self.nodes, 2)
                for victim in victims:
                    if victim.alive:
                        self.log(f"crash {victim.name} ({victim.service.state})")
                        await self.crash(victim)
                await asyncio.sleep(rng.uniform(0.05, 1.0))
                for victim in victims:
                    if not victim.alive:
                        self.log(f"restart {victim.name}")
                        await self.start_node(victim)
            elif kind == "partition":
                sides = {n.index: rng.randrange(2) for n in self.nodes}
                self.partition = sides
                self.log(f"partition {sides}")
                await asyncio.sleep(rng.uniform(0.2, 2.0))
                self.partition = {}
                self.log("heal partition")
            elif kind == "pause":
                victim = leader or rng.choice(self.nodes)
                self.disturb(victim)
                self.paused.add(victim.index)
                self.log(f"pause {victim.name}")
                pause = rng.uniform(0.2, 2.0)
                await asyncio.sleep(pause)
                self.paused.discard(victim.index)
                victim.clock_offset += 0.0  # its monotonic clock ran on meanwhile, as a real one does
                self.log(f"resume {victim.name}")
            elif kind == "clock":
                victim = rng.choice(self.nodes)
                jump = rng.uniform(0.1, 2.0)
                victim.clock_offset += jump
                self._clock_jumped_at = self.loop.time()
                self.disturb(victim)
                self.log(f"clock of {victim.name} jumps {jump:.2f}s")
            elif kind == "loss":
                self.loss, self.slow = rng.uniform(0.0, 0.3), rng.uniform(0.0, 0.3)
                self.log(f"loss {self.loss:.2f} slow {self.slow:.2f}")
                await asyncio.sleep(rng.uniform(0.2, 1.5))
                self.loss = self.slow = 0.0
            elif kind == "resign" and leader is not None:
                self.log(f"resign {leader.name}")
                self.disturb(leader)
                self.loop.create_task(leader.service.resign())
            elif kind == "one-way":
                a, b = rng.sample(self.nodes, 2)
                self.cuts.add((a.index, b.index))
                self.log(f"cut {a.name} -> {b.name} (one way)")
                await asyncio.sleep(rng.uniform(0.5, 4.0))
                self.cuts.discard((a.index, b.index))
                self.log(f"heal {a.name} -> {b.name}")
            elif kind == "asymmetric":
                x = rng.choice(self.nodes)
                others = [n for n in self.nodes if n is not x]
                shape = rng.choice(["hears nobody", "reaches nobody", "cut from one"])
                if shape == "hears nobody":
                    cuts = {(o.index, x.index) for o in others}
                elif shape == "reaches nobody":
                    cuts = {(x.index, o.index) for o in others}
                else:  # the others still reach both ends
                    y = rng.choice(others)
                    cuts = {(x.index, y.index), (y.index, x.index)}
                    shape = f"cut from {y.name}"
                self.cuts |= cuts
                self.log(f"asymmetric partition: {x.name} {shape}")
                await asyncio.sleep(rng.uniform(0.5, 4.0))
                self.cuts -= cuts
                self.log(f"heal {x.name}")
            elif kind == "certificate-split":
                await self.certificate_split()
            elif kind == "flap":
                a, b = rng.sample(self.nodes, 2)
                pair = {(a.index, b.index), (b.index, a.index)}
                self.log(f"the link {a.name} <-> {b.name} flaps")
                end = self.loop.time() + rng.uniform(1.0, 4.0)
                while self.loop.time() < end:
                    self.cuts ^= pair
                    await asyncio.sleep(rng.uniform(0.05, 0.5))
                self.cuts -= pair
                self.log(f"the link {a.name} <-> {b.name} is steady")
            elif kind == "restart-in-election":
                # kill the leader, then the first node that stands for election, mid-election
                if leader is not None:
                    self.log(f"crash {leader.name} ({leader.service.state})")
                    await self.crash(leader)
                candidate = await self.wait_for_candidate(rng.uniform(0.5, 3.0))
                if candidate is not None:
                    self.log(f"crash {candidate.name} in its election")
                    await self.crash(candidate)
                    await asyncio.sleep(rng.uniform(0.0, 0.3))
                    self.log(f"restart {candidate.name}")
                    await self.start_node(candidate)
                await asyncio.sleep(rng.uniform(0.05, 1.0))
                if leader is not None and not leader.alive:
                    self.log(f"restart {leader.name}")
                    await self.start_node(leader)

    # -- the run
    async def run(self, seconds: float, clients: int, schedule: Schedule | None = None) -> None:
        for node in self.nodes:
            await self.start_node(node)
        until = self.loop.time() + seconds
        tasks = [self.loop.create_task(self.client(k, until)) for k in range(clients)]
        tasks.append(self.loop.create_task(self.reader(until)))
        faults = self.faults_loop(until) if schedule is None else schedule(self, until)
        tasks.append(self.loop.create_task(faults))
        liveness = self.loop.create_task(self.liveness_loop())
        await asyncio.gather(*tasks)
        # heal: everyone up and connected, then wait (bounded) for the logs to agree
        self.partition, self.paused, self.loss, self.slow = {}, set(), 0.0, 0.0
        self.cuts, self.reloaded = set(), {}
        self._reset_lingering()
        healed = self.loop.time()
        for node in self.nodes:
            if not node.alive:
                await self.start_node(node)
        # one more write after healing: a leader commits its predecessors' records only with one of its own
        for _ in range(100):
            node = self.rng.choice(self.nodes)
            event_id = str(uuid.UUID(int=self.rng.getrandbits(128)))
            result = await self._append(node, "final", event_id)
            if result is not None:
                self._acknowledge(node, event_id, result)
                break
            await asyncio.sleep(0.2)
        else:
            self.violation("no write was acknowledged in 20 s after healing")
        # the healed cluster is a majority connected both ways: the liveness check must see its one
        # leader stay and acknowledge writes for a while; then no probe write is left in flight
        await asyncio.sleep(max(0.0, healed + LIVENESS_GRACE + 2 * PROBE_EVERY - self.loop.time()))
        liveness.cancel()
        while self._probing:
            await asyncio.sleep(0.05)
        deadline = self.loop.time() + 30
        while self.loop.time() < deadline:
            logs = [n.db.records[: n.db.synced] for n in self.nodes]
            limits = [n.db.readable_position for n in self.nodes]
            if all(log == logs[0] for log in logs) and len(set(limits)) == 1:
                break
            await asyncio.sleep(0.1)
        else:
            ends = {
                n.name: (n.db.committed_position, n.db.readable_position, n.service.state) for n in self.nodes
            }
            self.violation(f"the logs did not converge within 30 s of healing: {ends}")
        self.elections = sum(n.service.election_count for n in self.nodes)
        self.final_check()
        for node in self.nodes:
            await self.crash(node)

    def final_check(self) -> None:
        history = {r.position: r for r in self.nodes[0].db.records[: self.nodes[0].db.synced]}
        for node in self.nodes[1:]:
            if node.db.records[: node.db.synced] != self.nodes[0].db.records[: self.nodes[0].db.synced]:
                self.violation(f"{node.name}'s log differs from {self.nodes[0].name}'s after healing")
        for event_id, (position, _at) in self.acknowledged.items():
            record = history.get(position)
            if record is None or record.event_id != event_id:
                self.violation(f"acknowledged event {event_id[:8]} at {position} is not in the final history")
        seen: dict[str, int] = {}
        for record in history.values():
            if record.kind == "event":
                if record.event_id in seen:
                    self.violation(f"event {record.event_id[:8]} is in the log twice")
                seen[record.event_id] = record.position
        for name, position, event_id in self.reads:
            record = history.get(position)
            if record is None or record.event_id != event_id:
                self.violation(f"{name} served event {event_id[:8]} at {position}, not in the final history")


def run_seed(
    seed: int,
    *,
    nodes: int = 3,
    seconds: float = 8.0,
    clients: int = 3,
    verbose: bool = False,
    schedule: Schedule | None = None,
) -> SimulationResult:
    """Run one simulated cluster under ``seed``; the same seed always runs the same way. ``schedule``:
    the faults to inject instead of the seed's random ones (``await schedule(sim, until)``)."""
    # what an earlier run in this process left for the garbage collector (its coroutines and async
    # generators) goes now: finalized during this run, it would take turns on this run's loop. What is
    # left outlives this run: frozen, the collector does not scan it again (a full scan of the modules'
    # objects, at this collect and at each of the run's own, cost about 10% of a seed)
    gc.collect()
    gc.freeze()
    sim = Simulation(seed, nodes, verbose=verbose)
    loop = sim.loop

    running = True

    def unhandled(loop: asyncio.AbstractEventLoop, context: dict) -> None:
        # an exception no task handled is a bug of the cluster code (or of the simulator)
        if running:
            sim.violation(f"unhandled in a task: {context.get('message')} {context.get('exception')!r}")

    loop.set_exception_handler(unhandled)

    async def bounded() -> None:
        try:
            async with asyncio.timeout(seconds + 400):  # virtual seconds: a stuck run is a finding
                await sim.run(seconds, clients, schedule)
        except TimeoutError:
            sim.violation(f"the run did not finish within {seconds + 400:.0f} simulated seconds")

    try:
        loop.run_until_complete(bounded())
    except SimDeadlock as exc:
        sim.violation(f"deadlock: {exc}")
    finally:
        running = False
        for task in asyncio.all_tasks(loop):
            task.cancel()
        with contextlib.suppress(BaseException):
            loop.run_until_complete(asyncio.sleep(0))
        with contextlib.suppress(BaseException):
            loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
    return SimulationResult(
        seed,
        nodes,
        list(sim.violations),
        len(sim.acknowledged),
        sim.elections,
        sim.faults,
        loop.time(),
        sim.chunk_files,
    )


def _run_one(args: tuple[int, int, float]) -> SimulationResult:
    seed, nodes, seconds = args
    return run_seed(seed, nodes=nodes, seconds=seconds)


def run_seeds(
    seeds: range | list[int], *, nodes: int = 3, seconds: float = 8.0, processes: int = 1
) -> list[SimulationResult]:
    """Run many seeds, over ``processes`` worker processes; results in seed order."""
    work = [(seed, nodes, seconds) for seed in seeds]
    if processes <= 1:
        return [_run_one(w) for w in work]
    import multiprocessing

    with multiprocessing.get_context("spawn").Pool(processes) as pool:
        return pool.map(_run_one, work, chunksize=max(1, len(work) // (processes * 8)))


def _main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evdb.cluster.sim", description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, help="run this one seed (with --verbose: its schedule and logs)")
    parser.add_argument("--seeds", type=int, default=100, help="how many seeds, from --first (default 100)")
    parser.add_argument("--first", type=int, default=0)
    parser.add_argument("--nodes", type=int, default=3, choices=(3, 5))
    parser.add_argument("--seconds", type=float, default=4.0, help="simulated seconds of faults per seed")
    parser.add_argument(
        "--jobs", "--processes", type=int, default=1, dest="jobs", help="worker processes (default 1)"
    )
    parser.add_argument("--report", type=int, default=1000, help="print progress every N seeds")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    if args.verbose:
        logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s %(message)s")
    started = time.perf_counter()
    done = failed = 0
    seeds = [args.seed] if args.seed is not None else range(args.first, args.first + args.seeds)
    for at in range(0, len(seeds), max(1, args.report)):
        batch = seeds[at : at + max(1, args.report)]
        if args.seed is not None:
            results = [run_seed(args.seed, nodes=args.nodes, seconds=args.seconds, verbose=args.verbose)]
        else:
            results = run_seeds(batch, nodes=args.nodes, seconds=args.seconds, processes=args.jobs)
        for seed, result in zip(batch, results, strict=True):
            done += 1
            if not result.ok:
                failed += 1
                print(f"seed {seed}: {len(result.violations)} violation(s)")
                for line in result.violations[:5]:
                    print(f"  {line}")
                print(
                    f"  replay: python -m evdb.cluster.sim --seed {seed} --nodes {args.nodes} "
                    f"--seconds {args.seconds:g} --verbose"
                )
        if len(seeds) > len(batch):
            print(f"... {done} seeds, {failed} failed, {time.perf_counter() - started:.0f} s", flush=True)
    print(f"{done} seeds, {args.nodes} nodes, {failed} failed, {time.perf_counter() - started:.1f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(_main())
