from __future__ import annotations

import logging
import os

from evdb.backup.progress import Progress
from evdb.database import Database
from evdb.streams import NewEvent

CHUNK_SIZE = 64 * 1024


def open_db(directory: str, index: str | None = None) -> Database:
    return Database.open(
        directory,
        index_dir=index,
        chunk_size=CHUNK_SIZE,
        max_memtable_entries=64,
        existence_filter_capacity=10_000,
    )


def append_events(db: Database, count: int, *, streams: int = 20, size: int = 60) -> list:
    results = []
    for i in range(count):
        stream = f"s-{i % streams}"
        results.append((stream, db.append(stream, [NewEvent("T", b"x" * size)])))
    db.index.wait_idle()
    return results


def progress(operation: str = "full", clock=None) -> Progress:
    kwargs = {"clock": clock} if clock is not None else {}
    return Progress(operation, logging.getLogger("evdb.backup.test"), **kwargs)


def files_in(directory: str) -> list[str]:
    out = []
    for root, _dirs, names in os.walk(directory):
        out += [os.path.relpath(os.path.join(root, n), directory) for n in names]
    return sorted(out)
