"""The archive store contract (evdb/archive/store.py), kept by both stores: a folder, and an S3 bucket
of a real S3-compatible server (moto's, on loopback: conftest.py). Nothing is mocked: the S3 store
talks HTTP through obstore, the file-system store to the disk."""

from __future__ import annotations

import http.server
import os
import socket
import threading
import time

import pytest
from archive_helpers import REGION, environ_for

from evdb.archive.filesystem import FileSystemStore
from evdb.archive.s3 import S3Store
from evdb.archive.store import ObjectChanged, ObjectExists, ObjectMissing
from evdb.errors import ArchiveError, ArchiveUnavailable
from evdb.free_port import free_port

MiB = 1024 * 1024


def test_an_object_is_stored_read_listed_and_deleted(store):
    assert store.head("chunks/chunk-000000.000001") is None
    info = store.put_bytes("chunks/chunk-000000.000001", b"abc" * 1000)
    assert info.size == 3000 and info.etag
    assert store.head("chunks/chunk-000000.000001") == info
    assert store.get_bytes("chunks/chunk-000000.000001") == b"abc" * 1000
    store.put_bytes("checkpoint", b"1")
    assert [o.name for o in store.list()] == ["checkpoint", "chunks/chunk-000000.000001"]
    replaced = store.put_bytes("checkpoint", b"22")
    assert replaced.etag != store.list()[0].etag or store.get_bytes("checkpoint") == b"22"
    assert store.get_bytes("checkpoint") == b"22"
    store.delete("checkpoint")
    store.delete("checkpoint")  # a delete of a missing object does nothing
    assert [o.name for o in store.list()] == ["chunks/chunk-000000.000001"]
    with pytest.raises(ObjectMissing, match="checkpoint") as missing:
        store.get_bytes("checkpoint")
    assert store.description in str(missing.value)


def test_a_file_is_uploaded_whole_and_read_back_by_ranges(store, tmp_path):
    data = os.urandom(12 * MiB + 12345)  # more than one part of a multipart upload
    path = tmp_path / "chunk-000003.000000"
    path.write_bytes(data)
    info = store.put_file("chunks/chunk-000003.000001", str(path))
    assert info.size == len(data) and store.head("chunks/chunk-000003.000001").size == len(data)
    for start, length in [(0, 128), (5 * MiB - 7, 100), (len(data) - 128, 128), (1234, 3 * MiB)]:
        assert store.get_range("chunks/chunk-000003.000001", start, length) == data[start : start + length]
    # fewer bytes at the end of the object, none past it
    assert store.get_range("chunks/chunk-000003.000001", len(data) - 10, 100) == data[-10:]
    assert store.get_range("chunks/chunk-000003.000001", len(data), 100) == b""
    assert store.get_range("chunks/chunk-000003.000001", len(data) + 5, 1) == b""
    assert store.get_range("chunks/chunk-000003.000001", 10, 0) == b""
    copy = tmp_path / "download"
    assert store.download("chunks/chunk-000003.000001", str(copy)).size == len(data)
    assert copy.read_bytes() == data
    with pytest.raises(ObjectMissing):
        store.get_range("chunks/chunk-000009.000001", 0, 10)
    with pytest.raises(ObjectMissing):
        store.download("chunks/chunk-000009.000001", str(tmp_path / "nothing"))


def test_a_create_only_put_refuses_an_existing_object(store):
    store.put_bytes("claim", b"cluster-a", if_absent=True)
    with pytest.raises(ObjectExists, match="claim"):
        store.put_bytes("claim", b"cluster-b", if_absent=True)
    assert store.get_bytes("claim") == b"cluster-a"


def test_a_conditional_put_refuses_an_object_changed_since_it_was_read(store):
    first = store.put_bytes("checkpoint", b"1")
    second = store.put_bytes("checkpoint", b"2", if_match=first.etag)
    assert second.etag != first.etag
    with pytest.raises(ObjectChanged, match="checkpoint"):
        store.put_bytes("checkpoint", b"3", if_match=first.etag)  # a stale tag: someone else wrote
    assert store.get_bytes("checkpoint") == b"2"
    with pytest.raises(ObjectChanged):
        store.put_bytes("nothing-yet", b"1", if_match=first.etag)


