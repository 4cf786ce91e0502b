"""gRPC load on the node: h2load (compiled HTTP/2) sending KurrentDB Streams calls, and several
kurrentdbclient processes making real appends, with the client's CPU beside the node's.

    sh bench/install-tools.sh
    .venv/bin/python bench/bench_grpc.py [--seconds 10] [--runs 3] [--connections 8] [--processes 4]
        [--targets single-insecure,single-tls,cluster3-tls] [--profile DIR] [--json FILE]

Per target, launched fresh each run with `evdb cluster up` (as bench_http.py):

1. `h2load -c8 -m1` (one call in flight per connection, as wrk -c8) posting a pre-encoded gRPC body
   (content-type application/grpc, te: trailers, Basic auth; TLS with ALPN h2 to a TLS target):
   - Streams/Read of 10 events of a 10-event stream (real work each call);
   - Streams/Append of one event. h2load sends the same body every time, so every call after the first
     carries an event id already written: the node answers it idempotently from its cache (the whole
     gRPC path, validation and the duplicate check, but no write or fsync). It measures what the gRPC
     transport costs, not appends. Before each load one call is made with nghttp and its grpc-status
     must be 0; afterwards the stream must hold exactly that one event (Append) or ten (Read).
   Latency percentiles come from h2load's per-request log.
2. Real appends: --processes kurrentdbclient processes, each appending one new event per call as fast
   as it can to its own stream for --seconds (every event a new id), started together; and one process
   alone for the sequential p50. Each process reports its calls, latencies and its own CPU time.

--profile DIR: one more run per target with py-spy on the leader during the h2load Append load and during
the kurrentdbclient processes; prints where the node's milliseconds go per call.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from netbench import (
    ADMIN,
    BASIC,
    LoadResult,
    Profiler,
    Target,
    launch,
    load_average,
    need_tools,
    run_measured,
    target_names,
)
from profile_summary import table

APPEND = "/event_store.client.streams.Streams/Append"
READ = "/event_store.client.streams.Streams/Read"


def grpc_frame(message) -> bytes:
    payload = message.SerializeToString()
    return b"\x00" + struct.pack(">I", len(payload)) + payload


def append_body(stream: str, event_id: uuid.UUID) -> bytes:
    from kurrentdbclient.protos.v1 import shared_pb2, streams_pb2

    options = streams_pb2.AppendReq(
        options=streams_pb2.AppendReq.Options(
            stream_identifier=shared_pb2.StreamIdentifier(stream_name=stream.encode()), any=shared_pb2.Empty()
        )
    )
    event = streams_pb2.AppendReq(
        proposed_message=streams_pb2.AppendReq.ProposedMessage(
            id=shared_pb2.UUID(string=str(event_id)),
            metadata={"type": "BenchEvent", "content-type": "application/json"},
            data=b'{"account":"acc-17","amount":25,"currency":"EUR","note":"single-event append from h2load"}',
        )
    )
    return grpc_frame(options) + grpc_frame(event)


def read_body(stream: str, count: int) -> bytes:
    from kurrentdbclient.protos.v1 import shared_pb2, streams_pb2

    options = streams_pb2.ReadReq.Options(
        stream=streams_pb2.ReadReq.Options.StreamOptions(
            stream_identifier=shared_pb2.StreamIdentifier(stream_name=stream.encode()),
            start=shared_pb2.Empty(),
        ),
        read_direction=streams_pb2.ReadReq.Options.Forwards,
        resolve_links=False,
        count=count,
        no_filter=shared_pb2.Empty(),
        uuid_option=streams_pb2.ReadReq.Options.UUIDOption(string=shared_pb2.Empty()),
    )
    return grpc_frame(streams_pb2.ReadReq(options=options))


GRPC_HEADERS = ["content-type: application/grpc", "te: trailers", f"authorization: {BASIC}"]


def grpc_status(target: Target, path: str, body: Path) -> str:
    """One call with nghttp (nghttp2-client: h2 by ALPN over TLS, prior knowledge without): the
    grpc-status of its trailers."""
    headers = [x for h in GRPC_HEADERS for x in ("-H", h)]
    done = subprocess.run(
        ["nghttp", "-v", *headers, "-d", str(body), target.leader.url + path],
        capture_output=True,
        text=True,
        errors="replace",
        timeout=30,
    )
    if done.returncode != 0:
        raise SystemExit(f"nghttp {path} failed: {done.stderr or done.stdout[-1000:]}")
    statuses = [
        line.rsplit(":", 1)[1].strip() for line in done.stdout.splitlines() if " grpc-status:" in line
    ]
    return statuses[-1] if statuses else "missing"


def h2load(target: Target, path: str, body: bytes, *, seconds: float, connections: int) -> LoadResult:
    need_tools("h2load", "nghttp")
    with tempfile.TemporaryDirectory() as tmp:
        body_file = Path(tmp) / "body.bin"
        body_file.write_bytes(body)
        status = grpc_status(target, path, body_file)
        if status != "0":
            raise SystemExit(f"{path}: grpc-status {status} from nghttp; the body is not accepted")
        log = Path(tmp) / "requests.log"
        command = [
            "h2load",
            f"-D{seconds:g}",
            f"-c{connections}",
            "-m1",
            "-t1",
            "--npn-list=h2",  # ALPN h2 only, as gRPC clients offer (offered both, the node picks http/1.1)
            "-d",
            str(body_file),
            f"--log-file={log}",
            *(x for h in GRPC_HEADERS for x in ("-H", h)),
            target.leader.url + path,
        ]
        done, client_cpu, node_cpu, _, load = run_measured(command, target, seconds + 60)
        rows = [line.split("\t") for line in log.read_text().splitlines() if line.strip()]
    failed = sum(1 for r in rows if r[1] != "200")
    if failed or not rows:
        raise SystemExit(f"h2load: {failed} of {len(rows)} calls failed: {done.stdout[-1500:]}")
    latencies = sorted(int(r[2]) for r in rows)
    span = (max(int(r[0]) + int(r[2]) for r in rows) - min(int(r[0]) for r in rows)) / 1e6
    return LoadResult(
        "h2load",
        len(rows),
        span,
        latencies[len(latencies) // 2] / 1000,
        latencies[int(len(latencies) * 0.99)] / 1000,
        failed,
        client_cpu,
        node_cpu,
        load,
    )


# -- kurrentdbclient processes -----------------------------------------------------------------------


def client_uri(target: Target) -> tuple[str, str | None]:
    host = target.leader.url.split("://", 1)[1]
    if target.ca is None:
        return f"kurrentdb://{ADMIN[0]}:{ADMIN[1]}@{host}?tls=false", None
    return f"kurrentdb://{ADMIN[0]}:{ADMIN[1]}@{host}?tls=true", target.ca


def worker(uri: str, ca: str, stream: str, seconds: float) -> None:
    """A client process: connects and appends once, prints "ready", reads the start time from its
    standard input, appends to its stream from then for seconds; prints a JSON line."""
    from kurrentdbclient import KurrentDBClient, NewEvent, StreamState

    root = Path(ca).read_text() if ca != "-" else None
    client = KurrentDBClient(uri, root_certificates=root)
    data = (
        b'{"account":"acc-17","amount":25,"currency":"EUR","note":"single-event append from kurrentdbclient"}'
    )
    client.append_to_stream(stream, events=NewEvent("BenchEvent", data), current_version=StreamState.ANY)
    print("ready", flush=True)
    start_at = float(sys.stdin.readline())
    time.sleep(max(0.0, start_at - time.time()))
    latencies = []
    cpu0 = time.process_time()
    started = time.perf_counter()
    end = started + seconds
    while (now := time.perf_counter()) < end:
        client.append_to_stream(stream, events=NewEvent("BenchEvent", data), current_version=StreamState.ANY)
        latencies.append(time.perf_counter() - now)
    elapsed = time.perf_counter() - started
    cpu = time.process_time() - cpu0
    client.close()
    print(json.dumps({"calls": len(latencies), "seconds": elapsed, "cpu": cpu, "latencies": latencies}))


def client_processes(
    target: Target, processes: int, seconds: float, on_start: Callable[[], object] | None = None
) -> LoadResult:
    uri, ca = client_uri(target)
    tag = uuid.uuid4().hex[:8]
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--worker",
                uri,
                ca or "-",
                f"grpc-{tag}-{i}",
                str(seconds),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(processes)
    ]
    for p in procs:  # every process has started, connected and made its first append
        assert p.stdout is not None and p.stdin is not None
        if p.stdout.readline().strip() != "ready":
            raise SystemExit("a kurrentdbclient process failed before its load")
    start_at = time.time() + 0.2
    for p in procs:
        assert p.stdin is not None
        p.stdin.write(f"{start_at}\n")
        p.stdin.flush()
    time.sleep(max(0.0, start_at - time.time()))
    before = target.cpu()
    if on_start:
        on_start()
    time.sleep(seconds)
    after = target.cpu()
    load = load_average()
    results = []
    for p in procs:
        out, _ = p.communicate(timeout=120)
        if p.returncode != 0:
            raise SystemExit(f"a kurrentdbclient process failed ({p.returncode})")
        results.append(json.loads(out.strip().splitlines()[-1]))
    latencies = sorted(x for r in results for x in r["latencies"])
    calls = sum(r["calls"] for r in results)
    span = max(r["seconds"] for r in results)
    return LoadResult(
        f"kurrentdbclient x{processes}",
        calls,
        span,
        latencies[len(latencies) // 2] * 1000,
        latencies[int(len(latencies) * 0.99)] * 1000,
        0,
        sum(r["cpu"] for r in results),
        {name: after[name] - before[name] for name in before},
        load,
    )


def one_target(kind: str, args, profile: Path | None = None) -> dict[str, LoadResult]:
    """Every load on one fresh target; ``kind`` is a TARGETS name, with "@variant" (bench/node_variant.py)."""
    out: dict[str, LoadResult] = {}
    with launch(kind) as target:
        read_stream = f"read-{uuid.uuid4().hex[:8]}"
        with target.client() as c:
            for i in range(10):
                r = c.post(
                    f"/streams/{read_stream}",
                    json={"i": i},
                    headers={"ES-EventType": "BenchEvent", "ES-EventId": str(uuid.uuid4())},
                )
                r.raise_for_status()
        out["h2load Read 10"] = h2load(
            target, READ, read_body(read_stream, 10), seconds=args.seconds, connections=args.connections
        )
        append_stream = f"h2-{uuid.uuid4().hex[:8]}"
        profiler = (
            Profiler(profile, f"grpc-h2load-append-{kind}", target.nodes[:1], args.seconds)
            if profile
            else None
        )
        out["h2load Append (idempotent repeats)"] = h2load(
            target,
            APPEND,
            append_body(append_stream, uuid.uuid4()),
            seconds=args.seconds,
            connections=args.connections,
        )
        if profiler:
            profiler.wait()
        with target.client() as c:
            held = c.get(f"/streams/{append_stream}/head/backward/20", headers={"Accept": "application/json"})
            held.raise_for_status()
            if len(held.json()["entries"]) != 1:
                raise SystemExit(f"{append_stream} holds {len(held.json()['entries'])} events, not 1")
        out["kurrentdbclient x1 (sequential)"] = client_processes(target, 1, args.seconds)
        profilers: list[Profiler] = []

        def start_profile() -> None:
            if profile:
                profilers.append(Profiler(profile, f"grpc-clients-{kind}", target.nodes[:2], args.seconds))

        out[f"kurrentdbclient x{args.processes}"] = client_processes(
            target, args.processes, args.seconds, start_profile
        )
        for profiler in profilers:
            profiler.wait()
    return out


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        uri, ca, stream, seconds = sys.argv[2:6]
        worker(uri, ca, stream, float(seconds))
        return
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--targets", default="single-insecure,single-tls,cluster3-tls")
    parser.add_argument("--profile", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--variants", default="asyncio", help="e.g. asyncio,uvloop: runtime variants (bench/node_variant.py)"
    )
    args = parser.parse_args()
    targets = target_names(args.targets, args.variants)
    need_tools("h2load", "nghttp", *(["py-spy"] if args.profile else []))
    print(f"load average at start: {load_average()}", flush=True)
    results: dict[tuple[str, str], list[LoadResult]] = {}
    for run in range(args.runs):
        for kind in targets:
            for load, r in one_target(kind, args).items():
                results.setdefault((kind, load), []).append(r)
                print(
                    f"run {run + 1}, {kind}, {load}: {r.rate:,.0f} calls/s, p50 {r.p50_ms:.2f} ms, "
                    f"p99 {r.p99_ms:.2f} ms; CPU {r.cpu_text()}; load {r.load}",
                    flush=True,
                )
    print(f"\nmedians of {args.runs} runs, {args.seconds:g} s each; CPU as shares of one core")
    print(
        "| target | load | calls/s | p50 ms | p99 ms | client CPU | leader CPU | other nodes' CPU | node CPU ms/call |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for (kind, load), rows in results.items():

        def med(f, rows=rows) -> float:
            return statistics.median(f(r) for r in rows)

        print(
            f"| {kind} | {load} | {med(lambda r: r.rate):,.0f} | {med(lambda r: r.p50_ms):.2f} | "
            f"{med(lambda r: r.p99_ms):.2f} | {med(lambda r: r.client_share):.0%} | "
            f"{med(lambda r: r.leader_share):.0%} | "
            f"{med(lambda r: r.others_share):.0%} | "
            f"{med(lambda r: sum(r.node_cpu.values()) / r.requests * 1000):.3f} |"
        )
    profiles = {}
    if args.profile:
        for kind in targets:
            profiled = one_target(kind, args, args.profile)
            for load, label, nodes in (
                ("h2load Append (idempotent repeats)", f"grpc-h2load-append-{kind}", 1),
                (f"kurrentdbclient x{args.processes}", f"grpc-clients-{kind}", 2),
            ):
                r = profiled[load]
                print(
                    f"\nprofiled run, {kind}, {load}: {r.rate:,.0f} calls/s, p50 {r.p50_ms:.2f} ms; CPU {r.cpu_text()}"
                )
                for name in list(r.node_cpu)[:nodes]:
                    path = args.profile / f"{label}-{name}.txt"
                    print(table(path, r.requests, r.seconds, r.node_cpu[name]))
                profiles[f"{kind} {load}"] = r.row()
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "runs": {f"{k} | {w}": [r.row() for r in v] for (k, w), v in results.items()},
                    "profiles": profiles,
                },
                indent=1,
            )
        )


if __name__ == "__main__":
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    main()
