"""The scavenge's threads import no module: what they run is loaded with the scavenge service, at node
start, not in the middle of a run. A first import in a scavenge thread runs module code beside the
node's appends, in one go (numpy's ``np.unique`` reaching for ``numpy.ma`` in calculation held the
GIL for 5-7 ms, measured with ``bench/bench_scavenge.py --steady --stall-probe``).

A fresh interpreter, so that nothing an earlier test imported hides a first import: it loads the
scavenge service as the node does, writes a database that takes every phase (tombstones, ``$maxAge``,
``$maxCount`` and ``$tb`` metadata, index tables, merging) and scavenges it twice, recording every
module first imported on a thread whose name starts with ``evdb-scav``. Small chunks: the per-chunk
work (summaries, copies) runs in the scavenge thread too, a superset of what a node with worker
processes runs there."""

from __future__ import annotations

import json
import subprocess
import sys

_SCRIPT = r"""
import json, logging, sys, threading, time

from evdb.clock import ManualClock
from evdb.database import Database
from evdb.scavenge.service import ScavengeRequest, ScavengeService
from evdb.streams import NewEvent

path = sys.argv[1]
clock = ManualClock(1_700_000_000.0)
db = Database.open(path, clock=clock, chunk_size=64 * 1024, max_memtable_entries=64)
service = ScavengeService(
    db,
    clock=clock,
    state_path=ScavengeService.state_path_for(path + "/index"),
    logger=logging.getLogger("test"),
    merging=True,
)
first_imports = []


def hook(event, args):
    if event == "import" and threading.current_thread().name.startswith("evdb-scav"):
        if args[0] not in sys.modules:
            first_imports.append(args[0])


def scavenge():
    service.start(ScavengeRequest())
    assert service.wait(60)
    assert service.last()[1] == "Success", service.last()
    progress = service.last_progress()
    assert any(c.executed for c in progress.chunks) and progress.index_entries_removed, progress
    assert list(progress.phase_seconds)[1:] == [
        "Accumulation", "Calculation", "Chunk execution", "Chunk merging", "Index execution", "Cleaning"
    ], progress.phase_seconds


def write(round_):
    for i in range(40):
        db.append(f"s-{round_}-{i}", [NewEvent.json("E", {"i": n, "pad": "x" * 200}) for n in range(6)])
    db.set_stream_metadata(f"s-{round_}-1", {"$maxCount": 2})
    db.set_stream_metadata(f"s-{round_}-2", {"$tb": 3})
    db.set_stream_metadata(f"s-{round_}-3", {"$maxAge": 60})
    db.delete_stream(f"s-{round_}-4", hard=True)
    clock.advance(120)
    db.call_in_writer(lambda ctx: ctx.complete_active_chunk())


sys.addaudithook(hook)
write(0)
scavenge()
write(1)
scavenge()
service.close()
db.close()
print(json.dumps(first_imports))
"""


def test_a_scavenge_imports_no_module_in_its_threads(tmp_path):
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(tmp_path / "db")], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
