"""A real Prometheus (Debian's ``prometheus``) scrapes a node running the system projections, under
steady HTTP and gRPC traffic with a persistent subscription group: every series of KurrentDB's default metrics configuration is stored
under its name with KurrentDB's label names (or is in the documented no-meaning list), and the
queries of KurrentDB's Grafana dashboards that evdb can answer (kurrentdb_dashboard_queries.txt)
evaluate to numbers.
"""

from __future__ import annotations

import asyncio
import math
import pathlib
import subprocess
import time
import uuid

import httpx
from kurrentdbclient import KurrentDBClient, NewEvent, StreamState

from evdb.metrics import NO_MEANING
from evdb.node import Node
from tests.node.conftest import node_options
from tests.node.test_contract_prometheus import free_port, poll, prometheus_binary

DEADLINE = 90.0  # seconds for Prometheus to start, scrape enough and answer (a loaded machine)
HERE = pathlib.Path(__file__).parent
DOCS = HERE.parent.parent / "docs" / "metrics.md"

#: KurrentDB's default-config series (its metrics endpoint test's list) and their label names; a
#: histogram's _count and _sum carry its bucket's labels but ``le``
DEFAULT_SERIES: dict[str, set[str]] = {
    "kurrentdb_cache_hits_misses_total": {"cache", "kind"},
    "kurrentdb_cache_resources_entries": {"cache", "kind"},
    "kurrentdb_checkpoints": {"name", "read"},
    "kurrentdb_current_incoming_grpc_calls": set(),
    "kurrentdb_disk_io_bytes_total": {"activity"},
    "kurrentdb_disk_io_operations_total": {"activity"},
    "kurrentdb_elections_count_total": set(),
    "kurrentdb_gc_allocated_bytes_total": set(),
    "kurrentdb_gc_collection_count_total": {"generation"},
    "kurrentdb_gc_generation_size_bytes": {"generation"},
    "kurrentdb_gc_heap_fragmentation": set(),
    "kurrentdb_gc_heap_size_bytes": set(),
    "kurrentdb_gc_pause_duration_max_seconds": {"range"},
    "kurrentdb_gc_time_in_gc": set(),
    "kurrentdb_incoming_grpc_calls_total": {"kind"},
    "kurrentdb_io_bytes_total": {"activity"},
    "kurrentdb_io_events_total": {"activity"},
    "kurrentdb_io_record_read_duration_seconds_bucket": {"source"},
    "kurrentdb_io_record_read_duration_seconds_count": {"source"},
    "kurrentdb_io_record_read_duration_seconds_sum": {"source"},
    "kurrentdb_logical_chunk_read_distribution_bucket": set(),
    "kurrentdb_logical_chunk_read_distribution_count": set(),
    "kurrentdb_logical_chunk_read_distribution_sum": set(),
    "kurrentdb_persistent_sub_checkpointed_event_number": {"event_stream_id", "group_name"},
    "kurrentdb_persistent_sub_connections": {"event_stream_id", "group_name"},
    "kurrentdb_persistent_sub_in_flight_messages": {"event_stream_id", "group_name"},
    "kurrentdb_persistent_sub_items_processed_total": {"event_stream_id", "group_name"},
    "kurrentdb_persistent_sub_last_known_event_number": {"event_stream_id", "group_name"},
    "kurrentdb_persistent_sub_oldest_parked_message_seconds": {"event_stream_id", "group_name"},
    "kurrentdb_persistent_sub_park_message_requests": {"event_stream_id", "group_name", "reason"},
    "kurrentdb_persistent_sub_parked_message_replays": {"event_stream_id", "group_name"},
    "kurrentdb_persistent_sub_parked_messages": {"event_stream_id", "group_name"},
    "kurrentdb_proc_contention_count_total": set(),
    "kurrentdb_proc_cpu": set(),
    "kurrentdb_proc_exception_count_total": set(),
    "kurrentdb_proc_mem_bytes": {"kind"},
    "kurrentdb_proc_thread_count": set(),
    "kurrentdb_proc_thread_pool_pending_work_item_count": set(),
    "kurrentdb_proc_up_time_seconds_total": {"pid"},
    "kurrentdb_queue_processing_duration_seconds_bucket": {"message_type", "queue"},
    "kurrentdb_queue_processing_duration_seconds_count": {"message_type", "queue"},
    "kurrentdb_queue_processing_duration_seconds_sum": {"message_type", "queue"},
    "kurrentdb_queue_queueing_duration_max_seconds": {"name", "range"},
    "kurrentdb_statuses": {"name", "status"},
    "kurrentdb_sys_cpu": set(),
    "kurrentdb_sys_disk_bytes": {"disk", "kind"},
    "kurrentdb_sys_mem_bytes": {"kind"},
    "kurrentdb_writer_flush_duration_max_seconds": {"range"},
    "kurrentdb_writer_flush_size_max": {"range"},
}
#: what every stored series carries besides its own labels
PROMETHEUS_LABELS = {"__name__", "job", "instance", "le"}


