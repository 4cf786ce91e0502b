"""metricsconfig.json (KurrentDB's shape): read beside the node's --config file at start, KurrentDB's
defaults without one; RecentMax's windows; the gRPC call counts."""

from __future__ import annotations

import httpx
import pytest

from evdb.clock import ManualClock, SystemClock
from evdb.metrics import GrpcCalls, NodeMetrics, NodeSources, RecentMax
from evdb.metrics_config import MetricsConfig, MetricsConfigError, load_metrics_config, parse_metrics_config
from evdb.node import Node
from tests.node.conftest import node_options


def _families(metrics: NodeMetrics) -> dict[str, list]:
    return {f.name: f.samples for f in metrics.registry.collect()}


def test_defaults_are_kurrentdbs_shipped_file():
    config = load_metrics_config(None)
    assert config.expected_scrape_interval_seconds == 15
    assert config.on("Writer", "FlushSize") and config.on("Process", "TimeInGc")
    assert not config.on("Process", "MemVirtualBytes") and not config.on("CacheHitsMisses", "Chunk")
    assert set(config.checkpoints) >= {"writer", "index", "replication"}
    assert config.statuses == {"index", "node", "scavenge"}


def test_file_with_comments_any_case_and_partial_sections(tmp_path):
    text = """{
      // as KurrentDB's own file: comments, "//" inside a string kept
      "expectedScrapeIntervalSeconds": 1,
      "Meters": ["KurrentDB.Core", "http://not-a-comment"],
      "PROCESS": {"cpu": false},
      "Checkpoints": {"Writer": true, "Index": false, "Replication": true, "Chaser": false, "Epoch": false}
    }"""
    config = parse_metrics_config(text, "x/metricsconfig.json")
    assert config.expected_scrape_interval_seconds == 1
    assert not config.on("Process", "Cpu")
    assert config.on("Process", "UpTime")  # a key the file leaves out keeps its default
    assert config.checkpoints == ["writer", "replication"]


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ('{"ExpectedScrapeIntervalSeconds": 7}', "must be 0, 1, 5, 10 or a multiple of 15, but was 7"),
        ('{"ExpectedScrapeIntervalSeconds": "15"}', "must be a whole number"),
        ("{not json", "not valid JSON"),
        ("[1]", "must be a JSON object"),
        ('{"Meters": "KurrentDB.Core"}', "Meters must be a list"),
    ],
)
def test_a_bad_file_is_refused_naming_it(text, words):
    with pytest.raises(MetricsConfigError) as caught:
        parse_metrics_config(text, "/etc/evdb/metricsconfig.json")
    assert str(caught.value).startswith("/etc/evdb/metricsconfig.json: ")
    assert words in str(caught.value)


def test_without_the_core_meter_no_kurrentdb_series():
    config = parse_metrics_config('{"Meters": ["KurrentDB.Projections.Core"]}', "m.json")
    metrics = NodeMetrics(NodeSources(lambda: None, lambda: None, dict), config, clock=SystemClock())
    assert not [name for name in _families(metrics) if name.startswith("kurrentdb_") and "http" not in name]


def test_disabled_figures_are_not_exported():
    config = parse_metrics_config(
        '{"Process": {"UpTime": false}, "System": {"Cpu": false}, "Writer": {"FlushSize": false}}', "m.json"
    )
    names = set(
        _families(NodeMetrics(NodeSources(lambda: None, lambda: None, dict), config, clock=SystemClock()))
    )
    assert "kurrentdb_proc_up_time_seconds" not in names
    assert "kurrentdb_sys_cpu" not in names
    assert "kurrentdb_writer_flush_size_max" not in names
    assert {"kurrentdb_proc_cpu", "kurrentdb_writer_flush_duration_max_seconds"} <= names


@pytest.mark.parametrize(
    ("interval", "label"),
    [
        (0, "0-1 seconds"),
        (1, "2-3 seconds"),
        (5, "6-8 seconds"),
        (10, "12-15 seconds"),
        (15, "16-20 seconds"),
        (30, "32-40 seconds"),
    ],
)
def test_recent_max_range_follows_the_scrape_interval(interval, label):
    assert RecentMax(interval, lambda: 0.0).range_label == label


