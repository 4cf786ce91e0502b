"""Reads of archived positions (issue 37): a node whose chunks left its disk for the archive serves every
read that needs them from the archive (stream reads through the index, ``$all`` both ways, catch-up
subscriptions),
on both stores and after a reopen; an unreachable archive is ArchiveUnavailable (HTTP 503, gRPC
UNAVAILABLE), never other data; a read of a local chunk completes while an archive read is stalled."""

from __future__ import annotations

import base64
import logging
import os
import threading
from urllib.parse import quote

import grpc
import httpx
import pytest
from archive_helpers import CHUNK, REGION, environ_for
from archive_helpers import all_events as _events
from archive_helpers import leave_archived as _leave_archived
from kurrentdbclient import KurrentDBClient
from kurrentdbclient.protos.v1 import shared_pb2, streams_pb2

from evdb.archive.filesystem import FileSystemStore
from evdb.archive.reads import ArchiveReads
from evdb.archive.s3 import S3Store
from evdb.database import Database
from evdb.database.config import DatabaseConfig
from evdb.errors import ArchiveUnavailable
from evdb.free_port import free_port
from evdb.licensing.issuers import issue_demo_license
from evdb.streams import NewEvent
from tests.clients.conftest import ADMIN, NodeThread, node_options
from tests.waiting import wait_until

LOGGER = logging.getLogger("test.archive.reads")
STREAMS = [f"order-{i}" for i in range(7)]


def _reads(store, tmp_path, **kw) -> ArchiveReads:
    return ArchiveReads(
        store, str(tmp_path / "cache"), chunk_size=CHUNK, max_cache_bytes=1 << 30, logger=LOGGER, **kw
    )


def _open(path, clock, archive) -> Database:
    return Database.open(
        str(path), clock=clock, chunk_size=CHUNK, existence_filter_capacity=10_000, archive=archive
    )


def test_every_event_reads_back_by_stream_and_all_from_the_archive(store, tmp_path, clock):
    written = _leave_archived(tmp_path / "db", clock, store)
    assert sorted(n for n in os.listdir(tmp_path / "db") if n.startswith("chunk-")) == ["chunk-000003.000000"]
    reads = _reads(store, tmp_path)
    db = _open(tmp_path / "db", clock, reads)
    try:
        assert db.log.archived_chunks == 3 and db.log.chunk_by_number(0) is None
        assert _events(db) == written
        backward = [(e.stream, e.event_number, e.data) for e in db.read_all_backward(None, 100_000).events]
        assert backward == written[::-1]
        assert [(e.stream, e.event_number, e.data) for e in db.iter_all(0)] == written  # catch-up's scan
        for stream in STREAMS:
            got = [(e.stream, e.event_number, e.data) for e in db.read_stream_forward(stream, 0, 1000).events]
            assert got == [w for w in written if w[0] == stream]
            assert db.read_event(stream, 0).data == got[0][2]
        assert reads.cache.stats.downloads == 3  # each chunk once, then from the cache
    finally:
        db.close()
        reads.close()


class _Stalling(FileSystemStore):
    """A folder whose downloads wait until the test lets them go (the store's latency, injected)."""

    def __init__(self, folder: str) -> None:
        super().__init__(folder)
        self.started = threading.Event()
        self.release = threading.Event()

    def download(self, name, path):
        self.started.set()
        assert self.release.wait(60), "the test never released the download"
        return super().download(name, path)


def test_a_local_read_completes_while_an_archive_read_is_stalled(tmp_path, clock):
    (tmp_path / "archive").mkdir()
    store = _Stalling(str(tmp_path / "archive"))
    store.release.set()  # the archiver's own reads go through
    written = _leave_archived(tmp_path / "db", clock, store)
    store.release.clear()
    reads = _reads(store, tmp_path, max_waiting=1)
    db = _open(tmp_path / "db", clock, reads)
    got: list = []
    reader = threading.Thread(target=lambda: got.append(_events(db)))
    try:
        reader.start()
        assert store.started.wait(30)  # the archive read is under way, and stays stalled
        local = db.read_all_forward(3 * CHUNK, 100_000).events
        assert [(e.stream, e.event_number, e.data) for e in local] == written[-len(local) :] and local
        assert db.read_all_backward(None, 5).events[0].data == written[-1][2]
        db.append("new", [])  # the writer is not held up either
        with pytest.raises(
            ArchiveUnavailable, match=r"1 reads are waiting for the archive .* chunk 2 not read"
        ):
            db.read_all_backward(3 * CHUNK, 1)  # one more archive read: refused, not queued
        assert reader.is_alive() and not got
        store.release.set()
        reader.join(30)
        assert got == [written]
    finally:
        store.release.set()
        reader.join(30)
        db.close()
        reads.close()


