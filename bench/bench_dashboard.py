"""Dashboard cost: CPU of the dashboard process idling while attached to 4 nodes, and the time to
its first full frame (every node answered once and was drawn).

    .venv/bin/python bench/bench_dashboard.py [--seconds 20]

Four evdb nodes run in one helper process (plain HTTP, port 0); the dashboard runs headless in a
second process; psutil samples the dashboard process's CPU time over the idle window.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time

import psutil

NODES_SCRIPT = r"""
import asyncio, sys, tempfile
from evdb.node import Node
from evdb.options import load_options

async def main():
    folder = tempfile.mkdtemp(prefix="evdb-bench-dash-")
    nodes = []
    for i in range(4):
        o = load_options(["--db", f"{folder}/n{i}/db", "--log", f"{folder}/n{i}/log", "--insecure",
                          "--http-port", "0", "--stats-period-sec", "0"], {})
        n = Node(o, name=f"node{i}")
        await n.__aenter__()
        nodes.append(n)
    print(" ".join(n.http_url for n in nodes), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)

asyncio.run(main())
"""


def child(urls: list[str], seconds: float) -> None:
    from tui.app import Connection, DashboardApp, NodeSpec

    started = time.monotonic()
    app = DashboardApp(
        [NodeSpec(u) for u in urls], connection=Connection("admin", "changeit"), discover=False
    )

    async def finish() -> None:
        await asyncio.sleep(seconds)
        app.exit(None)

    app.call_later(lambda: app.run_worker(finish()))
    app.run(headless=True, size=(160, 45))
    print(json.dumps({"first_frame_seconds": app.first_frame_seconds, "process_start_to_app": started}))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--child", nargs="*")
    args = parser.parse_args()
    if args.child is not None:
        child(args.child, args.seconds)
        return
    nodes = subprocess.Popen(
        [sys.executable, "-c", NODES_SCRIPT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        urls = nodes.stdout.readline().split()
        assert len(urls) == 4, urls
        t0 = time.monotonic()
        dash = subprocess.Popen(
            [sys.executable, __file__, "--seconds", str(args.seconds), "--child", *urls],
            stdout=subprocess.PIPE,
            text=True,
        )
        p = psutil.Process(dash.pid)
        time.sleep(5)  # start-up and first polls are not idling
        before = p.cpu_times()
        w0 = time.monotonic()
        time.sleep(args.seconds - 7)
        after = p.cpu_times()
        window = time.monotonic() - w0
        out, _ = dash.communicate(timeout=60)
        figures = json.loads(out.strip().splitlines()[-1])
        cpu = (after.user + after.system - before.user - before.system) / window * 100
        print(f"dashboard idle CPU, 4 nodes, 1 s polls: {cpu:.1f}% of one core over {window:.1f} s")
        print(f"time to first full frame: {figures['first_frame_seconds']:.2f} s (from the app's start)")
        print(f"wall time from launching the dashboard process: {time.monotonic() - t0:.1f} s total run")
    finally:
        nodes.stdin.close()
        nodes.wait(timeout=30)


if __name__ == "__main__":
    tempfile.gettempdir()
    main()
