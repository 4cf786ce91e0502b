from __future__ import annotations

import pytest
from backup_helpers import append_events, open_db


@pytest.fixture
def source(tmp_path):
    """A closed database folder (db, index) with a few chunks and several index tables."""
    db_dir = str(tmp_path / "node" / "db")
    index_dir = str(tmp_path / "node" / "index")
    with open_db(db_dir, index_dir) as db:
        append_events(db, 2000)
    return db_dir, index_dir
