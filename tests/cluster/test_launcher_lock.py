"""Changes to a local cluster happen one at a time: cluster.json's read-modify-writes from several
threads (a dashboard's jobs) and several processes (``evdb cluster`` commands beside a dashboard) lose
no update, and a change waits while another process holds the cluster."""

from __future__ import annotations

import subprocess
import sys
import threading

from evdb.cluster.launcher import LocalCluster


def _cluster(tmp_path) -> LocalCluster:
    cluster = LocalCluster(tmp_path / "cluster")
    cluster.create(nodes=3, replicas=1, insecure=True)
    return cluster


def test_threads_changing_different_nodes_lose_no_update(tmp_path):
    cluster = _cluster(tmp_path)
    names = [n["name"] for n in cluster.info()["nodes"]]

    def churn(name: str, base: int) -> None:
        for i in range(40):
            LocalCluster(cluster.data_dir)._set_pid(name, base + i)  # its own instance, as a job would

    threads = [threading.Thread(target=churn, args=(n, 1000 * k)) for k, n in enumerate(names, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    pids = {n["name"]: n["pid"] for n in cluster.info()["nodes"]}
    assert pids == {n: 1000 * k + 39 for k, n in enumerate(names, 1)}


_CHURN = """
import sys
from evdb.cluster.launcher import LocalCluster
cluster = LocalCluster(sys.argv[1])
for i in range(60):
    cluster._set_pid(sys.argv[2], int(sys.argv[3]) + i)
"""


def test_processes_changing_different_nodes_lose_no_update(tmp_path):
    cluster = _cluster(tmp_path)
    names = [n["name"] for n in cluster.info()["nodes"]]
    processes = [
        subprocess.Popen([sys.executable, "-c", _CHURN, str(cluster.data_dir), name, str(1000 * k)])
        for k, name in enumerate(names, 1)
    ]
    assert [p.wait(60) for p in processes] == [0] * len(names)
    pids = {n["name"]: n["pid"] for n in cluster.info()["nodes"]}
    assert pids == {n: 1000 * k + 59 for k, n in enumerate(names, 1)}


_HOLD = """
import sys
from evdb.cluster.launcher import LocalCluster
cluster = LocalCluster(sys.argv[1])
with cluster._changing():
    print("held", flush=True)
    sys.stdin.readline()
"""


def test_a_change_waits_while_another_process_holds_the_cluster(tmp_path):
    cluster = _cluster(tmp_path)
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(cluster.data_dir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline() == "held\n"
        done = threading.Event()
        changer = threading.Thread(target=lambda: (cluster._set_pid("node1", 4242), done.set()))
        changer.start()
        assert not done.wait(0.5)  # blocked behind the other process
        assert cluster.info()["nodes"][0]["pid"] is None
        holder.stdin.write("\n")
        holder.stdin.flush()
        assert done.wait(30)
        assert cluster.info()["nodes"][0]["pid"] == 4242
    finally:
        holder.kill()
        holder.wait()


def test_a_folder_without_a_cluster_is_not_created(tmp_path):
    missing = LocalCluster(tmp_path / "nowhere")
    try:
        missing.stop_node("node1")
    except Exception as exc:  # the launcher's own "No cluster in …" error
        assert "No cluster in" in str(exc)
    assert not (tmp_path / "nowhere").exists()
