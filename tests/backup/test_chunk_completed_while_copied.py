"""A backup beside a writing node: the active chunk it copies may be completed at any moment, which
writes its footer and cuts the file from the full chunk size to its exact size (storage-format.md).
The crash matrix's backup-under-writes mode failed on that ('chunk-000000.000000 became shorter while
it was copied (at byte 65536)', 3 of 10 CI runs): here the completion comes, deterministically, right
after the copy has looked at the file's size and data regions."""

from __future__ import annotations

import os

import pytest
from backup_helpers import append_events, open_db, progress

from evdb.backup import copying
from evdb.backup.procedures import run_backup
from evdb.backup.restore import restore_backup
from evdb.backup.verify import verify_backup
from evdb.storage.chunk import chunk_file_name


def _complete_during_copy(monkeypatch, db, chunk_path: str, when: str) -> list[int]:
    """The node completes the chunk of ``chunk_path`` (in its writer, as a full chunk or a scavenge
    point does) once, while the backup copies it: ``while``, right after the copy has read the
    file's size and data regions; ``after``, once it has copied the last of them (before it takes
    the copy as done). Returns the sizes the file was cut to."""
    regions, copy_range = copying._data_regions, copying._copy_range
    done: list[int] = []
    ends: list[int] = []

    def complete() -> None:
        db.call_in_writer(lambda ctx: ctx.complete_active_chunk())
        done.append(os.path.getsize(chunk_path))

    def regions_of(fd: int, size: int):
        found = regions(fd, size)
        if not done and os.path.samefile(f"/proc/self/fd/{fd}", chunk_path):
            if when == "while":
                complete()
            else:
                ends.append(found[-1][0] + found[-1][1])
        return found

    def copy_then_complete(src, dst, offset, length, *args):
        copy_range(src, dst, offset, length, *args)
        if ends and not done and offset + length == ends[-1]:
            complete()

    monkeypatch.setattr(copying, "_data_regions", regions_of)
    monkeypatch.setattr(copying, "_copy_range", copy_then_complete)
    return done


@pytest.mark.parametrize("when", ["while", "after"])
@pytest.mark.parametrize("differential", [False, True])
def test_a_chunk_completed_while_it_is_copied_is_copied_again_whole(
    tmp_path, monkeypatch, differential, when
):
    db_dir, index_dir, dest = (str(tmp_path / n) for n in ("db", "index", "backup"))
    with open_db(db_dir, index_dir) as db:
        append_events(db, 50, size=300)
        if differential:  # the backup's last chunk is an earlier copy of the active one
            run_backup(db_dir, index_dir, dest, progress=progress())
            append_events(db, 30, size=300)
        active = os.path.join(db_dir, chunk_file_name(db.log.active_chunk.start_number, 0))
        full_size = os.path.getsize(active)
        completed = _complete_during_copy(monkeypatch, db, active, when)
        run_backup(db_dir, index_dir, dest, differential=differential, progress=progress("differential"))
        assert completed and completed[0] < full_size  # the file was cut under the copy
        with (
            open(active, "rb") as source,
            open(os.path.join(dest, "db", os.path.basename(active)), "rb") as copy,
        ):
            assert copy.read() == source.read()  # the completed chunk, whole
        events = [e.id for e in db.iter_all(0)]
    report = verify_backup(dest)
    assert report.ok, report.problems
    restore_backup(dest, str(tmp_path / "restored"), overwrite=True)
    with open_db(str(tmp_path / "restored")) as restored:
        assert [e.id for e in restored.iter_all(0)] == events
