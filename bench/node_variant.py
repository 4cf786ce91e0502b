"""`evdb node ...` with a variant of its Python runtime: a benchmark experiment only (evdb itself runs on
uvloop, or asyncio's own loop with EVDB_EVENT_LOOP=asyncio, with Python's default GIL switch interval of
5 ms).

    EVDB_BENCH_VARIANT=uvloop+gil0.5ms .venv/bin/python bench/node_variant.py node --config node.yaml

A variant is a "+"-joined list of:
- ``uvloop``: the node's event loop is uvloop's (libuv transports, TLS and call_soon_threadsafe in
  Cython), evdb's default since issue 24's first changes;
- ``gil<N>ms``: ``sys.setswitchinterval(N / 1000)``: a thread that waits for the GIL (the writer thread
  woken by a request, the event loop woken by the writer's answer) gets it after at most N ms instead
  of 5 ms.
- ``asyncio``: asyncio's pure-Python selector loop (``EVDB_EVENT_LOOP=asyncio``), the loop before.
It measures what such a change would bring on the request paths before anything in evdb is changed:
the `--variants` option of bench_http.py and bench_grpc.py starts every node of a target this way.
"""

from __future__ import annotations

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
            os.environ["EVDB_EVENT_LOOP"] = "uvloop"
        elif part == "asyncio":
            os.environ["EVDB_EVENT_LOOP"] = "asyncio"
        elif part.startswith("gil"):
            sys.setswitchinterval(float(part[3:-2]) / 1000)


if __name__ == "__main__":
    apply(os.environ.get("EVDB_BENCH_VARIANT", "asyncio"))
    from evdb.cli import main

    sys.exit(main())
