"""What a backup holds and where: the node's files by kind, and the backup's own two files.

A backup folder::

    DEST/db/        chunk files and the database checkpoint files
    DEST/index/     indexmap, <GUID> PTables and <GUID>.bloomfilter, stream-existence/, scavenging/
    DEST/backup.json        the manifest: the source node, what was copied, the chaser position
    DEST/BACKUP-COMPLETE    written last; a folder without it is an unfinished backup
"""

from __future__ import annotations

import json
import os
import re
import socket
from dataclasses import asdict, dataclass, field

from evdb.backup.copying import fsync_dir, is_temp_name
from evdb.backup.errors import InvalidBackupFolder
from evdb.storage.chunk import HEADER_SIZE, ChunkHeader, parse_chunk_file_name

__all__ = [
    "ARCHIVED_CHK",
    "COMPLETE_MARKER",
    "DB_CHECKPOINTS",
    "DIFFERENTIAL_CHECKPOINTS",
    "MANIFEST",
    "Manifest",
    "SourceNode",
    "check_folder",
    "chunk_files",
    "chunk_id_of",
    "index_checkpoint_files",
    "index_table_files",
    "read_archived_before",
    "read_checkpoint",
]

MANIFEST = "backup.json"
COMPLETE_MARKER = "BACKUP-COMPLETE"
FORMAT = 1

#: a node's marker of the chunks it keeps in the archive only (evdb/storage/log.py ARCHIVED_CHECKPOINT):
#: copied when present, never the archive's read cache (``archive-cache/``)
ARCHIVED_CHK = "archived.chk"
#: every checkpoint of the database folder (simple full backup, step 3)
DB_CHECKPOINTS = ("chaser.chk", "epoch.chk", "proposal.chk", "truncate.chk", "writer.chk", ARCHIVED_CHK)
#: the checkpoints the differential backup copies (log part, step 2), in the spec's order
DIFFERENTIAL_CHECKPOINTS = ("chaser.chk", "epoch.chk", "writer.chk", "proposal.chk")

INDEXMAP = "indexmap"
EXISTENCE_DIR = "stream-existence"
EXISTENCE_CHK = os.path.join(EXISTENCE_DIR, "streamExistenceFilter.chk")
EXISTENCE_DAT = os.path.join(EXISTENCE_DIR, "streamExistenceFilter.dat")
SCAVENGE_DB = os.path.join("scavenging", "scavenging.db")


def check_folder(path: object, what: str = "backup folder") -> str:
    """The rule for every folder a backup or restore is given (HTTP, CLI, the procedures): a
    non-empty path without a NUL byte, which no file system accepts. Raises InvalidBackupFolder
    (HTTP 400, exit code 2) before any file is touched."""
    if not isinstance(path, str) or not path.strip():
        raise InvalidBackupFolder(f"The {what} must be a non-empty path.")
    if "\x00" in path:
        raise InvalidBackupFolder(f"The {what} {path!r} contains a NUL byte, which no path can hold.")
    return path


def backup_target(value: object) -> str:
    """The rule for the folder a node is asked to back up into (``POST /admin/backup``'s ``to``, the
    dashboard's and web UI's backup dialogs): a folder on the node's host, named by an absolute path
    (:func:`check_folder` too); returned normalised. Raises InvalidBackupFolder (HTTP 400)."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidBackupFolder("Name the backup folder (an absolute path on the node's host).")
    check_folder(value)
    if not os.path.isabs(value):
        raise InvalidBackupFolder(f"The backup folder must be an absolute path, not {value!r}.")
    return os.path.normpath(value)


_GUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
_TABLE_FILE = re.compile(_GUID + r"(\.bloomfilter)?")


def read_checkpoint(path: str) -> int:
    with open(path, "rb") as f:
        raw = f.read(8)
    if len(raw) != 8:
        raise ValueError(f"{path} holds {len(raw)} bytes, a checkpoint holds 8")
    return int.from_bytes(raw, "little", signed=True)


def read_archived_before(db: str) -> int:
    """The position a database folder's ``archived.chk`` holds (0 when there is none): the chunks
    before it are in the archive only."""
    try:
        return read_checkpoint(os.path.join(db, ARCHIVED_CHK))
    except FileNotFoundError:
        return 0


def chunk_files(directory: str) -> list[str]:
    """Names of the chunk files in a database folder, by chunk number then version."""
    names = [n for n in os.listdir(directory) if parse_chunk_file_name(n) is not None and "." in n[6:]]
    names = [n for n in names if n.count(".") == 1]  # not ``.old`` or temporary names
    return sorted(names, key=lambda n: parse_chunk_file_name(n) or (0, 0))


def old_chunk_files(directory: str) -> list[str]:
    return sorted(n for n in os.listdir(directory) if n.startswith("chunk-") and n.endswith(".old"))


def chunk_id_of(path: str) -> str:
    """The random id in a chunk's header: two nodes never write a chunk with the same id."""
    with open(path, "rb") as f:
        return ChunkHeader.decode(f.read(HEADER_SIZE), path).chunk_id.hex()