def test_an_append_to_a_stream_last_written_in_an_archived_chunk_never_holds_the_writer(tmp_path, clock):
    (tmp_path / "archive").mkdir()
    store = _Stalling(str(tmp_path / "archive"))
    store.release.set()
    written = _leave_archived(tmp_path / "db", clock, store)
    store.release.clear()
    reads = _reads(store, tmp_path)
    db = _open(tmp_path / "db", clock, reads)
    last = max(n for s, n, _ in written if s == "order-0")  # in chunk 2: in the archive only

    def append():
        return db.append("order-0", [NewEvent("Placed", data=b"new")], expected_version=last)

    try:
        with pytest.raises(ArchiveUnavailable, match=r"Chunk 2 is being read from the archive .*: try again"):
            append()  # at once: the writer does not wait for the download
        assert store.started.wait(30)  # which is under way, and stalled
        assert db.append("fresh", [NewEvent("E", data=b"y")]).next_expected_version == 0  # others go on
        store.release.set()
        result = wait_until(append, what="the append, once the chunk is here", tolerate=(ArchiveUnavailable,))
        assert result.next_expected_version == last + 1
    finally:
        store.release.set()
        db.close()
        reads.close()


def _unreachable(tmp_path) -> S3Store:
    return S3Store(
        "evdb-archive",
        REGION,
        environ_for(f"http://127.0.0.1:{free_port()}", tmp_path),
        max_retries=0,
        connect_timeout_seconds=1,
    )


def test_an_unreachable_or_missing_archive_is_unavailable_and_local_reads_go_on(tmp_path, clock):
    (tmp_path / "archive").mkdir()
    written = _leave_archived(tmp_path / "db", clock, FileSystemStore(str(tmp_path / "archive")))
    reads = _reads(_unreachable(tmp_path), tmp_path)
    db = _open(tmp_path / "db", clock, reads)
    try:
        with pytest.raises(ArchiveUnavailable, match="s3://evdb-archive"):
            db.read_all_forward(0, 10)
        with pytest.raises(ArchiveUnavailable, match="s3://evdb-archive"):
            db.read_stream_forward("order-0", 0, 10)
        assert db.read_all_backward(None, 1).events[0].data == written[-1][2]
    finally:
        db.close()
        reads.close()
    db = _open(tmp_path / "db", clock, None)  # the archive switched off: said so, never data missing
    try:
        with pytest.raises(ArchiveUnavailable, match=r"Chunk 0 of .* is in the archive only .* no archive"):
            db.read_all_forward(0, 10)
    finally:
        db.close()


# -- a node: HTTP and gRPC --------------------------------------------------------------------------


def _grpc_read_all(port: int) -> list[streams_pb2.ReadResp]:
    o = streams_pb2.ReadReq.Options
    options = o(read_direction=o.Forwards, resolve_links=False, count=100)
    options.all.start.CopyFrom(shared_pb2.Empty())
    options.no_filter.CopyFrom(shared_pb2.Empty())
    options.uuid_option.string.CopyFrom(shared_pb2.Empty())
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        read = channel.unary_stream(
            "/event_store.client.streams.Streams/Read",
            request_serializer=streams_pb2.ReadReq.SerializeToString,
            response_deserializer=streams_pb2.ReadResp.FromString,
        )
        auth = [("authorization", "Basic " + base64.b64encode(b"admin:changeit").decode())]
        return list(read(streams_pb2.ReadReq(options=options), timeout=30, metadata=auth))


