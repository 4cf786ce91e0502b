"""``indexmap``: the current set of PTables and the index checkpoint, as a small text file.

::

    <xxh3-128 of every byte after this line, 32 lowercase hex digits>
    1                               format version
    <checkpoint>                    log position up to which the PTables hold every entry (-1: none)
    <max auto-merge level>          tables at this level or above are never merged automatically
    <level>,<index>,<GUID>          one line per PTable, by level then index within the level

Lines end with ``\\n``. ``index`` is the table's place in its level, 0 the oldest. The file is
replaced atomically (``indexmap.tmp``, fsync, rename, folder fsync): the differential backup
copies it, then the tables it names, then compares it again, so it must always name exactly the
current, complete tables.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

import xxhash

from evdb.errors import CorruptedFile
from evdb.index.durable import write_durably
from evdb.index.ptable import TABLE_NAME

__all__ = ["DEFAULT_MAX_AUTO_MERGE_LEVEL", "INDEXMAP_NAME", "IndexMap", "IndexMapEntry"]

INDEXMAP_NAME = "indexmap"
FORMAT_VERSION = 1
DEFAULT_MAX_AUTO_MERGE_LEVEL = 2**31 - 1  # KurrentDB's default: no limit
_DIGEST_LINE = re.compile(r"[0-9a-f]{32}")
_INT = re.compile(r"-?[0-9]+")


@dataclass(frozen=True, slots=True)
class IndexMapEntry:
    """One PTable: its level, its place in the level (0 = oldest), its file name."""

    level: int
    index: int
    name: str


@dataclass(frozen=True, slots=True)
class IndexMap:
    checkpoint: int = -1
    max_auto_merge_level: int = DEFAULT_MAX_AUTO_MERGE_LEVEL
    tables: tuple[IndexMapEntry, ...] = ()

    def encode(self) -> bytes:
        lines = [str(FORMAT_VERSION), str(self.checkpoint), str(self.max_auto_merge_level)]
        lines += [
            f"{t.level},{t.index},{t.name}" for t in sorted(self.tables, key=lambda t: (t.level, t.index))
        ]
        body = ("\n".join(lines) + "\n").encode()
        return xxhash.xxh3_128_hexdigest(body).encode() + b"\n" + body

    @classmethod
    def decode(cls, raw: bytes, path: str = INDEXMAP_NAME) -> IndexMap:
        """Parse and check an indexmap; ``CorruptedFile(path, ...)`` when it is not a valid one."""
        digest, newline, body = raw.partition(b"\n")
        if not newline or not _DIGEST_LINE.fullmatch(digest.decode("ascii", "replace")):
            raise CorruptedFile(path, "indexmap has no checksum line")
        if xxhash.xxh3_128_hexdigest(body).encode() != digest:
            raise CorruptedFile(path, "indexmap checksum mismatch")
        try:
            text = body.decode("ascii")
        except UnicodeDecodeError:
            raise CorruptedFile(path, "indexmap is not ASCII text") from None
        if not text.endswith("\n"):
            raise CorruptedFile(path, "indexmap does not end with a newline")
        lines = text[:-1].split("\n")
        if len(lines) < 3 or not all(_INT.fullmatch(v) for v in lines[:3]):
            raise CorruptedFile(path, "indexmap header lines are malformed")
        version, checkpoint, max_level = (int(v) for v in lines[:3])
        if version != FORMAT_VERSION:
            raise CorruptedFile(path, f"unknown indexmap format version {version}")
        if checkpoint < -1 or max_level < 0:
            raise CorruptedFile(path, "indexmap checkpoint or max auto-merge level out of range")
        tables = tuple(_table_line(line, path) for line in lines[3:])
        _check_tables(tables, path)
        return cls(checkpoint, max_level, tables)

    @classmethod
    def read(cls, directory: str) -> IndexMap | None:
        """The folder's indexmap, or None when there is none (the index is then rebuilt from the log)."""
        path = os.path.join(directory, INDEXMAP_NAME)
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return None
        return cls.decode(raw, path)

    def write(self, directory: str) -> None:
        """Replace the folder's indexmap atomically and durably."""
        write_durably(os.path.join(directory, INDEXMAP_NAME), [self.encode()])


def _table_line(line: str, path: str) -> IndexMapEntry:
    fields = line.split(",")
    if len(fields) != 3 or not _INT.fullmatch(fields[0]) or not _INT.fullmatch(fields[1]):
        raise CorruptedFile(path, f"indexmap table line {line!r} is malformed")
    if not TABLE_NAME.fullmatch(fields[2]):
        raise CorruptedFile(path, f"indexmap names {fields[2]!r}, which is not a table name")
    entry = IndexMapEntry(int(fields[0]), int(fields[1]), fields[2])
    if entry.level < 0 or entry.index < 0:
        raise CorruptedFile(path, f"indexmap table line {line!r} is out of range")
    return entry


def _check_tables(tables: tuple[IndexMapEntry, ...], path: str) -> None:
    """Each name once; each level's indexes 0, 1, 2, ... in order."""
    if len({t.name for t in tables}) != len(tables):
        raise CorruptedFile(path, "indexmap names a table twice")
    expected: dict[int, int] = {}
    previous_level = -1
    for t in tables:
        if t.level < previous_level or t.index != expected.get(t.level, 0):
            raise CorruptedFile(path, "indexmap table lines are out of order")
        expected[t.level] = t.index + 1
        previous_level = t.level
