"""``evdb backup verify``: is a backup whole and restorable?

It checks the completion marker and the manifest, that the chunks cover the log from chunk 0 (or
from the node's ``archived.chk``: the chunks before are in its archive only, as the manifest says)
without gaps, every completed chunk's checksum, the records of the last chunk up to the chaser
position, that each chunk is the one the manifest recorded (same chunk id: no file of another node
slipped in), that every table ``indexmap`` names is present with a valid checksum, and the scavenge
database's integrity. Nothing in the backup is modified.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from dataclasses import dataclass, field

from evdb.backup import layout as L
from evdb.errors import CorruptedFile
from evdb.index import ptable as P
from evdb.index.indexmap import IndexMap
from evdb.scavenge import state as scavenge_state
from evdb.storage.chunk import Chunk, parse_chunk_file_name

__all__ = ["VerifyReport", "verify_backup"]

_log = logging.getLogger("evdb.backup")


@dataclass
class VerifyReport:
    backup: str
    problems: list[str] = field(default_factory=list)
    chunks_checked: int = 0
    tables_checked: int = 0
    bytes_checked: int = 0
    chaser: int = -1
    #: the chunks before this position are in the archive only (``archived.chk``), not in the backup
    archived_before: int = 0
    #: the archive that holds them, as the manifest names it (None: not recorded)
    archive: str | None = None

    @property
    def ok(self) -> bool:
        return not self.problems

    def problem(self, text: str) -> None:
        self.problems.append(text)
        _log.error("VERIFY problem: %s", text)


def _check_table(path: str) -> int:
    """The checks :meth:`PTable.open` makes, without rebuilding anything."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise CorruptedFile(path, "index table named by indexmap is missing") from None
    size = len(data)
    if size < P.HEADER_SIZE + P.FOOTER_SIZE:
        raise CorruptedFile(path, f"index table is {size} bytes: truncated")
    magic, version, _level, _, count = P._HEADER.unpack_from(data, 0)
    if magic != P.MAGIC or version != P.FORMAT_VERSION:
        raise CorruptedFile(path, "not an evdb index table, or an unknown format version")
    if size != P.table_file_size(count):
        raise CorruptedFile(path, f"index table is {size} bytes but holds {count} entries")
    if P._digest_of(memoryview(data), size - P.DIGEST_SIZE) != data[size - P.DIGEST_SIZE :]:
        raise CorruptedFile(path, "index table checksum mismatch")
    return size


def _verify_chunks(report: VerifyReport, db: str, manifest: L.Manifest | None) -> None:
    names = L.chunk_files(db)
    if not names:
        report.problem(f"{db} holds no chunk files")
        return
    chaser = report.chaser
    covered: int | None = None  # the first chunk's number: after those in the archive only
    chunk_size = 0
    for i, name in enumerate(names):
        path = os.path.join(db, name)
        last = i == len(names) - 1
        parsed = parse_chunk_file_name(name)
        assert parsed is not None
        try:
            chunk = Chunk.open(path, verify=True, writable=False)
        except CorruptedFile as exc:
            if last and "not completed" in str(exc):
                chunk = Chunk.open(path, verify=True, writable=True)
            else:
                report.problem(str(exc))
                continue
        chunk_size = chunk.chunk_size
        if covered is None:
            covered = report.archived_before // chunk_size
            if report.archived_before % chunk_size:
                report.problem(
                    f"archived.chk {report.archived_before} is not a chunk boundary ({chunk_size} bytes)"
                )
        try:
            if chunk.start_number != covered:
                report.problem(
                    f"chunk {covered} is missing (the next chunk file, {name}, starts at chunk {chunk.start_number})"
                    if chunk.start_number > covered
                    else f"{name} overlaps the chunk before it"
                )
            covered = chunk.end_number + 1
            if not chunk.is_completed:
                if not last:
                    report.problem(f"{path}: only the last chunk may be incomplete")
                elif chaser > chunk.start_position:
                    chunk.recover_active(chaser - chunk.start_position, verify=True)
            report.chunks_checked += 1
            report.bytes_checked += os.path.getsize(path)
            if manifest is not None:
                recorded = manifest.chunk_ids.get(name)
                actual = chunk.header.chunk_id.hex()
                if recorded is None:
                    report.problem(f"{name} is not in the backup's manifest (a file added by hand?)")
                elif recorded != actual:
                    report.problem(
                        f"{name} is not the chunk this backup copied (chunk id {actual}, manifest {recorded}): "
                        "files of different nodes must not be mixed"
                    )
        except CorruptedFile as exc:
            report.problem(str(exc))
        finally:
            chunk.close()
    if manifest is not None:
        for name in sorted(set(manifest.chunk_ids) - set(names)):
            report.problem(f"{name} is missing (the manifest lists it)")
    end = (covered or 0) * chunk_size
    if chaser > end:
        report.problem(f"chaser.chk {chaser} is beyond the end of the backup's chunks ({end})")


