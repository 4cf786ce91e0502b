"""The long run of the deterministic cluster simulation: many seeds of 3- and 5-node clusters.

    .venv/bin/python bench/sim_cluster.py --seeds 100000 --processes 2

Four seeds in five run 3 nodes, one in five 5 nodes (seed numbers from --first; 5-node seeds are
offset by 10,000,000 so they never repeat a 3-node seed). Prints progress every --report seeds, each
failing seed with the command that replays it, and a last line with the totals; exits 1 on any
violation. CI runs 1,370 seeds of the same kind (tests/sim/test_simulation.py), safety and liveness.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from evdb.cluster.sim import run_seeds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=100_000)
    parser.add_argument("--first", type=int, default=0)
    parser.add_argument("--seconds", type=float, default=4.0, help="simulated seconds of faults per seed")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--report", type=int, default=5_000, help="print progress every N seeds")
    args = parser.parse_args()
    started = time.perf_counter()
    done = failed = acknowledged = elections = 0
    for batch_start in range(args.first, args.first + args.seeds, args.report):
        batch = range(batch_start, min(batch_start + args.report, args.first + args.seeds))
        five = [s + 10_000_000 for s in batch if s % 5 == 4]
        three = [s for s in batch if s % 5 != 4]
        for nodes, seeds in ((3, three), (5, five)):
            for result in run_seeds(seeds, nodes=nodes, seconds=args.seconds, processes=args.processes):
                done += 1
                acknowledged += result.acknowledged
                elections += result.elections
                if not result.ok:
                    failed += 1
                    print(f"seed {result.seed} ({nodes} nodes): {result.violations[:3]}", flush=True)
                    print(
                        f"  replay: python -m evdb.cluster.sim --seed {result.seed} --nodes {nodes} "
                        f"--seconds {args.seconds} --verbose",
                        flush=True,
                    )
        print(
            f"{done} seeds, {failed} failed, {acknowledged} acknowledged appends, {elections} elections, "
            f"{time.perf_counter() - started:.0f} s",
            flush=True,
        )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
