"""A damaged checkpoint is refused, naming the file and the value, before any file is touched.

The case that made this necessary: a ``truncate.chk`` holding a value that is not a record boundary
(or one beyond the writer checkpoint, or a negative other than -1) made the open delete chunk files
and rewrite chunk 0 before it checked the value, then fail; the node never started again.
"""

from __future__ import annotations

import hashlib
import os
import struct
import subprocess
import sys

import pytest

from evdb.database import Database
from evdb.errors import CorruptedFile
from evdb.storage.log import TransactionLog
from evdb.streams import NewEvent

CHUNK = 4096


def _build(db_dir: str) -> tuple[list[tuple[str, int, int]], int]:
    """A database of several chunks (the last one active); returns (stream, number, position) of each
    event, and the end of the log."""
    out = []
    with Database.open(db_dir, chunk_size=CHUNK) as db:
        for i in range(55):
            result = db.append(f"s-{i % 3}", [NewEvent("E", f"event {i}".encode() + b"." * 120)])
            out.append((f"s-{i % 3}", result.next_expected_version, result.position))
        end = db.log.committed
        assert end % CHUNK < CHUNK - 100  # room after the end in the active chunk
        # leftovers the open would clear away: they must stay when the open is refused
        with open(os.path.join(db_dir, "leftover.chunk.tmp"), "wb") as f:
            f.write(b"half a chunk")
    return out, end


def _snapshot(folder: str) -> dict[str, str]:
    """Every file under ``folder`` (relative name -> sha256 of its bytes)."""
    out = {}
    for root, _dirs, files in os.walk(folder):
        for name in files:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, folder)] = hashlib.sha256(f.read()).hexdigest()
    return out


def _set_checkpoint(db_dir: str, name: str, value: int) -> None:
    with open(os.path.join(db_dir, f"{name}.chk"), "r+b") as f:
        f.write(struct.pack("<q", value))


def _chunk_files(db_dir: str) -> list[str]:
    return sorted(n for n in os.listdir(db_dir) if n.startswith("chunk-"))


@pytest.fixture
def built(tmp_path):
    db_dir = str(tmp_path / "db")
    events, end = _build(db_dir)
    assert len(_chunk_files(db_dir)) >= 3
    return db_dir, events, end


def _bad_truncates(events, end: int) -> dict[str, int]:
    positions = [p for _, _, p in events]
    first_chunk = [p for p in positions if p < CHUNK]
    last_chunk = [p for p in positions if p >= positions[-1] // CHUNK * CHUNK]
    return {
        "inside a record of a completed chunk": first_chunk[2] + 5,
        "inside a record of the active chunk": last_chunk[-1] + 3,
        "beyond the writer checkpoint": end + 8,  # still inside the active chunk's range
        "in the unused end of a completed chunk": CHUNK - 1,
        "negative": -2,
        "very negative": -(1 << 40),
    }


@pytest.mark.parametrize(
    "case",
    [
        "inside a record of a completed chunk",
        "inside a record of the active chunk",
        "beyond the writer checkpoint",
        "in the unused end of a completed chunk",
        "negative",
        "very negative",
    ],
)
def test_a_bad_truncate_checkpoint_is_refused_and_nothing_changes(built, case):
    db_dir, events, end = built
    value = _bad_truncates(events, end)[case]
    _set_checkpoint(db_dir, "truncate", value)
    before = _snapshot(db_dir)
    with pytest.raises(CorruptedFile) as caught:
        Database.open(db_dir, chunk_size=CHUNK)
    message = str(caught.value)
    assert os.path.join(db_dir, "truncate.chk") in message, message
    assert str(value) in message, message
    assert _snapshot(db_dir) == before, "the refused open changed files"
    # and again: the node that failed can be started again (and fails the same way)
    with pytest.raises(CorruptedFile):
        TransactionLog.open(db_dir, chunk_size=CHUNK)
    assert _snapshot(db_dir) == before


@pytest.mark.parametrize(
    ("name", "value"),
    [("writer", -5), ("chaser", -1), ("epoch", -7), ("proposal", -3), ("writer", 1 << 40)],
)
def test_other_bad_checkpoints_are_refused_before_anything_changes(built, name, value):
    db_dir, _, _ = built
    _set_checkpoint(db_dir, name, value)
    before = _snapshot(db_dir)
    with pytest.raises(CorruptedFile) as caught:
        Database.open(db_dir, chunk_size=CHUNK)
    message = str(caught.value)
    assert os.path.join(db_dir, f"{name}.chk") in message, message
    assert str(value) in message, message
    assert _snapshot(db_dir) == before


def test_a_truncate_checkpoint_at_a_record_boundary_still_cuts_the_log(built):
    db_dir, events, _ = built
    cut_at = len(events) // 3  # in a completed chunk
    _set_checkpoint(db_dir, "truncate", events[cut_at][2])
    with Database.open(db_dir, chunk_size=CHUNK) as db:
        kept = [r.log_position for r in db.iter_all(0) if not r.stream.startswith("$")]
        assert kept == [p for _, _, p in events[:cut_at]]
        assert db.log.checkpoints.truncate.value == -1
        db.append("after", [NewEvent("E", b"x")])
    assert not os.path.exists(os.path.join(db_dir, "leftover.chunk.tmp"))
    with Database.open(db_dir, chunk_size=CHUNK) as db:
        assert db.read_stream_forward("after", 0, 10).events[0].data == b"x"


@pytest.mark.parametrize("where", ["active", "completed chunk end"])
def test_truncate_at_the_end_of_the_log_or_of_a_chunk_is_a_boundary(built, where):
    db_dir, _, end = built
    value = end if where == "active" else CHUNK
    _set_checkpoint(db_dir, "truncate", value)
    with Database.open(db_dir, chunk_size=CHUNK) as db:
        assert db.log.committed == value
        assert db.log.checkpoints.truncate.value == -1


@pytest.mark.slow
def test_the_node_process_exits_non_zero_naming_truncate_chk(tmp_path):
    db_dir = str(tmp_path / "db")
    node_chunk = 64 * 1024  # the node's smallest ChunkSize
    with Database.open(db_dir, chunk_size=node_chunk) as db:
        positions = [db.append("s", [NewEvent("E", b"." * 100)]).position for _ in range(10)]
    value = positions[4] + 5
    _set_checkpoint(db_dir, "truncate", value)
    before = _snapshot(db_dir)
    result = subprocess.run(
        [sys.executable, "-m", "evdb.cli", "node", "--db", db_dir, "--log", str(tmp_path / "log"),
         "--http-port", "0", "--insecure", "--chunk-size", str(node_chunk)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode != 0
    assert "truncate.chk" in result.stderr and str(value) in result.stderr, result.stderr
    assert _snapshot(db_dir) == before
