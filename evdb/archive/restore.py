"""``evdb restore --from-archive``: a stopped node's database made from the archive alone (issue 37).

The archive holds every chunk of the cluster's log before the archive checkpoint (``archive.chk``),
each verified by the archiver. A restore from it:

1. checks everything before a file is touched: the folders' names, the archive there and reachable,
   claimed by a cluster (``archive.claim``), its checkpoint readable and past chunk 0, its chunk size
   the node's ``ChunkSize``, every chunk object before the checkpoint present; then, holding the
   database folder's lock (``evdb.lock``: no node runs there, none starts meanwhile), that the folders
   hold no database unless ``overwrite`` (the backup restore's checks, evdb/backup/restore.py), and
   that the database folder is no mount point (step 4 renames it);
2. downloads every archived chunk into a staging folder beside the database folder
   (``.<name>.archive-restore``), each verified by its checksum as the archive cache verifies what it
   reads (:func:`~evdb.archive.cache.download_verified`), chunk 0's first record checked against the
   log the claim names;
3. writes the checkpoints as the backup restore leaves them: the log ends at the archive checkpoint
   (``writer.chk`` and ``truncate.chk``), nothing is indexed (``chaser.chk`` 0), the epochs are found
   again when the node indexes the log (``epoch.chk``, ``proposal.chk`` -1); all of it was committed
   cluster-wide (the archiver uploads only committed chunks), so ``replication.chk`` is the archive
   checkpoint too: as a restarted member, the node serves it before its leader confirms more. The
   staging folder is synced;
4. moves it into place: the old index files first when the index folder lies outside the database
   folder, then one exchange of the two folders (``renameat2(RENAME_EXCHANGE)``), then the old one
   (now under the staging name) is removed. An archiver node's own id (``archiving/archiver-id``) is
   carried over.

A kill -9 at any point leaves the database folder either as it was or whole and restored: before the
exchange only the staging folder holds anything new (a node never opens it; the next restore removes
it), after it the restored folder is in place. On a file system without the exchange the database folder is
moved aside (``.<name>.archive-restore.old``), then the staging folder renamed: a kill between the two
leaves no database folder (the restore can be run again).

At its next start the node cuts its log at the archive checkpoint (nothing to cut), indexes it, and
joins its cluster as any follower behind: the leader sends it what came after.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass

from evdb.archive.archiver import (
    ArchiveCheckpoint,
    chunk_object_name,
    first_record_identity,
    read_checkpoint,
    read_claim,
)
from evdb.archive.cache import download_verified
from evdb.archive.store import ArchiveStore
from evdb.backup.errors import BackupError, BackupIncomplete, InvalidBackupFolder
from evdb.backup.progress import Progress
from evdb.backup.restore import check_destination, hold_database_lock, restore_folders
from evdb.errors import ArchiveError, ArchiveUnavailable
from evdb.index.durable import fsync_dir, remove_durably, write_durably

__all__ = ["ArchiveRestoreResult", "exchange_folders", "restore_from_archive", "staging_folder"]

_log = logging.getLogger("evdb.backup")

STAGING_SUFFIX = ".archive-restore"
_ARCHIVER_ID = os.path.join("archiving", "archiver-id")
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


@dataclass(frozen=True)
class ArchiveRestoreResult:
    archive: str
    chunks: int
    bytes_copied: int
    #: the log's end after the restore: the archive checkpoint
    position: int


def staging_folder(db_dir: str) -> str:
    """Where a restore into ``db_dir`` builds the new database: beside it, on the same file system."""
    path = os.path.abspath(db_dir)
    return os.path.join(os.path.dirname(path), f".{os.path.basename(path)}{STAGING_SUFFIX}")


def exchange_folders(new: str, old: str) -> None:
    """Swap two folders' names at once (Linux ``renameat2(RENAME_EXCHANGE)``); where the system or the
    file system has no exchange, ``old`` is renamed to ``new``'s name after ``new`` is moved aside."""
    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is not None:
        if renameat2(_AT_FDCWD, os.fsencode(new), _AT_FDCWD, os.fsencode(old), _RENAME_EXCHANGE) == 0:
            return
        code = ctypes.get_errno()
        if code not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
            raise OSError(code, f"cannot exchange {new} and {old}: {os.strerror(code)}")
    aside = new + ".old"
    os.rename(old, aside)
    os.rename(new, old)
    os.rename(aside, new)


def _remove_tree(path: str) -> None:
    if os.path.lexists(path):
        _log.info("RESTORE removes %s", path)
        shutil.rmtree(path)
        fsync_dir(os.path.dirname(path))


def _check_beside(db_dir: str, staging: str) -> None:
    """InvalidBackupFolder unless the staging folder can take the database folder's name in one rename:
    the database folder is no mount point and lies on its parent's file system."""
    parent = os.path.dirname(staging)
    if os.path.ismount(db_dir) or os.stat(db_dir).st_dev != os.stat(parent).st_dev:
        raise InvalidBackupFolder(
            f"{db_dir} is a mount point (or another file system than {parent}): a restore from the archive "
            f"builds the database beside it, in {staging}, and renames it into place, which a mount point "
            "cannot be. Give the node a Db folder inside the volume (e.g. <mount>/db). Nothing was restored."
        )


