"""The local launcher's view of its node processes: a zombie (its own or another process's) is dead, a
pid the system gave to another program is not the node, and a node it started that dies is reaped."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from evdb.cluster.launcher import _pid_alive, _reap_when_done


def _wait_until(condition, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def test_a_zombie_of_another_parent_is_dead():
    # sh starts a short child, then becomes a sleep that never waits for it: a zombie that is not ours
    holder = subprocess.Popen(["sh", "-c", "sleep 0 & echo $!; exec sleep 30"], stdout=subprocess.PIPE)
    try:
        zombie = int(holder.stdout.readline())
        assert _wait_until(
            lambda: Path(f"/proc/{zombie}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
        )
        os.kill(zombie, 0)  # kill(0) alone says it is there
        assert not _pid_alive(zombie)
    finally:
        holder.kill()
        holder.wait()


def test_a_reused_pid_is_not_the_node():
    assert _pid_alive(os.getpid())
    assert not _pid_alive(os.getpid(), "/nowhere/node2/node.yaml")


def test_a_started_process_that_dies_is_reaped_at_once():
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    _reap_when_done(process)
    assert _wait_until(lambda: not Path(f"/proc/{process.pid}").exists())  # no zombie left behind
    assert not _pid_alive(process.pid)
