"""Jobs on one node of a local cluster (what the dashboard's keys call): stop it (graceful, then killed
after the bound), start it, and restore a stopped node from a backup, after which it catches up from
the leader; each refuses clearly, and changes nothing, when it cannot act. Node options given at
``up`` survive the restarts. One real 3-node cluster (plain HTTP) for the whole file."""

from __future__ import annotations

import os
import signal
import uuid
from pathlib import Path

import pytest
from waiting import wait_until

from evdb.backup.errors import BackupIncomplete
from evdb.cli import main as evdb_main
from evdb.cluster.launcher import LocalCluster, NodeIsRunning, UnknownNode
from evdb.options import load_options
from evdb.redaction.protocol import socket_path


def _quiet(*_):
    pass


def _append(local: LocalCluster, url: str, stream: str, count: int) -> None:
    body = [{"eventId": str(uuid.uuid4()), "eventType": "Tested", "data": {"n": i}} for i in range(count)]
    with local.client(url, timeout=10) as c:
        r = c.post(
            f"/streams/{stream}", json=body, headers={"Content-Type": "application/vnd.kurrent.events+json"}
        )
        assert r.status_code == 201, r.text


def _count(local: LocalCluster, url: str, stream: str) -> int:
    with local.client(url, timeout=5) as c:
        r = c.get(f"/streams/{stream}/0/forward/100", headers={"Accept": "application/json"})
        return len(r.json()["entries"]) if r.status_code == 200 else 0


def _files(folder: str) -> dict[str, int]:
    return {
        os.path.relpath(os.path.join(d, f), folder): os.path.getsize(os.path.join(d, f))
        for d, _, names in os.walk(folder)
        for f in names
        if f != "evdb.lock"
    }


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    cluster = LocalCluster(tmp_path_factory.mktemp("jobs") / "cluster")
    cluster.up(
        nodes=3,
        insecure=True,
        options={"ChunkSize": "64KiB", "EnableUnixSocket": "true"},
        timeout=60,
        log=_quiet,
    )
    try:
        yield cluster
    finally:
        cluster.down(timeout=10, log=_quiet)


def test_stop_restore_and_start_a_node(local, tmp_path, capsys):
    data = str(local.data_dir)
    leader_url = local.wait_for_leader(30)
    nodes = {n["name"]: n for n in local.info()["nodes"]}
    name = next(r["name"] for r in local.status() if r["state"] == "Follower")
    node = nodes[name]
    _append(local, leader_url, "before", 20)
    wait_until(lambda: _count(local, node["url"], "before") == 20, 20, f"{name} to have the first writes")
    backup = tmp_path / "backup"
    with local.client(node["url"], timeout=10) as c:
        assert c.post("/admin/backup", json={"to": str(backup)}).status_code == 202
        wait_until(
            lambda: c.get("/admin/backup/current").json()["state"] == "completed", 30, f"the backup of {name}"
        )
    _append(local, leader_url, "after", 20)  # the restored node must catch these up

    # refusals: nothing changes
    with pytest.raises(NodeIsRunning, match=f"{name} is running .*stop it first"):
        local.restore_node(name, backup, log=_quiet)
    assert evdb_main(["cluster", "restore-node", name, "--from", str(backup), "--data", data]) == 6
    assert "stop it first" in capsys.readouterr().err
    for job in (lambda: local.restore_node("node9", backup), lambda: local.start_node("node9")):
        with pytest.raises(UnknownNode, match=r"No node named 'node9'.*its nodes are node1, node2, node3"):
            job()
    assert evdb_main(["cluster", "stop-node", "node9", "--data", data]) == 2
    assert local.is_running(name)

    # stop: graceful (the node shuts down when asked)
    assert evdb_main(["cluster", "stop-node", name, "--data", data]) == 0
    out = capsys.readouterr().out
    assert f"Stopped {name}" in out and "killing" not in out  # it shut down when asked
    assert not local.is_running(name)
    assert next(r for r in local.status() if r["name"] == name)["state"] == "Down"
    assert local.stop_node(name, log=_quiet) is False  # not running: nothing to do
    # a folder that is not a finished backup: refused before any file is touched
    before = _files(node["db"])
    (tmp_path / "not-a-backup").mkdir()
    with pytest.raises(BackupIncomplete):
        local.restore_node(name, tmp_path / "not-a-backup", log=_quiet)
    assert _files(node["db"]) == before and not local.is_running(name)

    # restore, start, and it catches up by replication
    assert evdb_main(["cluster", "restore-node", name, "--from", str(backup), "--data", data]) == 0
    out = capsys.readouterr().out
    assert f"Restored {name} from {backup}" in out and f"{name} is Follower" in out
    wait_until(lambda: _count(local, node["url"], "after") == 20, 30, f"{name} to catch up")
    assert _count(local, node["url"], "before") == 20
    # the options given at `up` are those it runs with after every restart
    assert load_options(["--config", node["config"]], {}).enable_unix_socket is True
    wait_until(lambda: Path(socket_path(node["db"])).exists(), 20, f"{name}'s redaction socket")


def test_a_node_that_does_not_stop_in_time_is_killed_and_starts_again(local, capsys):
    local.wait_for_leader(30)
    name = next(r["name"] for r in local.status() if r["state"] == "Follower")
    pid = next(n["pid"] for n in local.info()["nodes"] if n["name"] == name)
    os.kill(pid, signal.SIGSTOP)  # it can answer nothing, not even the shutdown request
    said: list[str] = []
    assert local.stop_node(name, timeout=1, log=said.append) is True
    assert said == [f"{name} did not stop in 1 s: killing it", f"Stopped {name}"]
    assert not local.is_running(name)
    wait_until(lambda: not Path(f"/proc/{pid}").exists(), 10, f"{name}'s process to be reaped")
    assert evdb_main(["cluster", "start-node", name, "--data", str(local.data_dir)]) == 0
    assert f"{name} is Follower" in capsys.readouterr().out
    assert local.is_running(name)
