from __future__ import annotations

import asyncio
import json

from evdb.node import Node
from evdb.options import load_options


def _stats_task_parked(clock) -> bool:
    """The statistics task waits on the clock for its period (10 s); other tasks wait for theirs."""
    return any(abs(due - 10) < 1e-6 for due in clock.due_in())


async def test_statistics_events_are_written_and_kept_24_hours(tmp_path, clock):
    options = load_options(
        [
            "--mem-db",
            "--insecure",
            "--http-port",
            "0",
            "--log",
            str(tmp_path / "log"),
            "--stats-period-sec",
            "10",
        ],
        {},
    )
    async with Node(options, clock=clock, name="stats") as node:
        stream = node.stats_stream
        while not _stats_task_parked(clock):
            await asyncio.sleep(0.01)
        clock.advance(10)
        for _ in range(500):
            try:
                events = node.db.read_stream_forward(stream).events
                if events:
                    break
            except Exception:
                pass
            await asyncio.sleep(0.01)
        assert events[0].event_type == "$statsCollected"
        stats = json.loads(events[0].data)
        assert {"proc", "sys", "es"} <= set(stats)
        metadata, _ = node.db.get_stream_metadata(stream)
        assert metadata.max_age == 24 * 3600
        clock.advance(24 * 3600 + 20)  # older than 24 hours: gone from stream reads
        while not _stats_task_parked(clock):
            await asyncio.sleep(0.01)
        fresh = node.db.read_stream_forward(stream).events
        assert events[0].event_id not in {e.event_id for e in fresh}
