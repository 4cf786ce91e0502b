"""Prometheus metrics of one node (its own registry, so several nodes can share a process)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import psutil
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

if TYPE_CHECKING:
    from aiohttp import web

    from evdb.database import Database
    from evdb.scavenge.service import ScavengeService

__all__ = ["NodeMetrics", "NodeSources"]


class NodeSources:
    """What the metrics read from their node at each scrape: the database and the scavenge service
    open now (None while a follower reopens), and the statuses of its components."""

    def __init__(
        self,
        db: Callable[[], Database | None],
        scavenge: Callable[[], ScavengeService | None],
        statuses: Callable[[], dict[str, tuple[str, float]]],
    ) -> None:
        self.db, self.scavenge, self.statuses = db, scavenge, statuses


class _NodeCollector:
    """Figures read at scrape time from the node's sources."""

    def __init__(self, sources: NodeSources) -> None:
        self._sources = sources
        self._process = psutil.Process()

    def collect(self):
        sources = self._sources
        db = sources.db()
        if db is not None:
            chk = db.log.checkpoints
            g = GaugeMetricFamily("kurrentdb_checkpoints", "Checkpoint positions", labels=["name", "read"])
            g.add_metric(["writer", "non-flushed"], db.committed_position)
            g.add_metric(["chaser", "non-flushed"], chk.chaser.value)
            g.add_metric(["epoch", "non-flushed"], chk.epoch.value)
            yield g
            chunks = GaugeMetricFamily("evdb_chunks", "Chunk files in the log", labels=["state"])
            distinct = db.log.distinct_chunks()
            chunks.add_metric(["completed"], sum(1 for c in distinct if c.is_completed))
            chunks.add_metric(["scavenged"], sum(1 for c in distinct if c.is_scavenged))
            chunks.add_metric(["active"], sum(1 for c in distinct if not c.is_completed))
            yield chunks
            yield GaugeMetricFamily(
                "evdb_index_entries", "Entries in the index", value=db.index.entry_count()
            )
        statuses = GaugeMetricFamily(
            "kurrentdb_statuses",
            "Status of node components; the value is the Unix time the status was entered",
            labels=["name", "status"],
        )
        for name, (status, since) in sources.statuses().items():
            statuses.add_metric([name, status], since)
        yield statuses
        service = sources.scavenge()
        if service is not None:
            for key, value in service.totals.items():
                yield CounterMetricFamily(
                    f"evdb_scavenge_{key}", f"Scavenge: {key.replace('_', ' ')} (all runs)", value=value
                )
            running = service.progress()
            yield GaugeMetricFamily(
                "evdb_scavenge_running", "1 while a scavenge runs", value=1 if running else 0
            )
            if running:
                yield GaugeMetricFamily(
                    "evdb_scavenge_bytes_reclaimed_current",
                    "Bytes reclaimed so far by the running scavenge",
                    value=running["bytesReclaimed"],
                )
        with self._process.oneshot():
            mem = self._process.memory_info()
            yield GaugeMetricFamily(
                "kurrentdb_proc_mem_bytes", "Resident memory of the node process", value=mem.rss
            )
            yield GaugeMetricFamily(
                "kurrentdb_proc_thread_count",
                "Threads of the node process",
                value=self._process.num_threads(),
            )


class NodeMetrics:
    def __init__(self, sources: NodeSources) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.events_written = Counter("evdb_events_written", "Events appended through this node", registry=r)
        self.bytes_written = Counter(
            "evdb_bytes_written", "Bytes of event data and metadata appended", registry=r
        )
        self.http_requests = Counter(
            "kurrentdb_http_requests", "HTTP requests served", ["method", "status"], registry=r
        )
        self.http_duration = Histogram(
            "kurrentdb_http_request_duration_seconds",
            "HTTP request duration",
            ["method"],
            registry=r,
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5),
        )
        self.append_latency = Histogram(
            "evdb_append_duration_seconds",
            "Time from receiving an append to its acknowledgement",
            registry=r,
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5, 1),
        )
        self.node_up = Gauge("evdb_node_up", "1 while the node serves requests", registry=r)
        # each (method, status)'s children, looked up once: ``labels()`` builds and checks its key at
        # every call, 4-5 % of the event loop's time per append
        self._http_children: dict[tuple[str, int], tuple[Counter, Histogram]] = {}
        r.register(_NodeCollector(sources))

    def observe_http(self, request: web.Request, status: int, seconds: float) -> None:
        method = request.method
        children = self._http_children.get((method, status))
        if children is None:
            children = (self.http_requests.labels(method, str(status)), self.http_duration.labels(method))
            self._http_children[(method, status)] = children
        children[0].inc()
        children[1].observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)