def _verify_index(report: VerifyReport, index: str) -> None:
    try:
        indexmap = IndexMap.read(index)
    except CorruptedFile as exc:
        report.problem(str(exc))
        return
    if indexmap is None:
        if L.index_table_files(index):
            report.problem(f"{index}/indexmap is missing but the folder holds index tables")
        return
    for table in indexmap.tables:
        path = os.path.join(index, table.name)
        try:
            report.bytes_checked += _check_table(path)
            report.tables_checked += 1
        except CorruptedFile as exc:
            report.problem(str(exc))
            continue
        if not os.path.exists(path + ".bloomfilter"):
            _log.warning("VERIFY %s.bloomfilter is missing (the node rebuilds it at start)", path)
    if indexmap.checkpoint > report.chaser >= 0:
        _log.warning(
            "VERIFY index checkpoint %d is past chaser %d: the node rebuilds the index after the restore",
            indexmap.checkpoint,
            report.chaser,
        )
    scavenge_db = os.path.join(index, L.SCAVENGE_DB)
    if os.path.exists(scavenge_db):
        try:
            with scavenge_state.reading(scavenge_db) as conn:
                result = conn.execute("PRAGMA quick_check").fetchone()[0]
            if result != "ok":
                report.problem(f"{scavenge_db}: {result}")
        except sqlite3.DatabaseError as exc:
            report.problem(f"{scavenge_db}: {exc}")


def verify_backup(backup: str) -> VerifyReport:
    report = VerifyReport(backup)
    if not os.path.isdir(backup):
        report.problem(f"{backup} does not exist")
        return report
    if not L.is_complete(backup):
        report.problem(
            f"{backup} has no {L.COMPLETE_MARKER} marker: the backup did not finish; run evdb backup again"
        )
    try:
        manifest = L.Manifest.read(backup)
    except ValueError as exc:
        report.problem(str(exc))
        manifest = None
    if manifest is None and not report.problems:
        report.problem(f"{backup} has no {L.MANIFEST}: it is not an evdb backup")
    db = os.path.join(backup, "db")
    index = os.path.join(backup, "index")
    if not os.path.isdir(db):
        report.problem(f"{db} is missing")
        return report
    for name in L.DIFFERENTIAL_CHECKPOINTS:
        path = os.path.join(db, name)
        try:
            value = L.read_checkpoint(path)
        except FileNotFoundError:
            report.problem(f"{path} is missing")
            continue
        except ValueError as exc:
            report.problem(str(exc))
            continue
        if name == "chaser.chk":
            report.chaser = value
    if manifest is not None and report.chaser != manifest.chaser and L.is_complete(backup):
        report.problem(f"chaser.chk holds {report.chaser} but the manifest recorded {manifest.chaser}")
    try:
        report.archived_before = L.read_archived_before(db)
    except ValueError as exc:
        report.problem(str(exc))
    if manifest is not None:
        report.archive = manifest.archive
        if report.archived_before != manifest.archived_before and L.is_complete(backup):
            report.problem(
                f"archived.chk holds {report.archived_before} but the manifest recorded {manifest.archived_before}"
            )
    if report.archived_before:
        _log.info(
            "VERIFY the chunks before position %d are in the archive %s only (not in the backup)",
            report.archived_before,
            report.archive or "(the manifest names none)",
        )
    _verify_chunks(report, db, manifest)
    if os.path.isdir(index):
        _verify_index(report, index)
    _log.info(
        "VERIFY %s: %d chunks, %d index tables, %d bytes checked, %d problems",
        backup,
        report.chunks_checked,
        report.tables_checked,
        report.bytes_checked,
        len(report.problems),
    )
    return report
