"""The mirror's own endpoint: Prometheus metrics and its status as JSON (``--metrics-port``)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

__all__ = ["start_metrics"]


async def start_metrics(
    snapshot: Callable[[], dict[str, Any]], host: str, port: int, logger: logging.Logger
) -> tuple[Any, str]:
    """Serve ``/metrics`` (Prometheus) and ``/status`` (JSON) from ``snapshot()``; the runner and its URL."""
    from aiohttp import web
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    class Collector:
        def collect(self):
            st = snapshot()
            gauges = {
                "evdb_mirror_position": (
                    "$all position (on the primary) of the last event handled",
                    st["position"],
                ),
                "evdb_mirror_primary_head_position": (
                    "position of the primary's newest event",
                    st["primaryHead"],
                ),
                "evdb_mirror_lag_bytes": ("bytes of the primary's $all not handled yet", st["lagBytes"]),
                "evdb_mirror_lag_seconds": (
                    "primary time between its newest event and the last one copied",
                    st["lagSeconds"],
                ),
                "evdb_mirror_caught_up": (
                    "1 when every event of the primary is copied",
                    int(st["caughtUp"]),
                ),
                "evdb_mirror_events_per_second": (
                    "copy rate over the last 10 seconds",
                    st["eventsPerSecond"],
                ),
            }
            for name, (doc, value) in gauges.items():
                if value is not None:
                    yield GaugeMetricFamily(name, doc, value=value)
            counters = {
                "evdb_mirror_events_copied": ("events appended to the secondary", st["eventsCopied"]),
                "evdb_mirror_events_skipped": (
                    "events of the primary's system streams, not copied",
                    st["eventsSkipped"],
                ),
                "evdb_mirror_tombstones": ("tombstones copied", st["tombstones"]),
            }
            for name, (doc, value) in counters.items():
                yield CounterMetricFamily(name, doc, value=value)

    registry = CollectorRegistry()
    registry.register(Collector())

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(registry), content_type="text/plain", charset="utf-8")

    async def status_page(request: web.Request) -> web.Response:
        return web.json_response(snapshot())

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/status", status_page)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound_host, bound_port = runner.addresses[0][:2]
    url = f"http://{bound_host}:{bound_port}"
    logger.info("Mirror metrics at %s/metrics and status at %s/status", url, url)
    return runner, url
