"""``evdb restore``: put a backup in place for a stopped node.

The spec's restore: the node must be stopped, all files are copied into place, and ``chaser.chk``
is copied over ``truncate.chk``. At its next start the node cuts the log at that position and
indexes again what the index lacks, so it serves every event the backup's chaser position covers.

The restore holds the database folder's lock (``evdb.lock``, the one a running node holds) for
its whole run: it refuses while a node runs there, and a node cannot start in the middle of it.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass

from evdb.archive.archiver import read_checkpoint as read_archive_checkpoint
from evdb.archive.reads import CACHE_FOLDER
from evdb.archive.store import ArchiveStore
from evdb.backup import layout as L
from evdb.backup.copying import copy_file, fsync_dir, is_temp_name, remove_files
from evdb.backup.errors import BackupError, BackupIncomplete, InvalidBackupFolder, NodeRunning
from evdb.backup.progress import Progress
from evdb.backup.verify import verify_backup
from evdb.errors import ArchiveError

__all__ = ["RestoreResult", "check_destination", "hold_database_lock", "restore_backup", "restore_folders"]

_log = logging.getLogger("evdb.backup")
LOCK_NAME = "evdb.lock"  # evdb.database takes an exclusive flock on it while a node runs


@dataclass(frozen=True)
class RestoreResult:
    files_copied: int
    files_removed: int
    bytes_copied: int
    truncate_to: int
    same_node_as_source: bool
    reminder: str
    #: the chunks before this position are read from ``archive`` (the backup's archived.chk; 0: none)
    archived_before: int = 0
    archive: str | None = None


@contextlib.contextmanager
def hold_database_lock(db_dir: str) -> Iterator[None]:
    os.makedirs(db_dir, exist_ok=True)
    fd = os.open(os.path.join(db_dir, LOCK_NAME), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise NodeRunning(
                f"A node is running on {db_dir} (it holds {LOCK_NAME}). Stop the node first: restoring "
                "onto a running node would corrupt its data."
            ) from None
        yield
    finally:
        os.close(fd)


def _files_under(root: str) -> list[str]:
    out = []
    for directory, _dirs, files in os.walk(root):
        for name in files:
            if not is_temp_name(name) and not name.endswith(".tmp"):
                out.append(os.path.relpath(os.path.join(directory, name), root))
    return sorted(out)


def _evdb_files(db_dir: str, index_dir: str) -> tuple[list[str], list[str]]:
    """Files of a database a restore replaces: chunks and checkpoints; the index's files."""
    db_files = []
    if os.path.isdir(db_dir):
        db_files = L.chunk_files(db_dir) + L.old_chunk_files(db_dir)
        db_files += [n for n in L.DB_CHECKPOINTS if os.path.exists(os.path.join(db_dir, n))]
    index_files = []
    if os.path.isdir(index_dir):
        index_files = L.index_table_files(index_dir)
        for relative in (L.INDEXMAP, L.EXISTENCE_CHK, L.EXISTENCE_DAT, L.SCAVENGE_DB):
            for suffix in ("", "-wal", "-shm", "-journal") if relative == L.SCAVENGE_DB else ("",):
                if os.path.exists(os.path.join(index_dir, relative + suffix)):
                    index_files.append(relative + suffix)
    return db_files, index_files


def restore_folders(db_dir: str, index_dir: str | None) -> tuple[str, str]:
    """The folders a restore writes (the index's: ``<db>/index`` unless given), each checked
    (InvalidBackupFolder, exit 2) before anything is touched."""
    L.check_folder(db_dir, "database folder")
    if index_dir is not None:
        L.check_folder(index_dir, "index folder")
    return db_dir, index_dir or os.path.join(db_dir, "index")


def check_destination(db_dir: str, index_dir: str, overwrite: bool, what: str) -> tuple[list[str], list[str]]:
    """The files of a database the folders hold now (chunks and checkpoints; the index's), which a
    restore replaces; a BackupError when there are any and not ``overwrite``. Called holding the lock."""
    old_db, old_index = _evdb_files(db_dir, index_dir)
    if (old_db or old_index) and not overwrite:
        raise BackupError(
            f"{db_dir} (or {index_dir}) already holds a database. Give --overwrite to replace it with "
            f"{what} (its current files are removed)."
        )
    return old_db, old_index


def _check_archive(manifest: L.Manifest, archive: ArchiveStore | None) -> None:
    """A backup of a node with ``archived.chk`` holds no chunk before it: the restored node reads those
    from its archive, which must be there, hold them and be that node's (the log the manifest names).
    Refused (nothing restored) otherwise."""
    before = manifest.archived_before
    where = manifest.archive or "its archive"
    if archive is None:
        raise InvalidBackupFolder(
            f"The backup holds no chunk before position {before}: the node it was taken from keeps them in "
            f"the archive only ({where}; archived.chk), and the restored node must read them from there. "
            "Give the node's configuration (--config) with Archive: Enabled naming that archive (or the "
            "--archive-* options). Nothing was restored."
        )
    try:
        checkpoint = read_archive_checkpoint(archive)
    except ArchiveError as exc:
        raise BackupError(
            f"{exc}. The backup's chunks before {before} are there only. Nothing was restored."
        ) from exc
    if checkpoint.position < before:
        raise InvalidBackupFolder(
            f"The archive {archive.description} holds the log up to {checkpoint.position} only, and the "
            f"backup's chunks before {before} are in {where}: the configuration names another archive. "
            "Nothing was restored."
        )
    if manifest.archive_log is not None and checkpoint.log != manifest.archive_log:
        raise InvalidBackupFolder(
            f"The archive {archive.description} holds the log {checkpoint.log}, the backup's node the log "
            f"{manifest.archive_log} (in {where}): the configuration names another cluster's archive. "
            "Nothing was restored."
        )