def test_recent_max_keeps_a_value_for_the_window_then_forgets_it():
    now = [1000.0]
    recent = RecentMax(15, lambda: now[0])  # 5 buckets of 4 s
    recent.record(3.0)
    now[0] += 2
    recent.record(1.0)
    assert recent.observe() == 3.0
    now[0] += 14  # 16 s after: still in the window
    assert recent.observe() == 3.0
    now[0] += 8  # past 20 s: gone, and so is the smaller one recorded 2 s later
    assert recent.observe() == 0.0
    recent.record(0.5)
    assert recent.observe() == 0.5


def test_grpc_calls_count_failures_by_kind():
    from grpclib.const import Status

    calls = GrpcCalls()
    for status in (Status.UNIMPLEMENTED, Status.DEADLINE_EXCEEDED, Status.NOT_FOUND):
        calls.ended(status)
    assert (calls.failed, calls.unimplemented, calls.deadline_exceeded) == (3, 1, 1)


async def test_node_reads_metricsconfig_beside_its_config_file(tmp_path, clock):
    (tmp_path / "evdb.conf").write_text("RunProjections: None\n")
    (tmp_path / "metricsconfig.json").write_text(
        '{"ExpectedScrapeIntervalSeconds": 5, "Process": {"MemVirtualBytes": true}, "ElectionsCount": false}'
    )
    node = Node(node_options(tmp_path, "--config", str(tmp_path / "evdb.conf")), clock=clock, name="mc")
    await node.start()
    try:
        async with httpx.AsyncClient(base_url=node.http_url, timeout=30) as c:
            text = (await c.get("/metrics")).text
    finally:
        await node.stop()
    assert 'kurrentdb_writer_flush_size_max{range="6-8 seconds"}' in text
    assert 'kurrentdb_proc_mem_bytes{kind="virtual-bytes"}' in text
    assert "kurrentdb_elections_count_total" not in text


async def test_a_bad_metricsconfig_stops_the_node_at_start_naming_the_file(tmp_path, clock):
    (tmp_path / "evdb.conf").write_text("RunProjections: None\n")
    (tmp_path / "metricsconfig.json").write_text('{"ExpectedScrapeIntervalSeconds": 20}')
    with pytest.raises(MetricsConfigError, match=r"metricsconfig\.json: ExpectedScrapeIntervalSeconds"):
        Node(node_options(tmp_path, "--config", str(tmp_path / "evdb.conf")), clock=clock, name="bad")


def test_metrics_config_default_instance_is_independent():
    a, b = MetricsConfig(), MetricsConfig()
    a.sections["writer"]["flushsize"] = False
    assert b.on("Writer", "FlushSize")


def test_evdb_node_refuses_a_bad_metricsconfig_with_a_message(tmp_path):
    import subprocess
    import sys

    (tmp_path / "evdb.conf").write_text("Insecure: true\n")
    (tmp_path / "metricsconfig.json").write_text('{"ExpectedScrapeIntervalSeconds": 20}')
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from evdb.cli import main; raise SystemExit(main())",
            "node",
            "--config",
            str(tmp_path / "evdb.conf"),
            "--db",
            str(tmp_path / "db"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done
    assert done.stderr.strip() == (
        f"evdb node: {tmp_path / 'metricsconfig.json'}: ExpectedScrapeIntervalSeconds must be 0, 1, 5, 10 or a "
        "multiple of 15, but was 20"
    )


def test_node_and_index_statuses_carry_the_time_they_were_first_seen():
    from types import SimpleNamespace

    clock = ManualClock(start=100.0)
    cluster = SimpleNamespace(state="Follower", election_count=0)
    metrics = NodeMetrics(NodeSources(lambda: None, lambda: None, dict, cluster=lambda: cluster), clock=clock)
    assert metrics.sample_statuses(None) == {"Node": ("Follower", 100.0), "Index": ("Opening", 100.0)}
    clock.advance(100.0)
    cluster.state = "Leader"
    metrics.sample_statuses(None)  # what the event loop's sampler does every LAG_PERIOD seconds
    clock.advance(100.0)
    samples = {
        s.labels["name"]: (s.labels["status"], s.value) for s in _families(metrics)["kurrentdb_statuses"]
    }
    assert samples == {"Node": ("Leader", 200.0), "Index": ("Opening", 100.0)}
