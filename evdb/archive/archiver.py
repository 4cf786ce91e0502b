"""The archiver: uploads each completed, committed chunk to the archive, in order, and records how
far it got in the archive checkpoint (issue 37, step 2).

Objects in the archive (KurrentDB's names for the chunks, so an archived chunk can be downloaded and
used as a local file):

- ``chunk-NNNNNN.000001``: logical chunk NNNNNN, the exact bytes of the local file;
- ``archive.chk``: the archive checkpoint, JSON ``{"position": P, "chunkSize": S, "log": ID}``: every
  chunk before log position P is uploaded and verified;
- ``archive.claim``: which log the bucket belongs to and which archiver writes it (``{"log": ID,
  "archiver": AID, "name": NAME}``, ID being a hash of the log's first record, the same on every member
  of a cluster, AID the archiver's own id, kept in ``<Db>/archiving/archiver-id``), written once,
  create-only.

One :meth:`Archiver.step` uploads at most one chunk:

1. the claim: absent, it is created (create-only, so of two racing archivers one wins); naming
   another log (another cluster's bucket) or another archiver of this cluster (one archiver per
   cluster), the archiver refuses the bucket (:class:`ArchiveClaimed`) and stops, loudly;
2. the checkpoint is read (absent: 0) with its entity tag, at start and after a failure; between
   successful steps the archiver's own last write is the checkpoint;
3. the next chunk is the one the checkpoint points at; it must be completed and committed (its
   records end at or before what the cluster committed); a merged local chunk is split back: the
   records of the one logical chunk are written, as a scavenged chunk of that number, to
   ``<Db>/archiving/unmerged-NNNNNN`` (fsynced, kept until the checkpoint passes it, so a restart
   uploads the same bytes and finds them verified);
4. at start and after a failure, an object already there with the local file's size and footer
   checksum (an upload a kill -9 interrupted before its checkpoint) is kept; otherwise the file is
   uploaded (between its own successful steps the archiver does not look: only it writes there);
5. the object is verified: its size and its last 16 bytes (the footer's xxh3-128 checksum of all the
   bytes before it) must be the local file's;
6. then the checkpoint moves past the chunk, written only if it is still the one read in step 2
   (If-Match), so two archivers never both move it.

A kill -9 anywhere leaves either the old checkpoint (the chunk is found verified and kept in step 4:
no second upload) or the new one: never a gap. :meth:`run` repeats steps, backing off (1 s doubling to
60 s) while the archive is unavailable, and sleeps through the injected ``wait`` while there is
nothing to upload.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import xxhash

from evdb.archive.store import ArchiveStore, ObjectChanged, ObjectExists, ObjectMissing
from evdb.clock import TICKS_PER_SECOND
from evdb.errors import ArchiveError, ArchiveUnavailable, CorruptedFile
from evdb.index.durable import remove_durably, replace_durably, write_durably
from evdb.storage.chunk import HEADER_SIZE, Chunk, ChunkBuilder

__all__ = [
    "CHECKPOINT",
    "CLAIM",
    "ArchiveCheckpoint",
    "ArchiveClaimed",
    "Archiver",
    "ArchiverService",
    "ChunkSource",
    "DatabaseChunks",
    "archived_as",
    "archiver_identity",
    "backoff_seconds",
    "chunk_object_name",
    "first_record_identity",
    "read_checkpoint",
    "read_claim",
    "start_archiver",
]

CHECKPOINT = "archive.chk"
CLAIM = "archive.claim"
_CHECKSUM_SIZE = 16


class ArchiveClaimed(ArchiveError):
    """The bucket (folder) holds another cluster's archive: this archiver refuses it."""


def chunk_object_name(number: int) -> str:
    """The archive's name of logical chunk ``number``: the local file name at version 1 (KurrentDB's)."""
    return f"chunk-{number:06d}.000001"


def backoff_seconds(failures: int) -> float:
    """How long the archiver waits after ``failures`` failures in a row: 1 s, doubling, at most 60 s."""
    return float(min(60, 2 ** max(0, failures - 1)))


