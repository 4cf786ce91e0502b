"""``indexmap``: the current set of PTables and the index checkpoint, as a small text file.

    <xxh3-64 of the lines below, 16 hex digits>
    1                                   format version
    <checkpoint>                        log position up to which the PTables hold every entry
    <max auto-merge level>
    <level>,<index>,<table name>        one line per PTable

Replaced atomically (temporary file, fsync, rename, folder fsync): the differential backup relies
on it naming exactly the current tables, and on tables never changing once written.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass

import xxhash

from evdb.errors import CorruptedFile

__all__ = ["IndexMap", "IndexMapEntry"]

FORMAT_VERSION = 1


@dataclass(frozen=True)
class IndexMapEntry:
    level: int
    index: int
    name: str


@dataclass(frozen=True)
class IndexMap:
    checkpoint: int = -1
    max_level: int = 64
    tables: tuple[IndexMapEntry, ...] = ()

    def encode(self) -> bytes:
        lines = [str(FORMAT_VERSION), str(self.checkpoint), str(self.max_level)]
        lines += [f"{t.level},{t.index},{t.name}" for t in self.tables]
        body = "\n".join(lines) + "\n"
        return (f"{xxhash.xxh3_64_hexdigest(body.encode())}\n{body}").encode()

    @classmethod
    def decode(cls, raw: bytes, path: str = "indexmap") -> IndexMap:
        try:
            text = raw.decode()
        except UnicodeDecodeError:
            raise CorruptedFile(path, "indexmap is not text") from None
        digest, _, body = text.partition("\n")
        if xxhash.xxh3_64_hexdigest(body.encode()) != digest.strip():
            raise CorruptedFile(path, "indexmap checksum mismatch")
        lines = body.splitlines()
        try:
            if int(lines[0]) != FORMAT_VERSION:
                raise CorruptedFile(path, f"unsupported indexmap version {lines[0]}")
            checkpoint, max_level = int(lines[1]), int(lines[2])
            tables = []
            for line in lines[3:]:
                level, index, name = line.split(",", 2)
                tables.append(IndexMapEntry(int(level), int(index), name))
        except (IndexError, ValueError):
            raise CorruptedFile(path, "indexmap is malformed") from None
        return cls(checkpoint, max_level, tuple(tables))

    @classmethod
    def read(cls, directory: str) -> IndexMap | None:
        path = os.path.join(directory, "indexmap")
        try:
            with open(path, "rb") as f:
                return cls.decode(f.read(), path)
        except FileNotFoundError:
            return None

    def write(self, directory: str) -> None:
        path = os.path.join(directory, "indexmap")
        tmp = os.path.join(directory, f"indexmap.{uuid.uuid4().hex}.tmp")
        with open(tmp, "wb") as f:
            f.write(self.encode())
            f.flush()
            os.fsync(f.fileno())
        os.rename(tmp, path)
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
