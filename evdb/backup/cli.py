"""``evdb backup``, ``evdb backup verify`` and ``evdb restore``.

Exit codes: 0 done; 1 failed; 2 bad usage; 3 a scavenge runs or ran (see --stop-scavenge);
4 files of another node; 5 unfinished backup (or an archive with nothing archived yet: ``evdb
restore --from-archive``, evdb/archive/restore.py); 6 a node runs on the restore's folders.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from evdb.backup.errors import BackupError, InvalidBackupFolder
from evdb.backup.layout import check_folder
from evdb.backup.procedures import run_backup
from evdb.backup.progress import Progress, json_lines_listener
from evdb.backup.restore import restore_backup
from evdb.backup.scavenge_guard import FolderScavengeGuard, HttpScavengeGuard
from evdb.backup.verify import verify_backup
from evdb.errors import EvdbError

if TYPE_CHECKING:
    from evdb.archive.store import ArchiveStore

__all__ = ["register_cli"]

#: the node's options ``evdb restore --from-archive`` reads (with ``--db`` and ``--index``): the file
#: that holds them, the chunk size, and the archive's
_ARCHIVE_OPTIONS = (
    "Config",
    "ChunkSize",
    "ArchiveEnabled",
    "ArchiveStorageType",
    "ArchiveS3Region",
    "ArchiveS3Bucket",
    "ArchiveFileSystemPath",
    "ArchiveRetainAtLeastDays",
    "ArchiveRetainAtLeastLogicalBytes",
)

_RESTORE_HELP = """\
Restore a stopped node's database folders, from a backup (--from BACKUP) or from the archive alone
(--from-archive); exactly one of the two.

--from BACKUP: copy the backup into place and copy chaser.chk over truncate.chk; at its next start
the node truncates the log there and re-indexes.

--from-archive: read the archive the node's configuration names (--config node.yaml, the
environment, or the --archive-* options; S3 endpoint and credentials from the standard AWS
providers), as `evdb node` does. Before any file is touched it checks the archive is reachable,
claimed by a cluster (archive.claim), its checkpoint (archive.chk) readable, its chunk size the
node's ChunkSize and every chunk before the checkpoint there; that no node runs on the folders and
that they hold no database unless --overwrite, and that the database folder is no mount point. It
then downloads every archived chunk into .<db>.archive-restore beside the database folder, each
verified by its checksum, writes the checkpoints so that the log ends at the archive checkpoint,
syncs, and swaps that folder with the database folder in one rename. A kill at any point leaves the
old folder or the whole restored one. At its next start the node indexes the log, joins its cluster
and catches up the rest from the leader as any follower behind.

