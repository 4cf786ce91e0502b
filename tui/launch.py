"""What ``evdb dashboard`` says while it brings up (or finds running) the local cluster."""

from __future__ import annotations

from evdb.cluster.launcher import LocalCluster

__all__ = ["launch_message"]


def launch_message(cluster: LocalCluster) -> str:
    """ "Attaching" to a local cluster whose nodes all run; "Starting" it (or its stopped nodes)
    otherwise."""
    where = f"the local cluster in {cluster.data_dir}"
    if not cluster.exists():
        return f"Starting {where} …"
    nodes = cluster.info().get("nodes", [])
    running = {n.get("name") for n in cluster.running_nodes()}
    if nodes and len(running) == len(nodes):
        return f"Attaching to {where} ({len(nodes)} nodes running) …"
    if not running:
        return f"Starting {where} …"
    stopped = [str(n.get("name")) for n in nodes if n.get("name") not in running]
    return f"Starting {', '.join(stopped)} of {where} ({len(running)} of {len(nodes)} running) …"
