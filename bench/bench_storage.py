"""Append and read throughput: evdb against the eventsourcing library's SQLite event store.

Both stores get the same events in the same run, on the same disk, with every append durable
(evdb fsyncs each append group; SQLite runs with the eventsourcing library's settings, printed
below). Each figure is the median of --runs runs.

    .venv/bin/python bench/bench_storage.py [--events 100000] [--runs 3] [--dir /tmp/bench]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable

from eventsourcing.persistence import StoredEvent
from eventsourcing.sqlite import SQLiteApplicationRecorder, SQLiteDatastore

from evdb.database import Database
from evdb.streams import NewEvent

WRITERS = 8
PAYLOAD = b'{"amount": 12345, "currency": "EUR", "note": "' + b"x" * 150 + b'"}'


class Evdb:
    name = "evdb"

    def __init__(self, directory: str) -> None:
        self.db = Database.open(os.path.join(directory, "evdb"))

    def append_batch(self, stream: uuid.UUID, first: int, count: int) -> None:
        events = [NewEvent("Deposited", PAYLOAD, is_json=True) for _ in range(count)]
        self.db.append(str(stream), events, first - 1 if first else -1)

    def read_stream(self, stream: uuid.UUID) -> int:
        return len(self.db.read_stream_forward(str(stream), 0, 10_000).events)

    def scan_all(self) -> int:
        total, position = 0, 0
        while True:
            page = self.db.read_all_forward(position, 4096)
            total += len(page.events)
            position = page.next_position
            if page.is_end:
                return total

    def close(self) -> None:
        self.db.close()


class EventsourcingSqlite:
    name = "eventsourcing-sqlite"

    def __init__(self, directory: str) -> None:
        self.datastore = SQLiteDatastore(os.path.join(directory, "es.sqlite"))
        self.recorder = SQLiteApplicationRecorder(self.datastore)
        self.recorder.create_table()

    def pragmas(self) -> dict:
        with self.datastore.transaction(commit=False) as c:
            out = {}
            for p in ("journal_mode", "synchronous"):
                c.execute(f"PRAGMA {p}")
                out[p] = c.fetchone()[0]
            return out

    def append_batch(self, stream: uuid.UUID, first: int, count: int) -> None:
        self.recorder.insert_events(
            [StoredEvent(stream, first + i, "bank:Deposited", PAYLOAD) for i in range(count)]
        )

    def read_stream(self, stream: uuid.UUID) -> int:
        return len(self.recorder.select_events(stream))

    def scan_all(self) -> int:
        total, start = 0, 1
        while True:
            page = self.recorder.select_notifications(start, 4096)
            if not page:
                return total
            total += len(page)
            start = page[-1].id + 1

    def close(self) -> None:
        self.datastore.close()


def timed(fn: Callable[[], int | None]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def run_once(store_cls, directory: str, events: int, batch: int, singles: int) -> dict[str, float]:
    store = store_cls(directory)
    streams = [uuid.uuid4() for _ in range(max(1, events // (batch * 10)))]
    versions = dict.fromkeys(streams, 0)

    def batched() -> None:
        for i in range(events // batch):
            s = streams[i % len(streams)]
            store.append_batch(s, versions[s], batch)
            versions[s] += batch

    single_stream = uuid.uuid4()

    def single() -> None:
        for i in range(singles):
            store.append_batch(single_stream, i, 1)

    def concurrent() -> None:
        """The same batches from ``WRITERS`` threads at once (a server's many clients)."""
        own = [uuid.uuid4() for _ in range(WRITERS)]

        def writer(k: int) -> None:
            version = 0
            for _ in range(events // batch // WRITERS):
                store.append_batch(own[k], version, batch)
                version += batch

        threads = [threading.Thread(target=writer, args=(k,)) for k in range(WRITERS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    out = {
        "batched appends (events/s)": events / timed(batched),
        f"batched appends, {WRITERS} concurrent writers (events/s)": events / timed(concurrent),
        "single appends (events/s)": singles / timed(single),
    }
    read_events = sum(versions.values())
    events_total = events * 2 + singles
    out["stream reads (events/s)"] = read_events / timed(lambda: [store.read_stream(s) for s in streams])
    out["$all scan (events/s)"] = events_total / timed(store.scan_all)
    if hasattr(store, "pragmas"):
        out["_pragmas"] = store.pragmas()
    store.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--singles", type=int, default=2_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dir", default=None, help="folder on the disk to measure (default: a temp folder)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results: dict[str, dict[str, list[float]]] = {}
    pragmas = None
    for run in range(args.runs):
        for store_cls in (Evdb, EventsourcingSqlite):  # alternate so neither always runs on a warm cache
            directory = tempfile.mkdtemp(dir=args.dir, prefix=f"bench-{store_cls.name}-")
            try:
                figures = run_once(store_cls, directory, args.events, args.batch, args.singles)
            finally:
                shutil.rmtree(directory, ignore_errors=True)
            pragmas = figures.pop("_pragmas", pragmas)
            for k, v in figures.items():
                results.setdefault(store_cls.name, {}).setdefault(k, []).append(v)
        print(f"run {run + 1}/{args.runs} done", flush=True)
    medians = {name: {k: statistics.median(v) for k, v in figs.items()} for name, figs in results.items()}
    if args.json:
        print(json.dumps({"medians": medians, "sqlite": pragmas, "args": vars(args)}, indent=2))
        return
    print(
        f"\n{args.events} events in batches of {args.batch}, {args.singles} single appends, median of {args.runs} runs"
    )
    print(f"SQLite settings used by eventsourcing: {pragmas}\n")
    print("| measure | evdb | eventsourcing SQLite | ratio |")
    print("|---|---|---|---|")
    for k in medians["evdb"]:
        a, b = medians["evdb"][k], medians["eventsourcing-sqlite"][k]
        print(f"| {k} | {a:,.0f} | {b:,.0f} | {a / b:.2f}× |")


if __name__ == "__main__":
    main()