class ChunkSource(Protocol):
    """What the archiver reads of the node's log."""

    @property
    def chunk_size(self) -> int: ...

    def readable_position(self) -> int:
        """The end of what the cluster committed (what readers may see)."""

    def chunk(self, number: int) -> Chunk | None:
        """The local chunk that holds logical chunk ``number`` now, or None."""

    def log_identity(self) -> str | None:
        """The log's identity: a hash of its first record; None while the log is empty."""


class DatabaseChunks:
    """The node's database as a :class:`ChunkSource`; ``db`` gives the open one (None while a
    follower reopens it: nothing to upload then)."""

    def __init__(self, db: Callable[[], Any], chunk_size: int) -> None:
        self._db = db
        self._chunk_size = chunk_size

    @property
    def chunk_size(self) -> int:
        return self._chunk_size

    def readable_position(self) -> int:
        db = self._db()
        return 0 if db is None else int(db.readable_position)

    def chunk(self, number: int) -> Chunk | None:
        db = self._db()
        return None if db is None else db.log.chunk_by_number(number)

    def log_identity(self) -> str | None:
        first = self.chunk(0)
        if first is None or first.start_number != 0 or self.readable_position() == 0:
            return None
        return first_record_identity(first)


def archived_as(store: ArchiveStore, name: str) -> tuple[int, bytes] | None:
    """(size, footer checksum) of the archived chunk ``name``, or None when there is none: what a
    local chunk file's ``(file_size, footer.checksum)`` must be for the object to hold its bytes."""
    info = store.head(name)
    if info is None or info.size < _CHECKSUM_SIZE:
        return None
    return info.size, store.get_range(name, info.size - _CHECKSUM_SIZE, _CHECKSUM_SIZE)


@dataclass(frozen=True)
class ArchiveCheckpoint:
    position: int
    etag: str | None  # None: there is no checkpoint object yet
    #: what the checkpoint object says besides its position (None when not read from the archive)
    chunk_size: int | None = None
    log: str | None = None


def first_record_identity(first: Chunk) -> str:
    """A log's identity from its chunk 0: the hash of its first record (what ``archive.claim`` and
    ``archive.chk`` name)."""
    return xxhash.xxh3_128(first.raw_frame(first.physical_offset_at_or_after(0))).hexdigest()


#: how many times a read of the archive checkpoint is made again when the archiver wrote it meanwhile
_CHECKPOINT_READS = 5


def read_checkpoint(store: ArchiveStore) -> ArchiveCheckpoint:
    """The archive checkpoint (position 0 when there is none yet). Read again when the archiver wrote
    it while it was read (a reader polling it beside a working archiver: a full CI run's test saw it);
    ObjectChanged only when it changed under every one of :data:`_CHECKPOINT_READS` reads."""
    for _ in range(_CHECKPOINT_READS - 1):
        with contextlib.suppress(ObjectChanged):
            return _read_checkpoint_once(store)
    return _read_checkpoint_once(store)


def _read_checkpoint_once(store: ArchiveStore) -> ArchiveCheckpoint:
    info = store.head(CHECKPOINT)
    if info is None:
        return ArchiveCheckpoint(0, None)
    try:
        raw = store.get_bytes(CHECKPOINT)
    except ObjectMissing:
        return ArchiveCheckpoint(0, None)
    try:
        body = json.loads(raw)
        position = int(body["position"])
        chunk_size = int(body["chunkSize"]) if body.get("chunkSize") is not None else None
        log = body.get("log")
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ArchiveError(
            f"The archive checkpoint {CHECKPOINT} in {store.description} is damaged: {exc}"
        ) from exc
    # the tag of the version read: head and get may straddle a write, so read the tag again
    again = store.head(CHECKPOINT)
    if again is None or again.etag != info.etag:
        raise ObjectChanged(f"The archive checkpoint {CHECKPOINT} in {store.description} changed while read")
    return ArchiveCheckpoint(position, info.etag, chunk_size, log if isinstance(log, str) else None)


