"""How to open a database."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from evdb.storage.log import ArchivedChunks

__all__ = ["DEFAULT_CHUNK_SIZE", "DatabaseConfig"]

DEFAULT_CHUNK_SIZE = 256 * 1024 * 1024


@dataclass(frozen=True)
class DatabaseConfig:
    """How to open a database. ``db_dir`` None means in memory (MemDb)."""

    db_dir: str | None
    index_dir: str | None = None  # default: <db_dir>/index
    chunk_size: int = DEFAULT_CHUNK_SIZE
    max_memtable_entries: int = 1_000_000
    max_append_size: int = 16 * 1024 * 1024
    verify: bool = True
    stream_cache_capacity: int = 100_000
    idempotency_cache_capacity: int = 100_000
    existence_filter_capacity: int = 10_000_000
    #: where the log reads the chunks it keeps in the archive only (evdb/archive/reads.py); None: such
    #: reads fail with ArchiveUnavailable
    archive: ArchivedChunks | None = field(default=None, compare=False)

    @property
    def resolved_index_dir(self) -> str | None:
        if self.db_dir is None:
            return None
        return self.index_dir or os.path.join(self.db_dir, "index")