def dashboard_queries(instance: str) -> list[tuple[str, str]]:
    out = []
    for line in (HERE / "kurrentdb_dashboard_queries.txt").read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        title, expr = (part.strip() for part in line.split(" | ", 1))
        expr = (
            expr.replace("$Instance", instance).replace("$__rate_interval", "10s").replace("$__range", "1m")
        )
        out.append((title, expr))
    return out


def test_the_default_series_list_is_kurrentdbs_49():
    assert len(DEFAULT_SERIES) == 49


def test_each_series_without_meaning_is_documented_with_its_reason():
    text = DOCS.read_text()
    section = text.split("## No meaning in evdb", 1)[1]
    for name in NO_MEANING:
        assert f"`{name}`" in section, name
    assert set(DEFAULT_SERIES) >= NO_MEANING


async def _traffic(node, stop: asyncio.Event, log: list[str]) -> None:
    """Appends and reads over HTTP and gRPC, a nack that parks an event, until ``stop``."""
    headers = {"Content-Type": "application/vnd.eventstore.events+json"}
    client = await asyncio.to_thread(
        KurrentDBClient, f"kurrentdb://admin:changeit@{node.addresses.endpoint}?tls=false"
    )
    try:
        async with httpx.AsyncClient(base_url=node.http_url, auth=("admin", "changeit"), timeout=30) as c:
            r = await c.put("/subscriptions/metrics-s/metrics-g", json={"minCheckPointCount": 1})
            log.append(f"create group: {r.status_code}")
            n = 0
            while not stop.is_set():
                n += 1
                body = [{"eventId": str(uuid.uuid4()), "eventType": "Tick", "data": {"n": n}}]
                r = await c.post("/streams/metrics-s", json=body, headers=headers)
                assert r.status_code == 201, r.text
                r = await c.get("/streams/metrics-s", headers={"Accept": "application/json"})
                assert r.status_code == 200, r.text

                def grpc_calls(n: int = n) -> None:
                    client.append_to_stream(
                        f"metrics-g-{n}", current_version=StreamState.ANY, events=[NewEvent("T", b"{}")]
                    )
                    list(client.get_stream(f"metrics-g-{n}"))

                await asyncio.to_thread(grpc_calls)
                await asyncio.sleep(0.05)
    finally:
        await asyncio.to_thread(client.close)


async def test_prometheus_stores_kurrentdbs_default_series_and_dashboard_queries_answer(tmp_path, clock):
    binary = prometheus_binary()
    args = ("--run-projections", "System", "--start-standard-projections", "true")
    async with Node(node_options(tmp_path, *args), clock=clock, name="scraped") as node:
        await _scraped(node, tmp_path, binary)


async def _scraped(node: Node, tmp_path, binary: str) -> None:
    target = node.http_url.removeprefix("http://")
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        "scrape_configs:\n"
        "  - job_name: evdb\n"
        f"    static_configs:\n      - targets: ['{target}']\n"
    )
    port = free_port()
    log_path = tmp_path / "prometheus.log"
    with open(log_path, "wb") as log_file:
        server = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )

    def log() -> str:
        return log_path.read_text(errors="replace")[-3000:]

    stop = asyncio.Event()
    traffic_log: list[str] = []
    traffic = asyncio.create_task(_traffic(node, stop, traffic_log))
    deadline = time.monotonic() + DEADLINE
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as prom:

            async def series(name: str):
                async def probe():
                    assert not traffic.done(), traffic.exception() if traffic.done() else None
                    r = await prom.get("/api/v1/series", params={"match[]": name})
                    return r.json()["data"] if r.status_code == 200 else None

                return await poll(f"series {name}", probe, deadline, server, log)

            for name, labels in DEFAULT_SERIES.items():
                if name in NO_MEANING:
                    continue
                stored = await series(name)
                for one in stored:
                    assert set(one) - PROMETHEUS_LABELS == labels, (name, one)
                assert stored[0]["instance"] == target

            failed = []
            for title, expr in dashboard_queries(target):

                async def answer(expr: str = expr):
                    r = await prom.get("/api/v1/query", params={"query": expr})
                    body = r.json()
                    if body.get("status") != "success":
                        raise ValueError(body)
                    result = body["data"]["result"]
                    if body["data"]["resultType"] == "scalar":
                        result = [{"value": result}]
                    values = [float(item["value"][1]) for item in result]
                    return values if values and not any(math.isnan(v) for v in values) else None

                try:
                    await poll(f"numbers from {title!r}", answer, deadline, server, log)
                except BaseException as exc:  # collect them all, then fail with the list
                    failed.append(f"{title}: {exc}")
            assert not failed, "\n".join(failed)
    finally:
        stop.set()
        await asyncio.wait_for(traffic, timeout=30)
        server.terminate()
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=5)
    assert traffic_log == ["create group: 201"]
