"""Bounded load (CI): 8 writers and 4 readers for a few seconds while a scavenge and a backup run.

The longer run and its figures: bench/soak_load.py (docs/reliability.md).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from soak_load import run_load


async def test_writers_and_readers_during_a_scavenge_and_a_backup_lose_nothing(tmp_path):
    result = await run_load(str(tmp_path), writers=8, readers=4, seconds=6)
    print(result)
    assert result["acknowledged"] > 50
    assert result["lost"] == 0
    assert result["errors"] == {}
    assert result["scavenge start"] == 200 and result["backup start"] == 202
    assert result["backup"]["state"] == "completed", result["backup"]
    assert result["backup verifies"], result["backup problems"]
    assert result["scavenge"] == "Success"
    for kind in ("append", "read stream", "read $all"):
        assert result["latency"][kind]["count"] > 0
