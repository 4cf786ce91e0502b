"""Command throughput of one ``eventsourcing`` application on evdb (through eventsourcing-kurrentdb,
gRPC) and on eventsourcing's own stores: PostgreSQL (a real server over TCP) and SQLite, in the same run.

A command loads an aggregate from its repository, changes it, and saves it (one append of one
event with optimistic concurrency). Each run: --accounts accounts are opened, then --commands credit
commands go to them round-robin, first from one thread, then from --threads threads at once. Each
figure is the median of --runs runs; every run uses fresh stores, and the stores alternate inside
each run so that the machine's background load falls on all of them alike:

- eventsourcing SQLite: a file, in the benchmark's process;
- eventsourcing PostgreSQL: Debian's PostgreSQL server started by the benchmark (initdb into a temporary
  folder as the `postgres` user, its own port, TCP on 127.0.0.1, fsync=on, synchronous_commit=on,
  full_page_writes=on; the settings in force are read back and printed), through psycopg;
- evdb single node, insecure; evdb single node, TLS; evdb 3-node cluster, TLS (the leader): each launched
  with evdb's local-cluster launcher (`evdb cluster up`, one process per node, on-disk databases);
- the client's floor (``--stores floor``, not in the default set): the same client (eventsourcing-kurrentdb,
  kurrentdbclient, grpcio) against an in-memory gRPC server in its own process (grpcio's C core, this
  file's ``--floor-server``) that answers Streams/Read and Streams/BatchAppend with the messages evdb
  sends and keeps nothing on disk. Not a store: what this client costs and reaches with a server that
  takes no time, i.e. the most any node (evdb or KurrentDB) could give this client on this machine.

Beside each figure: the benchmark process's CPU (the client: the application, the driver, grpcio's
threads) and the server's (every evdb node, or the postmaster and its backends), as shares of one core
and as milliseconds of CPU per command.

    sh bench/install-tools.sh     # PostgreSQL and psycopg
    .venv/bin/python bench/bench_eventsourcing.py [--commands 2000] [--accounts 50] [--threads 4] [--runs 3]
        [--stores sqlite,postgres,evdb-insecure,evdb-tls,evdb-cluster3,floor] [--json FILE] [--profile DIR]

--profile DIR: one more run of each evdb store with py-spy on the leader and one follower during each
phase; prints where the node's milliseconds go per command (bench/profile_summary.py).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from uuid import UUID

sys.path.insert(0, str(Path(__file__).resolve().parent))

from eventsourcing.application import Application
from eventsourcing.domain import Aggregate, event
from netbench import Profiler, cpu_seconds, launch, load_average
from profile_summary import table


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


# -- CPU of the client (this process) and of the server's processes ----------------------------------


def children_of(pid: int) -> list[int]:
    out = []
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(stat) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.split("/")[2]))
    return out


@dataclass
class Server:
    """The server processes whose CPU is counted (none for SQLite: it runs in this process)."""

    pids: Callable[[], list[int]]
    #: with --profile: starts py-spy on the server's nodes for one phase (its label)
    profile: Callable[[str], Profiler] | None = None

    def cpu(self) -> dict[int, float]:
        out = {}
        for pid in self.pids():
            try:
                out[pid] = cpu_seconds(pid)
            except OSError:
                pass  # ended meanwhile
        return out


NO_SERVER = Server(lambda: [])


@dataclass
class Phase:
    rate: float
    client_cpu: float  # share of one core
    server_cpu: float

    def per_command(self, share: float) -> float:
        """A CPU share of this phase as milliseconds per command."""
        return share / self.rate * 1000


def run_commands(bank: Bank, accounts: list[UUID], commands: int, threads: int, server: Server) -> Phase:
    """Credit commands per second; each thread owns its own accounts (no conflicts)."""
    per_thread = [accounts[i::threads] for i in range(threads)]

    def work(mine: list[UUID], count: int) -> None:
        for i in range(count):
            bank.credit(mine[i % len(mine)], 1)

    workers = [threading.Thread(target=work, args=(mine, commands // threads)) for mine in per_thread]
    profiler = server.profile(f"{threads}thread") if server.profile else None
    server_before = server.cpu()
    client_before = time.process_time()
    started = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    elapsed = time.perf_counter() - started
    client = time.process_time() - client_before
    server_after = server.cpu()
    served = sum(v - server_before.get(pid, 0.0) for pid, v in server_after.items())
    if profiler:
        done = (commands // threads) * threads
        print(
            f"profiled: {threads} thread(s), {done / elapsed:,.0f} commands/s (a command: 1 read + 1 append)"
        )
        for path in profiler.stop().values():
            print(table(path, done, elapsed))
    return Phase((commands // threads) * threads / elapsed, client / elapsed, served / elapsed)


def measure(env: dict[str, str], args, server: Server) -> tuple[float, Phase, Phase]:
    bank = Bank(env=env)
    try:
        started = time.perf_counter()
        accounts = [bank.open(f"owner-{i}") for i in range(args.accounts)]
        opened = args.accounts / (time.perf_counter() - started)
        single = run_commands(bank, accounts, args.commands, 1, server)
        concurrent = run_commands(bank, accounts, args.commands, args.threads, server)
        expected = (args.commands + args.commands // args.threads * args.threads) // args.accounts
        assert sum(bank.repository.get(a).balance for a in accounts) >= expected  # the work happened
        return opened, single, concurrent
    finally:
        bank.close()


# -- the stores ------------------------------------------------------------------------------------------


def on_evdb(kind: str) -> Callable:
    def run(args) -> tuple[float, Phase, Phase]:
        with launch(kind, args.dir) as target:
            host = target.leader.url.split("://", 1)[1]
            env = {"PERSISTENCE_MODULE": "eventsourcing_kurrentdb"}
            if target.ca:
                env["KURRENTDB_URI"] = f"kurrentdb://admin:changeit@{host}?tls=true"
                env["KURRENTDB_ROOT_CERTIFICATES"] = Path(target.ca).read_text()
            else:
                env["KURRENTDB_URI"] = f"kurrentdb://{host}?tls=false"
            profile = None
            if args.profile_now:

                def profile(label: str) -> Profiler:
                    return Profiler(args.profile, f"es-{kind}-{label}", target.nodes[:2], None)

            return measure(env, args, Server(lambda: [n.pid for n in target.nodes], profile))

    return run


def floor_server() -> None:
    """``--floor-server``: an in-memory gRPC server (grpcio) answering Streams/Read and
    Streams/BatchAppend as evdb does (the same messages and fields), for the client's floor; prints its
    port, serves until killed. Nothing is kept on disk: it measures the client, it is not a store."""
    from concurrent import futures

    import grpc  # type: ignore[import-untyped]
    from google.protobuf import empty_pb2
    from kurrentdbclient.protos.v1 import shared_pb2, streams_pb2, streams_pb2_grpc

    read_resp = streams_pb2.ReadResp
    streams: dict[str, list[tuple[str, str, bytes, bytes, int, str]]] = {}
    lock = threading.Lock()
    last = [0]

    class Streams(streams_pb2_grpc.StreamsServicer):
        def Read(self, request, context):
            options = request.options
            ident = options.stream.stream_identifier
            start = (
                options.stream.revision if options.stream.WhichOneof("revision_option") == "revision" else 0
            )
            if options.read_direction != streams_pb2.ReadReq.Options.Forwards or options.HasField("all"):
                context.abort(grpc.StatusCode.UNIMPLEMENTED, "the floor server reads streams forwards only")
            with lock:
                events = streams.get(ident.stream_name.decode())
                page = None if events is None else events[start : start + options.count]
            if page is None:
                yield read_resp(stream_not_found=read_resp.StreamNotFound(stream_identifier=ident))
                return
            for revision, (event_id, kind, data, metadata, position, created) in enumerate(page, start):
                recorded = read_resp.ReadEvent.RecordedEvent(
                    id=shared_pb2.UUID(string=event_id),
                    stream_identifier=ident,
                    stream_revision=revision,
                    prepare_position=position,
                    commit_position=position,
                    metadata={"type": kind, "content-type": "application/octet-stream", "created": created},
                    custom_metadata=metadata,
                    data=data,
                )
                yield read_resp(event=read_resp.ReadEvent(event=recorded, commit_position=position))

        def BatchAppend(self, request_iterator, context):
            for request in request_iterator:
                options = request.options
                which = options.WhichOneof("expected_stream_position")
                name = options.stream_identifier.stream_name.decode()
                response = streams_pb2.BatchAppendResp(
                    correlation_id=request.correlation_id, stream_identifier=options.stream_identifier
                )
                with lock:
                    events = streams.get(name)
                    current = -1 if events is None else len(events) - 1
                    if not (
                        which == "any"
                        or (which == "no_stream" and events is None)
                        or (which == "stream_exists" and events is not None)
                        or (which == "stream_position" and options.stream_position == current)
                    ):
                        context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"{name}: expected {which}")
                    events = streams.setdefault(name, [])
                    for message in request.proposed_messages:
                        last[0] += 1 + len(message.data) + len(message.custom_metadata)
                        created = str(time.time_ns() // 100)
                        events.append(
                            (
                                message.id.string,
                                message.metadata["type"],
                                message.data,
                                message.custom_metadata,
                                last[0],
                                created,
                            )
                        )
                    response.success.current_revision = len(events) - 1
                    response.success.position.commit_position = last[0]
                    response.success.position.prepare_position = last[0]
                if which == "stream_position":
                    response.stream_position = options.stream_position
                else:
                    getattr(response, which).CopyFrom(empty_pb2.Empty())
                yield response

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    streams_pb2_grpc.add_StreamsServicer_to_server(Streams(), server)  # type: ignore[no-untyped-call]
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(port, flush=True)
    server.wait_for_termination()


def on_floor(args) -> tuple[float, Phase, Phase]:
    process = subprocess.Popen(
        [sys.executable, __file__, "--floor-server"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        port = process.stdout.readline().strip()
        if not port.isdigit():
            raise SystemExit(f"the floor server did not start (exit code {process.poll()})")
        env = {
            "PERSISTENCE_MODULE": "eventsourcing_kurrentdb",
            "KURRENTDB_URI": f"kurrentdb://127.0.0.1:{port}?tls=false",
        }
        return measure(env, args, Server(lambda: [process.pid]))
    finally:
        process.kill()
        process.wait()


def on_sqlite(args) -> tuple[float, Phase, Phase]:
    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        env = {"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": os.path.join(folder, "es.db")}
        return measure(env, args, NO_SERVER)


def postgres_bin() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if not found:
        raise SystemExit("no PostgreSQL server: run `sh bench/install-tools.sh` as root first")
    return Path(found[-1]).parent


def as_postgres(command: list[str], **kw) -> subprocess.CompletedProcess:
    """PostgreSQL refuses to run as root: its commands run as the `postgres` user then."""
    if os.geteuid() == 0:
        command = ["runuser", "-u", "postgres", "--", *command]
    done = subprocess.run(command, capture_output=True, text=True, **kw)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed: {done.stderr.strip() or done.stdout.strip()}")
    return done


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


PG_SETTINGS = {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on"}


@contextmanager
def postgres_server(parent: str | None) -> Iterator[tuple[int, int]]:
    """A fresh PostgreSQL server in a temporary folder: (its port, the postmaster's pid)."""
    bin_dir = postgres_bin()
    with tempfile.TemporaryDirectory(dir=parent, prefix="bench-pg-") as folder:
        if os.geteuid() == 0:
            shutil.chown(folder, "postgres", "postgres")
        data = Path(folder) / "data"
        as_postgres([str(bin_dir / "initdb"), "-D", str(data), "-U", "bench", "--auth=trust", "-E", "UTF8"])
        port = free_port()
        options = " ".join(
            [f"-c port={port}", "-c listen_addresses=127.0.0.1", f"-c unix_socket_directories={folder}"]
            + [f"-c {k}={v}" for k, v in PG_SETTINGS.items()]
        )
        log = Path(folder) / "server.log"
        as_postgres([str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(log), "-o", options, "-w", "start"])
        try:
            pid = int((data / "postmaster.pid").read_text().split()[0])
            as_postgres([str(bin_dir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "bench", "es"])
            yield port, pid
        finally:
            as_postgres([str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"], timeout=60)


def postgres_settings(port: int) -> dict[str, str]:
    import psycopg

    with psycopg.connect(host="127.0.0.1", port=port, user="bench", dbname="es") as conn:
        out = {}
        for k in (*PG_SETTINGS, "server_version"):
            row = conn.execute(f"SHOW {k}").fetchone()
            out[k] = str(row[0]) if row else "missing"
        return out


def on_postgres(args) -> tuple[float, Phase, Phase]:
    with postgres_server(args.dir) as (port, pid):
        settings = postgres_settings(port)
        if any(settings[k] != v for k, v in PG_SETTINGS.items()):
            raise SystemExit(f"PostgreSQL runs with {settings}, not {PG_SETTINGS}")
        if not args.pg_printed:
            print(f"PostgreSQL {settings['server_version']} on 127.0.0.1:{port}: {settings}", flush=True)
            args.pg_printed = True
        env = {
            "PERSISTENCE_MODULE": "eventsourcing.postgres",
            "POSTGRES_DBNAME": "es",
            "POSTGRES_HOST": "127.0.0.1",
            "POSTGRES_PORT": str(port),
            "POSTGRES_USER": "bench",
            "POSTGRES_PASSWORD": "",
            "POSTGRES_POOL_SIZE": str(max(5, args.threads + 1)),
        }
        return measure(env, args, Server(lambda: [pid, *children_of(pid)]))


STORES: dict[str, tuple[str, Callable]] = {
    "sqlite": ("eventsourcing SQLite (in process)", on_sqlite),
    "postgres": ("eventsourcing PostgreSQL (TCP, fsync on)", on_postgres),
    "evdb-insecure": ("evdb single node, insecure", on_evdb("single-insecure")),
    "evdb-tls": ("evdb single node, TLS", on_evdb("single-tls")),
    "evdb-cluster3": ("evdb 3-node cluster, TLS", on_evdb("cluster3-tls")),
    "floor": ("client floor: in-memory gRPC server, no disk", on_floor),
}
DEFAULT_STORES = "sqlite,postgres,evdb-insecure,evdb-tls,evdb-cluster3"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--commands", type=int, default=2000)
    parser.add_argument("--accounts", type=int, default=50)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--stores", default=DEFAULT_STORES, help=f"of {', '.join(STORES)}")
    parser.add_argument("--dir", default=None, help="folder for the temporary stores (default: the system's)")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--profile", type=Path, default=None, help="py-spy the evdb stores in one more run")
    parser.add_argument("--floor-server", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.floor_server:
        floor_server()
        return
    args.pg_printed = False
    args.profile_now = False
    chosen = args.stores.split(",")
    if unknown := [s for s in chosen if s not in STORES]:
        raise SystemExit(f"unknown store(s) {unknown}; known: {', '.join(STORES)}")
    print(f"load average at start: {load_average()}", flush=True)
    results: dict[str, list[tuple[float, Phase, Phase]]] = {s: [] for s in chosen}
    loads = []
    for run in range(args.runs):
        for key in chosen:
            name, store = STORES[key]
            o, s, c = store(args)
            results[key].append((o, s, c))
            print(
                f"run {run + 1}, {name}: opens {o:,.0f}/s; 1 thread {s.rate:,.0f}/s (client CPU "
                f"{s.client_cpu:.0%} = {s.per_command(s.client_cpu):.2f} ms/command, server {s.server_cpu:.0%} = "
                f"{s.per_command(s.server_cpu):.2f} ms); {args.threads} threads {c.rate:,.0f}/s (client "
                f"{c.client_cpu:.0%} = {c.per_command(c.client_cpu):.2f} ms, server {c.server_cpu:.0%} = "
                f"{c.per_command(c.server_cpu):.2f} ms); load {load_average()}",
                flush=True,
            )
        loads.append(load_average())
    print(
        f"\n{args.commands} credit commands over {args.accounts} accounts; medians of {args.runs} runs; "
        f"load averages after each run: {'; '.join(loads)}"
    )
    print(
        f"| store | opens/s | commands/s, 1 thread | client / server CPU | commands/s, {args.threads} threads "
        "| client / server CPU | 1 thread ÷ PostgreSQL | 4 threads ÷ PostgreSQL | 1 thread ÷ SQLite |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    medians = {}
    for key, rows in results.items():

        def med(f, rows=rows) -> float:
            return statistics.median(f(r) for r in rows)

        medians[key] = {
            "opens": med(lambda r: r[0]),
            "single": med(lambda r: r[1].rate),
            "single_client": med(lambda r: r[1].client_cpu),
            "single_server": med(lambda r: r[1].server_cpu),
            "concurrent": med(lambda r: r[2].rate),
            "concurrent_client": med(lambda r: r[2].client_cpu),
            "concurrent_server": med(lambda r: r[2].server_cpu),
            "single_client_ms": med(lambda r: r[1].per_command(r[1].client_cpu)),
            "single_server_ms": med(lambda r: r[1].per_command(r[1].server_cpu)),
            "concurrent_client_ms": med(lambda r: r[2].per_command(r[2].client_cpu)),
            "concurrent_server_ms": med(lambda r: r[2].per_command(r[2].server_cpu)),
        }
    for key, m in medians.items():
        pg = medians.get("postgres")
        sq = medians.get("sqlite")
        print(
            f"| {STORES[key][0]} | {m['opens']:,.0f} | {m['single']:,.0f} | "
            f"{m['single_client']:.0%} / {m['single_server']:.0%} | {m['concurrent']:,.0f} | "
            f"{m['concurrent_client']:.0%} / {m['concurrent_server']:.0%} | "
            + (
                f"{m['single'] / pg['single']:.2f}× | {m['concurrent'] / pg['concurrent']:.2f}× | "
                if pg
                else "| | "
            )
            + (f"{m['single'] / sq['single']:.2f}× |" if sq else "|")
        )
    print(
        f"\nCPU per command, ms (medians): client / server, 1 thread; client / server, {args.threads} threads"
    )
    for key, m in medians.items():
        print(
            f"| {STORES[key][0]} | {m['single_client_ms']:.2f} / {m['single_server_ms']:.2f} | "
            f"{m['concurrent_client_ms']:.2f} / {m['concurrent_server_ms']:.2f} |"
        )
    if args.profile:
        args.profile_now = True
        for key in chosen:
            if key.startswith("evdb"):
                print(f"\nprofiled run, {STORES[key][0]}")
                STORES[key][1](args)
    if args.json:
        raw = {
            k: [{"opens": o, "single": vars(s), "concurrent": vars(c)} for o, s, c in rows]
            for k, rows in results.items()
        }
        args.json.write_text(json.dumps({"runs": raw, "medians": medians, "loads": loads}, indent=1))


if __name__ == "__main__":
    main()