def _checked_archive(store: ArchiveStore, chunk_size: int) -> tuple[ArchiveCheckpoint, str, int]:
    """The checkpoint, the claimed log and the bytes to download, or the refusal (nothing touched)."""
    try:
        store.check()
    except ArchiveUnavailable:
        raise
    except ArchiveError as exc:
        raise InvalidBackupFolder(f"There is no archive there: {exc}. Nothing was restored.") from None
    claim = read_claim(store)
    checkpoint = read_checkpoint(store)
    if claim is None or checkpoint.etag is None or checkpoint.position <= 0:
        raise BackupIncomplete(
            f"The archive {store.description} holds no archived chunk yet ("
            + ("no archive.claim: no archiver has claimed it" if claim is None else "no archive checkpoint")
            + "). Nothing was restored."
        )
    if checkpoint.chunk_size != chunk_size:
        raise InvalidBackupFolder(
            f"The archive {store.description} holds chunks of {checkpoint.chunk_size} bytes, the node's "
            f"ChunkSize is {chunk_size}: give the node's configuration (--config, or --chunk-size "
            f"{checkpoint.chunk_size}). Nothing was restored."
        )
    if checkpoint.position % chunk_size:
        raise BackupError(
            f"The archive checkpoint {checkpoint.position} in {store.description} is not at a chunk "
            f"boundary (chunk size {chunk_size}). Nothing was restored."
        )
    sizes = {o.name: o.size for o in store.list()}
    names = [chunk_object_name(n) for n in range(checkpoint.position // chunk_size)]
    missing = [name for name in names if name not in sizes]
    if missing:
        raise BackupError(
            f"The archive {store.description} lacks {len(missing)} chunk(s) before its checkpoint "
            f"{checkpoint.position}: {', '.join(missing[:5])}. Nothing was restored."
        )
    return checkpoint, str(claim["log"]), sum(sizes[name] for name in names)


def restore_from_archive(
    store: ArchiveStore,
    db_dir: str,
    index_dir: str | None = None,
    *,
    chunk_size: int,
    overwrite: bool = False,
    progress: Progress | None = None,
    move: Callable[[str, str], None] = exchange_folders,
) -> ArchiveRestoreResult:
    """Restore a stopped node's folders from ``store`` (see the module); ``move`` exchanges the staging
    folder and the database folder. Raises BackupError (its exit code) having changed nothing, but
    for a staging folder left by an earlier, interrupted restore, which it removes."""
    db_dir, index_dir = restore_folders(db_dir, index_dir)
    p = progress or Progress("restore", _log)
    try:
        checkpoint, log, total = _checked_archive(store, chunk_size)
    except ArchiveError as exc:
        raise BackupError(f"{exc}. Nothing was restored.") from exc
    count = checkpoint.position // chunk_size
    staging = staging_folder(db_dir)
    index_inside = os.path.commonpath([os.path.abspath(index_dir), os.path.abspath(db_dir)]) == (
        os.path.abspath(db_dir)
    )
    with hold_database_lock(db_dir):
        p.begin_step("restore", 1, "check the node is stopped and its folders free")
        _old_db, old_index = check_destination(db_dir, index_dir, overwrite, "the archive's log")
        _check_beside(db_dir, staging)
        for leftover in (staging, staging + ".old"):  # what an interrupted restore left
            _remove_tree(leftover)
        p.end_step()
        try:
            with hold_database_lock(staging):
                p.begin_step("restore", 2, f"download and verify {count} archived chunks", count, total)
                for number in range(count):
                    name = chunk_object_name(number)
                    path = os.path.join(staging, name)
                    try:
                        chunk, info = download_verified(store, number, chunk_size, path + ".tmp", path)
                    except ArchiveError as exc:
                        raise BackupError(f"{exc}. Nothing was restored.") from exc
                    try:
                        if number == 0 and first_record_identity(chunk) != log:
                            raise BackupError(
                                f"The archived {name} in {store.description} does not begin the log its "
                                f"archive.claim names ({log}). Nothing was restored."
                            )
                    finally:
                        chunk.close()
                    p.bytes_moved(info.size)
                    p.file_copied(f"archive/{name}", info.size)
                p.end_step()

                p.begin_step("restore", 3, "write the checkpoints: the log ends at the archive checkpoint", 6)
                position = checkpoint.position
                for file, value in (
                    ("chaser.chk", 0),
                    ("epoch.chk", -1),
                    ("proposal.chk", -1),
                    ("replication.chk", position),
                    ("truncate.chk", position),
                    ("writer.chk", position),
                ):
                    write_durably(os.path.join(staging, file), [value.to_bytes(8, "little", signed=True)])
                    p.file_copied(f"db/{file}", 8)
                archiver_id = os.path.join(db_dir, _ARCHIVER_ID)
                if os.path.exists(archiver_id):  # an archiver node keeps its identity in the claim
                    with open(archiver_id, "rb") as f:
                        kept = f.read()
                    os.makedirs(os.path.join(staging, "archiving"))
                    write_durably(os.path.join(staging, _ARCHIVER_ID), [kept])
                    fsync_dir(staging)
                p.end_step()

                p.begin_step("restore", 4, "move the restored database into place")
                if not index_inside and old_index:
                    # first: an old index must never meet the new log (the old log without it re-indexes)
                    for relative in old_index:
                        p.file_removed(os.path.join(index_dir, relative))
                    remove_durably(os.path.join(index_dir, relative) for relative in old_index)
                move(staging, db_dir)
                fsync_dir(os.path.dirname(os.path.abspath(db_dir)))
                p.end_step()
        except BaseException:
            # a failure before the move leaves the staging folder; after it, the old database
            _remove_tree(staging)
            raise
        _remove_tree(staging)
    p.finish("completed")
    p.logger.info(
        "RESTORE of %s into %s completed: %d chunks, %d bytes; the node's log ends at %d, it re-indexes "
        "at its next start and catches up from the leader",
        store.description,
        db_dir,
        count,
        p.bytes_copied,
        checkpoint.position,
    )
    return ArchiveRestoreResult(store.description, count, p.bytes_copied, checkpoint.position)
