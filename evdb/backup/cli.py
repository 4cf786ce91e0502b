"""``evdb backup``, ``evdb backup verify`` and ``evdb restore``.

Exit codes: 0 done; 1 failed; 2 bad usage; 3 a scavenge runs or ran (see --stop-scavenge);
4 files of another node; 5 unfinished backup; 6 a node runs on the restore's folders.
"""

from __future__ import annotations

import argparse
import logging
import sys

from evdb.backup.errors import BackupError, InvalidBackupFolder
from evdb.backup.layout import check_folder
from evdb.backup.procedures import run_backup
from evdb.backup.progress import Progress, json_lines_listener
from evdb.backup.restore import restore_backup
from evdb.backup.scavenge_guard import FolderScavengeGuard, HttpScavengeGuard
from evdb.backup.verify import verify_backup

__all__ = ["register_cli"]

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
        help="restore a backup onto a stopped node's folders",
        description=(
            "Copy a backup into place for a stopped node and copy chaser.chk over truncate.chk; at its "
            "next start the node truncates the log there and re-indexes."
        ),
    )
    restore.add_argument("--from", dest="backup_dir", required=True, metavar="BACKUP")
    restore.add_argument("--db", required=True, help="the node's database folder")
    restore.add_argument("--index", help="the node's index folder (default: <db>/index)")
    restore.add_argument("--overwrite", action="store_true", help="replace the database the folders hold now")
    restore.add_argument(
        "--no-verify", action="store_true", help="skip checking the backup's checksums before copying"
    )
    restore.add_argument("--progress-json", action="store_true", help="print progress as JSON lines")
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
        result = run_backup(
            args.db,
            args.index,
            args.dest,
            differential=args.differential,
            guard=guard,
            stop_scavenge=args.stop_scavenge,
            progress=_progress("differential" if args.differential else "full", args.progress_json),
            node_url=args.node,
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
    try:
        result = restore_backup(
            args.backup_dir,
            args.db,
            args.index,
            overwrite=args.overwrite,
            verify=not args.no_verify,
            progress=_progress("restore", args.progress_json),
        )
    except BackupError as exc:
        print(f"evdb restore: {exc}", file=sys.stderr)
        return exc.exit_code
    except OSError as exc:
        print(f"evdb restore: {exc}", file=sys.stderr)
        return 1
    print(
        f"restore complete: {result.files_copied} files, {result.bytes_copied} bytes; the node truncates "
        f"to position {result.truncate_to} and re-indexes at its next start.\nREMINDER: {result.reminder}",
        file=sys.stderr,
    )
    return 0
