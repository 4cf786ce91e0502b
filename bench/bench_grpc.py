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
3. The sequential p50 without kurrentdbclient's own cost: bench/grpc_lean.py, one process writing each
   HTTP/2 frame by hand (a few tens of microseconds of client CPU per call), appending new events one at
   a time (real writes, fdatasync included): the node's round trip.

--profile DIR: one more run per target with py-spy on the leader during the h2load Append load and during
the kurrentdbclient processes; prints where the node's milliseconds go per call.

--framing [--calls N]: no node; the server side's HTTP/2 work of N unary calls in this process (request
headers and one message in, response headers, one message and trailers out), with the pure-Python h2
that grpclib uses and, when it can be imported, ngh2 (libnghttp2, compiled, sans-I/O): what a compiled
HTTP/2 engine behind the node's port would save per call. ngh2 is not a dependency; to include it:
    .venv/bin/pip install --target /tmp/ngh2 ngh2==0.3.0
    PYTHONPATH=/tmp/ngh2 .venv/bin/python bench/bench_grpc.py --framing
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

from grpc_lean import timed_calls
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
    result = timed_calls(
        lambda: client.append_to_stream(
            stream, events=NewEvent("BenchEvent", data), current_version=StreamState.ANY
        ),
        seconds,
    )
    client.close()
    print(json.dumps(result))


def client_processes(
    target: Target,
    processes: int,
    seconds: float,
    on_start: Callable[[], object] | None = None,
    *,
    lean: bool = False,
) -> LoadResult:
    """``processes`` kurrentdbclient processes (or, with ``lean``, bench/grpc_lean.py's hand-framed
    client) appending new events, each to its own stream, for ``seconds`` seconds."""
    uri, ca = client_uri(target)
    tag = uuid.uuid4().hex[:8]

    def command(i: int) -> list[str]:
        if lean:
            lean_client = str(Path(__file__).with_name("grpc_lean.py"))
            return [
                sys.executable,
                lean_client,
                target.leader.url,
                ca or "-",
                f"lean-{tag}-{i}",
                str(seconds),
                *ADMIN,
            ]
        return [sys.executable, __file__, "--worker", uri, ca or "-", f"grpc-{tag}-{i}", str(seconds)]

    procs = [
        subprocess.Popen(
            command(i),
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
        f"{'lean client' if lean else 'kurrentdbclient'} x{processes}",
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
        out["lean client x1 (sequential)"] = client_processes(target, 1, args.seconds, lean=True)
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


# -- --framing: the HTTP/2 engine's share of a call, without a node --------------------------------------
_CALL_HEADERS = [
    (":method", "POST"),
    (":scheme", "http"),
    (":path", APPEND),
    (":authority", "127.0.0.1:2113"),
    ("content-type", "application/grpc"),
    ("te", "trailers"),
    ("grpc-timeout", "10S"),
    ("user-agent", "grpc-python/1.85"),
    ("authorization", BASIC),
]


def _client_bytes(calls: int) -> tuple[bytes, list[bytes]]:
    """A client's preface and the bytes of each of ``calls`` unary calls (a 180-byte message each)."""
    import h2.config
    import h2.connection
    import h2.settings

    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    client.initiate_connection()
    client.increment_flow_control_window(2**30)
    # the server's settings as the client would have them: streams and window without limit here
    peer = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
    peer.local_settings = h2.settings.Settings(
        client=False, initial_values={h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 2**31 - 1}
    )
    peer.initiate_connection()
    peer.increment_flow_control_window(2**30)
    preface = client.data_to_send()
    client.receive_data(peer.data_to_send())
    preface += client.data_to_send()
    body = b"\x00" + (180).to_bytes(4, "big") + b"x" * 180
    out = []
    for _ in range(calls):
        stream_id = client.get_next_available_stream_id()
        client.send_headers(stream_id, _CALL_HEADERS)
        client.send_data(stream_id, body, end_stream=True)
        out.append(client.data_to_send())
    return preface, out


def _serve_h2(preface: bytes, calls: list[bytes], answer: bytes) -> float:
    import h2.config
    import h2.connection
    import h2.events

    server = h2.connection.H2Connection(
        h2.config.H2Configuration(client_side=False, header_encoding="ascii", validate_inbound_headers=False)
    )  # as grpclib configures it
    server.initiate_connection()
    server.increment_flow_control_window(2**30)
    server.receive_data(preface)
    server.data_to_send()
    started = time.process_time()
    for data in calls:
        stream_id = 0
        for event in server.receive_data(data):
            if isinstance(event, h2.events.RequestReceived):
                stream_id = event.stream_id
            elif isinstance(event, h2.events.DataReceived):
                server.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        server.send_headers(stream_id, [(":status", "200"), ("content-type", "application/grpc+proto")])
        server.send_data(stream_id, answer)
        server.send_headers(stream_id, [("grpc-status", "0")], end_stream=True)
        server.data_to_send()
    return time.process_time() - started


def _serve_ngh2(preface: bytes, calls: list[bytes], answer: bytes) -> float:
    import ngh2  # type: ignore[import-not-found]
    from ngh2.config import Role  # type: ignore[import-not-found]

    server = ngh2.Connection(Role.SERVER)  # its window updates are automatic
    server.initiate_connection()
    server.receive_data(preface)
    server.events()
    server.data_to_send()
    started = time.process_time()
    for data in calls:
        server.receive_data(data)
        stream_id = 0
        for event in server.events():
            if isinstance(event, ngh2.events.RequestReceived):
                stream_id = event.stream_id
        server.send_response(stream_id, [(b":status", b"200"), (b"content-type", b"application/grpc+proto")])
        server.send_data(stream_id, answer)
        server.send_trailers(stream_id, [(b"grpc-status", b"0")])
        server.data_to_send()
    return time.process_time() - started


def framing(calls: int, runs: int) -> None:
    engines: list[tuple[str, Callable[[bytes, list[bytes], bytes], float]]] = [
        ("h2 (pure Python)", _serve_h2)
    ]
    try:
        import ngh2  # type: ignore[import-not-found]

        engines.append((f"ngh2 {ngh2.__version__} (libnghttp2)", _serve_ngh2))
    except ImportError:
        print("ngh2 not importable: measuring h2 only (see the module docstring)")
    answer = b"\x00" + (60).to_bytes(4, "big") + b"y" * 60
    print(f"server-side HTTP/2 work of a unary gRPC call, {calls:,} calls, CPU ms per call, median of {runs}")
    for name, serve in engines:
        times = []
        for _ in range(runs):
            preface, data = _client_bytes(calls)
            times.append(serve(preface, data, answer) / calls * 1000)
        print(
            f"| {name} | {statistics.median(times):.4f} ms | runs: {', '.join(f'{t:.4f}' for t in times)} |"
        )


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
    parser.add_argument("--framing", action="store_true", help="only the HTTP/2 engines' cost per call")
    parser.add_argument("--calls", type=int, default=20_000, help="with --framing")
    args = parser.parse_args()
    if args.framing:
        framing(args.calls, args.runs)
        return
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
