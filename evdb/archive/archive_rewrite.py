"""Rewriting an archived chunk in place: what a scavenge and a redaction of archived events share
(issue 37: the archive obeys the same maintenance rules as the nodes).

An archived chunk keeps its object name (``chunk-NNNNNN.000001``); a rewrite replaces the object with
one PUT of the whole new chunk file. Both stores make that atomic (S3: a PUT replaces an object whole;
the file-system store: a temporary file renamed over the object), so at any moment the archive holds
a complete, checksum-valid object for every chunk number up to ``archive.chk``: the old one until the
put, the new one after. No old copy is left behind (an S3 bucket without versioning keeps none; the
folder's rename drops the old file). The new object is checked after the put as the archiver checks an
upload: its size and footer checksum must be the new file's.

Rewrites of the same archive by several nodes (a scavenge on one, a redaction on another) are taken
one at a time through a lease object, ``archive.rewriting`` (:class:`RewriteLease`): created
create-only, taken over with ``If-Match`` once it has expired (its holder died), deleted when done.
Its holder renews it with ``If-Match`` of its own entity tag right before each put of a rewritten
chunk (:func:`put_rewritten`): a holder that overran its lease, and lost it to another node, finds the
lease changed and puts nothing. It deletes the lease at the end only while its own copy is there with
:data:`RELEASE_MARGIN` of its time left (a lease past that is left to expire: deleting it could delete
the next holder's).
Each rewrite downloads the object after taking the lease, so it always starts from the newest copy:
a scavenge never puts back an event a redaction blanked meanwhile.

The work files (the downloaded copy, the rewritten one) are in a folder of the caller's under
``<Db>/archiving/``, emptied when its next rewrite starts (a crash leaves at most those).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import uuid
from collections.abc import Callable

from evdb.archive.archiver import archived_as, chunk_object_name
from evdb.archive.cache import download_verified
from evdb.archive.store import ArchiveStore, ObjectChanged, ObjectExists, ObjectInfo, ObjectMissing
from evdb.errors import ArchiveError, ArchiveUnavailable
from evdb.storage.chunk import HEADER_SIZE, Chunk, ChunkHeader

__all__ = [
    "LEASE",
    "LEASE_SECONDS",
    "MARKERS",
    "RELEASE_MARGIN",
    "RewriteLease",
    "archived_header",
    "download_archived",
    "mark_scavenged",
    "marker_name",
    "put_rewritten",
    "scavenged_to",
    "work_folder",
]

LEASE = "archive.rewriting"
#: how long a lease holds before another node may take it over (its holder is taken to be dead)
LEASE_SECONDS = 600.0
#: a holder deletes its lease only with this long left of it (the look and the delete take less)
RELEASE_MARGIN = 60.0


def work_folder(db_dir: str, name: str) -> str:
    """``<db_dir>/archiving/<name>``, made and emptied (what a killed rewrite left is never used)."""
    folder = os.path.join(db_dir, "archiving", name)
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder, exist_ok=True)
    return folder


class RewriteLease:
    """The archive's one rewrite at a time (see the module). ``now`` gives wall-clock seconds (the
    node's clock); ``wait(seconds)`` sleeps and answers True when the caller should give up."""

    def __init__(
        self, store: ArchiveStore, *, node: str, now: Callable[[], float], seconds: float = LEASE_SECONDS
    ) -> None:
        self.store = store
        self.node = node
        self.now = now
        self.seconds = seconds
        #: the node and the kind of rewrite: a node restarted after a kill takes its own lease back at
        #: once (one scavenge at a time on a node; redactions one at a time under its chunk lock)
        self.owner = node
        self.held = False
        #: this holder's copy of the lease object: its entity tag and its end (wall clock)
        self._etag = ""
        self._until = 0.0

    def _put(self, *, if_absent: bool = False, if_match: str | None = None) -> None:
        """Write this holder's lease (a full one from now) under the store's condition; held once written."""
        until = self.now() + self.seconds
        body = json.dumps({"owner": self.owner, "node": self.node, "until": until}).encode()
        info = self.store.put_bytes(LEASE, body, if_absent=if_absent, if_match=if_match)
        self.held, self._etag, self._until = True, info.etag, until

    def try_acquire(self) -> str | None:
        """None when this lease now holds the archive; else who holds it (for the log)."""
        try:
            self._put(if_absent=True)
            return None
        except ObjectExists:
            pass
        info = self.store.head(LEASE)
        if info is None:
            return "nobody (released just now)"
        try:
            found = json.loads(self.store.get_bytes(LEASE))
            holder, until, owner = str(found["node"]), float(found["until"]), found.get("owner")
        except ObjectMissing:
            return "nobody (released just now)"
        except (ValueError, KeyError, TypeError, AttributeError):
            holder, until, owner = "a damaged lease", 0.0, None
        if until > self.now() and owner != self.owner:
            return f"{holder} (until {until:.0f})"
        try:  # expired: taken over only if nobody replaced it since it was read
            self._put(if_match=info.etag)
        except (ObjectChanged, ObjectMissing):
            return f"{holder} (taken over by another node just now)"
        return None

    def renew(self, what: str) -> None:
        """A full lease from now, if this holder's copy is still the lease object (``If-Match``); else
        ArchiveUnavailable: the lease ran out and another node took it, so ``what`` must not be done."""
        if not self.held:
            raise ArchiveUnavailable(f"{what} in {self.store.description}: no rewrite lease is held")
        try:
            self._put(if_match=self._etag)
        except (ObjectChanged, ObjectMissing):
            self.held = False
            raise ArchiveUnavailable(
                f"{what} not done: the rewrite lease on {self.store.description} ran out and another node "
                "took it (try again)"
            ) from None

    def acquire(self, wait: Callable[[float], bool], logger: logging.Logger, what: str) -> None:
        """Take the lease, waiting while another node holds it; ArchiveUnavailable when ``wait`` says to
        give up."""
        said = False
        while True:
            holder = self.try_acquire()
            if holder is None:
                return
            if not said:
                logger.info(
                    "%s waits: the archive %s is being rewritten by %s", what, self.store.description, holder
                )
                said = True
            if wait(1.0):
                raise ArchiveUnavailable(
                    f"The archive {self.store.description} is being rewritten by {holder}: {what} not done "
                    "(try again)"
                )

    def release(self) -> None:
        """Delete the lease object while it is this holder's copy with RELEASE_MARGIN of it left; a
        lease nearer its end is left to expire (another node may take it over any moment)."""
        if not self.held:
            return
        self.held = False
        if self.now() >= self._until - RELEASE_MARGIN:
            return
        info = self.store.head(LEASE)
        if info is not None and info.etag == self._etag:
            self.store.delete(LEASE)


