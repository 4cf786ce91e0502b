"""An operations day, in CI: one 3-node TLS cluster with a read-only replica, under a steady client write
load the whole time, goes through a rolling certificate update to a new CA, a configured auto-scavenge
cycle over every node (paused and resumed from a follower mid-cycle, the leader last after it resigns),
a differential backup of a follower, the redaction of one event on every node, and kill -9 of that
follower, its restore from the backup, restart and catch-up. After each step every check of
operations_day.OperationsDay.check runs; a failed step or check is recorded and the day goes on, so one
run reports every failure. ConnectionResetInterval is 2 s; the whole day must take under 3 minutes."""

from __future__ import annotations

import time

import pytest
from operations_day import OperationsDay

pytestmark = pytest.mark.slow

BUDGET = 180.0  # seconds, the whole day with the cluster's start and stop


def test_an_operations_day_keeps_every_write_and_every_endpoint(tmp_path):
    began = time.monotonic()
    day = OperationsDay(tmp_path, log=lambda line: print(line, flush=True))
    try:
        with day.step("start: cluster, data, client load, full backups"):
            day.up()  # nothing to go on with without it
            day.check()
        day.run_step("1 rolling certificate update to a new CA", day.rotate_certificates)
        day.run_step("2 auto-scavenge cycle, paused and resumed from a follower", day.auto_scavenge)
        day.run_step("3 differential backup of a follower", day.differential_backup)
        day.run_step("4 redaction of one event on every node", day.redact)
        day.run_step("5 kill -9 of that follower, restore, restart, catch-up", day.kill_and_restore)
        with day.step("end: the load stopped, every node's $all the same", under_load=False):
            day.finish()
    finally:
        day.print_node_logs_after_failures()  # a failed start or end step: what the nodes said
        day.close()
    took = time.monotonic() - began
    print("step times: " + "; ".join(f"{name} {seconds:.1f} s" for name, seconds in day.times))
    print(f"the whole day: {took:.1f} s")
    assert day.load is not None and not day.load.result.errors, day.load.result.errors
    assert not day.findings.failures, "failed checks:\n" + day.findings.report()
    assert took < BUDGET, f"the day took {took:.0f} s, over the {BUDGET:.0f} s budget"
