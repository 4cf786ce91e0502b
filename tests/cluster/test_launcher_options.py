"""Node options of the local cluster (``evdb cluster up --option Key=Value``, ``LocalCluster(...).up(options=)``):
checked against the node's option table before any file is written, kept in cluster.json and every
node's node.yaml (so a restart keeps them), shown by ``evdb cluster status``. Only the last test starts node
processes (what each running node still waits for); the others use ``create``, which writes the folders only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from evdb.cli import main as evdb_main
from evdb.cluster.launcher import (
    InvalidNodeOptions,
    LocalCluster,
    check_node_options,
    parse_option_assignments,
)
from evdb.options import load_options


def test_names_are_the_tables_in_any_spelling_and_values_are_checked():
    checked = check_node_options(
        {
            "enableunixsocket": "true",
            "AutoScavenge:Enabled": "false",
            "LicensingLicenseKey": "k",
            "ChunkSize": "1MiB",
        }
    )
    assert checked == {
        "EnableUnixSocket": "true",
        "AutoScavengeEnabled": "false",
        "LicenseKey": "k",
        "ChunkSize": "1MiB",
    }


def test_every_problem_is_named_at_once():
    with pytest.raises(InvalidNodeOptions) as caught:
        check_node_options(
            {
                "EnableUnixSockt": "true",
                "ChunkSize": "lots",
                "HttpPort": "2113",
                "LogLevel": "Loud",
                "Db": "/elsewhere",
            }
        )
    text = str(caught.value)
    assert caught.value.exit_code == 2
    assert "5 problems" in text
    assert "Unknown node option 'EnableUnixSockt' (did you mean EnableUnixSocket?)" in text
    assert "ChunkSize (--option ChunkSize): 'lots' is not a size in bytes" in text
    assert "LogLevel (--option LogLevel): 'Loud' is not allowed" in text
    assert "HttpPort is set by the local cluster itself" in text
    assert "Db is set by the local cluster itself" in text


def test_assignments_need_a_key_and_an_equals_sign():
    assert parse_option_assignments(["EnableUnixSocket=true", "LogLevel=Verbose", "GossipSeed="]) == {
        "EnableUnixSocket": "true",
        "LogLevel": "Verbose",
        "GossipSeed": "",
    }
    for bad in ("EnableUnixSocket", "=true", " =1"):
        with pytest.raises(InvalidNodeOptions, match="Key=Value"):
            parse_option_assignments([bad])
    with pytest.raises(InvalidNodeOptions, match="given twice"):
        check_node_options(parse_option_assignments(["LogLevel=Verbose", "loglevel=Debug"]))


def test_a_bad_option_on_the_command_line_exits_2_and_creates_nothing(tmp_path, capsys):
    folder = tmp_path / "cluster"
    for option in ("EnableUnixSockt=true", "EnableUnixSocket=maybe", "EnableUnixSocket", "HttpPort=1"):
        code = evdb_main(["cluster", "up", "--data", str(folder), "--insecure", "--option", option])
        assert code == 2, option
        err = capsys.readouterr().err
        assert err.startswith("evdb cluster up: "), err
        assert not folder.exists(), option
    # on an existing cluster nothing is rewritten either
    cluster = LocalCluster(folder)
    cluster.create(nodes=1, insecure=True, options={"LogLevel": "Debug"})
    before = (folder / "node1" / "node.yaml").read_text(), (folder / "cluster.json").read_text()
    assert evdb_main(["cluster", "up", "--data", str(folder), "--option", "LogLevel=Loud"]) == 2
    assert ((folder / "node1" / "node.yaml").read_text(), (folder / "cluster.json").read_text()) == before


def test_options_reach_every_node_and_a_later_up_changes_or_removes_them(tmp_path, capsys):
    cluster = LocalCluster(tmp_path / "c")
    info = cluster.create(
        nodes=2, replicas=1, insecure=True, options={"EnableUnixSocket": "yes", "GossipIntervalMs": "700"}
    )
    assert info["options"] == {"EnableUnixSocket": "yes", "GossipIntervalMs": "700"}
    assert cluster.node_options() == {"EnableUnixSocket": "yes", "GossipIntervalMs": "700"}
    for node in info["nodes"]:
        options = load_options(["--config", node["config"]], {})  # what the node reads at start
        assert options.enable_unix_socket is True and options.gossip_interval_ms == 700
        assert options.http_port != 0 and options.db == node["db"]  # the cluster's own settings stay
    # a later change (what `evdb cluster up --option` does on an existing cluster before starting it)
    notes = cluster.set_node_options({"EnableUnixSocket": "", "GossipIntervalMs": "", "LogLevel": "Debug"})
    assert notes == []  # no node runs: they all start with the new options
    assert cluster.node_options() == {"LogLevel": "Debug"}
    for node in cluster.info()["nodes"]:
        written = yaml.safe_load(Path(node["config"]).read_text())
        assert "EnableUnixSocket" not in written  # removed: the node's default again
        assert written["GossipIntervalMs"] == 500  # the local cluster's own value again
        assert written["LogLevel"] == "Debug"
    assert json.loads((tmp_path / "c" / "cluster.json").read_text())["options"] == {"LogLevel": "Debug"}
    assert evdb_main(["cluster", "status", "--data", str(tmp_path / "c")]) == 0
    out = capsys.readouterr().out
    assert "Node options (--option): LogLevel=Debug" in out
    assert out.count("Down") == 3


def test_the_chunk_size_flag_and_option_must_agree(tmp_path):
    cluster = LocalCluster(tmp_path / "c")
    with pytest.raises(InvalidNodeOptions, match="ChunkSize is given twice"):
        cluster.create(nodes=1, insecure=True, chunk_size="1MiB", options={"ChunkSize": "2MiB"})
    assert not (tmp_path / "c").exists()


def test_the_dashboards_launcher_checks_its_options_the_same_way(tmp_path, capsys):
    folder = tmp_path / "dash"
    assert evdb_main(["dashboard", "--data", str(folder), "--option", "EnableUnixSocket=maybe"]) == 2
    assert "EnableUnixSocket (--option EnableUnixSocket): 'maybe' is not a boolean" in capsys.readouterr().err
    assert not folder.exists()


@pytest.mark.slow
def test_each_running_node_is_told_exactly_what_it_waits_for(tmp_path, capsys):
    """Real node processes: after an option changes, a node already restarted with it is not told to
    restart again, and a reloadable option is a reload, not a restart (GET /info/options of each node)."""
    cluster = LocalCluster(tmp_path / "c")
    quiet = lambda *_: None  # noqa: E731
    cluster.up(nodes=1, replicas=1, insecure=True, timeout=60, log=quiet)
    try:
        notes = cluster.set_node_options({"EnableUnixSocket": "true"})
        assert len(notes) == 2, notes
        for name, note in zip(("node1", "replica1"), notes, strict=True):
            assert note.startswith(f"{name} runs with EnableUnixSocket=false; its node.yaml says "
                                   "EnableUnixSocket=true: restart it"), note  # fmt: skip

        cluster.stop_node("replica1", log=quiet)
        cluster.start_node("replica1")
        cluster.wait_for_node("replica1", 60)
        assert [r["name"] for r in cluster.option_states("replica1") if r["restartPending"]] == []
        assert [r["name"] for r in cluster.option_states("node1") if r["restartPending"]] == [
            "EnableUnixSocket"
        ]

        notes = cluster.set_node_options({"LogLevel": "Debug"})
        assert not any(n.startswith("replica1 runs with") for n in notes), notes  # no restart for it
        assert "replica1: LogLevel=Debug takes effect at its next reload" in "\n".join(notes)
        assert any(n.startswith("node1 runs with EnableUnixSocket=false") for n in notes), notes

        # the same up again: the node still waiting is told once more, and only it
        logged: list[str] = []
        cluster.up(options={"EnableUnixSocket": "true"}, timeout=60, log=logged.append)
        restarts = [line for line in logged if "restart it" in line]
        assert len(restarts) == 1 and restarts[0].startswith("node1 runs with"), logged
        assert evdb_main(["cluster", "status", "--data", str(tmp_path / "c")]) == 0
        out = capsys.readouterr().out
        assert "node1 runs with EnableUnixSocket=false" in out and "replica1 runs with" not in out
    finally:
        cluster.down(timeout=10, log=quiet)
