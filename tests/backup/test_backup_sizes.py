"""Issue 34: a full backup of the same data reported 13.2 MB one time and 280.6 MB another, and a
differential reported the whole 256 MiB active chunk as copied. The active chunk is a file of the
full chunk size whose tail is zeros; whether the file system reports that tail as a hole depends on
the page cache (ext4 calls a preallocated range data once it has been read), and a differential
counted the bytes its earlier copy already held as copied. Now a block of zeros is never written
(it stays a hole in the copy), ``bytesCopied`` is the bytes written, ``bytesUnchanged`` the bytes a
differential found already in the backup, and each step's ``bytesDone`` ends at its ``bytesTotal``."""

from __future__ import annotations

import os
import shutil

import pytest
from backup_helpers import append_events, open_db, progress

from evdb.backup import copying, run_backup, verify_backup
from evdb.backup.layout import chunk_files

BLOCK = 4096


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of 4 KiB, so that a test chunk (64 KiB) spans several."""
    monkeypatch.setattr(copying, "_STEP", BLOCK)
    monkeypatch.setattr(copying, "_ZEROS", bytes(BLOCK), raising=False)


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    root = tmp_path_factory.mktemp("sizes-source")
    with open_db(str(root / "db"), str(root / "index")) as db:
        append_events(db, 300)
    return root


def nonzero_blocks(path: str) -> int:
    with open(path, "rb") as f:
        data = f.read()
    zero = bytes(BLOCK)
    return sum(1 for at in range(0, len(data), BLOCK) if data[at : at + BLOCK] != zero[: len(data) - at])


def zeros_as_data(path: str) -> None:
    """Write the file's zeros back as data (what a page cache that read them makes ext4 report)."""
    with open(path, "r+b") as f:
        data = f.read()
        f.seek(0)
        f.write(data)


def test_the_bytes_copied_are_the_data_not_a_zero_tail_however_the_file_system_reports_it(
    template, tmp_path, small_blocks
):
    totals = []
    for name, written in (("sparse", False), ("written", True)):
        shutil.copytree(template, tmp_path / name)
        db_dir, index_dir = str(tmp_path / name / "db"), str(tmp_path / name / "index")
        last = os.path.join(db_dir, chunk_files(db_dir)[-1])
        if written:
            zeros_as_data(last)
        else:  # the tail a hole, as a node's preallocated chunk reads before anything cached it
            with open(last, "r+b") as f:
                size = os.fstat(f.fileno()).st_size
                data = f.read().rstrip(b"\0")
                f.truncate(0)
                f.seek(0)
                f.write(data)
                f.truncate(size)
        dest = str(tmp_path / f"bk-{name}")
        p = progress("full")
        reports: list[dict] = []
        p.listeners.append(reports.append)
        result = run_backup(db_dir, index_dir, dest, progress=p)
        assert verify_backup(dest).ok
        copy = os.path.join(dest, "db", os.path.basename(last))
        with open(last, "rb") as a, open(copy, "rb") as b:
            assert a.read() == b.read()
        # the zero tail is not copied: at most the data blocks of the last chunk were written for it
        tail = os.path.getsize(last) - nonzero_blocks(last) * BLOCK
        assert tail >= 4 * BLOCK
        assert result.bytes_copied + tail <= sum(
            os.path.getsize(os.path.join(r, n)) for r, _, ns in os.walk(db_dir) for n in ns
        ) + sum(os.path.getsize(os.path.join(r, n)) for r, _, ns in os.walk(index_dir) for n in ns)
        chunk_step = [r for r in reports if r.get("step") == 4 and r.get("part") == "full"][-1]
        assert chunk_step["bytesDone"] == chunk_step["bytesTotal"]  # the chunk step ends at its total
        totals.append(result.bytes_copied)
    assert totals[0] == totals[1]  # the same data: the same figure, whatever the file system says


def test_a_differential_counts_what_the_backup_already_holds_as_unchanged_not_copied(
    template, tmp_path, small_blocks
):
    shutil.copytree(template, tmp_path / "node")
    db_dir, index_dir = str(tmp_path / "node" / "db"), str(tmp_path / "node" / "index")
    dest = str(tmp_path / "bk")
    full = run_backup(db_dir, index_dir, dest)
    last = os.path.join(db_dir, chunk_files(db_dir)[-1])
    p = progress("differential")
    steps: list[dict] = []
    p.listeners.append(steps.append)
    again = run_backup(db_dir, index_dir, dest, differential=True, progress=p)
    # nothing changed: the checkpoints and the scavenge database are written again, no chunk byte
    chunks = sum(os.path.getsize(os.path.join(db_dir, n)) for n in chunk_files(db_dir))
    assert again.bytes_copied < full.bytes_copied and again.bytes_copied < chunks / 4, (again, full)
    assert again.bytes_unchanged >= os.path.getsize(last)
    assert steps[-1]["bytesCopied"] == again.bytes_copied
    assert steps[-1]["bytesUnchanged"] == again.bytes_unchanged
    assert verify_backup(dest).ok
