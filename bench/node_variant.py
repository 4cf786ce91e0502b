"""`evdb node ...` with a variant of its Python runtime: a benchmark experiment only (evdb itself runs on
asyncio's own loop with Python's default GIL switch interval of 5 ms).

    EVDB_BENCH_VARIANT=uvloop+gil0.5ms .venv/bin/python bench/node_variant.py node --config node.yaml

A variant is a "+"-joined list of:
- ``uvloop``: the node's event loop is uvloop's (libuv transports, TLS and call_soon_threadsafe in
  Cython) instead of asyncio's pure-Python selector loop;
- ``gil<N>ms``: ``sys.setswitchinterval(N / 1000)``: a thread that waits for the GIL (the writer thread
  woken by a request, the event loop woken by the writer's answer) gets it after at most N ms instead
  of 5 ms.
- ``asyncio``: no change.
It measures what such a change would bring on the request paths before anything in evdb is changed:
the `--variants` option of bench_http.py and bench_grpc.py starts every node of a target this way.
"""

from __future__ import annotations

import asyncio
import os
import re
import sys

VARIANT = re.compile(r"^(asyncio|uvloop|gil\d+(\.\d+)?ms)$")


def check_variant(variant: str) -> str:
    """The variant, or SystemExit naming the part that is not one."""
    for part in variant.split("+"):
        if not VARIANT.match(part):
            raise SystemExit(
                f"unknown node variant part {part!r} in {variant!r}: asyncio, uvloop or gil<N>ms"
            )
    return variant


def apply(variant: str) -> None:
    for part in check_variant(variant).split("+"):
        if part == "uvloop":
            import uvloop

            asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
        elif part.startswith("gil"):
            sys.setswitchinterval(float(part[3:-2]) / 1000)


if __name__ == "__main__":
    apply(os.environ.get("EVDB_BENCH_VARIANT", "asyncio"))
    from evdb.cli import main

    sys.exit(main())