#: the folder of the scavenge markers: ``scavenged/chunk-NNNNNN.json`` says which scavenge point's
#: decisions the archived chunk was last checked (and rewritten where needed) with, and which object
#: that was (its size and footer checksum)
MARKERS = "scavenged"


def marker_name(number: int) -> str:
    return f"{MARKERS}/chunk-{number:06d}.json"


def scavenged_to(store: ArchiveStore, number: int) -> int | None:
    """The scavenge point number archived chunk ``number`` was scavenged to, when its marker names the
    object the archive holds now (a rewrite since, a redaction say, makes the marker stale: None)."""
    try:
        marker = json.loads(store.get_bytes(marker_name(number)))
        point, size, checksum = int(marker["point"]), int(marker["size"]), bytes.fromhex(marker["checksum"])
    except ObjectMissing:
        return None
    except (ValueError, KeyError, TypeError, AttributeError):
        return None  # a damaged marker: the chunk is looked at again
    return point if archived_as(store, chunk_object_name(number)) == (size, checksum) else None


def mark_scavenged(store: ArchiveStore, number: int, point: int, node: str) -> None:
    """Record that archived chunk ``number``, as the archive holds it now, is scavenged to ``point``."""
    found = archived_as(store, chunk_object_name(number))
    if found is None:
        return
    body = {"point": point, "size": found[0], "checksum": found[1].hex(), "node": node}
    store.put_bytes(marker_name(number), json.dumps(body).encode())


def archived_header(store: ArchiveStore, number: int) -> ChunkHeader | None:
    """The header of archived chunk ``number`` (one ranged read), None when it has no object."""
    name = chunk_object_name(number)
    try:
        return ChunkHeader.decode(store.get_range(name, 0, HEADER_SIZE), f"{store.description}/{name}")
    except ObjectMissing:
        return None
    except Exception as exc:  # a header that does not parse
        raise ArchiveError(f"The archived {name} in {store.description} is damaged: {exc}") from exc


def download_archived(store: ArchiveStore, number: int, chunk_size: int, folder: str) -> Chunk:
    """Archived chunk ``number`` downloaded into ``folder`` and verified whole (header and checksum)."""
    path = os.path.join(folder, f"chunk-{number:06d}.{uuid.uuid4().hex[:8]}.archived")
    chunk, _ = download_verified(store, number, chunk_size, path + ".tmp", path)
    return chunk


def put_rewritten(store: ArchiveStore, number: int, new: Chunk, lease: RewriteLease) -> ObjectInfo:
    """Replace archived chunk ``number`` with the completed chunk file ``new`` (one atomic put) under
    ``lease``, renewed first (nothing is put by a holder that lost it), and check the object holds its
    bytes (size and footer checksum)."""
    name = chunk_object_name(number)
    assert new.path is not None and new.footer is not None
    if new.start_number != number or new.end_number != number:
        raise ValueError(f"{new.path} holds chunks {new.start_number}-{new.end_number}, not chunk {number}")
    lease.renew(f"The rewrite of archived chunk {number}")
    info = store.put_file(name, new.path)
    expected = (new.file_size, new.footer.checksum)
    found = archived_as(store, name)
    if found != expected:
        raise ArchiveError(
            f"The rewritten {name} in {store.description} does not match {new.path} (size and footer "
            f"checksum {found} against {expected})"
        )
    return info
