"""Kill -9 a writing process at random moments; after each kill nothing acknowledged is lost,
nothing half-written is visible, and every file verifies when the database opens again."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from evdb.database import Database
from evdb.errors import StreamNotFound

WRITER = Path(__file__).with_name("writer.py")
KILLS = 50


def _run_and_kill(directory: str, seed: int, rng: random.Random) -> list[dict]:
    """Start the writer, let it write for a random number of acknowledged batches, SIGKILL it."""
    proc = subprocess.Popen(
        [sys.executable, str(WRITER), directory, str(seed)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    lines: list[dict] = []
    target_acks = rng.randrange(1, 60)
    acks = 0
    deadline = time.monotonic() + 30
    assert proc.stdout is not None
    while acks < target_acks:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(f"writer exited early: {proc.stderr.read() if proc.stderr else ''}")
        lines.append(json.loads(line))
        if "ack" in lines[-1]:
            acks += 1
        assert time.monotonic() < deadline, "writer too slow"
    # kill at a random moment inside the next batch (or between batches)
    if rng.random() < 0.5:
        time.sleep(rng.random() * 0.003)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    for line in proc.stdout:  # whatever reached the pipe before the kill
        lines.append(json.loads(line))
    return lines


def test_fifty_kills_lose_nothing_acknowledged(tmp_path):
    directory = str(tmp_path / "db")
    rng = random.Random(20261122)
    sent: dict[str, dict] = {}
    acked: dict[str, int] = {}
    for kill in range(KILLS):
        for line in _run_and_kill(directory, kill, rng):
            if "send" in line:
                sent[line["send"]] = line
            else:
                acked[line["ack"]] = line["first"]
        with Database.open(
            directory, chunk_size=16 * 1024, existence_filter_capacity=10_000, max_memtable_entries=40
        ) as db:
            by_id = {}
            for stream in {s["stream"] for s in sent.values()}:
                try:
                    events = db.read_stream_forward(stream, 0, 100_000).events
                except StreamNotFound:
                    events = []
                numbers = [e.event_number for e in events]
                assert numbers == list(range(len(numbers))), f"gap or duplicate in {stream} after kill {kill}"
                for e in events:
                    assert str(e.id) not in by_id, "an event was written twice"
                    by_id[str(e.id)] = (stream, e.event_number)
            for name, batch in sent.items():
                present = [i for i in batch["ids"] if i in by_id]
                if name in acked:
                    assert len(present) == len(batch["ids"]), (
                        f"acknowledged batch {name} lost after kill {kill}"
                    )
                    assert by_id[batch["ids"][0]][1] == acked[name]
                else:
                    assert len(present) in (0, len(batch["ids"])), (
                        f"batch {name} half-written after kill {kill}"
                    )
            # the $all scan agrees with the stream reads
            assert sum(1 for e in db.iter_all(0) if not e.stream.startswith("$")) == len(by_id)
    assert len(acked) > KILLS
