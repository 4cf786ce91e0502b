"""The system projections over an archive that cannot be reached for a while (issue 37): a projection
whose next read of ``$all`` is in a chunk kept in the archive only waits (1 s, then 2 s, ...), says so in
its status reason and the log, naming the archive, and goes on when the archive is back, writing every
link once; it never faults for it. In-process, on the file-system store: its folder's mount lost, then
back (the clock is a ManualClock, so the waits take no time)."""

from __future__ import annotations

import errno
import logging

from archive_helpers import CHUNK, leave_archived

from evdb.archive.filesystem import FileSystemStore
from evdb.archive.reads import ArchiveReads
from evdb.clock import ManualClock
from evdb.database import Database
from evdb.projections import SystemProjections
from evdb.projections.waits import LONGEST_WAIT_SECONDS
from evdb.subscriptions import CommitNotifier
from tests.waiting import until

LOG = logging.getLogger("test.archive.projections")


class _Unplugged(FileSystemStore):
    """A folder on a network mount: while ``down`` every read of an object fails as a lost mount's does
    (ENOTCONN), which the store reports as ArchiveUnavailable."""

    down = False

    def download(self, name, path):
        if self.down:
            with self._errors("read", name):
                raise OSError(errno.ENOTCONN, "Transport endpoint is not connected", self._path(name))
        return super().download(name, path)


async def test_a_projection_waits_for_the_archive_and_goes_on_when_it_is_back(tmp_path, clock, caplog):
    (tmp_path / "archive").mkdir()
    store = _Unplugged(str(tmp_path / "archive"))
    written = leave_archived(tmp_path / "db", clock, store)
    store.down = True
    reads = ArchiveReads(
        store, str(tmp_path / "cache"), chunk_size=CHUNK, max_cache_bytes=1 << 30, logger=LOG
    )
    db = Database.open(
        str(tmp_path / "db"), clock=clock, chunk_size=CHUNK, existence_filter_capacity=10_000, archive=reads
    )
    notifier = CommitNotifier(db)
    waits = ManualClock()
    service = SystemProjections(
        database=lambda: db,
        notifier=lambda: notifier,
        is_leader=lambda: True,
        clock=waits,
        logger=LOG,
        start_standard=True,
    )
    caplog.set_level(logging.INFO, logger=LOG.name)
    try:
        await service.start()
        await until(lambda: service.active, "the projections to load")

        def details() -> dict:
            return service.statistics("$by_category")[0]

        def reason_has(text: str):
            return lambda: text in details()["stateReason"]

        await until(reason_has("attempt 1, next in 1 s"), "the projection to wait for the archive")
        assert details()["status"] == "Running"
        assert store.description in details()["stateReason"]
        assert any(
            r.levelno == logging.WARNING
            and "Projection $by_category waits for the archive" in r.getMessage()
            and store.description in r.getMessage()
            for r in caplog.records
        )

        def second_wait() -> bool:
            if any("(attempt 2, next in 2 s)" in r.getMessage() for r in caplog.records):
                return True
            # the first wait's sleep starts a moment after its reason shows: the clock is moved on in
            # steps until it ended (one advance of 1 s could come before the sleep was under way)
            waits.advance(0.25)
            return False

        await until(second_wait, "the second wait, twice as long")
        assert details()["status"] == "Running"

        store.down = False
        end = db.readable_position

        def caught_up() -> bool:
            waits.advance(LONGEST_WAIT_SECONDS)  # every wait under way ends (a fifth reader is refused
            # while four wait for the archive: it waits once more)
            # (and no longer waiting: a projection at the end may still be waiting out a refusal, the
            # archive's fifth reader while four projections read it)
            return all(
                service._runtimes[n].next_position >= end and not service.statistics(n)[0]["stateReason"]
                for n in service.names()
            )

        await until(caught_up, "every projection to catch up once the archive is back")
        assert all(service.statistics(n)[0]["status"] == "Running" for n in service.names())
        assert details()["stateReason"] == ""
        assert any("Projection $by_category resumed" in r.getMessage() for r in caplog.records)
        orders = [f"{number}@{stream}" for stream, number, _ in written if stream.startswith("order-")]
        links = [e.data.decode() for e in db.read_stream_forward("$ce-order", 0, 100_000).events]
        assert links == orders  # each archived event linked once, in order
    finally:
        await service.stop()
        notifier.close()
        db.close()
        reads.close()