def restore_backup(
    backup: str,
    db_dir: str,
    index_dir: str | None = None,
    *,
    overwrite: bool = False,
    verify: bool = True,
    progress: Progress | None = None,
    archive: ArchiveStore | None = None,
) -> RestoreResult:
    """Restore ``backup`` onto a stopped node's folders (see the module). ``archive``: the archive the
    node's configuration names (None: none), needed when the backup leaves chunks to the archive."""
    L.check_folder(backup)
    db_dir, index_dir = restore_folders(db_dir, index_dir)
    p = progress or Progress("restore", _log)
    if not os.path.isdir(backup):
        raise InvalidBackupFolder(
            f"There is no folder {backup}: name a folder that evdb backup --to wrote; nothing was restored."
        )
    if not L.is_complete(backup):
        raise BackupIncomplete(
            f"{backup} is not a finished backup (no {L.COMPLETE_MARKER}); run evdb backup again first."
        )
    manifest = L.Manifest.read(backup)
    if manifest is None:
        raise BackupError(f"{backup} has no {L.MANIFEST}: it is not an evdb backup.")
    if manifest.archived_before:
        _check_archive(manifest, archive)
    source_db = os.path.join(backup, "db")
    source_index = os.path.join(backup, "index")
    with hold_database_lock(db_dir):
        p.begin_step("restore", 1, "check the node is stopped and the backup is whole")
        old_db, old_index = check_destination(db_dir, index_dir, overwrite, "the backup")
        if verify:
            report = verify_backup(backup)
            if not report.ok:
                raise BackupError(f"The backup failed verification: {'; '.join(report.problems[:5])}")
        p.end_step()

        db_files = _files_under(source_db)
        index_files = _files_under(source_index) if os.path.isdir(source_index) else []
        sizes = sum(os.path.getsize(os.path.join(source_db, f)) for f in db_files) + sum(
            os.path.getsize(os.path.join(source_index, f)) for f in index_files
        )
        p.begin_step("restore", 2, "copy all files into place", len(db_files) + len(index_files), sizes)
        # what the backup does not hold goes first (a stale scavenge WAL must never meet the new file)
        keep_db, keep_index = set(db_files), set(index_files)
        stale = [os.path.join(db_dir, n) for n in old_db if n not in keep_db]
        stale += [os.path.join(index_dir, n) for n in old_index if n not in keep_index]
        for path in stale:
            p.file_removed(path)
        remove_files(stale)
        cache = os.path.join(db_dir, CACHE_FOLDER)
        if os.path.isdir(cache):  # chunks read from the archive of the log this folder held before
            p.file_removed(cache)
            shutil.rmtree(cache)
        dirs = set()
        for root, target, names, label in (
            (source_index, index_dir, index_files, "index"),
            (source_db, db_dir, db_files, "db"),
        ):
            for relative in names:
                destination = os.path.join(target, relative)
                os.makedirs(os.path.dirname(destination), exist_ok=True)
                size = copy_file(
                    os.path.join(root, relative), destination, p.bytes_moved, passed=p.bytes_passed
                )
                dirs.add(os.path.dirname(destination))
                p.file_copied(f"{label}/{relative}", size)
        for directory in sorted(dirs):
            fsync_dir(directory)
        p.end_step()

        p.begin_step("restore", 3, "copy chaser.chk to truncate.chk", 1, 8)
        copy_file(os.path.join(db_dir, "chaser.chk"), os.path.join(db_dir, "truncate.chk"))
        fsync_dir(db_dir)
        p.file_copied("db/chaser.chk -> db/truncate.chk", 8)
        p.end_step()
    truncate_to = L.read_checkpoint(os.path.join(db_dir, "truncate.chk"))
    same = manifest.source.same_files_as(L.SourceNode.describe(db_dir, index_dir, None))
    if same:
        reminder = (
            "This node was the backup's source: take a FULL backup of it now, into a new folder "
            "(spec rule 6), before any differential backup."
        )
    else:
        reminder = (
            "If this node was the backup's source, take a full backup of it now (spec rule 6). Start the "
            "node: it truncates the log to the backup's chaser position and re-indexes."
        )
    if manifest.archived_before:
        p.logger.info(
            "RESTORE: the chunks before position %d are in the archive %s only: the node reads them from there",
            manifest.archived_before,
            archive.description if archive is not None else manifest.archive,
        )
    p.logger.warning("RESTORE %s", reminder)
    p.finish("completed")
    p.logger.info(
        "RESTORE of %s into %s completed: %d files, %d bytes; the node truncates to %d at start",
        backup,
        db_dir,
        p.files_copied,
        p.bytes_copied,
        truncate_to,
    )
    return RestoreResult(
        p.files_copied - 1,
        p.files_removed,
        p.bytes_copied,
        truncate_to,
        same,
        reminder,
        manifest.archived_before,
        archive.description if archive is not None and manifest.archived_before else None,
    )
