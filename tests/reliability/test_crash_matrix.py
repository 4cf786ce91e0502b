"""kill -9 at every kill point of the matrix (bounded for CI; bench/soak_crash.py runs it for longer).

What is checked after each kill is in crash_matrix.py's docstring.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from crash_matrix import POINTS, run_matrix

#: CI bound, seconds of killing (the first round of every mode always runs)
BUDGET = float(os.environ.get("EVDB_CRASH_SECONDS", "20"))


def test_kill_9_matrix_loses_nothing_and_resumes(tmp_path):
    summary = run_matrix(str(tmp_path), seconds=BUDGET, seed=20261123, min_rounds=2)
    print(f"\n{len(summary.kills)} kills, {len(summary.points)} points, {summary.seconds:.1f} s")
    print(summary.table())
    print(dict(summary.figures))
    modes = {k.mode for k in summary.kills}
    assert modes == set(POINTS)
    assert len(summary.kills) >= 2 * len(POINTS)
    # most kills land on the point they aimed at (the rest were killed from outside after a timeout)
    aimed = [k for k in summary.kills if k.point != "outside"]
    assert len(aimed) >= 0.8 * len(summary.kills), summary.table()
    assert summary.figures["acked"] > 0 and summary.figures["removed"] > 0
    assert summary.figures["restarts_with_tls"] >= 2  # the certificate reload mode's checks ran
