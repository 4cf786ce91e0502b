"""A finished backup's figures are final: its duration and speed stop moving when it ends, and it says
when it finished (the dashboard and GET /admin/backup/current read them)."""

from __future__ import annotations

import logging

from evdb.backup.progress import Progress
from evdb.clock import ManualClock


def test_duration_and_speed_stop_at_the_end():
    clock = ManualClock(1_700_000_000.0)
    progress = Progress("full", logging.getLogger("evdb.backup.test"), clock=clock)
    progress.begin_step("full", 4, "chunk files", files=1, size=4096)
    clock.advance(2.0)
    progress.bytes_moved(4096)
    progress.file_copied("chunk-000000.000000", 4096)
    progress.end_step()
    progress.finish("completed")
    final = progress.snapshot()
    assert final["elapsedSeconds"] == 2.0 and final["bytesPerSecond"] == 2048
    assert final["finishedAt"] == 1_700_000_002.0
    clock.advance(60.0)
    assert progress.snapshot() == final


def test_a_running_backup_has_no_finish_time_and_its_duration_grows():
    clock = ManualClock(1_700_000_000.0)
    progress = Progress("full", logging.getLogger("evdb.backup.test"), clock=clock)
    clock.advance(1.0)
    first = progress.snapshot()
    clock.advance(1.0)
    assert "finishedAt" not in first and progress.snapshot()["elapsedSeconds"] == 2.0