def index_table_files(directory: str) -> list[str]:
    """``<GUID>`` and ``<GUID>.bloomfilter`` names in an index folder."""
    if not os.path.isdir(directory):
        return []
    return sorted(n for n in os.listdir(directory) if _TABLE_FILE.fullmatch(n))


def index_checkpoint_files(directory: str) -> list[str]:
    """Relative paths of every ``*.chk`` under the index folder (simple full backup, step 1)."""
    found = []
    for root, _dirs, files in os.walk(directory):
        for name in files:
            if name.endswith(".chk") and not is_temp_name(name):
                found.append(os.path.relpath(os.path.join(root, name), directory))
    return sorted(found)


def index_has_files(directory: str) -> bool:
    """Whether any file (not only folders) sits at the top of the index folder."""
    if not os.path.isdir(directory):
        return False
    return any(entry.is_file() for entry in os.scandir(directory))


@dataclass(frozen=True)
class SourceNode:
    """Which node a backup was taken from (spec rule 3: never mix files of different nodes)."""

    host: str
    db: str
    index: str
    node_url: str | None = None

    @classmethod
    def describe(cls, db_dir: str, index_dir: str, node_url: str | None) -> SourceNode:
        return cls(socket.gethostname(), os.path.realpath(db_dir), os.path.realpath(index_dir), node_url)

    def same_files_as(self, other: SourceNode) -> bool:
        return (self.host, self.db, self.index) == (other.host, other.db, other.index)

    def __str__(self) -> str:
        where = f"{self.host}:{self.db} (index {self.index})"
        return f"{where} via {self.node_url}" if self.node_url else where


@dataclass
class Manifest:
    source: SourceNode
    kind: str = "full"  # of the last run: full or differential
    started: float = 0.0
    finished: float | None = None
    chaser: int = -1  # the backup's chaser.chk: a restore serves every event before it
    writer: int = -1
    chunk_ids: dict[str, str] = field(default_factory=dict)  # chunk file name -> id in its header
    runs: int = 0
    #: ``archived.chk``: the chunks before this position are in the node's archive only, not in the
    #: backup (0: every chunk is in the backup)
    archived_before: int = 0
    #: which archive holds them (its location, as the node's configuration names it), and the log it
    #: holds (``archive.chk``'s identity); None when the backup was not told
    archive: str | None = None
    archive_log: str | None = None

    def to_json(self) -> dict:
        body = asdict(self)
        body["format"] = FORMAT
        return body

    @classmethod
    def from_json(cls, body: dict) -> Manifest:
        if body.get("format") != FORMAT:
            raise ValueError(f"unknown backup manifest format {body.get('format')!r}")
        src = body["source"]
        return cls(
            source=SourceNode(src["host"], src["db"], src["index"], src.get("node_url")),
            kind=body.get("kind", "full"),
            started=float(body.get("started", 0.0)),
            finished=body.get("finished"),
            chaser=int(body.get("chaser", -1)),
            writer=int(body.get("writer", -1)),
            chunk_ids=dict(body.get("chunk_ids", {})),
            runs=int(body.get("runs", 0)),
            archived_before=int(body.get("archived_before", 0)),
            archive=body.get("archive"),
            archive_log=body.get("archive_log"),
        )

    @classmethod
    def read(cls, backup: str) -> Manifest | None:
        path = os.path.join(backup, MANIFEST)
        try:
            with open(path, encoding="utf-8") as f:
                return cls.from_json(json.load(f))
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{path} is not a valid backup manifest: {exc}") from None

    def write(self, backup: str) -> None:
        path = os.path.join(backup, MANIFEST)
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(self.to_json(), f, indent=2, sort_keys=True)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(backup)


def is_complete(backup: str) -> bool:
    return os.path.exists(os.path.join(backup, COMPLETE_MARKER))
