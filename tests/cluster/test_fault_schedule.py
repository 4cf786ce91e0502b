"""The real-process fault soak, bounded for CI (fault_soak.py): a new 3-node cluster, a seeded schedule of
leader kill -9 and restart, leader SIGSTOP/SIGCONT, leader and follower killed together, follower kill -9
and resign, two writers and a reader all along; then heal and check every invariant (invariants.py).

EVDB_FAULT_SECONDS: how long new faults are started (default 35; every fault kind runs once whatever
the value, so a run takes about a minute). EVDB_FAULT_SEED: the schedule's seed (default 20261122).
The longer run is ``bench/soak_cluster.py --runs 20 --seconds 90 --seed N``."""

from __future__ import annotations

import os

import pytest
from fault_soak import FAULT_KINDS, SoakOptions, plan, run_soak


def test_the_schedule_is_drawn_from_the_seed():
    options = SoakOptions(pause=(3.0, 6.0), down=(1.0, 3.0))
    first = plan(5, 40, options)
    assert first == plan(5, 40, options) and first != plan(6, 40, options)
    assert {f.kind for f in first[: len(FAULT_KINDS)]} == set(FAULT_KINDS)  # every kind at once
    for f in first:
        low, high = options.pause if f.kind == "pause-leader" else options.down
        assert low <= f.hold <= high and 0 <= f.pick < 1


@pytest.mark.slow
def test_fault_schedule_keeps_every_invariant(tmp_path):
    seed = int(os.environ.get("EVDB_FAULT_SEED", "20261122"))
    seconds = float(os.environ.get("EVDB_FAULT_SECONDS", "35"))
    result = run_soak(tmp_path / "cluster", SoakOptions(seconds=seconds, seed=seed), log=lambda line: None)
    report = result.report()
    print(report)
    assert not result.errors, report
    assert not result.violations, report
    ran = {line.split()[1] for line in result.schedule}
    assert ran >= set(FAULT_KINDS), report
    assert result.count("acked") > 20 and len(result.reads) > 20, report
