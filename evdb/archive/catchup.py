"""A follower or read-only replica behind its leader's archived chunks catches up from the archive
itself (issue 37; KurrentDB: "a node that starts behind the archive downloads what it lacks").

A leader that deleted its chunk files before ``archived.chk`` (the retention policy,
evdb/archive/retention.py) cannot stream those chunks: its replication reads local chunks. When a
follower's log ends before the leader's local chunks start (a new node, one restored from an old
backup, one down for long), the leader says so in the replication handshake
(:func:`leader_archive`: where its local chunks start, its archive and the log that archive holds)
and ends the stream. The follower then, with :class:`ArchiveCatchUp`:

1. checks its own archive before it changes anything: reachable, holding the log the leader's
   archive holds (``archive.chk``'s log identity: another cluster's bucket is refused), archived at
   least up to the leader's boundary, of this node's chunk size;
2. takes one chunk at a time: downloads it into the database folder, verified (the footer's checksum
   of every byte, the header's number and size), checks that the records it has of that chunk are
   the archived ones, installs it as the leader's chunk files are installed (every record checked,
   indexed, epochs noted; the rename is the commit point), then leaves it, and every chunk before,
   to the archive (``archived.chk`` first, then the file: :meth:`TransactionLog.leave_to_archive`),
   so the disk holds one chunk of it at a time;
3. subscribes again: its log now ends where the leader's local chunks start, and the leader streams
   the rest.

A failure (the archive unreachable, a damaged object) stops it between two chunks with everything
before kept; the follower waits (1 s, doubling to 60 s) and tries again, naming the archive in its
log. A kill -9 at any point leaves a log the next open accepts (an install either happened or not; a
deletion the marker names is finished at the open). Nothing is ever taken from an archive that is
not the cluster's.
"""

from __future__ import annotations

import logging
import os
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from evdb.archive.archiver import chunk_object_name, read_checkpoint
from evdb.archive.cache import download_verified
from evdb.archive.reads import ArchiveReads
from evdb.cluster.replica import ChunkLogReplication, record_fingerprint
from evdb.errors import ArchiveError

if TYPE_CHECKING:
    from evdb.database import Database

__all__ = ["ArchiveCatchUp", "LeaderArchive", "leader_archive", "no_archive_message"]


@dataclass(frozen=True)
class LeaderArchive:
    """What a leader tells a follower behind its local chunks (the ``behindArchive`` message)."""

    #: the follower's log end, as the leader found it
    follower_end: int
    #: where the leader's local chunks start: every chunk before is in the archive only
    local_start: int
    #: the leader's archive (its description), None when the leader's archive is off
    archive: str | None
    #: the log the leader's archive holds (``archive.chk``'s identity), None when it could not be read
    log: str | None
    #: why the leader could not read its archive, if it could not
    error: str | None = None

    def message(self) -> dict[str, Any]:
        return {
            "behindArchive": {
                "from": self.follower_end,
                "localStart": self.local_start,
                "archive": self.archive,
                "log": self.log,
                "error": self.error,
            }
        }

    @classmethod
    def from_message(cls, body: dict) -> LeaderArchive:
        info = body["behindArchive"]
        return cls(
            int(info["from"]),
            int(info["localStart"]),
            info.get("archive"),
            info.get("log"),
            info.get("error"),
        )


def leader_archive(db: Database, follower_end: int) -> LeaderArchive:
    """The leader's side: its local start, its archive and the log the archive holds (one small read
    of ``archive.chk``; an archive that cannot be read is named in ``error``)."""
    reads = db.log.archive
    if not isinstance(reads, ArchiveReads):
        return LeaderArchive(
            follower_end, db.log.local_start, None, None, "the leader has no archive configured"
        )
    try:
        log = read_checkpoint(reads.store).log
        error = None if log is not None else f"the archive {reads.store.description} names no log yet"
    except ArchiveError as exc:
        log, error = None, str(exc)
    return LeaderArchive(follower_end, db.log.local_start, reads.store.description, log, error)


def no_archive_message(facts: LeaderArchive) -> str:
    """What a follower without ``Archive: Enabled`` logs (and the leader, of it): what to configure."""
    return (
        f"its log ends at {facts.follower_end}, before the leader's local chunks (they start at "
        f"{facts.local_start}; the chunks before are in the archive {facts.archive or '(unknown)'} only), "
        "and it has no archive to read them from: configure Archive: Enabled on it with the cluster's "
        "archive (the same StorageType and S3: Bucket/Region or FileSystem: Path, and RetainAtLeast) and "
        "restart it; it takes nothing from the leader until then"
    )