def test_of_two_racing_creates_one_wins(store):
    outcomes: list[str] = []
    barrier = threading.Barrier(4)

    def claim(who: str) -> None:
        barrier.wait()
        try:
            store.put_bytes("claim", who.encode(), if_absent=True)
            outcomes.append("won")
        except ObjectExists:
            outcomes.append("refused")

    threads = [threading.Thread(target=claim, args=(f"cluster-{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["refused", "refused", "refused", "won"]


def test_a_folder_lists_whole_segments_only(store):
    for name in ("a/x", "a/y/z", "ab/x", "b"):
        store.put_bytes(name, name.encode())
    assert [o.name for o in store.list("a")] == ["a/x", "a/y/z"]
    assert [o.name for o in store.list("a/y")] == ["a/y/z"]
    assert store.list("c") == []


@pytest.mark.parametrize("name", ["", "/abs", "../up", "a/../b", "a//b", "a/", ".hidden", "a b"])
def test_a_bad_object_name_is_refused(store, name):
    with pytest.raises(ValueError, match="not an archive object name"):
        store.put_bytes(name, b"1")


def test_a_missing_bucket_or_folder_is_an_error_that_names_it(tmp_path, s3_environ):
    folder = FileSystemStore(str(tmp_path / "no-such-folder"))
    with pytest.raises(ArchiveError, match="no-such-folder") as fs:
        folder.check()
    assert not isinstance(fs.value, ArchiveUnavailable)
    bucket = S3Store("evdb-no-such-bucket", REGION, s3_environ, max_retries=0)
    with pytest.raises(ArchiveError, match="evdb-no-such-bucket") as s3:
        bucket.check()
    assert not isinstance(s3.value, ArchiveUnavailable) and "does not exist" in str(s3.value)


def test_an_unreachable_store_is_unavailable(tmp_path):
    closed = free_port()  # nothing listens there
    environ = environ_for(f"http://127.0.0.1:{closed}", tmp_path)
    store = S3Store("evdb-archive", REGION, environ, max_retries=1, connect_timeout_seconds=1)
    for call in (store.check, lambda: store.get_range("chunks/chunk-000000.000001", 0, 10)):
        with pytest.raises(ArchiveUnavailable, match=rf"s3://evdb-archive at http://127.0.0.1:{closed}"):
            call()


class _Failing(http.server.BaseHTTPRequestHandler):
    """An S3 endpoint that answers every request 500 (a store in trouble), counting them."""

    calls = 0

    def _fail(self) -> None:
        type(self).calls += 1
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        body = (
            b"<Error><Code>InternalError</Code><Message>We encountered an internal error.</Message></Error>"
        )
        self.send_response(500)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_PUT = do_HEAD = do_POST = do_DELETE = _fail

    def log_message(self, format, *args):  # quiet
        pass


def test_a_store_answering_500_is_unavailable_after_its_retries(tmp_path):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Failing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        environ = environ_for(f"http://127.0.0.1:{server.server_address[1]}", tmp_path)
        store = S3Store("evdb-archive", REGION, environ, max_retries=2)
        with pytest.raises(ArchiveUnavailable, match="500"):
            store.put_bytes("checkpoint", b"1")
        assert _Failing.calls == 3  # the first try and obstore's two retries
        with pytest.raises(ArchiveUnavailable):
            store.get_range("chunks/chunk-000000.000001", 0, 10)
    finally:
        server.shutdown()
        server.server_close()


def test_a_local_file_gone_before_its_upload_is_the_local_error(store, tmp_path):
    gone = str(tmp_path / "chunk-000001.000000")  # switched out by a scavenge, say
    with pytest.raises(FileNotFoundError) as raised:
        store.put_file("chunk-000001.000001", gone)
    assert not isinstance(raised.value, ArchiveError) and raised.value.filename == gone
    assert store.head("chunk-000001.000001") is None


def test_a_store_that_does_not_answer_is_unavailable_within_its_timeout(tmp_path):
    silent = socket.socket()  # accepts connections (the kernel does), never answers a request
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    try:
        environ = environ_for(f"http://127.0.0.1:{silent.getsockname()[1]}", tmp_path)
        store = S3Store("evdb-archive", REGION, environ, timeout_seconds=1, max_retries=0)
        started = time.monotonic()
        with pytest.raises(ArchiveUnavailable, match="s3://evdb-archive"):
            store.get_range("chunk-000000.000001", 0, 10)
        assert time.monotonic() - started < 30  # its timeout, not forever (1 s asked; bound generous)
    finally:
        silent.close()
