"""Per-chunk scavenge work in worker processes, so the node's GIL stays free for appends and reads.

A worker opens the chunk file itself (read-only) and either summarises it for accumulation or
writes its scavenged (or merged) copy under a temporary name, fsynced, exactly as the scavenge
thread would; the node keeps the scavenge state, the switch-in (rename, delete) and the index.
A stop request reaches the workers through a shared event. A worker whose node has died exits at
once, idle or busy: it watches the read end of a pipe whose only write end the node holds, and the
node's death (even by SIGKILL) closes that end; a copy the worker was writing stays behind under its
``*.tmp`` name, which the log deletes (naming it) when the database opens again. Used for databases
on disk with chunks of at least :data:`PROCESS_MIN_CHUNK_SIZE`; smaller chunks (tests, in-memory
databases) are worked on in the scavenge thread with the same functions.
"""

from __future__ import annotations

import concurrent.futures
import concurrent.futures.process
import logging
import multiprocessing
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from evdb.errors import CorruptedFile
from evdb.scavenge.chunkscan import DecisionTable, discard_mask, record_table
from evdb.storage.chunk import Chunk, ChunkBuilder

if TYPE_CHECKING:
    from multiprocessing.connection import Connection
    from multiprocessing.synchronize import Event

__all__ = ["PROCESS_MIN_CHUNK_SIZE", "ChunkWorkers", "Summary", "build_copy", "summarise"]

#: chunks at least this big are read and copied in worker processes (when the database is on disk)
PROCESS_MIN_CHUNK_SIZE = 16 * 1024 * 1024
#: ... and only when they hold at least this much data: starting a worker process (importing numpy)
#: costs more than reading a few MiB in the scavenge thread, so a near-empty database never pays it
PROCESS_MIN_DATA = 8 * 1024 * 1024


@dataclass
class Summary:
    """What accumulation needs from one logical chunk's part of a chunk file."""

    names: list[str]  # the streams of its events, in the order they first appear
    lo: int | None  # timestamp range of its events
    hi: int | None
    #: (is tombstone, stream, physical offset) of its tombstones and metastream events
    special: list[tuple[int, str, int]]


def summarise(chunk: Chunk, ranges: list[tuple[int, int]], should_stop: Callable[[], bool]) -> list[Summary]:
    """One summary per ``[start, end)`` range of log positions of ``chunk``."""
    table = record_table(chunk, should_stop)
    names = table.run_names
    meta_runs = np.array([name.startswith("$$") for name in names], dtype=bool)
    events = table.run_of >= 0
    tombstones = (table.flags & 0x08) != 0
    special_all = events & (tombstones | (meta_runs[np.maximum(table.run_of, 0)] if names else False))
    out = []
    for start, end in ranges:
        selected = events & (table.positions >= start) & (table.positions < end)
        if not selected.any():
            out.append(Summary([], None, None, []))
            continue
        stamps = table.timestamps[selected]
        special = [
            (int(tombstones[i]), names[int(table.run_of[i])], int(table.offsets[i]))
            for i in np.nonzero(selected & special_all)[0].tolist()
        ]
        out.append(
            Summary(
                [names[k] for k in np.unique(table.run_of[selected]).tolist()],
                int(stamps.min()),
                int(stamps.max()),
                special,
            )
        )
    return out


def build_copy(
    chunks: list[Chunk],
    builder: ChunkBuilder,
    decisions: DecisionTable | None,
    should_stop: Callable[[], bool],
) -> tuple[Chunk, int]:
    """Copy ``chunks`` into ``builder`` without the records ``decisions`` removes (all of them are
    kept without decisions: a merge); returns the finished chunk and how many records went."""
    removed = 0
    try:
        for chunk in chunks:
            table = record_table(chunk, should_stop, streams=decisions is not None)
            if decisions is None:
                builder.add_records(chunk.buffer, table.offsets, table.sizes, table.positions, should_stop)
            else:
                keep = ~discard_mask(table, decisions)
                removed += len(table) - int(keep.sum())
                builder.add_records(
                    chunk.buffer, table.offsets[keep], table.sizes[keep], table.positions[keep], should_stop
                )
            del table
        return builder.finish(), removed
    except BaseException:
        builder.abort()
        raise


# -- the worker processes ----------------------------------------------------------------------------
_stop: Event | None = None  # set by _init, the initializer of every worker process
_parent = 0


class _Corrupted(Exception):
    """CorruptedFile, in a form that crosses the process boundary."""


def _init(stop: Event, parent: int, lifeline) -> None:
    global _stop, _parent
    _stop, _parent = stop, parent
    threading.Thread(target=_watch_parent, args=(lifeline,), name="evdb-parent-watch", daemon=True).start()


