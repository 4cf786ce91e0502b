"""python -m evdb.cluster.sim: see evdb/cluster/sim/runner.py."""

from evdb.cluster.sim.runner import main

if __name__ == "__main__":
    raise SystemExit(main())
