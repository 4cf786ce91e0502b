"""Backup time: evdb's full and differential backups against ``cp -r`` and ``rsync -a`` of the same
folders, in the same run, on the same disk. Each figure is the median of --runs runs.

Full: each tool copies the whole database (db + index) into an empty folder; evdb's backup is durable
(every file fsynced before it gets its name), so its peer is ``cp -r`` followed by ``sync``, and plain
``cp -r`` (which leaves the bytes in the page cache) is shown too. Differential: before
each run the same amount of new data (--extra-mib) is appended to the source; evdb's differential
then updates its backup, and ``rsync -a`` updates its earlier copy.

    .venv/bin/python bench/bench_backup.py [--size-gib 2] [--extra-mib 64] [--runs 3] [--dir /tmp/bench-backup]

``rsync`` comes from Debian (``apt-get install -y rsync``). The page cache is not dropped between
runs (that needs root and disturbs the machine); the first run warms it, so the figures compare
copy paths, not cold disk reads.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import statistics
import subprocess
import sys
import time

from evdb.backup import run_backup
from evdb.database import Database
from evdb.streams import NewEvent

EVENT = b"x" * (256 * 1024)


def grow(db_dir: str, mib: int) -> None:
    with Database.open(db_dir, max_memtable_entries=100_000) as db:
        for i in range(mib * 4):
            db.append(f"stream-{i % 100}", [NewEvent("Blob", EVENT)])
        db.index.wait_idle()


def folder_size(path: str) -> int:
    total = 0
    for root, _dirs, names in os.walk(path):
        for n in names:
            total += os.stat(os.path.join(root, n)).st_blocks * 512
    return total


def timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def sh(*cmd: str) -> None:
    subprocess.run(cmd, check=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size-gib", type=float, default=2.0)
    parser.add_argument("--extra-mib", type=int, default=64)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dir", default="/tmp/bench-backup")
    args = parser.parse_args()
    if not shutil.which("rsync"):
        raise SystemExit("rsync is missing: apt-get install -y rsync")
    logging.getLogger("evdb").setLevel(logging.WARNING)
    shutil.rmtree(args.dir, ignore_errors=True)
    src = os.path.join(args.dir, "src")
    db_dir = os.path.join(src, "db")
    index_dir = os.path.join(db_dir, "index")
    started = time.perf_counter()
    grow(db_dir, int(args.size_gib * 1024))
    print(
        f"source: {folder_size(src) / 2**30:.2f} GiB on disk, "
        f"{len([n for n in os.listdir(db_dir) if n.startswith('chunk-')])} chunks "
        f"(built in {time.perf_counter() - started:.0f} s)"
    )

    full: dict[str, list[float]] = {"evdb backup (full)": [], "cp -r": [], "cp -r; sync": [], "rsync -a": []}
    for _ in range(args.runs):
        for name in full:
            target = os.path.join(args.dir, "full")
            shutil.rmtree(target, ignore_errors=True)
            os.sync()
            if name.startswith("evdb"):
                full[name].append(timed(lambda t=target: run_backup(db_dir, index_dir, t)))
            elif name == "cp -r":
                full[name].append(timed(lambda t=target: sh("cp", "-r", src, t)))
            elif name == "cp -r; sync":  # the durable equivalent: evdb fsyncs every file it copies
                full[name].append(timed(lambda t=target: (sh("cp", "-r", src, t), os.sync())))
            else:
                full[name].append(timed(lambda t=target: sh("rsync", "-a", src + "/", t + "/")))
    shutil.rmtree(os.path.join(args.dir, "full"), ignore_errors=True)

    bk = os.path.join(args.dir, "bk")
    bk_cli = os.path.join(args.dir, "bk-cli")
    mirror = os.path.join(args.dir, "mirror")
    run_backup(db_dir, index_dir, bk)
    run_backup(db_dir, index_dir, bk_cli)
    sh("rsync", "-a", src + "/", mirror + "/")
    evdb_command = [sys.executable, "-m", "evdb.cli", "backup", "--db", db_dir, "--index", index_dir]
    diff: dict[str, list[float]] = {
        "evdb backup --differential": [],
        "the same, as a command": [],
        "rsync -a (update)": [],
    }
    copied: list[int] = []
    for _ in range(args.runs):
        grow(db_dir, args.extra_mib)
        os.sync()
        result = None

        def differential() -> None:
            nonlocal result
            result = run_backup(db_dir, index_dir, bk, differential=True)

        diff["evdb backup --differential"].append(timed(differential))
        copied.append(result.files_copied)
        os.sync()
        # the whole command, process start-up and imports included: what an operator's script runs
        diff["the same, as a command"].append(
            timed(
                lambda: subprocess.run(
                    [*evdb_command, "--to", bk_cli, "--differential"], check=True, capture_output=True
                )
            )
        )
        os.sync()
        diff["rsync -a (update)"].append(
            timed(lambda: sh("rsync", "-a", "--delete", src + "/", mirror + "/"))
        )

    print(
        f"\nfull backup of {args.size_gib} GiB (median of {args.runs}; ratios: medians of same-run ratios):"
    )
    for name, times in full.items():
        m = statistics.median(times)
        vs_cp = statistics.median(t / c for t, c in zip(times, full["cp -r"], strict=True))
        vs_sync = statistics.median(t / c for t, c in zip(times, full["cp -r; sync"], strict=True))
        print(
            f"  {name:28s} {m:7.2f} s  {args.size_gib * 1024 / m:8.0f} MiB/s  {vs_cp:5.2f}x cp -r"
            f"  {vs_sync:5.2f}x cp -r; sync  (runs: {', '.join(f'{t:.2f}' for t in times)})"
        )
    print(
        f"\ndifferential after +{args.extra_mib} MiB (median of {args.runs}; evdb copied {copied} files; "
        "the first row in this process, the second as its own process):"
    )
    for name, times in diff.items():
        m = statistics.median(times)
        vs = statistics.median(t / r for t, r in zip(times, diff["rsync -a (update)"], strict=True))
        print(f"  {name:28s} {m:7.2f} s  {vs:5.2f}x rsync -a  (runs: {', '.join(f'{t:.2f}' for t in times)})")
    shutil.rmtree(args.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