def _watch_parent(lifeline) -> None:
    """Exit this worker when the node dies: nothing is ever sent on ``lifeline``, so its read ends
    only when the node's write end closes (the node exits, or is killed)."""
    try:
        lifeline.recv_bytes()
    except (EOFError, OSError):
        pass
    os._exit(0)


def _should_stop() -> bool:
    assert _stop is not None  # called in worker processes only, after _init
    return _stop.is_set() or os.getppid() != _parent


def _summarise_file(path: str, ranges: list[tuple[int, int]]) -> list[Summary]:
    try:
        return summarise(Chunk.open(path, verify=False), ranges, _should_stop)
    except CorruptedFile as exc:
        raise _Corrupted(exc.path, exc.reason) from None


def _copy_files(paths: list[str], builder_args: dict, decisions: DecisionTable | None) -> tuple[str, int]:
    try:
        chunks = [Chunk.open(p, verify=False) for p in paths]
        builder = ChunkBuilder(**builder_args)
        new, removed = build_copy(chunks, builder, decisions, _should_stop)
    except CorruptedFile as exc:
        raise _Corrupted(exc.path, exc.reason) from None
    assert new.path is not None  # builder_args name a folder: workers copy on-disk chunks only
    return new.path, removed


def _builder_args(builder: ChunkBuilder) -> dict:
    header = builder.header
    return {
        "directory": builder.directory,
        "chunk_size": header.chunk_size,
        "start_number": header.start_number,
        "end_number": header.end_number,
        "version": header.version,
        "data_end_position": builder.data_end_position,
        "temp_suffix": builder.temp_suffix,
    }


class ChunkWorkers:
    """Runs per-chunk work in worker processes when that pays, else in the calling thread."""

    def __init__(self, threads: int, stop: threading.Event, logger: logging.Logger | None = None) -> None:
        self.threads = max(1, threads)
        self.stop = stop
        self.logger = logger or logging.getLogger(__name__)
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None
        self._shared_stop: Event | None = None
        #: (read end, write end): the workers exit when the write end closes
        self._lifeline: tuple[Connection, Connection] | None = None
        self._lock = threading.Lock()
        self._broken = False

    def wanted(self, chunk: Chunk) -> bool:
        return (
            not self._broken
            and chunk.path is not None
            and chunk.chunk_size >= PROCESS_MIN_CHUNK_SIZE
            and chunk.physical_end >= PROCESS_MIN_DATA
        )

    def _broke(self, exc: BaseException) -> None:
        """A worker process died (or could not start: an embedding whose main module cannot be
        imported again): the rest of the run works in the scavenge thread."""
        if not self._broken:
            self._broken = True
            self.logger.warning(
                "SCAVENGING: Scavenge worker processes failed (%s); continuing in the scavenge thread.", exc
            )

    def _submit(self, fn, *args):
        with self._lock:
            if self._pool is None:
                context = multiprocessing.get_context("spawn")  # never fork a node's threads
                self._shared_stop = context.Event()
                self._lifeline = lifeline = context.Pipe(duplex=False)
                self._pool = concurrent.futures.ProcessPoolExecutor(
                    max_workers=self.threads,
                    mp_context=context,
                    initializer=_init,
                    initargs=(self._shared_stop, os.getpid(), lifeline[0]),
                )
            future = self._pool.submit(fn, *args)
            shared_stop = self._shared_stop
        assert shared_stop is not None  # made with the pool, never dropped
        while True:
            try:
                return future.result(timeout=0.05)
            except concurrent.futures.TimeoutError:
                if self.stop.is_set():
                    shared_stop.set()
            except _Corrupted as exc:
                raise CorruptedFile(*exc.args) from None

    def summarise(self, chunk: Chunk, ranges: list[tuple[int, int]]) -> list[Summary]:
        if self.wanted(chunk):
            try:
                return self._submit(_summarise_file, chunk.path, ranges)
            except concurrent.futures.process.BrokenProcessPool as exc:
                self._broke(exc)
        return summarise(chunk, ranges, self.stop.is_set)

    def copy(
        self, chunks: list[Chunk], builder: ChunkBuilder, decisions: DecisionTable | None
    ) -> tuple[Chunk, int]:
        """The finished copy (under its temporary name) and how many records it left out."""
        if not all(self.wanted(c) for c in chunks):
            return build_copy(chunks, builder, decisions, self.stop.is_set)
        args = _builder_args(builder)
        builder.abort()  # the worker writes a file of its own
        try:
            path, removed = self._submit(_copy_files, [c.path for c in chunks], args, decisions)
        except concurrent.futures.process.BrokenProcessPool as exc:
            self._broke(exc)
            return build_copy(chunks, ChunkBuilder(**args), decisions, self.stop.is_set)
        try:
            return Chunk.open(path, verify=False), removed
        except BaseException:
            os.unlink(path)
            raise

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
            lifeline, self._lifeline = self._lifeline, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        if lifeline is not None:
            for end in lifeline:
                end.close()
