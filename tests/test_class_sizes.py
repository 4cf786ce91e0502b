"""Issue 36: no class over 600 lines in evdb/ and tui/ (a class that size does several things; split it
along its concepts, as ClusterService, DashboardApp and Database were)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 600


def test_no_class_is_over_600_lines():
    over = []
    for package in ("evdb", "tui"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if path.name.endswith("_pb2.py"):
                continue  # generated
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                    lines = node.end_lineno - node.lineno + 1
                    if lines > LIMIT:
                        over.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {lines} lines")
    assert not over, "\n".join(over)