class ArchiveCatchUp:
    """A follower's catch-up from the archive up to ``facts.local_start`` (see the module)."""

    def __init__(self, db: Database, facts: LeaderArchive, logger: logging.Logger) -> None:
        reads = db.log.archive
        if not isinstance(reads, ArchiveReads):
            raise ArchiveError(f"This node cannot catch up from the archive: {no_archive_message(facts)}")
        self.db = db
        self.facts = facts
        self.store = reads.store
        self.chunk_size = db.config.chunk_size
        self.logger = logger
        self._checked = False

    @property
    def done(self) -> bool:
        return self.db.committed_position >= self.facts.local_start

    def check(self) -> None:
        """Before anything changes: the archive is reachable and holds the leader's log up to its
        boundary (ArchiveUnavailable: try again later; ArchiveError: it is not the cluster's archive)."""
        facts, where = self.facts, self.store.description
        if facts.log is None:
            raise ArchiveError(
                f"The leader could not say which log its archive {facts.archive} holds ({facts.error}): "
                "not catching up from the archive yet"
            )
        if facts.local_start % self.chunk_size:
            raise ArchiveError(
                f"The leader's local chunks start at {facts.local_start}, not at a chunk boundary of "
                f"{self.chunk_size} bytes: its ChunkSize differs from this node's"
            )
        checkpoint = read_checkpoint(self.store)
        if checkpoint.log != facts.log:
            raise ArchiveError(
                f"The archive {where} holds the log {checkpoint.log}, the leader's archive "
                f"{facts.archive} the log {facts.log}: this node's Archive options must name its "
                "cluster's archive; nothing was taken from it"
            )
        if checkpoint.chunk_size not in (None, self.chunk_size):
            raise ArchiveError(
                f"The archive {where} holds chunks of {checkpoint.chunk_size} bytes, this node's "
                f"ChunkSize is {self.chunk_size}"
            )
        if checkpoint.position < facts.local_start:
            raise ArchiveError(
                f"The archive {where} holds the log up to {checkpoint.position} only, and the leader's "
                f"local chunks start at {facts.local_start}: it is not the archive the leader deleted "
                "its chunks against"
            )
        self._checked = True

    def step(self) -> bool:
        """Take the next chunk from the archive (see the module); False once the log reaches the
        leader's boundary. Raises ArchiveError (ArchiveUnavailable: try again later) having kept
        every chunk taken before."""
        if not self._checked:
            self.check()
        db = self.db
        end = db.committed_position
        if end >= self.facts.local_start:
            return False
        number = end // self.chunk_size
        folder = db.config.db_dir
        if folder is None:
            raise ArchiveError("An in-memory database cannot catch up from the archive")
        name = uuid.uuid4().hex
        path = os.path.join(folder, f"{name}.archive.tmp")
        chunk, info = download_verified(
            self.store, number, self.chunk_size, os.path.join(folder, f"{name}.part.tmp"), path
        )
        try:
            try:
                self._check_shared(chunk, end)
            finally:
                chunk.close()
            committed = ChunkLogReplication(db).install_replicated_chunk(
                path, start_number=number, end_number=number
            )
        finally:
            if os.path.exists(path):  # not installed
                os.unlink(path)
        with db.log.chunk_lock:
            db.log.leave_to_archive(number + 1)
        self.logger.info(
            "Caught up from the archive %s: chunk %d (%s, %d bytes) taken and left to the archive; the log "
            "now ends at %d (the leader's local chunks start at %d)",
            self.store.description,
            number,
            chunk_object_name(number),
            info.size,
            committed,
            self.facts.local_start,
        )
        return committed < self.facts.local_start

    def _check_shared(self, chunk: Any, end: int) -> None:
        """The records this log has of the chunk (before ``end``) must be the archived ones: the newest
        is compared (the leader's handshake compared the rest with its own log)."""
        log = self.db.log
        if end <= chunk.start_position:
            return
        mine = next(iter(log.iter_backward(end, stop=chunk.start_position)), None)
        if mine is None:
            return
        offset = chunk.physical_offset(mine.log_position)
        if offset is None and chunk.is_scavenged:
            return  # a scavenge removed it from the archived copy: nothing to compare
        theirs = chunk.read_at(offset)[0] if offset is not None else None
        if theirs is None or record_fingerprint(theirs) != record_fingerprint(mine):
            raise ArchiveError(
                f"The archived {chunk_object_name(chunk.start_number)} in {self.store.description} does "
                f"not hold this node's record at {mine.log_position}: not this cluster's log; nothing taken"
            )
