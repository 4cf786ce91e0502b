"""The simple full and the differential backup, step by step in the spec's order.

Simple full: (1) index checkpoint files, (2) the other index files, (3) the database checkpoint
files, (4) the chunk files. Differential, index part: (1) skip to 7 when the index folder holds no
files, (2) copy ``indexmap`` (wait for it), (3) list the PTables, (4) copy those the backup lacks,
(5) compare ``indexmap`` again and go back to 2 when it changed, (6) remove tables the source no
longer has, (7-9) the stream-existence filter and the scavenge database. Log part: (1) rename the
backup's last chunk to ``.old``, (2) copy chaser, epoch, writer, proposal, (3) list the chunks,
(4) copy those the backup lacks, (5) remove chunks the source does not have (the ``.old`` too).

evdb adds a *prepare* step (refuse a running scavenge or another node's backup, mark the backup
unfinished, clear temporary files) and a *finish* step (check no scavenge ran, write the manifest,
then the completion marker). The full backup copies ``indexmap`` and its tables with the same
re-check loop as the differential one, so a merge during the copy cannot leave a map naming a
table the backup lacks, and it removes files the source no longer has.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from evdb.archive.archiver import read_checkpoint as read_archive_checkpoint
from evdb.archive.store import ArchiveStore
from evdb.backup import layout as L
from evdb.backup.copying import (
    copy_file,
    copy_files,
    copy_sqlite,
    fsync_dir,
    is_temp_name,
    remove_files,
)
from evdb.backup.errors import BackupError, MixedSources, ScavengeDuringBackup, ScavengeRunning
from evdb.backup.progress import Progress
from evdb.backup.scavenge_guard import FolderScavengeGuard, ScavengeGuard
from evdb.errors import ArchiveError, CorruptedFile
from evdb.index.indexmap import IndexMap

__all__ = ["BackupResult", "run_backup"]

_log = logging.getLogger("evdb.backup")

#: attempts of the differential index loop (steps 2-5) before the backup gives up
INDEX_ATTEMPTS = 50
#: how long step 2 waits for ``indexmap`` to exist again
INDEXMAP_WAIT_SECONDS = 30.0


@dataclass(frozen=True)
class BackupResult:
    destination: str
    kind: str
    files_copied: int
    files_skipped: int
    files_removed: int
    bytes_copied: int  # bytes of data written into the backup (an active chunk's holes are not)
    seconds: float
    chaser: int
    scavenge_restarted: str | None = None
    bytes_unchanged: int = 0  # bytes of data a differential found already in the backup


class _Backup:
    def __init__(
        self,
        db_dir: str,
        index_dir: str,
        dest: str,
        *,
        differential: bool,
        guard: ScavengeGuard,
        stop_scavenge: bool,
        progress: Progress,
        node_url: str | None,
        archive: ArchiveStore | None = None,
    ) -> None:
        self.db = db_dir
        self.archive = archive  # the node's archive, which holds the chunks before its archived.chk
        self.index = index_dir
        self.dest = dest
        self.dest_db = os.path.join(dest, "db")
        self.dest_index = os.path.join(dest, "index")
        self.differential = differential
        self.guard = guard
        self.stop_scavenge = stop_scavenge
        self.p = progress
        self.source = L.SourceNode.describe(db_dir, index_dir, node_url)
        self._baseline_last: str | None = None
        self._baseline_chunks: set[str] = set()
        self._dirty_dirs: set[str] = set()

    # -- helpers ---------------------------------------------------------------------------------------
    def _copy(self, source: str, target: str, relative: str) -> int:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        # a differential brings the backup's earlier copy up to date: an unchanged file costs no write
        size = copy_file(
            source,
            target,
            self.p.bytes_moved,
            update=self.differential,
            unchanged=self.p.bytes_kept,
            passed=self.p.bytes_passed,
        )
        self._dirty_dirs.add(os.path.dirname(target))
        self.p.file_copied(relative, size)
        return size

    def _remove(self, paths: list[str], relatives: list[str]) -> None:
        remove_files(paths)
        for relative in relatives:
            self.p.file_removed(relative)

    def _sizes(self, paths: list[str]) -> int:
        """The files' sizes: a step's ``bytesDone`` counts every byte once, copied, already in the
        backup, or a hole or zeros not written, so it ends at its ``bytesTotal``."""
        total = 0
        for path in paths:
            try:
                total += os.path.getsize(path)
            except FileNotFoundError:
                pass
        return total

    def _check_scavenge(self, when: str) -> None:
        running = self.guard.current()
        if running:
            raise ScavengeDuringBackup(
                f"A scavenge ({running}) started {when}; the copy may mix chunks from before and after "
                "it, so this backup is not usable. Stop the scavenge (or use --stop-scavenge) and run "
                "the backup again."
            )
        last = self.guard.last()
        if last != self._baseline_last:
            raise ScavengeDuringBackup(
                f"A scavenge ({last}) ran {when}; this backup is not usable. Run the backup again."
            )
        if os.path.isdir(self.db):
            present = set(L.chunk_files(self.db))
            gone = sorted(self._baseline_chunks - present)
            if gone:
                raise ScavengeDuringBackup(
                    f"Chunk files {', '.join(gone[:5])} were replaced {when} (a scavenge, redaction or "
                    "truncation switched chunks); this backup is not usable. Run the backup again."
                )

    # -- prepare ---------------------------------------------------------------------------------------
    def prepare(self) -> tuple[L.Manifest, tuple[str, dict] | None]:
        self.p.begin_step("backup", 0, "prepare: check the source and the destination")
        if not os.path.isdir(self.db):
            raise BackupError(f"The database folder {self.db} does not exist.")
        if not L.chunk_files(self.db):
            raise BackupError(f"{self.db} holds no chunk files: it is not an evdb database folder.")
        manifest = L.Manifest.read(self.dest) if os.path.isdir(self.dest) else None
        if manifest is None and os.path.isdir(self.dest) and os.listdir(self.dest):
            raise BackupError(
                f"{self.dest} is not empty and holds no evdb backup; give an empty or new folder."
            )
        if manifest is not None and not manifest.source.same_files_as(self.source):
            raise MixedSources(
                f"{self.dest} holds a backup of {manifest.source}, not of {self.source}. Files of "
                "different nodes must never be mixed (spec rule 3): back this node up into another folder."
            )
        if self.differential and os.path.isdir(self.dest_db):
            self._check_chunk_ids()
        stopped = None
        running = self.guard.current()
        if running:
            if not self.stop_scavenge:
                raise ScavengeRunning(
                    f"A scavenge ({running}) is running on the source node; a file-copy backup must not "
                    "overlap it. Stop it first, or give --stop-scavenge to stop it and start it again "
                    "after the backup."
                )
            if not getattr(self.guard, "can_stop", False):
                raise ScavengeRunning(
                    f"A scavenge ({running}) seems to be running and no node was given to stop it: give "
                    "--node URL with --stop-scavenge, or wait for it to finish."
                )
            settings = self.guard.settings(running)
            self.p.logger.info("BACKUP stopping scavenge %s before the backup", running)
            self.guard.stop(running)
            stopped = (running, settings)
        self._baseline_last = self.guard.last()
        self._baseline_chunks = set(L.chunk_files(self.db))
        os.makedirs(self.dest, exist_ok=True)
        remove_files([os.path.join(self.dest, L.COMPLETE_MARKER)])
        leftovers = []
        for root, _dirs, files in os.walk(self.dest):
            leftovers += [os.path.join(root, n) for n in files if is_temp_name(n) or n.endswith(".tmp")]
        if leftovers:
            self.p.logger.info("BACKUP removing %d temporary files of an interrupted run", len(leftovers))
            remove_files(leftovers)
        if manifest is None:
            manifest = L.Manifest(self.source)
        manifest.source = self.source
        manifest.kind = "differential" if self.differential else "full"
        manifest.started = self.p.clock.time()
        manifest.finished = None
        manifest.runs += 1
        manifest.write(self.dest)
        self.p.end_step()
        return manifest, stopped

    def _check_chunk_ids(self) -> None:
        """A chunk name in both the source and the backup must hold the same chunk (same id)."""
        source_names = set(L.chunk_files(self.db))
        for name in L.chunk_files(self.dest_db):
            if name not in source_names:
                continue
            try:
                ours, theirs = (
                    L.chunk_id_of(os.path.join(self.dest_db, name)),
                    L.chunk_id_of(os.path.join(self.db, name)),
                )
            except (FileNotFoundError, CorruptedFile):
                continue  # replaced meanwhile or damaged in the backup: it is copied again
            if ours != theirs:
                raise MixedSources(
                    f"{name} in the backup is not the source's {name} (different chunk ids): the backup "
                    "holds files of another node or of a database since restored or rebuilt. Never mix "
                    "them (spec rule 3): take a full backup into a new folder."
                )

    # -- index part ------------------------------------------------------------------------------------
    def _copy_index_tables(self, *, skip_present: bool) -> list[str]:
        """Differential index steps 2-5 (also the full backup's way of copying the tables)."""
        copied_now: set[str] = set()
        for _attempt in range(INDEX_ATTEMPTS):
            # step 2: copy indexmap, retrying until the source has one
            source_map = os.path.join(self.index, L.INDEXMAP)
            deadline = time.monotonic() + INDEXMAP_WAIT_SECONDS
            while True:
                try:
                    self._copy(source_map, os.path.join(self.dest_index, L.INDEXMAP), "index/indexmap")
                    break
                except FileNotFoundError:
                    if time.monotonic() > deadline:
                        raise BackupError(
                            f"{source_map} did not reappear within {INDEXMAP_WAIT_SECONDS:.0f} s."
                        ) from None
                    time.sleep(0.05)
            # step 3: the tables of the source
            index_files = L.index_table_files(self.index)
            # step 4: copy those the backup does not have
            present = set(L.index_table_files(self.dest_index)) if skip_present else copied_now
            todo = [n for n in index_files if n not in present]
            self.p.add_to_step(len(todo), self._sizes([os.path.join(self.index, n) for n in todo]))
            for name in index_files:
                if name not in todo:
                    self.p.file_skipped(f"index/{name}")
            for name in todo:
                try:
                    self._copy(
                        os.path.join(self.index, name), os.path.join(self.dest_index, name), f"index/{name}"
                    )
                    copied_now.add(name)
                except FileNotFoundError:
                    pass  # merged away meanwhile; step 5 sees the changed indexmap
            # step 5: compare indexmap in source and backup
            if self._same_indexmap() and self._tables_present():
                return index_files
            self.p.logger.info("BACKUP index part: indexmap changed while copying; copying it again")
        raise BackupError(
            f"The index kept changing: indexmap differed after {INDEX_ATTEMPTS} attempts. Run the "
            "backup again when the node is less busy."
        )

    def _same_indexmap(self) -> bool:
        try:
            with open(os.path.join(self.index, L.INDEXMAP), "rb") as f:
                source = f.read()
        except FileNotFoundError:
            return False
        with open(os.path.join(self.dest_index, L.INDEXMAP), "rb") as f:
            return f.read() == source

    def _tables_present(self) -> bool:
        try:
            indexmap = IndexMap.read(self.dest_index)
        except CorruptedFile:
            return False
        if indexmap is None:
            return False
        return all(os.path.exists(os.path.join(self.dest_index, t.name)) for t in indexmap.tables)

    def _remove_stale_tables(self, index_files: list[str]) -> None:
        keep = set(index_files)
        stale = [n for n in L.index_table_files(self.dest_index) if n not in keep]
        self._remove([os.path.join(self.dest_index, n) for n in stale], [f"index/{n}" for n in stale])

    def _copy_if_present(self, relative: str, *, sqlite: bool = False) -> None:
        source = os.path.join(self.index, relative)
        target = os.path.join(self.dest_index, relative)
        if not os.path.exists(source):
            self.p.file_skipped(f"index/{relative}")
            return
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if sqlite:
            size = copy_sqlite(source, target)
            self.p.bytes_moved(size)
            self._dirty_dirs.add(os.path.dirname(target))
            self.p.file_copied(f"index/{relative}", size)
        else:
            try:
                self._copy(source, target, f"index/{relative}")
            except FileNotFoundError:
                self.p.file_skipped(f"index/{relative}")

    def _index_step(self, number: int, name: str, relative: str, *, sqlite: bool = False) -> None:
        self.p.begin_step("index", number, name, 1, self._sizes([os.path.join(self.index, relative)]))
        self._copy_if_present(relative, sqlite=sqlite)
        self.p.end_step()

    def differential_index(self) -> None:
        os.makedirs(self.dest_index, exist_ok=True)
        self.p.begin_step("index", 1, "check whether the index folder holds files")
        has_files = L.index_has_files(self.index)
        self.p.end_step()
        if has_files:
            self.p.begin_step(
                "index", 2, "copy indexmap, then the tables it names, until indexmap is unchanged"
            )
            index_files = self._copy_index_tables(skip_present=True)
            self.p.end_step()
            self.p.begin_step("index", 6, "remove tables the source no longer has")
            self._remove_stale_tables(index_files)
            self.p.end_step()
        self._index_step(7, "copy the stream-existence checkpoint", L.EXISTENCE_CHK)
        self._index_step(8, "copy the stream-existence filter", L.EXISTENCE_DAT)
        self._index_step(9, "copy the scavenge database", L.SCAVENGE_DB, sqlite=True)

    # -- log part --------------------------------------------------------------------------------------
    def differential_log(self) -> None:
        os.makedirs(self.dest_db, exist_ok=True)
        self.p.begin_step("log", 1, "rename the backup's last chunk to .old")
        existing = L.chunk_files(self.dest_db)
        last = None
        if existing:
            last = existing[-1]
            os.rename(os.path.join(self.dest_db, last), os.path.join(self.dest_db, last + ".old"))
            fsync_dir(self.dest_db)
            self.p.logger.info("BACKUP log part renamed %s to %s.old", last, last)
        self.p.end_step()
        names = (*L.DIFFERENTIAL_CHECKPOINTS, L.ARCHIVED_CHK)  # archived.chk: an archive's, when there is one
        checkpoints = [n for n in names if os.path.exists(os.path.join(self.db, n))]
        self.p.begin_step(
            "log",
            2,
            "copy chaser, epoch, writer and proposal checkpoints",
            len(checkpoints),
            8 * len(checkpoints),
        )
        for name in checkpoints:
            self._copy(os.path.join(self.db, name), os.path.join(self.dest_db, name), f"db/{name}")
        self.p.end_step()
        self.p.begin_step("log", 3, "list the source's chunk files")
        chunk_files = L.chunk_files(self.db)
        self.p.end_step()
        present = set(L.chunk_files(self.dest_db))
        todo = [n for n in chunk_files if n not in present]
        self.p.begin_step(
            "log",
            4,
            "copy the chunk files the backup lacks",
            len(todo),
            self._sizes([os.path.join(self.db, n) for n in todo]),
        )
        for name in chunk_files:
            if name in present:
                self.p.file_skipped(f"db/{name}")
        # the source's version of the chunk renamed to .old (the one that was being written, most
        # often): brought up to date from the .old, whose records it starts with, not copied whole
        earlier = {}
        if last is not None and last in todo:
            earlier[os.path.join(self.dest_db, last)] = os.path.join(self.dest_db, last + ".old")
        self._copy_chunks(todo, earlier)
        self.p.end_step()
        self.p.begin_step("log", 5, "remove chunks the source does not have (and the .old file)")
        self._remove_stale_chunks(chunk_files)
        self.p.end_step()

    def _copy_chunks(self, names: list[str], earlier: dict[str, str] | None = None) -> None:
        """The chunk files, the bulk of a backup: copied as one batch (see copying.copy_files;
        ``earlier``: older copies in the backup to bring up to date instead)."""
        os.makedirs(self.dest_db, exist_ok=True)
        pairs = [(os.path.join(self.db, name), os.path.join(self.dest_db, name)) for name in names]
        try:
            copy_files(
                pairs,
                self.p.bytes_moved,
                lambda target, size: self.p.file_copied(f"db/{os.path.basename(target)}", size),
                earlier,
                self.p.bytes_kept,
                self.p.bytes_passed,
            )
        except FileNotFoundError as exc:
            raise ScavengeDuringBackup(
                f"Chunk file {os.path.basename(exc.filename or '?')} disappeared during the backup (a "
                "scavenge, redaction or truncation switched chunks); this backup is not usable. Run the "
                "backup again."
            ) from None
        self._dirty_dirs.add(self.dest_db)

    def _remove_stale_chunks(self, chunk_files: list[str]) -> None:
        keep = set(chunk_files)
        stale = [n for n in L.chunk_files(self.dest_db) if n not in keep] + L.old_chunk_files(self.dest_db)
        self._remove([os.path.join(self.dest_db, n) for n in stale], [f"db/{n}" for n in stale])

    # -- simple full -----------------------------------------------------------------------------------
    def full(self) -> None:
        os.makedirs(self.dest_db, exist_ok=True)
        os.makedirs(self.dest_index, exist_ok=True)
        chk_files = L.index_checkpoint_files(self.index) if os.path.isdir(self.index) else []
        self.p.begin_step(
            "full",
            1,
            "copy the index checkpoint files",
            len(chk_files),
            self._sizes([os.path.join(self.index, r) for r in chk_files]),
        )
        for relative in chk_files:
            self._copy_if_present(relative)
        self.p.end_step()

        self.p.begin_step("full", 2, "copy the other index files")
        if L.index_has_files(self.index):
            index_files = self._copy_index_tables(skip_present=False)
            self._remove_stale_tables(index_files)
        for relative in (L.EXISTENCE_DAT,):
            self.p.add_to_step(1, self._sizes([os.path.join(self.index, relative)]))
            self._copy_if_present(relative)
        self.p.add_to_step(1, self._sizes([os.path.join(self.index, L.SCAVENGE_DB)]))
        self._copy_if_present(L.SCAVENGE_DB, sqlite=True)
        self.p.end_step()

        checkpoints = [n for n in L.DB_CHECKPOINTS if os.path.exists(os.path.join(self.db, n))]
        self.p.begin_step(
            "full", 3, "copy the database checkpoint files", len(checkpoints), 8 * len(checkpoints)
        )
        for name in checkpoints:
            self._copy(os.path.join(self.db, name), os.path.join(self.dest_db, name), f"db/{name}")
        self.p.end_step()

        chunk_files = L.chunk_files(self.db)
        self.p.begin_step(
            "full",
            4,
            "copy the chunk files",
            len(chunk_files),
            self._sizes([os.path.join(self.db, n) for n in chunk_files]),
        )
        self._copy_chunks(chunk_files)
        self._remove_stale_chunks(chunk_files)
        self.p.end_step()

    def _record_archive(self, manifest: L.Manifest) -> None:
        """``archived.chk`` in the backup: the manifest says the chunks before it are in the archive
        only, and which archive (the one the node's configuration names, when given), checked to hold
        them (its checkpoint at or past that position)."""
        before = manifest.archived_before = L.read_archived_before(self.dest_db)
        manifest.archive = manifest.archive_log = None
        if not before:
            return
        if self.archive is None:
            self.p.logger.warning(
                "BACKUP: the chunks before position %d are in the node's archive only (archived.chk), not "
                "in this backup; give the node's configuration (--config) so the manifest names the archive",
                before,
            )
            return
        manifest.archive = self.archive.description
        try:
            checkpoint = read_archive_checkpoint(self.archive)
        except ArchiveError as exc:
            self.p.logger.warning("BACKUP could not read the archive's checkpoint: %s", exc)
            return
        if checkpoint.position < before:
            raise BackupError(
                f"The node leaves the chunks before position {before} to an archive, but the archive "
                f"{self.archive.description} holds the log up to {checkpoint.position} only: its "
                "configuration names another archive. This backup is not usable."
            )
        manifest.archive_log = checkpoint.log
        self.p.logger.info(
            "BACKUP: the chunks before position %d are in the archive %s (not copied)",
            before,
            manifest.archive,
        )

    # -- finish ----------------------------------------------------------------------------------------
    def finish(self, manifest: L.Manifest) -> None:
        self.p.begin_step("backup", 0, "finish: check no scavenge ran, write the manifest and the marker")
        self._check_scavenge("during the backup")
        for directory in sorted(self._dirty_dirs | {self.dest_db, self.dest_index}):
            if os.path.isdir(directory):
                fsync_dir(directory)
        manifest.chunk_ids = {
            n: L.chunk_id_of(os.path.join(self.dest_db, n)) for n in L.chunk_files(self.dest_db)
        }
        manifest.chaser = L.read_checkpoint(os.path.join(self.dest_db, "chaser.chk"))
        manifest.writer = L.read_checkpoint(os.path.join(self.dest_db, "writer.chk"))
        self._record_archive(manifest)
        manifest.finished = self.p.clock.time()
        manifest.write(self.dest)
        marker = os.path.join(self.dest, L.COMPLETE_MARKER)
        with open(marker + ".tmp", "w", encoding="utf-8") as f:
            f.write(f"evdb backup complete; chaser {manifest.chaser}\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(marker + ".tmp", marker)
        fsync_dir(self.dest)
        self.p.end_step()


def run_backup(
    db_dir: str,
    index_dir: str | None,
    dest: str,
    *,
    differential: bool = False,
    guard: ScavengeGuard | None = None,
    stop_scavenge: bool = False,
    progress: Progress | None = None,
    node_url: str | None = None,
    before_finish: Callable[[], None] | None = None,
    archive: ArchiveStore | None = None,
) -> BackupResult:
    """Back ``db_dir`` and ``index_dir`` up into ``dest``; raises a :class:`BackupError` on refusal
    or failure (the backup is then left unfinished: no completion marker). ``archive``: the node's
    archive (its configuration's), named in the manifest when the node keeps chunks there only."""
    L.check_folder(dest)
    L.check_folder(db_dir, "database folder")
    if index_dir is not None:
        L.check_folder(index_dir, "index folder")
    index_dir = index_dir or os.path.join(db_dir, "index")
    kind = "differential" if differential else "full"
    p = progress or Progress(kind, _log)
    guard = guard or FolderScavengeGuard(db_dir)
    run = _Backup(
        db_dir,
        index_dir,
        dest,
        differential=differential,
        guard=guard,
        stop_scavenge=stop_scavenge,
        progress=p,
        node_url=node_url,
        archive=archive,
    )
    started = p.clock.monotonic()
    stopped = None
    restarted = None
    try:
        manifest, stopped = run.prepare()
        p.logger.info("BACKUP %s of %s into %s started", kind, run.source, dest)
        if differential:
            run.differential_index()
            run.differential_log()
        else:
            run.full()
        if before_finish is not None:
            before_finish()
        run.finish(manifest)
    except BaseException as exc:
        p.finish("failed", str(exc))
        p.logger.error("BACKUP %s into %s failed: %s", kind, dest, exc)
        raise
    finally:
        if stopped is not None:
            scavenge_id, settings = stopped
            try:
                restarted = guard.start(settings)
                p.logger.info(
                    "BACKUP restarted the scavenge stopped before the backup (%s) as %s",
                    scavenge_id,
                    restarted,
                )
            except Exception as exc:  # the backup's own outcome stands; say what to do
                p.logger.error(
                    "BACKUP could not restart the scavenge %s: %s; start it again with POST /admin/scavenge",
                    scavenge_id,
                    exc,
                )
    p.finish("completed")
    seconds = p.clock.monotonic() - started
    p.logger.info(
        "BACKUP %s completed: %d files copied, %d skipped, %d removed, %d bytes copied (%d already in the "
        "backup) in %.2f s; chaser %d",
        kind,
        p.files_copied,
        p.files_skipped,
        p.files_removed,
        p.bytes_copied,
        p.bytes_unchanged,
        seconds,
        manifest.chaser,
    )
    return BackupResult(
        dest,
        kind,
        p.files_copied,
        p.files_skipped,
        p.files_removed,
        p.bytes_copied,
        seconds,
        manifest.chaser,
        restarted,
        p.bytes_unchanged,
    )
