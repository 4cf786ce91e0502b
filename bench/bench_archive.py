"""Archive upload speed: the archiver against obstore's own plain upload of the same chunk files.

Builds a database of --size-mib (chunks of --chunk-mib) in a temporary folder, starts moto's S3 server
(``moto[server]``, in a process of its own, on loopback) unless --endpoint names another S3-compatible
store, then --runs times, alternating which goes first: uploads every completed chunk file with
``obstore.put`` alone (the library's plain upload: one PUT, multipart for large files) into one
bucket, and archives the same chunks with the archiver (evdb/archive/archiver.py: claim, checkpoint
read, upload through the S3 store, verification by a HEAD and a ranged GET of the footer's checksum,
checkpoint write) into another. Issue 37 asks for the archiver within 1.2 times the plain upload.

    .venv/bin/python bench/bench_archive.py --size-mib 1024 --chunk-mib 64 --runs 2

Prints one JSON line per run and a summary (median ratio archiver / plain).

Not measured here yet: archive reads (cold and cached) and local read latency during them; they come
with the storage read path's hook to the archive (docs/operations/archive.md, "Not built yet").
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

import boto3
import obstore
from obstore.store import S3Store as PlainStore

from evdb.archive.archiver import Archiver, DatabaseChunks
from evdb.archive.s3 import S3Store
from evdb.clock import SystemClock
from evdb.database import Database
from evdb.streams import NewEvent

REGION = "eu-west-1"
KEYS = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench-secret"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_moto() -> tuple[subprocess.Popen, str]:
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return server, f"http://127.0.0.1:{port}"
        except OSError:
            if time.monotonic() > deadline or server.poll() is not None:
                server.kill()
                raise SystemExit("moto's server did not start") from None
            time.sleep(0.1)


def _build(folder: str, size: int, chunk_size: int) -> Database:
    db = Database.open(folder, clock=SystemClock(), chunk_size=chunk_size)
    payload = os.urandom(256 * 1024)
    written = 0
    while written < size:
        db.append(f"blob-{written // chunk_size}", [NewEvent("Blob", data=payload) for _ in range(8)])
        written += 8 * len(payload)
    db.call_in_writer(lambda ctx: ctx.complete_active_chunk())
    return db


def _bucket(endpoint: str) -> str:
    name = f"bench-archive-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=endpoint, region_name=REGION, **_boto_keys()).create_bucket(
        Bucket=name, CreateBucketConfiguration={"LocationConstraint": REGION}
    )
    return name


def _boto_keys() -> dict[str, str]:
    return {
        "aws_access_key_id": KEYS["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": KEYS["AWS_SECRET_ACCESS_KEY"],
    }


def _plain(endpoint: str, paths: list[str]) -> float:
    store = PlainStore(
        _bucket(endpoint),
        endpoint=endpoint,
        region=REGION,
        allow_http=endpoint.startswith("http://"),
        access_key_id=KEYS["AWS_ACCESS_KEY_ID"],
        secret_access_key=KEYS["AWS_SECRET_ACCESS_KEY"],
    )
    started = time.perf_counter()
    for path in paths:
        with open(path, "rb") as f:
            obstore.put(store, os.path.basename(path), f)
    return time.perf_counter() - started


def _archived(endpoint: str, db: Database, chunk_size: int, logger: logging.Logger) -> tuple[float, int]:
    environ = {**KEYS, "AWS_ENDPOINT_URL": endpoint, "HOME": tempfile.gettempdir()}
    store = S3Store(_bucket(endpoint), REGION, environ)
    archiver = Archiver(store, DatabaseChunks(lambda: db, chunk_size), name="bench", logger=logger)
    started = time.perf_counter()
    steps = 0
    while archiver.step():
        steps += 1
    return time.perf_counter() - started, steps


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--chunk-mib", type=int, default=64)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--endpoint", help="an S3-compatible endpoint (default: moto's server, started here)")
    args = parser.parse_args()
    logger = logging.getLogger("bench.archive")
    logger.addHandler(logging.NullHandler())
    logger.propagate = False
    chunk_size = args.chunk_mib * 1024 * 1024
    server = None
    endpoint = args.endpoint
    if endpoint is None:
        server, endpoint = _start_moto()
    with tempfile.TemporaryDirectory(prefix="bench-archive-") as folder:
        try:
            db = _build(os.path.join(folder, "db"), args.size_mib * 1024 * 1024, chunk_size)
            chunks = [c for c in db.log.distinct_chunks() if c.is_completed and c.path]
            paths = [str(c.path) for c in chunks]
            total = sum(os.path.getsize(p) for p in paths)
            ratios = []
            for run in range(args.runs):
                if run % 2 == 0:
                    plain = _plain(endpoint, paths)
                    archived, steps = _archived(endpoint, db, chunk_size, logger)
                else:
                    archived, steps = _archived(endpoint, db, chunk_size, logger)
                    plain = _plain(endpoint, paths)
                assert steps == len(paths), (steps, len(paths))
                ratios.append(archived / plain)
                print(
                    json.dumps(
                        {
                            "run": run + 1,
                            "chunks": len(paths),
                            "bytes": total,
                            "plainSeconds": round(plain, 3),
                            "archiverSeconds": round(archived, 3),
                            "plainMiBps": round(total / plain / 2**20, 1),
                            "archiverMiBps": round(total / archived / 2**20, 1),
                            "ratio": round(archived / plain, 3),
                        }
                    ),
                    flush=True,
                )
            print(
                f"median archiver/plain: {statistics.median(ratios):.3f} over {args.runs} runs (at most 1.2 asked)"
            )
            db.close()
        finally:
            if server is not None:
                server.terminate()
                server.wait()


if __name__ == "__main__":
    main()
