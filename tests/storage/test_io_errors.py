"""One failed disk call does not stop the database for good (a disk that fails once, through the
storage I/O seam)."""

from __future__ import annotations

import errno
import os

from evdb.database import Database
from evdb.storage.disk import OsDisk, use_disk
from evdb.streams import NewEvent


class _WriterCheckpointFailsOnceAfterANewChunk(OsDisk):
    """The real disk, except the first write to writer.chk after a chunk file is renamed into place."""

    def __init__(self) -> None:
        self.armed = False
        self.failed = False

    def rename(self, src: str, dst: str) -> None:
        os.rename(src, dst)
        if os.path.basename(dst).startswith("chunk-"):
            self.armed = True

    def pwrite(self, fd: int, data, offset: int) -> int:
        if self.armed and not self.failed and os.readlink(f"/proc/self/fd/{fd}").endswith("writer.chk"):
            self.failed = True
            raise OSError(errno.EIO, "Input/output error (injected)")
        return os.pwrite(fd, data, offset)


def test_a_failed_writer_checkpoint_write_after_a_new_chunk_does_not_stop_the_writes(tmp_path):
    db_dir = str(tmp_path / "db")
    flaky = _WriterCheckpointFailsOnceAfterANewChunk()
    acknowledged = []
    with Database.open(db_dir, chunk_size=4096) as db, use_disk(flaky):
        for i in range(40):
            try:
                db.append("s", [NewEvent("E", b"%d" % i + b"." * 300)])
            except OSError:
                assert flaky.failed
                continue
            acknowledged.append(i)
        assert flaky.failed, "the failure was never injected"
        assert len(acknowledged) == 39, "the writes stopped after one failed disk call"
    with Database.open(db_dir, chunk_size=4096) as db:
        got = [int(bytes(e.data).rstrip(b".")) for e in db.read_stream_forward("s", 0, 100).events]
    assert got == acknowledged
