from __future__ import annotations

import pytest

from evdb.clock import ManualClock
from evdb.database import Database


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture(params=["disk", "memory"])
def db(request, tmp_path, clock):
    """A small-chunk database, on disk and in memory (MemDb): the same semantics either way."""
    directory = str(tmp_path / "db") if request.param == "disk" else None
    database = Database.open(
        directory,
        clock=clock,
        chunk_size=64 * 1024,
        existence_filter_capacity=10_000,
        max_memtable_entries=64,
    )
    yield database
    database.close()
