"""Where a node's milliseconds go, per request, from a py-spy raw profile (`--threads --idle`).

    .venv/bin/python bench/profile_summary.py PROFILE.txt --requests N --seconds S
    .venv/bin/python bench/profile_summary.py --combine LABEL=PROFILE.txt:N:S ...

Each sample is one thread's stack at one moment (wall time: waiting is sampled too). A stack is put in
the first category that matches, reading from the innermost frame outwards, so the code that was
running (or waiting) at that moment decides: an fdatasync under the append is "fsync", a TLS read under
aiohttp's protocol is "TLS". Threads are grouped as the event loop (MainThread), the writer
(evdb-writer), the default thread pool (asyncio_N) and the rest; ms per request = a category's share
of a thread's samples x the profile's seconds / the requests answered in that time.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter, defaultdict
from pathlib import Path

IDLE = "idle (waiting for work; on uvloop also its C loop's own I/O)"


def _writer_wait() -> str:
    """The frame of the writer thread waiting for work (its queue's get, in ``GroupCommitWriter._loop``),
    with the line number it has in this tree's evdb/database/writer.py (so an edit there does not move
    it)."""
    source = Path(__file__).resolve().parent.parent / "evdb" / "database" / "writer.py"
    for number, line in enumerate(source.read_text().splitlines(), 1):
        if line.strip() == "first = self._queue.get()":
            return f"_loop (evdb/database/writer.py:{number})"
    return "_loop (evdb/database/writer.py:?)"


#: (category, substrings of a frame "function (file:line)"); first match from the innermost frame wins
CATEGORIES: list[tuple[str, tuple[str, ...]]] = [
    (
        IDLE,
        (
            "EpollSelector.select",
            "Condition.wait",
            "Event.wait",
            "_worker (concurrent/futures/thread.py:81)",
            _writer_wait(),
            "Queue.get (queue.py",
            "time.sleep",
            # uvloop: the loop runs in C under Runner.run; its waiting and its transports' socket and TLS
            # work have no Python frame of their own (node CPU per request from /proc is the check)
            "Runner.run (asyncio/runners.py",
        ),
    ),
    ("fsync (fdatasync: disk wait)", ("Chunk.flush", "fdatasync", "fsync")),
    ("checkpoint and log writes", ("evdb/storage/disk.py", "evdb/storage/checkpoints.py")),
    ("TLS (ssl, sslproto)", ("ssl.py", "sslproto.py")),
    ("HTTP/2 framing (h2, hpack, hyperframe)", ("h2/", "hpack/", "hyperframe/")),
    ("protobuf", ("google/protobuf", "_pb2.py")),
    ("grpclib (gRPC over h2)", ("grpclib/",)),
    ("evdb gRPC handler", ("evdb/grpc/",)),
    ("HTTP/1.1 parsing", ("aiohttp/http_parser", "aiohttp/_http_parser", "RequestHandler.data_received")),
    ("HTTP/1.1 response writing", ("aiohttp/http_writer", "aiohttp/web_response")),
    (
        "thread hand-offs (futures, call_soon_threadsafe)",
        (
            "_write_to_self",
            "_read_from_self",
            "concurrent/futures",
            "asyncio/futures.py",
            "call_soon_threadsafe",
        ),
    ),
    ("authentication", ("evdb/auth.py", "evdb/http/auth")),
    ("replication (leader/follower, acks)", ("evdb/cluster/",)),
    ("evdb HTTP handler (validation, decoding)", ("evdb/http/",)),
    (
        "append: records, index, log (writer)",
        ("evdb/database/", "evdb/storage/", "evdb/index/", "evdb/streams.py"),
    ),
    ("logging, metrics", ("logging/", "evdb/metrics", "evdb/logs", "prometheus")),
    ("aiohttp framework (routing, middlewares, requests)", ("aiohttp/", "multidict", "yarl/")),
    ("socket I/O (asyncio transports)", ("selector_events.py",)),
    ("asyncio event loop", ("asyncio/",)),
]
_THREAD = re.compile(r"^thread \(\w+\): ?([^;]*);")


def thread_group(name: str) -> str:
    if name == "MainThread":
        return "event loop"
    if name == "evdb-writer":
        return "writer"
    if name.startswith(("asyncio_", "ThreadPoolExecutor")):
        return "thread pool"
    return "other threads"


def categorise(frames: list[str]) -> str:
    for frame in reversed(frames):
        for category, needles in CATEGORIES:
            if any(n in frame for n in needles):
                return category
    return "other"


def summarise(path: Path) -> dict[str, Counter]:
    """Samples per thread group per category."""
    groups: dict[str, Counter] = defaultdict(Counter)
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        m = _THREAD.match(stack)
        if not m or not count.isdigit():
            continue
        frames = stack[m.end() :].split(";")
        groups[thread_group(m.group(1))][categorise(frames)] += int(count)
    return groups


GROUPS = ("event loop", "writer", "thread pool", "other threads")


def table(path: Path, requests: int, seconds: float, node_cpu: float | None = None) -> str:
    """A markdown table: ms per request in each category, per thread group (busy time; idle apart)."""
    groups = summarise(path)
    # a thread group's samples span `seconds` of wall time per thread; pools have several threads
    per_sample = {}
    for group, counts in groups.items():
        threads = max(1, _threads_in(path, group))
        per_sample[group] = seconds * threads / max(1, sum(counts.values()))
    categories = sorted(
        {c for counts in groups.values() for c in counts if c != IDLE},
        key=lambda c: -sum(groups[g][c] * per_sample[g] for g in groups),
    )
    cols = [g for g in GROUPS if g in groups]
    lines = [
        f"| {path.stem} (ms per request, {requests} requests in {seconds:.1f} s) | "
        + " | ".join(cols)
        + " | all threads |",
        "|---" * (len(cols) + 2) + "|",
    ]
    total_busy = 0.0
    for category in categories:
        cells = []
        row_total = 0.0
        for g in cols:
            ms = groups[g][category] * per_sample[g] / requests * 1000
            row_total += ms
            cells.append(f"{ms:.3f}" if ms >= 0.0005 else "")
        total_busy += row_total
        lines.append(f"| {category} | " + " | ".join(cells) + f" | {row_total:.3f} |")
    busy = [
        f"{(sum(groups[g].values()) - groups[g][IDLE]) * per_sample[g] / requests * 1000:.3f}" for g in cols
    ]
    lines.append("| **busy, sum** | " + " | ".join(busy) + f" | {total_busy:.3f} |")
    idle = []
    for g in cols:
        share = groups[g][IDLE] / max(1, sum(groups[g].values()))
        idle.append(f"{share:.0%} idle")
    lines.append("| idle share of the group's wall time | " + " | ".join(idle) + " | |")
    if node_cpu is not None:
        lines.append(
            f"| node CPU (/proc), ms per request | {node_cpu / requests * 1000:.3f} |" + " |" * len(cols)
        )
    return "\n".join(lines)


def combined(columns: list[tuple[str, Path, int, float]]) -> str:
    """One markdown table of several profiles: ms per request in each category over all threads
    (busy time), a column per profile (label, file, requests, seconds), and the event loop's idle share."""
    per: list[dict[str, float]] = []
    idle: list[str] = []
    for _, path, requests, seconds in columns:
        groups = summarise(path)
        row: dict[str, float] = defaultdict(float)
        for group, counts in groups.items():
            threads = max(1, _threads_in(path, group))
            per_sample = seconds * threads / max(1, sum(counts.values()))
            for category, n in counts.items():
                if category != IDLE:
                    row[category] += n * per_sample / requests * 1000
        per.append(row)
        loop = groups.get("event loop", Counter())
        idle.append(f"{loop[IDLE] / max(1, sum(loop.values())):.0%}")
    categories = sorted({c for row in per for c in row}, key=lambda c: -max(row.get(c, 0.0) for row in per))
    lines = [
        "| ms per request (all threads) | " + " | ".join(c[0] for c in columns) + " |",
        "|---" * (len(columns) + 1) + "|",
    ]
    for category in categories:
        cells = [f"{row[category]:.3f}" if row.get(category, 0.0) >= 0.0005 else "" for row in per]
        lines.append(f"| {category} | " + " | ".join(cells) + " |")
    lines.append("| **busy, sum** | " + " | ".join(f"**{sum(row.values()):.3f}**" for row in per) + " |")
    lines.append("| event loop idle | " + " | ".join(idle) + " |")
    return "\n".join(lines)


def _threads_in(path: Path, group: str) -> int:
    names = set()
    for line in path.read_text().splitlines():
        m = _THREAD.match(line)
        if m and thread_group(m.group(1)) == group:
            names.add(line.split(")", 1)[0])
    return len(names)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("profile", type=Path, nargs="?")
    parser.add_argument("--requests", type=int)
    parser.add_argument("--seconds", type=float)
    parser.add_argument(
        "--combine", nargs="+", metavar="LABEL=FILE:REQUESTS:SECONDS", help="one table of several profiles"
    )
    args = parser.parse_args()
    if args.combine:
        columns = []
        for spec in args.combine:
            label, _, rest = spec.partition("=")
            path, requests, seconds = rest.rsplit(":", 2)
            columns.append((label, Path(path), int(requests), float(seconds)))
        print(combined(columns))
    elif args.profile and args.requests and args.seconds:
        print(table(args.profile, args.requests, args.seconds))
    else:
        parser.error("give a profile with --requests and --seconds, or --combine")


if __name__ == "__main__":
    main()