def _http_all(http: httpx.Client) -> list[tuple]:
    out: list[tuple] = []
    url = f"/streams/{quote('$all')}/{'0' * 32}/forward/50?embed=body"
    while True:
        page = http.get(url, headers={"Accept": "application/vnd.kurrent.atom+json"})
        assert page.status_code == 200, page.text
        feed = page.json()
        out += [(e["streamId"], e["eventNumber"]) for e in reversed(feed["entries"])]
        previous = [link["uri"] for link in feed["links"] if link["relation"] == "previous"]
        if not feed["entries"] or not previous:
            return out
        url = previous[0]


def test_a_node_serves_archived_events_over_http_and_grpc_and_says_503_when_the_archive_is_down(
    tmp_path, clock
):
    (tmp_path / "archive").mkdir()
    store = FileSystemStore(str(tmp_path / "archive"))
    # the node's existence filter: as large as a node's (a filter of another size is built again)
    capacity = DatabaseConfig(None).existence_filter_capacity
    written = _leave_archived(tmp_path / "db", clock, store, existence_filter_capacity=capacity)
    (tmp_path / "node.yaml").write_text(
        f"Archive: {{Enabled: true, StorageType: FileSystem, FileSystem: {{Path: {tmp_path / 'archive'}}}, "
        "RetainAtLeast: {Days: 1, LogicalBytes: 1000}}\n"
    )
    options = node_options(
        tmp_path, "--insecure", "--dev", "--license-key", issue_demo_license(clock.time()),
        "--config", str(tmp_path / "node.yaml"),
    )  # fmt: skip
    node = NodeThread(options, clock=clock, name="archived").start()
    try:
        assert node.node is not None and node.node.archive_reads is not None
        retention = node.node.opened.scavenge.retention  # scavenges apply RetainAtLeast
        assert (retention.days, retention.logical_bytes, retention.reads) == (
            1,
            1000,
            node.node.archive_reads,
        )
        cache = node.node.archive_reads.cache
        assert cache.stats.downloads == 0  # nothing archived was read to open the node
        cache.store = _unreachable(tmp_path)
        with httpx.Client(base_url=f"http://127.0.0.1:{node.port}", auth=ADMIN, timeout=30) as http:
            down = http.get(f"/streams/{quote('$all')}/{'0' * 32}/forward/10")
            assert (
                down.status_code == 503 and "s3://evdb-archive" in down.text and down.headers["Retry-After"]
            )
            with pytest.raises(grpc.RpcError) as refused:
                _grpc_read_all(node.port)
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE  # type: ignore[attr-defined]
            cache.store = store
            ours = [(s, n) for s, n, _ in written]
            assert [x for x in _http_all(http) if x[0] in STREAMS] == ours
        with KurrentDBClient(f"kurrentdb://admin:changeit@127.0.0.1:{node.port}?tls=false") as client:
            got = [(e.stream_name, e.stream_position, e.data) for e in client.read_all()]
            assert [g for g in got if g[0] in STREAMS] == written
            caught_up = []
            with client.subscribe_to_all(timeout=30) as subscription:  # catch-up from the start
                for event in subscription:
                    if event.stream_name in STREAMS:
                        caught_up.append((event.stream_name, event.stream_position, event.data))
                    if len(caught_up) == len(written):
                        break
            assert caught_up == written
            for stream in STREAMS:
                events = client.get_stream(stream)
                assert [(e.stream_name, e.stream_position, e.data) for e in events] == [
                    w for w in written if w[0] == stream
                ]
        wait_until(lambda: cache.stats.downloads == 3, what="each archived chunk downloaded once")
        panel = node.node.collect_stats()["es"]["archive"]  # the stats' archive panel
        assert (panel["archivedOnlyChunks"], panel["archiveCheckpoint"]) == (3, 3 * CHUNK)
        # the node's own writes (a dev node's projections checkpoint as time goes) may have filled its
        # first local chunk: one or more (a full run on a loaded machine saw two)
        assert panel["localChunkFiles"] >= 1
    finally:
        node.stop()
