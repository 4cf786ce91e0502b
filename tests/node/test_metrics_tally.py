"""The HTTP and append metrics counted per thread without locks and added at scrape expose exactly what
prometheus_client's own Counter.inc and Histogram.observe calls would (same names, labels, values)."""

from __future__ import annotations

import random
import threading
from types import SimpleNamespace

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from evdb.clock import SystemClock
from evdb.metrics import NodeMetrics, NodeSources


def _metrics() -> NodeMetrics:
    return NodeMetrics(NodeSources(lambda: None, lambda: None, dict), clock=SystemClock())


def _reference() -> tuple[CollectorRegistry, dict]:
    """The same metrics, counted the direct way (as evdb did before)."""
    r = CollectorRegistry()
    m = {
        "events": Counter("evdb_events_written", "Events appended through this node", registry=r),
        "bytes": Counter("evdb_bytes_written", "Bytes of event data and metadata appended", registry=r),
        "requests": Counter(
            "kurrentdb_http_requests", "HTTP requests served", ["method", "status"], registry=r
        ),
        "duration": Histogram(
            "kurrentdb_http_request_duration_seconds",
            "HTTP request duration",
            ["method"],
            registry=r,
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5),
        ),
        "append": Histogram(
            "evdb_append_duration_seconds",
            "Time from receiving an append to its acknowledgement",
            registry=r,
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5, 1),
        ),
    }
    return r, m


def _samples(text: bytes, names: tuple[str, ...]) -> dict[str, float]:
    out = {}
    for line in text.decode().splitlines():
        if line.startswith("#") or "_created" in line:
            continue
        key, value = line.rsplit(" ", 1)
        if key.startswith(names):
            out[key] = float(value)
    return out


NAMES = (
    "evdb_events_written",
    "evdb_bytes_written",
    "kurrentdb_http_requests",
    "kurrentdb_http_request_duration_seconds",
    "evdb_append_duration_seconds",
)


def _observations(seed: int, n: int) -> list[tuple]:
    rnd = random.Random(seed)
    out: list[tuple] = []
    for _ in range(n):
        seconds = rnd.choice([0.0, 0.0005, 0.001, 0.0007, 0.003, 0.02, 0.7, 3.0, 9.0, rnd.random() / 50])
        if rnd.random() < 0.5:
            out.append(
                ("http", rnd.choice(["GET", "POST", "PUT"]), rnd.choice([200, 201, 400, 404]), seconds)
            )
        else:
            events = rnd.choice([0, 1, 3])
            out.append(("append", seconds, events, rnd.randrange(1, 500) if events else 0))
    return out


def _apply(metrics: NodeMetrics, reference: dict, items: list[tuple]) -> None:
    for item in items:
        if item[0] == "http":
            _, method, status, seconds = item
            metrics.observe_http(SimpleNamespace(method=method), status, seconds)  # type: ignore[arg-type]
            if reference:
                reference["requests"].labels(method, str(status)).inc()
                reference["duration"].labels(method).observe(seconds)
        else:
            _, seconds, events, size = item
            metrics.observe_append(seconds, events, size)
            if reference:
                reference["append"].observe(seconds)
                if events:
                    reference["events"].inc(events)
                    reference["bytes"].inc(size)


def test_exposed_values_match_direct_counting_across_scrapes():
    metrics = _metrics()
    registry, reference = _reference()
    for seed in range(3):  # a scrape after each round: later scrapes add only what is new
        _apply(metrics, reference, _observations(seed, 400))
        got = _samples(metrics.render(), NAMES)
        want = _samples(generate_latest(registry), NAMES)
        assert got.keys() == want.keys()
        for key, value in want.items():
            assert abs(got[key] - value) < 1e-9, key
    assert _samples(metrics.render(), NAMES) == got  # nothing new: nothing added twice


def test_counts_from_several_threads_are_all_exposed():
    metrics = _metrics()
    registry, reference = _reference()
    rounds = [_observations(10 + t, 300) for t in range(4)]
    for items in rounds:
        _apply(_metrics(), reference, items)  # the reference only (a metrics object thrown away)
    threads = [threading.Thread(target=_apply, args=(metrics, {}, items)) for items in rounds]
    for thread in threads:
        thread.start()
    metrics.render()  # a scrape while they count: what it misses goes with the next one
    for thread in threads:
        thread.join()
    got = _samples(metrics.render(), NAMES)
    want = _samples(generate_latest(registry), NAMES)
    assert got.keys() == want.keys()
    for key, value in want.items():
        assert abs(got[key] - value) < 1e-6, key