def read_claim(store: ArchiveStore) -> dict[str, Any] | None:
    """The archive's claim (``{"log": ..., "archiver": ..., "name": ...}``), None when unclaimed;
    ArchiveError when it is damaged."""
    try:
        found = json.loads(store.get_bytes(CLAIM))
    except ObjectMissing:
        return None
    except ValueError as exc:
        raise ArchiveError(f"The archive claim {CLAIM} in {store.description} is damaged: {exc}") from exc
    if not isinstance(found, dict) or "log" not in found or "archiver" not in found:
        raise ArchiveError(
            f"The archive claim {CLAIM} in {store.description} is damaged: it names no log and archiver"
        )
    return found


class Archiver:
    def __init__(
        self,
        store: ArchiveStore,
        source: ChunkSource,
        *,
        name: str,
        logger: logging.Logger,
        wait: Callable[[float], bool] | None = None,
        work_dir: str | None = None,
        archiver_id: str | None = None,
    ) -> None:
        self.store = store
        #: where merged chunks are split for upload (``<Db>/archiving``)
        self.work_dir = work_dir
        self.source = source
        self.name = name
        #: this archiver's own identity in the claim (``<Db>/archiving/archiver-id``); the name by default
        self.archiver_id = archiver_id or name
        self.logger = logger
        self._stop = threading.Event()
        #: sleeps up to the seconds given, or until stopped (True); tests pass their own
        self._wait = wait or self._stop.wait
        self._claimed = False
        #: the checkpoint as this archiver last wrote it (None: read it from the archive)
        self._known: ArchiveCheckpoint | None = None
        #: whether the next upload first looks for an object already there (at start, after a failure)
        self._look_first = True
        self.checkpoint = 0  # the archive checkpoint as last read or written
        self.uploaded = 0  # chunks uploaded by this archiver (kept ones not counted)
        self.kept = 0  # chunks found already uploaded and verified (after a crash)
        self.failures = 0  # failed steps in a row
        self.last_error: str | None = None

    # -- one step --------------------------------------------------------------------------------------
    def _claim(self) -> bool:
        identity = self.source.log_identity()
        if identity is None:
            return False
        claim = json.dumps({"log": identity, "archiver": self.archiver_id, "name": self.name}).encode()
        try:
            self.store.put_bytes(CLAIM, claim, if_absent=True)
            self.logger.info("Archive %s claimed for this cluster's log %s", self.store.description, identity)
        except ObjectExists:
            found = read_claim(self.store)
            if found is None:  # deleted since: claim it again at the next step
                raise ArchiveError(
                    f"The archive claim {CLAIM} in {self.store.description} vanished"
                ) from None
            log, archiver = found["log"], found["archiver"]
            if log != identity:
                raise ArchiveClaimed(
                    f"The archive {self.store.description} belongs to another cluster (its {CLAIM} names the "
                    f"log {log}, this cluster's log is {identity}): use one bucket per cluster"
                ) from None
            if archiver != self.archiver_id:
                raise ArchiveClaimed(
                    f"Another archiver of this cluster ({found.get('name', '?')}, id {archiver}) archives to "
                    f"{self.store.description}: one archiver per cluster. To move archiving to this node "
                    f"(id {self.archiver_id}), stop that one and delete {CLAIM} from the archive"
                ) from None
        self._claimed = True
        return True

    def step(self) -> bool:
        """Upload (or keep) the next chunk and move the checkpoint past it; False when there is nothing
        to do yet. Raises ArchiveError (ArchiveUnavailable: try again later)."""
        try:
            return self._step()
        except BaseException:
            # after a failure anything may be true again: read the checkpoint, look for the object
            self._known = None
            self._look_first = True
            raise

    def _step(self) -> bool:
        if not self._claimed and not self._claim():
            return False
        checkpoint = self._known or read_checkpoint(self.store)
        self.checkpoint = checkpoint.position
        size = self.source.chunk_size
        if checkpoint.position % size:
            raise ArchiveError(
                f"The archive checkpoint {checkpoint.position} in {self.store.description} is not at a chunk "
                f"boundary of this log (chunk size {size})"
            )
        number = checkpoint.position // size
        chunk = self.source.chunk(number)
        if chunk is None or not chunk.is_completed or chunk.path is None:
            return False
        if chunk.data_end_position > self.source.readable_position():
            return False
        unmerged = None
        if chunk.start_number != chunk.end_number:
            if self.work_dir is None:
                raise ArchiveError(
                    f"Chunk {number} is merged locally ({chunk.file_name}) and there is no folder to split it in"
                )
            unmerged = self._unmerged(number, chunk)
            chunk = unmerged
        try:
            self._upload(number, chunk)
        finally:
            if unmerged is not None:
                unmerged.close()
        end = chunk.end_position
        body = json.dumps(
            {
                "position": end,
                "chunkSize": size,
                "log": self.source.log_identity(),
                "archiver": self.archiver_id,
            }
        ).encode()
        if checkpoint.etag is None:
            written = self.store.put_bytes(CHECKPOINT, body, if_absent=True)
        else:
            written = self.store.put_bytes(CHECKPOINT, body, if_match=checkpoint.etag)
        # this archiver's own write is the checkpoint now: the next step need not read it (a change
        # by anyone else makes the next If-Match fail, and the failure reads it again)
        self._known = ArchiveCheckpoint(end, written.etag)
        self._look_first = False
        self.checkpoint = end
        if unmerged is not None and unmerged.path is not None:
            remove_durably([unmerged.path])
        return True

    def _unmerged(self, number: int, merged: Chunk) -> Chunk:
        """Logical chunk ``number`` of a merged chunk as a chunk file of its own (see the module):
        the one made earlier when it is whole, else a new one."""
        assert self.work_dir is not None
        path = os.path.join(self.work_dir, f"unmerged-{number:06d}")
        if os.path.exists(path):
            try:
                made = Chunk.open(path, verify=True)
                if made.start_number == made.end_number == number:
                    return made
                made.close()
            except CorruptedFile as exc:
                self.logger.warning("Making %s again: %s", path, exc)
        os.makedirs(self.work_dir, exist_ok=True)
        size = merged.chunk_size
        positions, offsets = merged.posmap_arrays()
        first, last = np.searchsorted(positions, [number * size, (number + 1) * size])
        ends = np.append(offsets[1:], merged.physical_end)
        builder = ChunkBuilder(
            self.work_dir,
            chunk_size=size,
            start_number=number,
            end_number=number,
            version=merged.version,
            data_end_position=merged.data_end_position
            if number == merged.end_number
            else (number + 1) * size,
            temp_suffix=".unmerge.tmp",
        )
        try:
            builder.add_records(
                merged.buffer,
                offsets[first:last] + HEADER_SIZE,
                ends[first:last] - offsets[first:last],
                positions[first:last],
            )
            made = builder.finish()
        except BaseException:
            builder.abort()
            raise
        assert made.path is not None
        made.close()
        replace_durably(made.path, path)
        self.logger.info(
            "Chunk %d split from the merged %s for upload (%d records)",
            number,
            merged.file_name,
            last - first,
        )
        return Chunk.open(path, verify=False)

    def _upload(self, number: int, chunk: Chunk) -> None:
        name = chunk_object_name(number)
        assert chunk.footer is not None and chunk.path is not None
        expected = (chunk.file_size, chunk.footer.checksum)
        # an object past the checkpoint can be there only after a failure or a restart: look then
        if self._look_first and self._archived_as(name) == expected:
            self.kept += 1
            self.logger.info("Chunk %d is in the archive already (%s, verified): kept", number, name)
            return
        self.store.put_file(name, chunk.path)
        found = self._archived_as(name)
        if found != expected:
            raise ArchiveError(
                f"The archived {name} in {self.store.description} does not match the local {chunk.file_name} "
                f"(size and footer checksum {found} against {expected[0]}): uploaded again next time"
            )
        self.uploaded += 1
        self.logger.info("Chunk %d archived as %s (%d bytes, verified)", number, name, chunk.file_size)

    def _archived_as(self, name: str) -> tuple[int, bytes] | None:
        return archived_as(self.store, name)

    # -- what it reports -------------------------------------------------------------------------------
    def figures(self) -> dict[str, Any]:
        """The archiver's figures for its node's stats (``es.archive.archiver``): the checkpoint as it
        last read or wrote it, its upload lag (the completed, committed chunks past that checkpoint: what
        it has still to upload; None until it has read the checkpoint), what it uploaded or found
        uploaded since its start, and its failures in a row with the last one's words. ``pendingSince``:
        the time (epoch seconds) of the last record of the oldest chunk waiting, its upload lag in time."""
        pending: int | None = None
        since: float | None = None
        if self._claimed:
            size, readable = self.source.chunk_size, self.source.readable_position()
            first, pending = self.checkpoint // size, 0
            while True:
                chunk = self.source.chunk(first + pending)
                if chunk is None or not chunk.is_completed or chunk.data_end_position > readable:
                    break
                if pending == 0 and chunk.physical_end > 0:  # when the oldest waiting chunk was written
                    since = chunk.read_before(chunk.physical_end)[0].timestamp / TICKS_PER_SECOND
                pending += 1
        return {
            "checkpoint": self.checkpoint if self._claimed else -1,
            "pendingChunks": pending,
            "pendingBytes": None if pending is None else pending * self.source.chunk_size,
            "pendingSince": since,
            "uploaded": self.uploaded,
            "kept": self.kept,
            "failures": self.failures,
            "lastError": self.last_error,
        }

    # -- the loop --------------------------------------------------------------------------------------
    def run(self, idle_seconds: float = 1.0) -> None:
        """Step until stopped: at once while there is work, every ``idle_seconds`` when there is none,
        after ``backoff_seconds`` while steps fail. A bucket of another cluster ends it."""
        while not self._stop.is_set():
            try:
                worked = self.step()
            except ArchiveClaimed as exc:
                self.last_error = str(exc)
                self.logger.critical("Archiving stopped: %s", exc)
                return
            except (ArchiveError, OSError) as exc:
                self.failures += 1
                self.last_error = str(exc)
                delay = backoff_seconds(self.failures)
                level = (
                    logging.WARNING if isinstance(exc, ArchiveUnavailable | ObjectChanged) else logging.ERROR
                )
                self.logger.log(
                    level, "Archiving failed (attempt %d, next in %.0f s): %s", self.failures, delay, exc
                )
                if self._wait(delay):
                    return
                continue
            if self.failures:
                self.logger.info("Archiving resumed after %d failed attempts", self.failures)
            self.failures = 0
            self.last_error = None
            if not worked and self._wait(idle_seconds):
                return

    def stop(self) -> None:
        self._stop.set()


