"""A single node's replication.chk: written once per COMMIT_FILE_STEP of log and exactly at close, not
at each commit; a cluster member's (a read limit is set) at each new commit position, as before."""

from __future__ import annotations

import os
import struct

from evdb.database import COMMIT_FILE_STEP, Database
from evdb.streams import NewEvent


def _on_disk(folder: str) -> int | None:
    path = os.path.join(folder, "replication.chk")
    if not os.path.exists(path):
        return None
    with open(path, "rb") as f:
        raw = f.read()
    return struct.unpack("<q", raw)[0] if len(raw) == 8 else None


def _append(db: Database, n: int, size: int = 10) -> None:
    for i in range(n):
        db.append(f"s-{i % 3}", [NewEvent("E", b"x" * size)])


def test_a_single_node_writes_the_file_per_step_and_at_close(tmp_path):
    folder = str(tmp_path / "n")
    db = Database.open(folder, chunk_size=1 << 22)
    try:
        db.record_commit_position(db.committed_position)  # what a single node does as it starts
        at_start = _on_disk(folder)
        for _ in range(20):  # commits of a few hundred bytes: under a step, nothing is written
            _append(db, 1)
            db.record_commit_position(db.committed_position)
        assert _on_disk(folder) == at_start
        _append(db, 12, size=100_000)  # past a step of log: written at the next call
        assert db.committed_position - max(at_start or 0, 0) >= COMMIT_FILE_STEP
        db.record_commit_position(db.committed_position)
        assert _on_disk(folder) == db.committed_position
        _append(db, 3)
        db.record_commit_position(db.committed_position)
        last = db.committed_position
        assert _on_disk(folder) < last  # type: ignore[operator]
    finally:
        db.close()
    assert _on_disk(folder) == last  # exact after a clean stop
    reopened = Database.open(folder, chunk_size=1 << 22)
    try:
        assert reopened.commit_limit_at_open() == last
    finally:
        reopened.close()


def test_a_file_behind_the_log_only_narrows_what_a_restarted_member_serves(tmp_path):
    """As after a kill -9 between steps: the file holds an older position; a member opened on the folder
    serves up to it (its leader confirms the rest), never past its log."""
    folder = str(tmp_path / "n")
    db = Database.open(folder, chunk_size=1 << 22)
    try:
        _append(db, 2)
        db.record_commit_position(db.committed_position)
        behind = db.committed_position
        db.close()  # the exact value is kept at close ...
        db = Database.open(folder, chunk_size=1 << 22)
        _append(db, 5)
        db.record_commit_position(db.committed_position)  # ... later ones wait for a step
        assert _on_disk(folder) == behind
        assert db.commit_limit_at_open() == behind < db.committed_position
    finally:
        db.close()


def test_a_cluster_member_writes_each_new_commit_position(tmp_path):
    folder = str(tmp_path / "n")
    db = Database.open(folder, chunk_size=1 << 22)
    try:
        for _ in range(5):
            _append(db, 1)
            db.set_read_limit(db.committed_position)
            assert _on_disk(folder) == db.committed_position
    finally:
        db.close()
