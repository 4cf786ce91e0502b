"""Redaction of archived events (issue 37): the archive's copy of a chunk is redacted too.

``getEventPositions`` lists, besides the local places of an event, its chunk's copy in the archive
when the archive holds that chunk (before ``archive.chk``), as ``{"logPosition", "chunkFile":
"archive:chunk-NNNNNN.000001", "chunkComplete": true, "archived": true, ...}`` (the ``archive:``
prefix names no file of the database folder, so a tool that knows nothing of the archive cannot take
it for one). ``redactArchived`` ``{"chunkNumber": N, "events": [{"stream", "eventNumber",
"logPosition"}]}`` then redacts them in the archive, on the node, with the chunk lock held:

1. takes the archive's rewrite lease (evdb/archive/archive_rewrite.py: one rewrite at a time across
   the cluster, so a scavenge on another node never puts the plaintext back);
2. downloads the archived chunk (the newest copy: after the lease) into ``<Db>/archiving/redaction``
   and verifies it whole; finds each event's record in it (a copy a scavenge removed it from has
   nothing to redact: reported as ``missing``);
3. writes the redacted copy (evdb/redaction/rewrite.py: 0xFF data, IsRedacted, checksums, the next
   version) and checks it by the switch's rules (evdb/redaction/switch.py: the file's header,
   footer, range, size, version and checksum; no event of a system stream redacted);
4. puts it over the archived object (one atomic put, checked: the bucket keeps no other copy) and
   removes the work files;
5. drops the node's cached copy of that chunk, and every cached chunk the archive holds another
   copy of now (another node's redaction): no local file holds the plaintext afterwards.

A kill at any step leaves the old object or the new one, whole; the work folder is emptied by the
next call, and running the tool again redacts what is left (events already redacted are reported
as such).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import threading
import uuid
from collections.abc import Callable
from typing import Any

from evdb.archive.archive_rewrite import RewriteLease, download_archived, put_rewritten, work_folder
from evdb.archive.archiver import chunk_object_name, read_checkpoint
from evdb.errors import ArchiveError
from evdb.redaction.protocol import RedactionError
from evdb.redaction.rewrite import TEMP_SUFFIX, EventToRedact, write_redacted_copy
from evdb.redaction.rules import check_redaction_target
from evdb.redaction.switch import checked_replacement
from evdb.storage.log import TransactionLog

__all__ = ["ARCHIVE_PREFIX", "archived_positions", "redact_archived"]

#: how ``getEventPositions`` names an archived copy (never a file of the database folder)
ARCHIVE_PREFIX = "archive:"
#: how long a redaction waits for another node's rewrite of the archive before it is refused
_LEASE_WAIT_SECONDS = 120


def _archive(log: TransactionLog) -> Any:
    """The node's archive (evdb/archive/reads.py: its store and read cache), None when it has none."""
    archive = log.archive
    return archive if archive is not None and hasattr(archive, "store") else None


def _archived_chunks(store: Any, chunk_size: int) -> int:
    """How many chunks (from 0) the archive holds: those before its checkpoint."""
    try:
        return read_checkpoint(store).position // chunk_size
    except ArchiveError as exc:
        raise RedactionError("ArchiveUnavailable", str(exc)) from None


def archived_positions(log: TransactionLog, positions: list[int]) -> list[dict]:
    """The archived copies of ``positions`` (records of the event found through the index): one entry
    per position whose chunk the archive holds."""
    archive = _archive(log)
    if archive is None or not positions:
        return []
    archived = _archived_chunks(archive.store, log.chunk_size)
    out = []
    for position in positions:
        number = position // log.chunk_size
        if number < archived:
            out.append(
                {
                    "logPosition": position,
                    "chunkFile": ARCHIVE_PREFIX + chunk_object_name(number),
                    "chunkNumber": number,
                    "chunkComplete": True,
                    "archived": True,
                    "location": archive.store.description,
                }
            )
    return out


