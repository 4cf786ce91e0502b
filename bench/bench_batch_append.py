"""BatchAppend throughput of one call (issue 35: the Node.js client's flood test).

    .venv/bin/python bench/bench_batch_append.py [--batches 10000] [--runs 3] [--deadline 10]
        [--insecure] [--profile FILE]

Starts one `evdb node` process as the Node.js suite's harness starts the flood test's node
(tests/clients/nodejs_suite/launcher.py: TLS unless --insecure, projections All, an on-disk database in a
temp folder, a free loopback port) and, per run, opens one Streams/BatchAppend call over
grpcio (admin credentials, as the Node.js suite's connection string) and sends --batches batches as the
Node.js client's `appendToStream` does when 10,000 are called at once (its
streams/appendToStream-batch-append-flood test): each batch is one request (options, one proposed message,
is_final) with its own correlation id, expected revision any, the pre-21.10 absolute deadline
(`deadline_21_10_0`) = the time the batches were made + --deadline seconds, and one JSON event whose data
is `{"value": "A" * 904}`. Every run writes to its own stream. The run ends when every batch is answered;
it reports batches/s (answers over the time from the first request to the last answer), the answers by
outcome (`Timeout`: a deadline that passed before the node read the batch) and the node's CPU seconds
(/proc user + system) over the run. The summary line is the median of the runs.

--profile FILE: one more run with py-spy sampling the node (raw format, every thread, into FILE); prints
each thread's busy time by function (self and inclusive), in ms per batch.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

import grpc
from kurrentdbclient.protos.v1 import shared_pb2, streams_pb2
from netbench import PY_SPY, ROOT, cpu_seconds
from profile_summary import _writer_wait

sys.path.insert(0, str(ROOT))
from tests.clients.nodejs_suite.launcher import Instance  # the suite's own nodes

METHOD = "/event_store.client.streams.Streams/BatchAppend"
CREDENTIALS = (("authorization", "Basic YWRtaW46Y2hhbmdlaXQ="),)  # admin:changeit
DATA = json.dumps({"value": "A" * 904}, separators=(",", ":")).encode()
PROFILE_RATE = 250


def batches(stream: str, count: int, deadline: float) -> list[bytes]:
    """The serialized requests, made at once as the Node.js client makes them (one deadline for all)."""
    seconds = int(deadline)
    options = streams_pb2.BatchAppendReq.Options(
        stream_identifier=shared_pb2.StreamIdentifier(stream_name=stream.encode())
    )
    options.any.SetInParent()
    options.deadline_21_10_0.seconds = seconds
    options.deadline_21_10_0.nanos = int((deadline - seconds) * 1e9)
    out = []
    for _ in range(count):
        message = streams_pb2.BatchAppendReq.ProposedMessage(
            id=shared_pb2.UUID(string=str(uuid.uuid4())),
            metadata={"type": "AnyEventType", "content-type": "application/json"},
            data=DATA,
        )
        request = streams_pb2.BatchAppendReq(
            correlation_id=shared_pb2.UUID(string=str(uuid.uuid4())),
            options=options,
            proposed_messages=[message],
            is_final=True,
        )
        out.append(request.SerializeToString())
    return out


def channel(node: Instance) -> grpc.Channel:
    address = f"localhost:{node.ports[0]}"
    if node.insecure:
        return grpc.insecure_channel(address)
    return grpc.secure_channel(address, grpc.ssl_channel_credentials(node.ca.read_bytes()))


def run(node: Instance, count: int, deadline: float, stream: str) -> dict:
    process = node.processes[0]
    assert process is not None
    pid = process.pid
    requests = batches(stream, count, time.time() + deadline)
    with channel(node) as open_channel:
        call = open_channel.stream_stream(
            METHOD,
            request_serializer=lambda b: b,
            response_deserializer=streams_pb2.BatchAppendResp.FromString,
        )
        cpu = cpu_seconds(pid)
        started = time.perf_counter()
        outcomes: Counter[str] = Counter()
        for answer in call(iter(requests), metadata=CREDENTIALS, timeout=600):
            if answer.HasField("success"):
                outcomes["success"] += 1
            else:
                outcomes[answer.error.message] += 1
            if sum(outcomes.values()) == count:
                break
        seconds = time.perf_counter() - started
        cpu = cpu_seconds(pid) - cpu
    return {
        "batches": count,
        "seconds": round(seconds, 3),
        "batches_per_s": round(count / seconds, 1),
        "node_cpu_s": round(cpu, 2),
        "node_cpu_ms_per_batch": round(cpu / count * 1000, 3),
        "answers": dict(outcomes),
    }


#: the innermost frames of a thread waiting for work (uvloop's loop waits in C, under Runner.run; the
#: writer in its queue's get)
IDLE = (
    "Runner.run (asyncio/runners.py",
    "select (selectors.py",
    "wait (threading.py",
    "_worker (concurrent/futures/thread.py",
    "get (queue.py",
    _writer_wait(),
)


def profile_table(path: Path, count: int, top: int = 25) -> str:
    """Each thread's busy samples by function, self and inclusive, in ms per batch (one sample is
    1/rate seconds of that thread)."""
    own: dict[str, Counter[str]] = {}
    inclusive: dict[str, Counter[str]] = {}
    for line in path.read_text().splitlines():
        stack, _, number = line.rpartition(" ")
        frames = stack.split(";")
        if not number.isdigit() or len(frames) < 2:
            continue
        thread = frames[0].rsplit("): ", 1)[-1].strip('"')
        thread = "thread pool" if thread.startswith(("asyncio_", "uvloop_")) else thread
        leaf = frames[-1]
        if any(idle in leaf for idle in IDLE):
            continue
        own.setdefault(thread, Counter())[leaf] += int(number)
        for frame in set(frames[1:]):
            inclusive.setdefault(thread, Counter())[frame] += int(number)
    per = 1000 / PROFILE_RATE / count
    lines = []
    for thread, counts in sorted(own.items(), key=lambda t: -sum(t[1].values())):
        lines += ["", f"{thread}: busy {sum(counts.values()) * per:.4f} ms per batch; self:"]
        lines += [f"  {n * per:8.4f}  {f}" for f, n in counts.most_common(top)]
        lines += [f"{thread}, inclusive:"]
        lines += [f"  {n * per:8.4f}  {f}" for f, n in inclusive[thread].most_common(top)]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batches", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--deadline", type=float, default=10.0, help="each batch's deadline, seconds")
    parser.add_argument("--insecure", action="store_true", help="a node without TLS")
    parser.add_argument("--profile", type=Path, help="one more run with py-spy; its raw file goes here")
    args = parser.parse_args()
    kind = "insecure" if args.insecure else "TLS"
    with tempfile.TemporaryDirectory(prefix="bench-batch-append-") as tmp:
        node = Instance(Path(tmp), 1, args.insecure, [])
        try:
            node.up()
            rows = []
            for i in range(args.runs):
                row = run(node, args.batches, args.deadline, f"flood-{i}-{uuid.uuid4().hex[:8]}")
                rows.append(row)
                print(json.dumps(row), flush=True)
            median = statistics.median(r["batches_per_s"] for r in rows)
            cpu = statistics.median(r["node_cpu_s"] for r in rows)
            print(
                f"{kind} node, median of {args.runs}: {median:.0f} batches/s, node CPU {cpu:.2f} s per "
                f"{args.batches} batches ({cpu / args.batches * 1000:.3f} ms per batch); "
                f"load average {os.getloadavg()[0]:.2f}"
            )
            if args.profile:
                profile(node, args)
        finally:
            node.down()


def profile(node: Instance, args: argparse.Namespace) -> None:
    """One more run with py-spy sampling the node."""
    process = node.processes[0]
    assert process is not None
    args.profile.parent.mkdir(parents=True, exist_ok=True)
    spy = subprocess.Popen(
        [
            *(str(PY_SPY), "record", "--pid", str(process.pid), "--rate", str(PROFILE_RATE)),
            *("--format", "raw", "--threads", "--idle", "--nonblocking", "-o", str(args.profile)),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    time.sleep(1.0)  # py-spy attaches
    row = run(node, args.batches, args.deadline, f"flood-profile-{uuid.uuid4().hex[:8]}")
    spy.send_signal(2)
    _, err = spy.communicate(timeout=120)
    if spy.returncode != 0:
        raise SystemExit(f"py-spy failed: {err.decode(errors='replace')[-1000:]}")
    print(json.dumps(row))
    print(profile_table(args.profile, args.batches))


if __name__ == "__main__":
    main()