class ArchiverService:
    """The archiver node's :class:`Archiver`, on its own thread (``evdb-archiver``): uploads and the
    waits between them never touch the event loop or the threads that serve local reads."""

    def __init__(self, archiver: Archiver, idle_seconds: float = 1.0) -> None:
        self.archiver = archiver
        self._thread = threading.Thread(
            target=archiver.run, args=(idle_seconds,), name="evdb-archiver", daemon=True
        )

    def start(self) -> ArchiverService:
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop after the current request (an upload in flight finishes or fails first)."""
        self.archiver.stop()
        self._thread.join()
        self.archiver.store.close()


def archiver_identity(work_dir: str) -> str:
    """This archiver's id, made once and kept in ``<work_dir>/archiver-id`` (written durably)."""
    path = os.path.join(work_dir, "archiver-id")
    try:
        with open(path, encoding="ascii") as f:
            found = f.read().strip()
        if found:
            return found
    except FileNotFoundError:
        pass
    os.makedirs(work_dir, exist_ok=True)
    made = uuid.uuid4().hex
    write_durably(path, [made.encode()])
    return made


def start_archiver(
    settings: Any, db: Callable[[], Any], chunk_size: int, *, name: str, logger: logging.Logger, db_dir: str
) -> ArchiverService | None:
    """The running archiver of an archiver node (``Archiver: true``), else None."""
    if not settings.archiver:
        return None
    store = settings.open_store()
    logger.info("Archiver started: uploading completed chunks to %s", store.description)
    work_dir = os.path.join(db_dir, "archiving")
    archiver = Archiver(
        store,
        DatabaseChunks(db, chunk_size),
        name=name,
        logger=logger,
        work_dir=work_dir,
        archiver_id=archiver_identity(work_dir),
    )
    return ArchiverService(archiver).start()
