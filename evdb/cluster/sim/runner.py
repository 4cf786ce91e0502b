"""Running seeds: one (run_seed), many over worker processes (run_seeds), and the command line
(python -m evdb.cluster.sim)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import logging
import sys
import time
from dataclasses import dataclass

from evdb.cluster.sim.loop import SimDeadlock
from evdb.cluster.sim.simulation import Schedule, Simulation


@dataclass
class SimulationResult:
    seed: int
    nodes: int
    violations: list[str]
    acknowledged: int
    elections: int
    faults: list[str]
    virtual_seconds: float
    chunk_files: int = 0  # whole chunk files followers installed (catch-up by files)

    @property
    def ok(self) -> bool:
        return not self.violations

    @property
    def replay_key(self) -> tuple[list[str], int, int, float]:
        """What running the same seed again must reproduce exactly: the faults in order, the writes
        acknowledged, the elections and the virtual time it took."""
        return (self.faults, self.acknowledged, self.elections, self.virtual_seconds)


def run_seed(
    seed: int,
    *,
    nodes: int = 3,
    seconds: float = 8.0,
    clients: int = 3,
    verbose: bool = False,
    schedule: Schedule | None = None,
) -> SimulationResult:
    """Run one simulated cluster under ``seed``; the same seed always runs the same way. ``schedule``:
    the faults to inject instead of the seed's random ones (``await schedule(sim, until)``)."""
    # what an earlier run in this process left for the garbage collector (its coroutines and async
    # generators) goes now: finalized during this run, it would take turns on this run's loop. What is
    # left outlives this run: frozen, the collector does not scan it again (a full scan of the modules'
    # objects, at this collect and at each of the run's own, cost about 10% of a seed)
    gc.collect()
    gc.freeze()
    sim = Simulation(seed, nodes, verbose=verbose)
    loop = sim.loop

    running = True

    def unhandled(loop: asyncio.AbstractEventLoop, context: dict) -> None:
        # an exception no task handled is a bug of the cluster code (or of the simulator)
        if running:
            sim.violation(f"unhandled in a task: {context.get('message')} {context.get('exception')!r}")

    loop.set_exception_handler(unhandled)

    async def bounded() -> None:
        try:
            async with asyncio.timeout(seconds + 400):  # virtual seconds: a stuck run is a finding
                await sim.run(seconds, clients, schedule)
        except TimeoutError:
            sim.violation(f"the run did not finish within {seconds + 400:.0f} simulated seconds")

    try:
        loop.run_until_complete(bounded())
    except SimDeadlock as exc:
        sim.violation(f"deadlock: {exc}")
    finally:
        running = False
        for task in asyncio.all_tasks(loop):
            task.cancel()
        with contextlib.suppress(BaseException):
            loop.run_until_complete(asyncio.sleep(0))
        with contextlib.suppress(BaseException):
            loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
    return SimulationResult(
        seed,
        nodes,
        list(sim.violations),
        len(sim.acknowledged),
        sim.elections,
        sim.faults,
        loop.time(),
        sim.chunk_files,
    )


def _run_one(args: tuple[int, int, float]) -> SimulationResult:
    seed, nodes, seconds = args
    return run_seed(seed, nodes=nodes, seconds=seconds)


def run_seeds(
    seeds: range | list[int], *, nodes: int = 3, seconds: float = 8.0, processes: int = 1
) -> list[SimulationResult]:
    """Run many seeds, over ``processes`` worker processes; results in seed order."""
    work = [(seed, nodes, seconds) for seed in seeds]
    if processes <= 1:
        return [_run_one(w) for w in work]
    import multiprocessing

    with multiprocessing.get_context("spawn").Pool(processes) as pool:
        return pool.map(_run_one, work, chunksize=max(1, len(work) // (processes * 8)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m evdb.cluster.sim", description="Deterministic simulation of a cluster under seeds."
    )
    parser.add_argument("--seed", type=int, help="run this one seed (with --verbose: its schedule and logs)")
    parser.add_argument("--seeds", type=int, default=100, help="how many seeds, from --first (default 100)")
    parser.add_argument("--first", type=int, default=0)
    parser.add_argument("--nodes", type=int, default=3, choices=(3, 5))
    parser.add_argument("--seconds", type=float, default=4.0, help="simulated seconds of faults per seed")
    parser.add_argument(
        "--jobs", "--processes", type=int, default=1, dest="jobs", help="worker processes (default 1)"
    )
    parser.add_argument("--report", type=int, default=1000, help="print progress every N seeds")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    if args.verbose:
        logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s %(message)s")
    started = time.perf_counter()
    done = failed = 0
    seeds = [args.seed] if args.seed is not None else range(args.first, args.first + args.seeds)
    for at in range(0, len(seeds), max(1, args.report)):
        batch = seeds[at : at + max(1, args.report)]
        if args.seed is not None:
            results = [run_seed(args.seed, nodes=args.nodes, seconds=args.seconds, verbose=args.verbose)]
        else:
            results = run_seeds(batch, nodes=args.nodes, seconds=args.seconds, processes=args.jobs)
        for seed, result in zip(batch, results, strict=True):
            done += 1
            if not result.ok:
                failed += 1
                print(f"seed {seed}: {len(result.violations)} violation(s)")
                for line in result.violations[:5]:
                    print(f"  {line}")
                print(
                    f"  replay: python -m evdb.cluster.sim --seed {seed} --nodes {args.nodes} "
                    f"--seconds {args.seconds:g} --verbose"
                )
        if len(seeds) > len(batch):
            print(f"... {done} seeds, {failed} failed, {time.perf_counter() - started:.0f} s", flush=True)
    print(f"{done} seeds, {args.nodes} nodes, {failed} failed, {time.perf_counter() - started:.1f} s")
    return 1 if failed else 0