Exit codes: 0 done; 1 failed (a damaged or missing archived chunk, an archive unreachable, the
folders hold a database and no --overwrite); 2 bad usage (no archive there, a ChunkSize other than
the archive's, a database folder that is a mount point, options); 3 a scavenge runs or ran; 4 files
of another node; 5 unfinished backup, or an archive with nothing archived yet; 6 a node runs on the
restore's folders.
"""

_log = logging.getLogger("evdb.backup")


def _console_logging(verbose: bool) -> None:
    if not _log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        _log.addHandler(handler)
        _log.propagate = False
    _log.setLevel(logging.DEBUG if verbose else logging.INFO)


def register_cli(subparsers: argparse._SubParsersAction) -> None:
    backup = subparsers.add_parser(
        "backup",
        help="back a node's database up (simple full or differential), or verify a backup",
        description=(
            "Copy a node's database and index folders into a backup folder, in the order the "
            "maintenance spec gives (full: index checkpoints, other index files, database "
            "checkpoints, chunks; differential: index part then log part, copying only new files). "
            "Refuses while a scavenge runs on the node unless --stop-scavenge."
        ),
    )
    backup.add_argument("--db", help="the node's database folder (chunks and checkpoints)")
    backup.add_argument("--index", help="the node's index folder (default: <db>/index)")
    backup.add_argument("--to", dest="dest", help="the backup folder (created if missing)")
    backup.add_argument(
        "--differential", action="store_true", help="copy only new or changed files into an existing backup"
    )
    backup.add_argument(
        "--node", help="the node's HTTP address, to check (and with --stop-scavenge stop) its scavenge"
    )
    backup.add_argument("--user", default="admin", help="user for --node (default admin)")
    backup.add_argument("--password", default="changeit", help="password for --node (default changeit)")
    backup.add_argument("--ca", help="CA certificate that signed the node's certificate")
    backup.add_argument(
        "--stop-scavenge",
        action="store_true",
        help="stop a running scavenge, back up, then start the scavenge again (it resumes)",
    )
    backup.add_argument(
        "--progress-json", action="store_true", help="print progress as JSON lines on standard output"
    )
    backup.add_argument("--verbose", action="store_true", help="log every file copied")
    from evdb.options import add_arguments

    # a node with archived.chk keeps its first chunks in the archive only: the manifest names which
    add_arguments(backup, only=_ARCHIVE_OPTIONS)
    backup.set_defaults(func=_backup)
    sub = backup.add_subparsers(dest="backup_command", metavar="COMMAND")
    verify = sub.add_parser("verify", help="check every chunk checksum and the index files of a backup")
    verify.add_argument("backup_dir", metavar="BACKUP")
    verify.set_defaults(func=_verify)
    hook = sub.add_parser(
        "snapshot-hook",
        help="call before disk snapshots: flush to disk and print which volume to snapshot first",
    )
    hook.add_argument("--db", required=True, help="the node's database folder")
    hook.add_argument("--index", help="the node's index folder (default: <db>/index)")
    hook.set_defaults(func=_snapshot_hook)

    restore = subparsers.add_parser(
        "restore",
        help="restore a backup, or the archive, onto a stopped node's folders",
        description=_RESTORE_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    source = restore.add_mutually_exclusive_group()
    source.add_argument("--from", dest="backup_dir", metavar="BACKUP", help="the backup folder to restore")
    source.add_argument(
        "--from-archive",
        action="store_true",
        help="restore from the archive the node's configuration names (--config, or the --archive-* options)",
    )
    restore.add_argument(
        "--db", help="the node's database folder (with --from-archive: default the configuration's Db)"
    )
    restore.add_argument("--index", help="the node's index folder (default: <db>/index)")
    restore.add_argument("--overwrite", action="store_true", help="replace the database the folders hold now")
    restore.add_argument(
        "--no-verify", action="store_true", help="skip checking the backup's checksums before copying"
    )
    restore.add_argument("--progress-json", action="store_true", help="print progress as JSON lines")
    add_arguments(restore, only=_ARCHIVE_OPTIONS)
    restore.set_defaults(func=_restore)


def _progress(operation: str, as_json: bool) -> Progress:
    progress = Progress(operation, _log)
    if as_json:
        progress.listeners.append(json_lines_listener(sys.stdout))
    return progress


def _backup(args: argparse.Namespace) -> int:
    _console_logging(args.verbose)
    missing = [flag for flag, value in (("--db", args.db), ("--to", args.dest)) if not value]
    if missing:
        print(f"evdb backup: {' and '.join(missing)} required", file=sys.stderr)
        return 2
    try:
        check_folder(args.dest)
        check_folder(args.db, "database folder")
        if args.index is not None:
            check_folder(args.index, "index folder")
    except InvalidBackupFolder as exc:
        print(f"evdb backup: {exc}", file=sys.stderr)
        return exc.exit_code
    if args.stop_scavenge and not args.node:
        print("evdb backup: --stop-scavenge needs --node URL", file=sys.stderr)
        return 2
    guard = (
        HttpScavengeGuard(args.node, auth=(args.user, args.password), ca=args.ca)
        if args.node
        else FolderScavengeGuard(args.db)
    )
    if not args.node:
        _log.warning(
            "BACKUP without --node: a running scavenge is detected only by its temporary files, and a "
            "scavenge during the backup only by switched chunk files"
        )
    try:
        archive = _configured_archive(args)
    except EvdbError as exc:
        print(f"evdb backup: {exc}", file=sys.stderr)
        return 2
    try:
        result = run_backup(
            args.db,
            args.index,
            args.dest,
            differential=args.differential,
            guard=guard,
            stop_scavenge=args.stop_scavenge,
            progress=_progress("differential" if args.differential else "full", args.progress_json),
            node_url=args.node,
            archive=archive,
        )
    except BackupError as exc:
        print(f"evdb backup: {exc}", file=sys.stderr)
        return exc.exit_code
    except OSError as exc:
        print(f"evdb backup: {exc}", file=sys.stderr)
        return 1
    finally:
        if isinstance(guard, HttpScavengeGuard):
            guard.close()
        if archive is not None:
            archive.close()
    print(
        f"backup {result.kind} complete: {result.files_copied} files copied, {result.files_skipped} "
        f"unchanged, {result.files_removed} removed, {result.bytes_copied} bytes copied"
        + (f" ({result.bytes_unchanged} already in the backup)" if result.bytes_unchanged else "")
        + f" in {result.seconds:.2f} s; "
        f"a restore serves every event before position {result.chaser}",
        file=sys.stderr,
    )
    return 0


def _verify(args: argparse.Namespace) -> int:
    _console_logging(False)
    report = verify_backup(args.backup_dir)
    for problem in report.problems:
        print(f"problem: {problem}")
    state = "OK" if report.ok else "FAILED"
    print(
        f"verify {state}: {report.chunks_checked} chunks, {report.tables_checked} index tables, "
        f"{report.bytes_checked} bytes checked; chaser {report.chaser}"
        + (
            f"; the chunks before position {report.archived_before} are in the archive "
            f"{report.archive or '(not named: the backup was taken without the node configuration)'} only"
            if report.archived_before
            else ""
        )
    )
    return 0 if report.ok else 1


def _snapshot_hook(args: argparse.Namespace) -> int:
    """What a snapshot tool runs first: every written byte reaches the disks, then the order."""
    import json
    import os

    from evdb.backup.layout import read_checkpoint

    index = args.index or os.path.join(args.db, "index")
    for folder in (args.db, index):
        if not os.path.isdir(folder):
            print(f"evdb backup snapshot-hook: {folder} does not exist", file=sys.stderr)
            return 2
    os.sync()  # the node fsyncs appends; this also flushes checkpoints written without fsync
    same = os.stat(args.db).st_dev == os.stat(index).st_dev
    body = {
        "sameVolume": same,
        "snapshotOrder": [args.db] if same else [index, args.db],
        "chaser": read_checkpoint(os.path.join(args.db, "chaser.chk")),
        "rule": "one snapshot if db and index share a volume; else the index volume first, then the data volume",
    }
    print(json.dumps(body))
    return 0


def _restore(args: argparse.Namespace) -> int:
    _console_logging(False)
    if args.from_archive:
        return _restore_from_archive(args)
    if not args.backup_dir:
        print("evdb restore: name what to restore: --from BACKUP or --from-archive", file=sys.stderr)
        return 2
    if not args.db:
        print("evdb restore: --db required", file=sys.stderr)
        return 2

    try:
        archive = _configured_archive(args)
    except EvdbError as exc:
        print(f"evdb restore: {exc}", file=sys.stderr)
        return 2

    def run() -> str:
        try:
            result = restore_backup(
                args.backup_dir,
                args.db,
                args.index,
                overwrite=args.overwrite,
                verify=not args.no_verify,
                progress=_progress("restore", args.progress_json),
                archive=archive,
            )
        finally:
            if archive is not None:
                archive.close()
        archived = (
            f" It reads the chunks before position {result.archived_before} from the archive {result.archive}."
            if result.archived_before
            else ""
        )
        return (
            f"restore complete: {result.files_copied} files, {result.bytes_copied} bytes; the node truncates "
            f"to position {result.truncate_to} and re-indexes at its next start.{archived}\n"
            f"REMINDER: {result.reminder}"
        )

    return _restored(run)


def _configured_archive(args: argparse.Namespace) -> ArchiveStore | None:
    """The archive the node's configuration names (--config, the environment or the --archive-*
    options, as `evdb node` reads them); None when it enables none. EvdbError: a bad configuration."""
    import os

    from evdb.archive.settings import archive_settings
    from evdb.options import options_from_namespace

    settings = archive_settings(options_from_namespace(args, os.environ))
    return settings.open_store() if settings.enabled else None


def _restored(run: Callable[[], str]) -> int:
    """Run a restore; print what it says when done, or why it failed (its exit code)."""
    try:
        done = run()
    except BackupError as exc:
        print(f"evdb restore: {exc}", file=sys.stderr)
        return exc.exit_code
    except OSError as exc:
        print(f"evdb restore: {exc}", file=sys.stderr)
        return 1
    print(done, file=sys.stderr)
    return 0


def _restore_from_archive(args: argparse.Namespace) -> int:
    import os

    from evdb.archive.restore import restore_from_archive
    from evdb.archive.settings import archive_settings
    from evdb.errors import EvdbError
    from evdb.options import options_from_namespace

    try:
        options = options_from_namespace(args, os.environ)
        settings = archive_settings(options)
        if not settings.enabled:
            raise EvdbError(
                "--from-archive reads the archive the node's configuration names, and it does not enable "
                "one (Archive: Enabled: true): give the node's configuration (--config) or the --archive-* "
                "options"
            )
        if options.config_sources["Db"] == "default":
            raise EvdbError("name the node's database folder: --db, or Db in its configuration (--config)")
        store = settings.open_store()
    except EvdbError as exc:
        print(f"evdb restore: {exc}", file=sys.stderr)
        return 2

    def run() -> str:
        try:
            result = restore_from_archive(
                store,
                options.db,
                options.index,
                chunk_size=options.chunk_size,
                overwrite=args.overwrite,
                progress=_progress("restore", args.progress_json),
            )
        finally:
            store.close()
        return (
            f"restore complete: {result.chunks} chunks, {result.bytes_copied} bytes from {result.archive}; "
            f"the node's log ends at the archive checkpoint {result.position}. At its next start it indexes "
            "the log, then joins its cluster and catches up the rest from the leader."
        )

    return _restored(run)
