"""Crash soak: the kill -9 matrix of tests/reliability for as long as asked.

    .venv/bin/python bench/soak_crash.py --seconds 600 [--seed N] [--modes append,scavenge,...] [--keep DIR]

The ``redact`` mode kills a real node with ``EnableUnixSocket`` whose redactions go through its own
unix-socket service (tests/crash/socket_redaction.py); the ``reload`` mode a real TLS node.

Prints the kills per mode and kill point, the checks made and the figures (events read back,
acknowledged batches, removed events checked, scavenges resumed ...). Exit code 1 at the first
failed check, with the folder kept for a look.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "reliability"))

from crash_matrix import POINTS, CheckFailed, run_matrix


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=600)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--modes", default=",".join(POINTS))
    parser.add_argument("--keep", default=None, help="folder to work in (kept); default a temporary one")
    args = parser.parse_args()
    modes = tuple(m for m in args.modes.split(",") if m)
    unknown = set(modes) - set(POINTS)
    if unknown:
        parser.error(f"unknown modes {sorted(unknown)}; known: {', '.join(POINTS)}")
    root = args.keep or tempfile.mkdtemp(prefix="evdb-soak-crash-")
    os.makedirs(root, exist_ok=True)
    print(f"seed {args.seed}, folder {root}", flush=True)
    try:
        summary = run_matrix(root, seconds=args.seconds, seed=args.seed, modes=modes)
    except CheckFailed as exc:
        print(f"CHECK FAILED: {exc}\nfolder kept: {root}", file=sys.stderr)
        return 1
    print(f"{len(summary.kills)} kills, {len(summary.points)} distinct points, {summary.checks} checks, "
          f"{summary.seconds:.0f} s")  # fmt: skip
    print(summary.table())
    print("figures:", dict(summary.figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
