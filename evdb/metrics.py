"""Prometheus metrics of one node (its own registry, so several nodes can share a process)."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import os
import threading
import time
from bisect import bisect_left
from collections.abc import Callable
from operator import attrgetter
from typing import TYPE_CHECKING, Any

import psutil
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from evdb.errors import EvdbError
from evdb.metrics_config import MetricsConfig

if TYPE_CHECKING:
    from aiohttp import web

    from evdb.clock import Clock
    from evdb.database import Database
    from evdb.scavenge.service import ScavengeService

__all__ = ["NO_MEANING", "DatabaseObserver", "GrpcCalls", "NodeMetrics", "NodeSources", "RecentMax"]

#: KurrentDB's default series that have no meaning in evdb (docs/metrics.md gives the reasons)
NO_MEANING = frozenset(
    {
        "kurrentdb_proc_contention_count_total",
        "kurrentdb_proc_exception_count_total",
        "kurrentdb_gc_allocated_bytes_total",
        "kurrentdb_gc_generation_size_bytes",
    }
)

#: seconds between two samples of the event loop's lag
LAG_PERIOD = 0.25
#: KurrentDB's buckets for its "-seconds" histograms (1 µs .. 10 s, by tens)
SECONDS_BUCKETS = (0.000001, 0.00001, 0.0001, 0.001, 0.01, 0.1, 1.0, 10.0)
#: kurrentdb_logical_chunk_read_distribution: 0, then 1, 2, 4, ... 2**18 chunks behind the active one
CHUNK_DISTANCE_BUCKETS = (0.0, *(float(1 << x) for x in range(19)))


class RecentMax:
    """The largest value recorded over the last MinPeriod..MaxPeriod seconds (KurrentDB's RecentMax):
    a scrape every ``expected_scrape_interval`` seconds sees each spike at least once.

    Values go into per-sub-period buckets, each remembering which sub-period it holds, so a bucket
    left from an older period is simply not counted (and is reused when its slot comes round).
    Recording takes no lock: one thread records (the writer, or the event loop); a scrape that reads
    while it records sees the value before or after, as KurrentDB's own."""

    def __init__(self, expected_scrape_interval: int, clock: Callable[[], float]) -> None:
        buckets, seconds = _recent_max_buckets(expected_scrape_interval)
        self._seconds_per_bucket = float(seconds)
        self._periods = [-1] * buckets
        self._values = [0.0] * buckets
        self._clock = clock
        self.max_period = buckets * seconds
        self.min_period = self.max_period - seconds

    @property
    def range_label(self) -> str:
        return f"{self.min_period}-{self.max_period} seconds"

    def record(self, value: float, now: float | None = None) -> None:
        """Record ``value`` at ``now`` (the clock's reading when the caller has one at hand)."""
        period = int((self._clock() if now is None else now) // self._seconds_per_bucket)
        i = period % len(self._values)
        if self._periods[i] != period:
            self._periods[i] = period
            self._values[i] = value
        elif value > self._values[i]:
            self._values[i] = value

    def observe(self) -> float:
        period = int(self._clock() // self._seconds_per_bucket)
        n = len(self._values)
        return max(
            (v for p, v in zip(self._periods, self._values, strict=True) if 0 <= period - p < n),
            default=0.0,
        )


def _recent_max_buckets(interval: int) -> tuple[int, int]:
    """(number of buckets, seconds per bucket) for an expected scrape interval (as KurrentDB's)."""
    if interval == 0:
        return 1, 1
    if interval == 1:
        return 3, 1
    if interval == 5:
        return 4, 2
    if interval == 10:
        return 5, 3
    if interval % 15 == 0:
        return 5, interval // 15 * 4
    raise ValueError(f"ExpectedScrapeIntervalSeconds must be 0, 1, 5, 10 or a multiple of 15, not {interval}")


class GrpcCalls:
    """The node's gRPC calls (counted on its event loop by evdb.grpc.server._handle_call): started,
    running now, and ended with a status other than OK (of which UNIMPLEMENTED: no such method, and
    DEADLINE_EXCEEDED)."""

    __slots__ = ("current", "deadline_exceeded", "failed", "total", "unimplemented")

    def __init__(self) -> None:
        self.current = self.total = self.failed = self.unimplemented = self.deadline_exceeded = 0

    def ended(self, status: Any) -> None:
        """A call ends with ``status`` (a grpclib Status other than OK)."""
        self.failed += 1
        name = getattr(status, "name", "")
        if name == "UNIMPLEMENTED":
            self.unimplemented += 1
        elif name == "DEADLINE_EXCEEDED":
            self.deadline_exceeded += 1


class DatabaseObserver:
    """What the database tells the metrics (set as ``Database.observer``): each group commit (in the
    writer thread: its flush, its whole processing) and each client read (in the reading thread,
    counted in that thread's own tally, without a lock). The times are perf_counter readings the
    database takes anyway around the work (on Linux the same clock as time.monotonic, which the
    recent-max windows use)."""

    def __init__(self, config: MetricsConfig, clock: Callable[[], float]) -> None:
        interval = config.expected_scrape_interval_seconds
        self.flush_size = RecentMax(interval, clock)
        self.flush_duration = RecentMax(interval, clock)
        self.group_seconds = _Slot(len(SECONDS_BUCKETS) + 1)
        self._local = threading.local()
        self._tallies: list[_ReadTally] = []
        self._tallies_lock = threading.Lock()

    def flushed(self, size: int, started: float, ended: float) -> None:
        # both windows have the same buckets: one sub-period for the two (RecentMax.record, twice)
        sizes, durations = self.flush_size, self.flush_duration
        period = int(ended // sizes._seconds_per_bucket)
        i = period % len(sizes._values)
        seconds = ended - started
        if sizes._periods[i] != period:
            sizes._periods[i] = durations._periods[i] = period
            sizes._values[i] = float(size)
            durations._values[i] = seconds
            return
        if size > sizes._values[i]:
            sizes._values[i] = float(size)
        if seconds > durations._values[i]:
            durations._values[i] = seconds

    def group_processed(self, seconds: float) -> None:
        slot = self.group_seconds
        slot.count += 1
        slot.total += seconds
        slot.buckets[bisect_left(SECONDS_BUCKETS, seconds)] += 1

    def read(self, events: list, seconds: float, end: int, chunk_size: int) -> None:
        """A read call returned ``events`` (non-empty) in ``seconds``; ``end``: the log's end."""
        try:
            tally = self._local.tally
        except AttributeError:
            tally = self._local.tally = _ReadTally()
            with self._tallies_lock:
                self._tallies.append(tally)
        n = len(events)
        tally.events += n
        tally.bytes += sum(map(len, map(_DATA, events))) + sum(map(len, map(_METADATA, events)))
        record = tally.record
        record.count += n
        record.total += seconds
        record.buckets[bisect_left(SECONDS_BUCKETS, seconds / n)] += n
        active = end // chunk_size
        distance = tally.distance
        first, last = events[0].log_position // chunk_size, events[-1].log_position // chunk_size
        if first == last:  # the common case: one chunk
            d = active - first
            distance.count += n
            distance.total += d * n
            distance.buckets[bisect_left(CHUNK_DISTANCE_BUCKETS, d)] += n
            return
        for e in events:
            d = active - e.log_position // chunk_size
            distance.count += 1
            distance.total += d
            distance.buckets[bisect_left(CHUNK_DISTANCE_BUCKETS, d)] += 1

    def reads(self) -> tuple[int, int, _Slot, _Slot]:
        """(events read, their bytes, record read times, chunk distances) over every thread."""
        record = _Slot(len(SECONDS_BUCKETS) + 1)
        distance = _Slot(len(CHUNK_DISTANCE_BUCKETS) + 1)
        events = size = 0
        with self._tallies_lock:
            tallies = list(self._tallies)
        for t in tallies:
            events += t.events
            size += t.bytes
            for total, part in ((record, t.record), (distance, t.distance)):
                total.count += part.count
                total.total += part.total
                total.buckets = [a + b for a, b in zip(total.buckets, part.buckets, strict=True)]
        return events, size, record, distance


_DATA = attrgetter("data")
_METADATA = attrgetter("metadata")


class _ReadTally:
    """One reading thread's counts (only that thread changes them)."""

    __slots__ = ("bytes", "distance", "events", "record")

    def __init__(self) -> None:
        self.events = 0
        self.bytes = 0
        self.record = _Slot(len(SECONDS_BUCKETS) + 1)
        self.distance = _Slot(len(CHUNK_DISTANCE_BUCKETS) + 1)


def _histogram(name: str, doc: str, labels: list[str], values: list[str], slot: _Slot, bounds) -> Any:
    h = HistogramMetricFamily(name, doc, labels=labels)
    running = 0
    buckets = []
    for bound, n in zip((*bounds, float("inf")), slot.buckets, strict=True):
        running += n
        buckets.append(("+Inf" if bound == float("inf") else _le(bound), running))
    h.add_metric(values, buckets, slot.total)
    return h


def _le(bound: float) -> str:
    return repr(bound) if bound < 1e-4 else str(bound)


class _GcWatch:
    """Python's garbage collections, timed with ``gc.callbacks``: the longest recent pause, and the
    share of time the last collection took since the one before (KurrentDB's time-in-GC)."""

    def __init__(self, pauses: RecentMax) -> None:
        self.pauses = pauses
        self.time_in_gc = 0.0
        self._started = 0.0
        self._previous_end = time.perf_counter()

    def __call__(self, phase: str, info: dict) -> None:
        now = time.perf_counter()
        if phase == "start":
            self._started = now
            return
        pause = now - self._started
        self.pauses.record(pause)  # at the recent maximum's own clock
        since = now - self._previous_end
        self.time_in_gc = 100.0 * pause / since if since > 0 else 0.0
        self._previous_end = now


class NodeSources:
    """What the metrics read from their node at each scrape: the database and the scavenge service
    open now (None while a follower reopens), the statuses of its components, and (when given) its
    cluster service and persistent subscriptions."""

    def __init__(
        self,
        db: Callable[[], Database | None],
        scavenge: Callable[[], ScavengeService | None],
        statuses: Callable[[], dict[str, tuple[str, float]]],
        cluster: Callable[[], Any] = lambda: None,
        persistent: Callable[[], Any] = lambda: None,
        projections: Callable[[], Any] = lambda: None,
    ) -> None:
        self.db, self.scavenge, self.statuses = db, scavenge, statuses
        self.cluster, self.persistent, self.projections = cluster, persistent, projections


class _StatusSince:
    """When a component's status was first seen (sampled on the event loop every LAG_PERIOD seconds,
    and at each scrape)."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._seen: dict[str, tuple[str, float]] = {}

    def __call__(self, name: str, status: str) -> tuple[str, float]:
        last = self._seen.get(name)
        if last is None or last[0] != status:
            last = self._seen[name] = (status, self._clock())
        return last


class _NodeCollector:
    """Figures read at scrape time from the node's sources (docs/metrics.md: what each one is)."""

    def __init__(self, sources: NodeSources, metrics: NodeMetrics) -> None:
        self._sources = sources
        self._metrics = metrics
        self._process = psutil.Process()
        # the CPU figures are "since the previous call": this first call makes the first scrape's
        # figures cover the time since the node was built, not nothing
        psutil.cpu_percent()
        self._process.cpu_percent()
        self._libc = _libc()

    def collect(self):
        # a family without samples (nothing enabled in it, no subscription groups) is left out
        return (family for family in self._families() if family.samples)

    def _families(self):
        config = self._metrics.config
        sources = self._sources
        db = sources.db()
        if db is not None:
            yield from self._database(db, config)
        yield from self._statuses(db, config)
        cluster = sources.cluster()
        if cluster is not None and config.on("ElectionsCount"):
            yield CounterMetricFamily(
                "kurrentdb_elections_count",
                "Elections this node has taken part in",
                value=cluster.election_count,
            )
        if config.on("PersistentSubscriptionStats"):
            yield from self._persistent(sources.persistent())
        if config.projection_stats:
            yield from self._projections(sources.projections())
        yield from self._scavenge(sources.scavenge())
        yield from self._observed(config)
        yield from self._system(config)
        yield from self._proc(config)

    def _database(self, db: Database, config: MetricsConfig):
        chk = db.log.checkpoints
        g = GaugeMetricFamily("kurrentdb_checkpoints", "Checkpoint positions", labels=["name", "read"])
        values = {
            "writer": db.committed_position,
            "index": db.index.indexed_position,
            "replication": db.readable_position,
            "chaser": chk.chaser.value,
            "epoch": chk.epoch.value,
        }
        for name in config.checkpoints:
            if name in values:
                g.add_metric([name, "non-flushed"], values[name])
        yield g
        chunks = GaugeMetricFamily("evdb_chunks", "Chunk files in the log", labels=["state"])
        distinct = db.log.distinct_chunks()
        chunks.add_metric(["completed"], sum(1 for c in distinct if c.is_completed))
        chunks.add_metric(["scavenged"], sum(1 for c in distinct if c.is_scavenged))
        chunks.add_metric(["active"], sum(1 for c in distinct if not c.is_completed))
        yield chunks
        yield GaugeMetricFamily("evdb_index_entries", "Entries in the index", value=db.index.entry_count())
        if config.on("CacheHitsMisses", "StreamInfo"):
            c = CounterMetricFamily(
                "kurrentdb_cache_hits_misses",
                "Lookups of the writer's stream-info cache",
                labels=["cache", "kind"],
            )
            c.add_metric(["stream-info", "hits"], db.state_cache_hits)
            c.add_metric(["stream-info", "misses"], db.state_cache_misses)
            yield c
        if config.on("CacheResources"):
            e = GaugeMetricFamily(
                "kurrentdb_cache_resources_entries", "Entries in the node's caches", labels=["cache", "kind"]
            )
            e.add_metric(["stream-info", "count"], db.stream_cache_entries)
            e.add_metric(["stream-info", "capacity"], db.config.stream_cache_capacity)
            yield e

    def _statuses(self, db: Database | None, config: MetricsConfig):
        statuses = GaugeMetricFamily(
            "kurrentdb_statuses",
            "Status of node components; the value is the Unix time the status was entered",
            labels=["name", "status"],
        )
        chosen = config.statuses
        now = {
            name: value for name, value in self._metrics.sample_statuses(db).items() if name.lower() in chosen
        }
        for name, value in self._sources.statuses().items():
            if name.lower() in chosen:
                now[name] = value
        for name, (status, since) in now.items():
            statuses.add_metric([name, status], since)
        yield statuses

    def _persistent(self, service: Any):
        groups = service.groups() if service is not None else []
        labels = ["event_stream_id", "group_name"]

        def family(kind, name: str, doc: str, extra: list[str] | None = None):
            return kind(name, doc, labels=labels + (extra or []))

        connections = family(GaugeMetricFamily, "kurrentdb_persistent_sub_connections", "Connected consumers")
        parked = family(GaugeMetricFamily, "kurrentdb_persistent_sub_parked_messages", "Parked messages")
        in_flight = family(
            GaugeMetricFamily, "kurrentdb_persistent_sub_in_flight_messages", "Messages in flight"
        )
        oldest = family(
            GaugeMetricFamily,
            "kurrentdb_persistent_sub_oldest_parked_message_seconds",
            "Oldest parked message age",
        )
        items = family(CounterMetricFamily, "kurrentdb_persistent_sub_items_processed", "Items processed")
        known = family(
            GaugeMetricFamily, "kurrentdb_persistent_sub_last_known_event_number", "Last known event"
        )
        known_all = family(
            GaugeMetricFamily,
            "kurrentdb_persistent_sub_last_known_event_commit_position",
            "Last known event's commit position ($all)",
        )
        checkpointed = family(
            GaugeMetricFamily, "kurrentdb_persistent_sub_checkpointed_event_number", "Last checkpointed event"
        )
        checkpointed_all = family(
            GaugeMetricFamily,
            "kurrentdb_persistent_sub_checkpointed_event_commit_position",
            "Last checkpointed event's commit position ($all)",
        )
        requests = family(
            GaugeMetricFamily, "kurrentdb_persistent_sub_park_message_requests", "Messages parked", ["reason"]
        )
        replays = family(
            GaugeMetricFamily, "kurrentdb_persistent_sub_parked_message_replays", "Replays requested"
        )
        truncations = family(
            GaugeMetricFamily, "kurrentdb_persistent_sub_parked_message_truncations", "Truncations requested"
        )
        for g in groups:
            key = [g.source.stream, g.group]
            connections.add_metric(key, len(g.clients))
            parked.add_metric(key, g.parked.count)
            in_flight.add_metric(key, sum(c.in_flight for c in list(g.clients.values())))
            oldest.add_metric(key, g.parked.oldest_age_seconds())
            items.add_metric(key, g.throughput.total_items)
            is_all = g.source.is_all
            last_known = _position_of(g.last_known)
            last_checkpointed = _position_of(g.checkpoints.last_checkpointed)
            (known_all if is_all else known).add_metric(key, last_known)
            (checkpointed_all if is_all else checkpointed).add_metric(key, last_checkpointed)
            requests.add_metric([*key, "client-nak"], g.parked.due_to_client_nak)
            requests.add_metric([*key, "max-retries"], g.parked.due_to_max_retries)
            replays.add_metric(key, g.parked.replays)
            truncations.add_metric(key, g.parked.truncations)
        yield from (connections, parked, in_flight, oldest, items, known, known_all)
        yield from (checkpointed, checkpointed_all, requests, replays, truncations)

    def _projections(self, service: Any):
        """The system projections this node runs (while it leads; none otherwise)."""
        stats: list[dict[str, Any]] = []
        if service is not None:
            with contextlib.suppress(EvdbError):  # not the leader: nothing runs here
                stats = service.statistics()
        processed = CounterMetricFamily(
            "kurrentdb_projection_events_processed_after_restart",
            "Events the projection handled since this node took office",
            labels=["projection"],
        )
        progress = GaugeMetricFamily(
            "kurrentdb_projection_progress", "Progress through $all, 0..1", labels=["projection"]
        )
        running = GaugeMetricFamily(
            "kurrentdb_projection_running", "1 while the projection runs", labels=["projection"]
        )
        status = GaugeMetricFamily(
            "kurrentdb_projection_status", "1 for the projection's status", labels=["projection", "status"]
        )
        for one in stats:
            name = one["name"]
            now = one["status"].split(" ")[0]  # "Stopped (Enabled)": Stopped
            now = now if now in ("Running", "Faulted") else "Stopped"
            processed.add_metric([name], one["eventsProcessedAfterRestart"])
            progress.add_metric([name], one["progress"] / 100.0)
            running.add_metric([name], 1 if now == "Running" else 0)
            for each in ("Running", "Faulted", "Stopped"):
                status.add_metric([name, each], 1 if each == now else 0)
        yield from (processed, progress, running, status)

    def _scavenge(self, service: ScavengeService | None):
        if service is None:
            return
        for key, value in service.totals.items():
            yield CounterMetricFamily(
                f"evdb_scavenge_{key}", f"Scavenge: {key.replace('_', ' ')} (all runs)", value=value
            )
        running = service.progress()
        yield GaugeMetricFamily("evdb_scavenge_running", "1 while a scavenge runs", value=1 if running else 0)
        if running:
            yield GaugeMetricFamily(
                "evdb_scavenge_bytes_reclaimed_current",
                "Bytes reclaimed so far by the running scavenge",
                value=running["bytesReclaimed"],
            )

    def _observed(self, config: MetricsConfig):
        m = self._metrics
        o = m.observer
        calls = m.grpc_calls
        if config.on("IncomingGrpcCalls", "Current"):
            yield GaugeMetricFamily(
                "kurrentdb_current_incoming_grpc_calls",
                "gRPC calls started and not ended",
                value=calls.current,
            )
        kinds = (
            ("Total", "total", calls.total),
            ("Failed", "failed", calls.failed),
            ("Unimplemented", "unimplemented", calls.unimplemented),
            ("DeadlineExceeded", "deadline-exceeded", calls.deadline_exceeded),
        )
        chosen = [(label, value) for key, label, value in kinds if config.on("IncomingGrpcCalls", key)]
        if chosen:
            c = CounterMetricFamily("kurrentdb_incoming_grpc_calls", "gRPC calls received", labels=["kind"])
            for label, value in chosen:
                c.add_metric([label], value)
            yield c
        events_read, bytes_read, record_seconds, chunk_distance = o.reads()
        if config.on("Events", "Read") or config.on("Events", "Written"):
            events = CounterMetricFamily(
                "kurrentdb_io_events", "Events read and written", labels=["activity"]
            )
            size = CounterMetricFamily(
                "kurrentdb_io_bytes", "Event bytes read and written", labels=["activity"]
            )
            if config.on("Events", "Read"):
                events.add_metric(["read"], events_read)
                size.add_metric(["read"], bytes_read)
            if config.on("Events", "Written"):
                events.add_metric(["written"], m.events_written._value.get())
                size.add_metric(["written"], m.bytes_written._value.get())
            yield events
            yield size
        if config.on("Events", "Read"):
            yield _histogram(
                "kurrentdb_io_record_read_duration_seconds",
                "Events read, by their read time (each read call's time shared among its events)",
                ["source"],
                ["FileSystem"],
                record_seconds,
                SECONDS_BUCKETS,
            )
            yield _histogram(
                "kurrentdb_logical_chunk_read_distribution",
                "Events read, by how many chunks older than the active chunk they are",
                [],
                [],
                chunk_distance,
                CHUNK_DISTANCE_BUCKETS,
            )
        if config.on("Writer", "FlushSize"):
            g = GaugeMetricFamily(
                "kurrentdb_writer_flush_size_max", "Recent largest flush (bytes)", labels=["range"]
            )
            g.add_metric([o.flush_size.range_label], o.flush_size.observe())
            yield g
        if config.on("Writer", "FlushDuration"):
            g = GaugeMetricFamily(
                "kurrentdb_writer_flush_duration_max_seconds", "Recent longest flush", labels=["range"]
            )
            g.add_metric([o.flush_duration.range_label], o.flush_duration.observe())
            yield g
        if config.on("Queues", "Length"):
            g = GaugeMetricFamily(
                "kurrentdb_queue_queueing_duration_max_seconds",
                "Recent longest wait of a callback on the node's event loop",
                labels=["name", "range"],
            )
            g.add_metric(["Main", m.loop_lag.range_label], m.loop_lag.observe())
            yield g
        if config.on("Queues", "Processing"):
            yield _histogram(
                "kurrentdb_queue_processing_duration_seconds",
                "Group commits of the writer, by their processing time",
                ["message_type", "queue"],
                ["Storage", "Writer"],
                o.group_seconds,
                SECONDS_BUCKETS,
            )

    def _system(self, config: MetricsConfig):
        if config.on("System", "Cpu"):
            yield GaugeMetricFamily("kurrentdb_sys_cpu", "Machine CPU use (%)", value=psutil.cpu_percent())
        periods = [p for p in ("1m", "5m", "15m") if config.on("System", f"LoadAverage{p}")]
        if periods:
            load = dict(zip(("1m", "5m", "15m"), os.getloadavg(), strict=True))
            g = GaugeMetricFamily("kurrentdb_sys_load_avg", "Machine load average", labels=["period"])
            for p in periods:
                g.add_metric([p], load[p])
            yield g
        vm = psutil.virtual_memory()
        mem = GaugeMetricFamily("kurrentdb_sys_mem_bytes", "Machine memory", labels=["kind"])
        if config.on("System", "FreeMem"):
            mem.add_metric(["free"], vm.available)
        if config.on("System", "TotalMem"):
            mem.add_metric(["total"], vm.total)
        yield mem
        db = self._sources.db()
        if db is not None and db.config.db_dir is not None:
            usage = psutil.disk_usage(db.config.db_dir)
            disk = GaugeMetricFamily(
                "kurrentdb_sys_disk_bytes", "Disk holding the database", labels=["disk", "kind"]
            )
            mount = _mount_point(db.config.db_dir)
            if config.on("System", "DriveUsedBytes"):
                disk.add_metric([mount, "used"], usage.used)
            if config.on("System", "DriveTotalBytes"):
                disk.add_metric([mount, "total"], usage.total)
            yield disk

    def _proc(self, config: MetricsConfig):
        p = self._process
        with p.oneshot():
            if config.on("Process", "UpTime"):
                c = CounterMetricFamily(
                    "kurrentdb_proc_up_time_seconds", "Time the node process has run", labels=["pid"]
                )
                c.add_metric([str(p.pid)], max(0.0, time.time() - p.create_time()))
                yield c
            if config.on("Process", "Cpu"):
                yield GaugeMetricFamily(
                    "kurrentdb_proc_cpu", "Node process CPU use (%)", value=p.cpu_percent()
                )
            mem = p.memory_info()
            g = GaugeMetricFamily("kurrentdb_proc_mem_bytes", "Memory of the node process", labels=["kind"])
            if config.on("Process", "MemWorkingSet"):
                g.add_metric(["working-set"], mem.rss)
            if config.on("Process", "MemVirtualBytes"):
                g.add_metric(["virtual-bytes"], mem.vms)
            yield g
            if config.on("Process", "ThreadCount"):
                yield GaugeMetricFamily(
                    "kurrentdb_proc_thread_count", "Threads of the node process", value=p.num_threads()
                )
            if config.on("Process", "DiskReadBytes") or config.on("Process", "DiskWrittenBytes"):
                io = p.io_counters()
                b = CounterMetricFamily(
                    "kurrentdb_disk_io_bytes", "Bytes read from and written to disk", labels=["activity"]
                )
                ops = CounterMetricFamily(
                    "kurrentdb_disk_io_operations", "Read and write calls to disk", labels=["activity"]
                )
                if config.on("Process", "DiskReadBytes"):
                    b.add_metric(["read"], io.read_bytes)
                if config.on("Process", "DiskWrittenBytes"):
                    b.add_metric(["written"], io.write_bytes)
                if config.on("Process", "DiskReadOps"):
                    ops.add_metric(["read"], io.read_count)
                if config.on("Process", "DiskWrittenOps"):
                    ops.add_metric(["written"], io.write_count)
                yield b
                yield ops
        if config.on("Process", "ThreadPoolPendingWorkItemCount"):
            yield GaugeMetricFamily(
                "kurrentdb_proc_thread_pool_pending_work_item_count",
                "Work waiting for a thread of the event loop's default executor",
                value=self._metrics.pending_work(),
            )
        generations = [n for n in (0, 1, 2) if config.on("Process", f"Gen{n}CollectionCount")]
        if generations:
            c = CounterMetricFamily(
                "kurrentdb_gc_collection_count", "Python garbage collections", labels=["generation"]
            )
            stats = gc.get_stats()
            for n in generations:
                c.add_metric([f"gen{n}"], stats[n]["collections"])
            yield c
        if config.on("Process", "TimeInGc"):
            yield GaugeMetricFamily(
                "kurrentdb_gc_time_in_gc",
                "Time of the last collection, % of time since the one before",
                value=self._metrics.gc_watch.time_in_gc,
            )
        if config.on("Process", "GcPauseDuration"):
            pauses = self._metrics.gc_watch.pauses
            g = GaugeMetricFamily(
                "kurrentdb_gc_pause_duration_max_seconds", "Recent longest collection", labels=["range"]
            )
            g.add_metric([pauses.range_label], pauses.observe())
            yield g
        heap = _malloc_heap(self._libc)
        if heap is not None:
            size, free = heap
            if config.on("Process", "HeapSize"):
                yield GaugeMetricFamily(
                    "kurrentdb_gc_heap_size_bytes", "Bytes the C allocator holds", value=size
                )
            if config.on("Process", "HeapFragmentation"):
                yield GaugeMetricFamily(
                    "kurrentdb_gc_heap_fragmentation",
                    "Free bytes in the C allocator's heap, % of it",
                    value=100.0 * free / size if size else 0.0,
                )


def _position_of(value: Any) -> float:
    """An event number, or a commit position (a ($all) position pair or object): -1 when none."""
    if value is None:
        return -1
    if isinstance(value, int):
        return value
    if isinstance(value, tuple):
        return value[0]
    commit = getattr(value, "commit", None)
    return commit if isinstance(commit, int) else -1


def _mount_point(path: str) -> str:
    path = os.path.abspath(path)
    while not os.path.ismount(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def _libc() -> Any:
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = _MallInfo2
        return libc
    return None


def _malloc_heap(libc: Any) -> tuple[int, int] | None:
    """(bytes glibc's allocator holds from the system, of which free), or None without glibc."""
    if libc is None:
        return None
    info = libc.mallinfo2()
    return info.arena + info.hblkhd, info.fordblks


class NodeMetrics:
    def __init__(
        self,
        sources: NodeSources,
        config: MetricsConfig | None = None,
        *,
        clock: Clock,
    ) -> None:
        """``clock``: the node's; its monotonic time paces the recent maxima, its wall time dates the
        statuses."""
        self.config = config if config is not None else MetricsConfig()
        interval = self.config.expected_scrape_interval_seconds
        #: given to each database the node opens (Database.observer)
        self.observer = DatabaseObserver(self.config, clock.monotonic)
        #: given to the node's gRPC server (evdb.grpc.server.KurrentServer)
        self.grpc_calls = GrpcCalls()
        #: how late the event loop ran a callback it was asked to run (sampled, see _watch_loop)
        self.loop_lag = RecentMax(interval, clock.monotonic)
        self.gc_watch = _GcWatch(RecentMax(interval, clock.monotonic))
        self._sources = sources
        self._since = _StatusSince(clock.time)  # Unix time, as kurrentdb_statuses gives it
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lag_task: asyncio.Task | None = None
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
        r.register(_NodeCollector(sources, self))

    def set_live(self, live: bool) -> None:
        """The node has started (True) or begins to stop (False); called on the node's event loop.
        While live, the loop's lag is sampled and Python's collections are timed."""
        self.live = live
        self.node_up.set(1 if live else 0)
        if live and self._lag_task is None:
            self._loop = asyncio.get_running_loop()
            self._lag_task = self._loop.create_task(self._watch_loop(), name="metrics-loop-lag")
            gc.callbacks.append(self.gc_watch)
        elif not live and self._lag_task is not None:
            self._lag_task.cancel()
            self._lag_task = None
            with contextlib.suppress(ValueError):
                gc.callbacks.remove(self.gc_watch)

    async def _watch_loop(self, period: float = LAG_PERIOD) -> None:
        """Every ``period`` seconds, how much later than asked the loop woke this task: the time a
        ready callback waited behind the others (kurrentdb_queue_queueing_duration_max_seconds)."""
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + period
            await asyncio.sleep(period)
            self.loop_lag.record(max(0.0, loop.time() - due))
            self.sample_statuses(self._sources.db())  # the time a status is entered, within ``period``

    def sample_statuses(self, db: Database | None) -> dict[str, tuple[str, float]]:
        """The Node and Index statuses now, with the time each was first seen."""
        out: dict[str, tuple[str, float]] = {}
        cluster = self._sources.cluster()
        if cluster is not None:
            out["Node"] = self._since("Node", cluster.state)
        index = "Opening" if db is None else "Merging" if db.index.dumping else "Idle"
        out["Index"] = self._since("Index", index)
        return out

    def pending_work(self) -> int:
        """Calls waiting for a thread of the event loop's default executor (asyncio.to_thread)."""
        executor = getattr(self._loop, "_default_executor", None)
        work = getattr(executor, "_work_queue", None)
        return work.qsize() if work is not None else 0

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
