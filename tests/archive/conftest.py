"""The archive tests' S3 server: moto's, a real S3-compatible HTTP server (``moto[server]``: werkzeug
serving moto's S3 model), started on a free loopback port once per test module that asks for it.

Why moto: it is on PyPI as a wheel (pure Python, nothing to download at test time, no container or
Java), it speaks the S3 REST API over HTTP as AWS does (path-style requests, multipart uploads, ranged
GETs, conditional puts with If-None-Match and If-Match), and obstore talks to it exactly as to AWS.
MinIO's server is a Go binary outside the registries (its PyPI package is a client only).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

import boto3
import pytest
from archive_helpers import KEYS, REGION, environ_for
from moto.server import ThreadedMotoServer

from evdb.archive.filesystem import FileSystemStore
from evdb.archive.s3 import S3Store
from evdb.archive.store import ArchiveStore
from evdb.free_port import free_port


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@pytest.fixture
def s3_environ(s3_endpoint, tmp_path) -> dict[str, str]:
    return environ_for(s3_endpoint, tmp_path / "home")


_buckets = iter(range(1, 1_000_000))


@pytest.fixture
def make_bucket(s3_endpoint) -> Callable[[], str]:
    """Create a new, empty bucket (a test's own) and return its name."""
    client = boto3.client(
        "s3",
        endpoint_url=s3_endpoint,
        region_name=REGION,
        aws_access_key_id=KEYS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=KEYS["AWS_SECRET_ACCESS_KEY"],
    )

    def make() -> str:
        name = f"evdb-archive-{next(_buckets)}"
        client.create_bucket(Bucket=name, CreateBucketConfiguration={"LocationConstraint": REGION})
        return name

    return make


@pytest.fixture(params=["filesystem", "s3"])
def store(request, tmp_path) -> Iterator[ArchiveStore]:
    """Each archive store, empty: a folder, and a bucket of the module's S3 server."""
    made: ArchiveStore
    if request.param == "filesystem":
        (tmp_path / "archive").mkdir()
        made = FileSystemStore(str(tmp_path / "archive"))
    else:
        environ = request.getfixturevalue("s3_environ")
        made = S3Store(request.getfixturevalue("make_bucket")(), REGION, environ)
    try:
        yield made
    finally:
        made.close()
