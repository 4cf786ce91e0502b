"""Prometheus metrics of one node (its own registry, so several nodes can share a process)."""

from __future__ import annotations

import threading
from bisect import bisect_left
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
        #: started and not stopping: what GET /health/live answers
        self.live = False
        # each (method, status)'s children, looked up once per scrape's flush (``labels()`` builds and
        # checks its key at every call)
        self._http_children: dict[tuple[str, int], tuple[Counter, Histogram]] = {}
        # observe_http and observe_append count in the calling thread's tally, with no lock (three
        # locked prometheus updates per HTTP append before); render adds what each tally gained since
        # the last scrape to the metrics above, so what is exposed is unchanged
        self._append_bounds = _upper_bounds(self.append_latency)
        self._http_bounds = _upper_bounds(self.http_duration)  # no child made: none exposed before use
        self._local = threading.local()
        self._tallies: list[_Tally] = []
        self._tallies_lock = threading.Lock()
        r.register(_NodeCollector(sources))

    def set_live(self, live: bool) -> None:
        """The node has started (True) or begins to stop (False)."""
        self.live = live
        self.node_up.set(1 if live else 0)

    def _tally(self) -> _Tally:
        try:
            return self._local.tally  # type: ignore[no-any-return]
        except AttributeError:
            tally = _Tally(len(self._append_bounds))
            with self._tallies_lock:
                self._tallies.append(tally)
            self._local.tally = tally
            return tally

    def observe_http(self, request: web.Request, status: int, seconds: float) -> None:
        """Count an answered HTTP request (kurrentdb_http_requests, its duration's histogram)."""
        slots = self._tally().http
        key = (request.method, status)
        slot = slots.get(key)
        if slot is None:
            slot = slots[key] = _Slot(len(self._http_bounds))
        slot.count += 1
        slot.total += seconds
        slot.buckets[bisect_left(self._http_bounds, seconds)] += 1

    def observe_append(self, seconds: float, events: int, size: int) -> None:
        """Count an acknowledged append: its latency, and its events and their bytes (0 and 0 for a
        retried append answered with the original result)."""
        tally = self._tally()
        seconds = max(0.0, seconds)
        tally.append.count += 1
        tally.append.total += seconds
        tally.append.buckets[bisect_left(self._append_bounds, seconds)] += 1
        tally.events += events
        tally.bytes += size

    def _flush(self) -> None:
        """Add what each thread's tally gained since the last flush to the prometheus metrics."""
        with self._tallies_lock:
            for tally in self._tallies:
                events, size = tally.events, tally.bytes
                if events > tally.pushed_events:
                    self.events_written.inc(events - tally.pushed_events)
                    tally.pushed_events = events
                if size > tally.pushed_bytes:
                    self.bytes_written.inc(size - tally.pushed_bytes)
                    tally.pushed_bytes = size
                _push(tally.append, self.append_latency, None)
                for (method, status), slot in list(tally.http.items()):
                    children = self._http_children.get((method, status))
                    if children is None:
                        children = (
                            self.http_requests.labels(method, str(status)),
                            self.http_duration.labels(method),
                        )
                        self._http_children[(method, status)] = children
                    _push(slot, children[1], children[0])

    def render(self) -> bytes:
        self._flush()
        return generate_latest(self.registry)


class _Slot:
    """Observations of one histogram in one thread: plain numbers that only that thread changes, and
    what of them the last flush added to the histogram (changed by the flush, under its lock)."""

    __slots__ = ("buckets", "count", "pushed_buckets", "pushed_count", "pushed_total", "total")

    def __init__(self, buckets: int) -> None:
        self.count = 0
        self.total = 0.0
        self.buckets = [0] * buckets
        self.pushed_count = 0
        self.pushed_total = 0.0
        self.pushed_buckets = [0] * buckets


class _Tally:
    """One thread's counts: the appends' latency, events and bytes, and the HTTP requests by
    (method, status)."""

    __slots__ = ("append", "bytes", "events", "http", "pushed_bytes", "pushed_events")

    def __init__(self, buckets: int) -> None:
        self.append = _Slot(buckets)
        self.events = 0
        self.bytes = 0
        self.pushed_events = 0
        self.pushed_bytes = 0
        self.http: dict[tuple[str, int], _Slot] = {}


def _upper_bounds(histogram: Histogram) -> list[float]:
    return list(histogram._upper_bounds)  # the last is +Inf: every value has a bucket


def _push(slot: _Slot, histogram: Histogram, counter: Counter | None) -> None:
    """Add a slot's observations since the last push to ``histogram`` (its sum and buckets, as
    ``observe`` does one at a time) and their number to ``counter``."""
    # the owner thread may count while this reads: each figure is pushed up to what was read of it, and
    # what came after goes with the next push (never lost, never twice)
    count, total = slot.count, slot.total
    buckets = list(slot.buckets)
    for i, seen in enumerate(buckets):
        if seen > slot.pushed_buckets[i]:
            histogram._buckets[i].inc(seen - slot.pushed_buckets[i])
    if total != slot.pushed_total:
        histogram._sum.inc(total - slot.pushed_total)
    if counter is not None and count > slot.pushed_count:
        counter.inc(count - slot.pushed_count)
    slot.pushed_buckets = buckets
    slot.pushed_count, slot.pushed_total = count, total