def _events(log: TransactionLog, number: object, events: object) -> tuple[int, list[tuple[str, int, int]]]:
    """The request's chunk number and events, checked (RedactionError BadRequest, SystemStream)."""
    if not isinstance(number, int) or isinstance(number, bool) or number < 0:
        raise RedactionError("BadRequest", f"chunkNumber {number!r} is not a chunk number")
    if not isinstance(events, list) or not events:
        raise RedactionError(
            "BadRequest", "events must be a non-empty list of {stream, eventNumber, logPosition}"
        )
    out = []
    for event in events:
        if not isinstance(event, dict):
            raise RedactionError("BadRequest", f"{event!r} is not {{stream, eventNumber, logPosition}}")
        stream, event_number = check_redaction_target(event.get("stream"), event.get("eventNumber"))
        position = event.get("logPosition")
        if (
            not isinstance(position, int)
            or isinstance(position, bool)
            or position // log.chunk_size != number
        ):
            raise RedactionError(
                "BadRequest", f"logPosition {position!r} of {event_number}@{stream} is not in chunk {number}"
            )
        out.append((stream, event_number, position))
    return number, out


def redact_archived(
    log: TransactionLog,
    number: object,
    events: object,
    *,
    node: str,
    now: Callable[[], float],
    logger: logging.Logger,
    wait: Callable[[float], bool] | None = None,
) -> dict:
    """Redact ``events`` in the archive's copy of chunk ``number`` (see the module); the answer's
    fields: ``object``, ``redacted``, ``already``, ``missing`` (each a list of ``N@stream``) and
    ``droppedFromCache`` (chunk numbers). ``wait``: the lease's wait (tests pass their own)."""

    archive = _archive(log)
    if archive is None or log.directory is None:
        raise RedactionError(
            "NotSupported", "This node has no archive (Archive: Enabled): nothing is archived"
        )
    number, wanted = _events(log, number, events)
    store, name = archive.store, chunk_object_name(number)
    if number >= _archived_chunks(store, log.chunk_size):
        raise RedactionError("NotArchived", f"Chunk {number} is not in the archive {store.description}")
    if wait is None:
        tries = iter(range(_LEASE_WAIT_SECONDS))
        pause = threading.Event()
        wait = lambda seconds: next(tries, None) is None or pause.wait(seconds)  # noqa: E731
    lease = RewriteLease(store, node=node, now=now)
    answer: dict[str, Any] = {"object": name, "redacted": [], "already": [], "missing": []}
    try:
        lease.acquire(wait, logger, f"The redaction of archived chunk {number}")
        work = work_folder(log.directory, "redaction")
        try:
            original = download_archived(store, number, log.chunk_size, work)
            try:
                todo = []
                for stream, event_number, position in wanted:
                    offset = original.physical_offset(position)
                    if offset is None:  # a scavenge removed it from this copy
                        answer["missing"].append(f"{event_number}@{stream}")
                    else:
                        todo.append(EventToRedact(stream, event_number, position, offset))
                if todo:
                    assert original.path is not None
                    temp = os.path.join(work, f"{name}.{uuid.uuid4().hex[:8]}{TEMP_SUFFIX}")
                    copy = write_redacted_copy(original.path, temp, todo)
                    answer["already"] = [f"{e.event_number}@{e.stream}" for e in copy.already]
                    answer["redacted"] = [f"{e.event_number}@{e.stream}" for e in copy.redacted]
                    if copy.redacted:
                        new = checked_replacement(original, temp, os.path.basename(temp))
                        try:
                            put_rewritten(store, number, new, lease)
                        finally:
                            new.close()
                        logger.info(
                            "Redaction: redacted %s in the archived %s in %s",
                            ", ".join(answer["redacted"]),
                            name,
                            store.description,
                        )
            finally:
                original.close()
        finally:
            shutil.rmtree(work, ignore_errors=True)
    except ArchiveError as exc:
        raise RedactionError("ArchiveUnavailable", str(exc)) from None
    finally:
        with contextlib.suppress(ArchiveError):
            lease.release()
    archive.cache.drop(number)
    with contextlib.suppress(ArchiveError):
        answer["droppedFromCache"] = sorted({number, *archive.cache.drop_stale()})
    return answer
