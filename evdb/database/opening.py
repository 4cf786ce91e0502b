"""Opening a database's index: the index and the stream-existence filter checked against the log,
the records after their checkpoints indexed again, and the writer's cache of recent appends rebuilt
from the end of the log."""

from __future__ import annotations

import contextlib
import json
import logging
import os

from evdb.database.appends import StreamWrites
from evdb.database.config import DatabaseConfig
from evdb.errors import StorageError
from evdb.index.existence import StreamExistenceFilter
from evdb.index.hashing import stream_hash
from evdb.index.table_index import TableIndex
from evdb.storage import records as rec
from evdb.storage.log import TransactionLog

__all__ = ["open_index", "reindex", "remember_recent_appends"]

_BEGIN = int(rec.RecordFlags.TRANSACTION_BEGIN)
#: appends whose ids a database re-reads from the end of its log when it opens (idempotency after a crash)
_REBUILT_APPENDS = 10_000
#: ... and of at most this many events: the rebuild reads every event of those appends, so with large
#: appends (200 events each) 10,000 of them were 2 million records, 7 s and 2 GiB of mapped pages at open
_REBUILT_EVENTS = 100_000


def open_index(
    cfg: DatabaseConfig, log: TransactionLog, logger: logging.Logger
) -> tuple[TableIndex, StreamExistenceFilter | None]:
    """The index and the existence filter of ``cfg``, each started afresh when it is ahead of the log
    (the log was truncated: a restore, or a diverged cluster tail)."""
    existence: StreamExistenceFilter | None = None
    index_dir = cfg.resolved_index_dir
    if index_dir is not None:
        os.makedirs(index_dir, exist_ok=True)
    index = TableIndex.open(index_dir, max_memtable_entries=cfg.max_memtable_entries)
    if index.checkpoint > log.committed:
        # the log was truncated (restore, or a diverged cluster tail): the index points past it
        logger.warning(
            "Index checkpoint %d is beyond the log end %d: rebuilding the index",
            index.checkpoint,
            log.committed,
        )
        index.close()
        index = _reset_index(index_dir, cfg.max_memtable_entries)
    if index_dir is not None:
        existence = StreamExistenceFilter.open(
            os.path.join(index_dir, "stream-existence"), capacity=cfg.existence_filter_capacity
        )
        if existence.checkpoint > log.committed:
            existence.close()
            _remove_existence_filter(index_dir)
            existence = StreamExistenceFilter.open(
                os.path.join(index_dir, "stream-existence"), capacity=cfg.existence_filter_capacity
            )
    return index, existence


def reindex(
    log: TransactionLog, index: TableIndex, existence: StreamExistenceFilter | None, logger: logging.Logger
) -> None:
    """Index the records written after the index checkpoint (and feed the existence filter)."""
    start_index = max(0, index.checkpoint)
    start = start_index
    if existence is not None:
        start = min(start, max(0, existence.checkpoint))
    if start >= log.committed:
        log.checkpoints.chaser.write(log.committed)
        return
    logger.info("Indexing the log from position %d to %d", start, log.committed)
    entries: list[tuple[int, int, int]] = []
    count = 0
    epoch = log.checkpoints.epoch
    for record in log.iter_forward(start):
        if not isinstance(record, rec.EventRecord):
            if record.kind == rec.SystemRecordKind.EPOCH and record.log_position > epoch.value:
                # written (or installed from the leader's chunk file) just before a crash that
                # came before epoch.chk was moved to it
                epoch.write(record.log_position)
                number = int(json.loads(record.payload).get("epochNumber", 0))
                if number > log.checkpoints.proposal.value:
                    log.checkpoints.proposal.write(number)
            continue
        if existence is not None and record.log_position >= existence.checkpoint:
            existence.add(record.stream)
        if record.log_position >= start_index:
            entries.append((stream_hash(record.stream), record.event_number, record.log_position))
            if len(entries) >= 10_000:
                index.add(entries, record.next_position)
                count += len(entries)
                entries = []
    if entries:
        count += len(entries)
    index.add(entries, log.committed)
    log.checkpoints.chaser.write(log.committed)
    if existence is not None:
        existence.flush(log.committed)
    logger.info("Indexed %d events", count)


def remember_recent_appends(
    log: TransactionLog, streams: StreamWrites, capacity: int, logger: logging.Logger
) -> None:
    """Rebuild the recent-append cache from the newest appends in the log (at most
    ``_REBUILT_APPENDS``), as a follower rebuilds it from replicated records. Without it a node
    restarted after a crash, elected leader with an append its clients never saw acknowledged,
    would write that append a second time when the client retries it with any-version."""
    wanted = min(capacity, _REBUILT_APPENDS)
    start = None
    appends = events = 0
    try:
        # the local chunks only: an append older than the archived chunks is not retried by a client
        for record in log.iter_backward(log.committed, stop=log.local_start):
            if isinstance(record, rec.EventRecord):
                start = record.log_position
                events += 1
                if record.flags & _BEGIN:  # an append's first event: stop only at one
                    appends += 1
                    if appends >= wanted or events >= _REBUILT_EVENTS:
                        break
    except StorageError as exc:  # a damaged record (SkipDbVerify): reads name it; opening goes on
        logger.warning("The recent appends are remembered only after a damaged record: %s", exc)
    if start is None:
        return
    for record in log.iter_forward(start):
        if isinstance(record, rec.EventRecord):
            streams.follow_replicated_append(record)
    streams.replicated_batch = None
    log.drop_pages()  # what the two passes mapped is not this node's memory


def _reset_index(index_dir: str | None, max_memtable_entries: int) -> TableIndex:
    if index_dir is not None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(index_dir, "indexmap"))
    return TableIndex.open(index_dir, max_memtable_entries=max_memtable_entries)


def _remove_existence_filter(index_dir: str) -> None:
    for name in ("streamExistenceFilter.dat", "streamExistenceFilter.chk"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(index_dir, "stream-existence", name))
