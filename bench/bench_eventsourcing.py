"""Command throughput of one ``eventsourcing`` application on evdb (through eventsourcing-kurrentdb,
gRPC) and on eventsourcing's own SQLite store, in the same run, on the same disk.

A command loads an aggregate from its repository, changes it, and saves it (one append of one
event with optimistic concurrency). Each run: --accounts accounts are opened, then --commands credit
commands go to them round-robin, first from one thread, then from --threads threads at once. Each
figure is the median of --runs runs; every run uses a fresh store (a fresh single-node evdb, in its
own process, insecure, on a temporary folder; a fresh SQLite file).

    .venv/bin/python bench/bench_eventsourcing.py [--commands 2000] [--accounts 50] [--threads 4] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from uuid import UUID

from eventsourcing.application import Application
from eventsourcing.domain import Aggregate, event

from evdb.cluster.launcher import LocalCluster


class Account(Aggregate):
    INITIAL_VERSION = 0  # stream revisions start at 0 (eventsourcing-kurrentdb); SQLite does not mind

    @event("Opened")
    def __init__(self, owner: str) -> None:
        self.owner = owner
        self.balance = 0

    @event("Credited")
    def credit(self, amount: int) -> None:
        self.balance += amount


class Bank(Application[UUID]):
    def open(self, owner: str) -> UUID:
        account = Account(owner)
        self.save(account)
        return account.id

    def credit(self, account_id: UUID, amount: int) -> None:
        account: Account = self.repository.get(account_id)
        account.credit(amount)
        self.save(account)


def run_commands(bank: Bank, accounts: list[UUID], commands: int, threads: int) -> float:
    """Credit commands per second; each thread owns its own accounts (no conflicts)."""
    per_thread = [accounts[i::threads] for i in range(threads)]

    def work(mine: list[UUID], count: int) -> None:
        for i in range(count):
            bank.credit(mine[i % len(mine)], 1)

    workers = [threading.Thread(target=work, args=(mine, commands // threads)) for mine in per_thread]
    started = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return (commands // threads) * threads / (time.perf_counter() - started)


def measure(env: dict[str, str], args) -> tuple[float, float, float]:
    bank = Bank(env=env)
    try:
        started = time.perf_counter()
        accounts = [bank.open(f"owner-{i}") for i in range(args.accounts)]
        opened = args.accounts / (time.perf_counter() - started)
        single = run_commands(bank, accounts, args.commands, 1)
        concurrent = run_commands(bank, accounts, args.commands, args.threads)
        expected = (args.commands + args.commands // args.threads * args.threads) // args.accounts
        assert sum(bank.repository.get(a).balance for a in accounts) >= expected  # the work happened
        return opened, single, concurrent
    finally:
        bank.close()


def on_evdb(args) -> tuple[float, float, float]:
    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        local = LocalCluster(folder)
        local.up(nodes=1, insecure=True, log=lambda *_: None)
        try:
            host = local.wait_for_leader(60).split("://", 1)[1]
            env = {
                "PERSISTENCE_MODULE": "eventsourcing_kurrentdb",
                "KURRENTDB_URI": f"kurrentdb://{host}?tls=false",
            }
            return measure(env, args)
        finally:
            local.down(log=lambda *_: None)


def on_sqlite(args) -> tuple[float, float, float]:
    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        env = {"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": os.path.join(folder, "es.db")}
        return measure(env, args)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--commands", type=int, default=2000)
    parser.add_argument("--accounts", type=int, default=50)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dir", default=None, help="folder for the temporary stores (default: the system's)")
    args = parser.parse_args()
    stores: dict[str, Callable] = {
        "evdb (gRPC, eventsourcing-kurrentdb)": on_evdb,
        "eventsourcing SQLite": on_sqlite,
    }
    results: dict[str, list[tuple[float, float, float]]] = {name: [] for name in stores}
    for _ in range(args.runs):
        for name, run in stores.items():
            results[name].append(run(args))
    print(f"{args.commands} credit commands over {args.accounts} accounts; medians of {args.runs} runs")
    print(f"| store | opens/s | commands/s, 1 thread | commands/s, {args.threads} threads |")
    print("|---|---|---|---|")
    medians = {}
    for name, rows in results.items():
        medians[name] = [statistics.median(r[i] for r in rows) for i in range(3)]
        o, s, c = medians[name]
        print(f"| {name} | {o:,.0f} | {s:,.0f} | {c:,.0f} |")
    evdb, sqlite = medians.values()
    print(
        f"| evdb / SQLite | {evdb[0] / sqlite[0]:.2f}× | {evdb[1] / sqlite[1]:.2f}× | {evdb[2] / sqlite[2]:.2f}× |"
    )


if __name__ == "__main__":
    main()
