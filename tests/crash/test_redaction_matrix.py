"""The crash matrix's redaction mode goes through the node's own unix-socket service.

A few rounds of the ``redact`` mode (tests/reliability/crash_matrix.py, driver in
tests/reliability/crash_driver.py, client in socket_redaction.py): each run is a real node with
``EnableUnixSocket`` killed with SIGKILL at a redaction kill point, and the folder is checked after each
kill. Every redaction the driver saw finish was switched in by the node's redaction service (its log
says so), not by the driver reaching into the log.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "reliability"))

from crash_matrix import Facts, run_matrix

pytestmark = pytest.mark.slow


def _node_log_messages(log_dir: Path) -> list[str]:
    messages = []
    for path in sorted(log_dir.rglob("*.json")):
        for line in path.read_text().splitlines():
            if line.strip():
                messages.append(json.loads(line)["@m"])
    return messages


def test_redaction_kills_go_through_the_node_socket(tmp_path):
    summary = run_matrix(str(tmp_path), seconds=0, seed=20261124, modes=("redact",), min_rounds=4)
    print(summary.table())
    assert len(summary.kills) == 4
    assert len([k for k in summary.kills if k.point != "outside"]) >= 3, summary.table()
    work = tmp_path / "redact"
    facts = Facts.read(str(work / "side.jsonl"))
    assert facts.redacted, "no redaction finished in four runs"
    assert summary.figures["redacted"] >= len(facts.redacted)
    messages = _node_log_messages(work / "log")
    assert sum("Redaction service listening on unix socket" in m for m in messages) == 4
    switched = [m for m in messages if m.startswith("Redaction: switched ")]
    # one switch per finished redaction (a kill inside a switch may add one the driver never saw end)
    assert len(switched) >= len(facts.redacted), (len(switched), len(facts.redacted))
