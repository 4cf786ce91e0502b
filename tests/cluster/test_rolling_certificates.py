"""Rolling certificate update of a real cluster (one process per node, TLS), to a new CA.

``evdb certs rotate``'s procedure (evdb/tls/rotate.py) runs while a client keeps appending. Between the
first and the last node's reload the nodes that no longer trust each other log certificate chain errors;
after the last reload (and the next ConnectionResetInterval) they all talk again, the errors stop, and
every acknowledged event is on every node.
"""

from __future__ import annotations

import datetime
import glob
import json
import os
import signal
import socket
import ssl
import threading
import time
import uuid
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from waiting import wait_until

from evdb.cluster.launcher import LocalCluster
from evdb.tls import repoint_link
from evdb.tls.rotate import rotate_cluster

pytestmark = pytest.mark.slow

RESET_INTERVAL = 2  # ConnectionResetInterval, seconds
STREAM = "rolling-certificates"


def trusted_cas(data_dir: Path) -> ssl.SSLContext:
    """Every CA generation of the cluster (old and new) is trusted by the test's client."""
    context = ssl.create_default_context()
    for path in sorted(glob.glob(str(data_dir / "certs" / "gen-*" / "ca" / "ca.crt"))):
        context.load_verify_locations(cafile=path)
    return context


def certificate_errors(local: LocalCluster) -> list[tuple[datetime.datetime, str, str]]:
    """(time, node, message) of every certificate chain error in the nodes' JSON logs."""
    found = []
    for node in local.info()["nodes"]:
        for root, _dirs, files in os.walk(node["log_dir"]):
            for name in files:
                if not name.endswith(".json"):
                    continue
                with open(os.path.join(root, name), errors="replace") as f:
                    for line in f:
                        try:
                            entry = json.loads(line)
                        except ValueError:
                            continue
                        message = entry.get("@m", "")
                        if "certificate validation error" in message and "certificate chain" in message:
                            when = datetime.datetime.fromisoformat(entry["@t"].replace("Z", "+00:00"))
                            found.append((when, node["name"], message))
    return sorted(found)


class Writer(threading.Thread):
    """Appends one event at a time through the nodes in turn; an event counts once a node answered 201."""

    def __init__(self, local: LocalCluster) -> None:
        super().__init__(daemon=True)
        self.local = local
        self.urls = [n["url"] for n in local.info()["nodes"]]
        self.acknowledged: list[tuple[float, str]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            event_id = str(uuid.uuid4())
            while not self.stop.is_set():  # the same id until some node acknowledges it
                url = self.urls[i % len(self.urls)]
                i += 1
                try:
                    with httpx.Client(
                        verify=trusted_cas(self.local.data_dir), auth=("admin", "changeit"), timeout=5
                    ) as c:
                        r = c.post(
                            f"{url}/streams/{STREAM}",
                            json={"n": len(self.acknowledged)},
                            headers={"Kurrent-EventType": "Rolling", "Kurrent-EventId": event_id},
                        )
                except httpx.HTTPError:
                    time.sleep(0.05)
                    continue
                if r.status_code == 201:
                    self.acknowledged.append((time.time(), event_id))
                    break
                time.sleep(0.05)

    def count(self) -> int:
        return len(self.acknowledged)


def read_ids(url: str, context: ssl.SSLContext) -> list[str]:
    ids: list[str] = []
    with httpx.Client(base_url=url, verify=context, auth=("admin", "changeit"), timeout=10) as c:
        while True:
            r = c.get(
                f"/streams/{STREAM}/{len(ids)}/forward/500?embed=body", headers={"Accept": "application/json"}
            )
            if r.status_code == 404:
                return ids
            r.raise_for_status()
            entries = sorted(r.json()["entries"], key=lambda e: e["eventNumber"])
            ids += [e["eventId"] for e in entries]
            if len(entries) < 500:
                return ids


def writer_positions(local: LocalCluster, context: ssl.SSLContext) -> set[int]:
    positions = set()
    for node in local.info()["nodes"]:
        with httpx.Client(verify=context, timeout=5) as c:
            positions.add(c.get(f"{node['url']}/gossip").json()["members"][0]["writerCheckpoint"])
    return positions


def presented_fingerprint(url: str, context: ssl.SSLContext) -> str:
    host, port = httpx.URL(url).host, httpx.URL(url).port
    with (
        socket.create_connection((host, port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname=host) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    return x509.load_der_x509_certificate(der).fingerprint(hashes.SHA256()).hex()


@pytest.fixture
def local(tmp_path):
    cluster = LocalCluster(tmp_path / "cluster")
    cluster.up(nodes=3, extra={"ConnectionResetInterval": RESET_INTERVAL}, timeout=60, log=lambda *_: None)
    try:
        yield cluster
    finally:
        cluster.down(timeout=10, log=lambda *_: None)


def test_rolling_update_to_a_new_ca_keeps_acknowledged_writes(local):
    writer = Writer(local)
    writer.start()
    reloads: list[float] = []
    acknowledged_between: list[int] = []

    def after_reload(name: str, index: int) -> None:
        reloads.append(time.time())
        if index == 0:
            # the first node has the new CA: it and the others no longer trust each other
            wait_until(
                lambda: any(when.timestamp() > reloads[0] for when, _, _ in certificate_errors(local)),
                4 * RESET_INTERVAL + 10,
                "a certificate chain error after the first reload",
            )
            count = writer.count()
            # the two nodes still on the old CA are a majority: writes go on
            wait_until(
                lambda: writer.count() >= count + 5, 20, "acknowledged writes while one node is updated"
            )
            acknowledged_between.append(writer.count() - count)

    try:
        wait_until(lambda: writer.count() >= 5, 20, "acknowledged writes before the update")
        report = rotate_cluster(local.data_dir, timeout=60, after_reload=after_reload, log=lambda *_: None)
        talking_at = time.time()
        count = writer.count()
        wait_until(lambda: writer.count() >= count + 10, 30, "acknowledged writes after the update")
        # watch for two more connection resets: no certificate error may appear any more
        wait_until(lambda: time.time() >= talking_at + 2 * RESET_INTERVAL, 10, "two more connection resets")
    finally:
        writer.stop.set()
        writer.join(10)

    print(
        f"reload order {report.order}; {len(writer.acknowledged)} writes acknowledged; "
        f"all nodes talked again {report.talking_again_after:.1f} s after the last reload"
    )
    assert len(reloads) == 3 and report.order[-1] != report.order[0]
    errors = certificate_errors(local)
    between = [e for e in errors if reloads[0] < e[0].timestamp() < reloads[-1]]
    assert between, "no certificate chain error between the first and the last reload"
    print(
        f"{len(between)} certificate chain errors between the first and the last reload, e.g. {between[0][1:]}"
    )
    late = [e for e in errors if e[0].timestamp() > talking_at]
    assert not late, f"certificate chain errors after every node talks again: {late[:3]}"
    assert acknowledged_between and acknowledged_between[0] >= 5

    new_ca = ssl.create_default_context(cafile=str(report.generation / "ca" / "ca.crt"))
    # every node presents its new certificate to a client that trusts only the new CA
    for node in local.info()["nodes"]:
        expected = x509.load_pem_x509_certificate(
            (report.generation / node["name"] / "node.crt").read_bytes()
        )
        assert presented_fingerprint(node["url"], new_ca) == expected.fingerprint(hashes.SHA256()).hex()
    # cluster.json's CA link follows the rotation
    assert os.path.realpath(local.info()["ca"]) == str(report.generation / "ca" / "ca.crt")
    wait_until(lambda: len(writer_positions(local, new_ca)) == 1, 30, "every node at the same position")
    acknowledged = [event_id for _, event_id in writer.acknowledged]
    missing: dict[str, int] = {}

    def every_node_shows_every_acknowledged_event() -> bool:
        # a follower that was still syncing when the leader answered shows a write once its sync
        # and the leader's next commit message are in: wait for that (bounded), never for less
        missing.clear()
        for node in local.info()["nodes"]:
            ids = read_ids(node["url"], new_ca)
            assert len(ids) == len(set(ids)), f"an event appears twice on {node['name']}"
            if lost := set(acknowledged) - set(ids):
                missing[node["name"]] = len(lost)
        return not missing

    wait_until(
        every_node_shows_every_acknowledged_event,
        30,
        f"every node showing all {len(acknowledged)} acknowledged events",
        detail=lambda: f"missing by node: {missing}",
    )

    # every node-to-node path took the new certificates: each follower forwards the auto-scavenge
    # calls to the leader (they kept the old trusted root for good before the one peer client)
    def forwards_everywhere() -> bool:
        with httpx.Client(verify=new_ca, auth=("admin", "changeit"), timeout=10) as c:
            answers = [c.get(f"{node['url']}/auto-scavenge/status") for node in local.info()["nodes"]]
        return all(a.status_code == 200 for a in answers) or print(
            [(a.status_code, a.text[:120]) for a in answers]
        )

    wait_until(forwards_everywhere, 30, "every node answering GET /auto-scavenge/status with 200")


def test_sighup_reload_and_a_failed_one_on_a_node_process(tmp_path):
    """A single-node process: SIGHUP with the key missing keeps the old certificate (a fresh handshake
    shows it), SIGHUP after repointing the links serves the new one; then `evdb certs rotate`."""
    from evdb.cli import main
    from evdb.tls.rotate import renew_ca, renew_node

    local = LocalCluster(tmp_path / "single")
    local.up(nodes=1, timeout=60, log=lambda *_: None)
    try:
        node = local.info()["nodes"][0]
        certs = local.data_dir / "certs"
        links = certs / "node1"
        old = os.path.realpath(links / "node.crt")
        ca_cert, ca_key = renew_ca(certs / "ca" / "ca.crt", tmp_path / "next" / "ca")
        new_cert, new_key = renew_node(old, ca_cert, ca_key, tmp_path / "next" / "node1")
        context = trusted_cas(local.data_dir)
        context.load_verify_locations(cafile=str(ca_cert))

        def fingerprint(path) -> str:
            certificate = x509.load_pem_x509_certificate(Path(path).read_bytes())
            return certificate.fingerprint(hashes.SHA256()).hex()

        def last_reload():
            with httpx.Client(verify=context, auth=("admin", "changeit"), timeout=5) as c:
                return c.get(f"{node['url']}/admin/certificates").json()["lastReload"]

        repoint_link(links / "ca", tmp_path / "next" / "ca")
        repoint_link(links / "node.crt", new_cert)
        repoint_link(links / "node.key", tmp_path / "next" / "node1" / "missing.key")
        os.kill(node["pid"], signal.SIGHUP)
        failed = wait_until(last_reload, 20, "the SIGHUP reload to finish")
        assert failed["trigger"] == "SIGHUP" and failed["result"] == "Failed"
        assert "node.key: the node private key file does not exist" in failed["error"]
        assert presented_fingerprint(node["url"], context) == fingerprint(old)

        repoint_link(links / "node.key", new_key)
        os.kill(node["pid"], signal.SIGHUP)
        done = wait_until(
            lambda: (r := last_reload()) and r["result"] == "Success" and r, 20, "a successful reload"
        )
        assert done["certificateChanged"] is True
        assert presented_fingerprint(node["url"], context) == fingerprint(new_cert)
        # the cluster tool continues from whatever the links point at: the next generation replaces it
        repoint_link(certs / "ca", tmp_path / "next" / "ca")
        assert main(["certs", "rotate", "--cluster", str(local.data_dir), "--timeout", "30"]) == 0
        rotated = os.path.realpath(links / "node.crt")
        assert rotated.startswith(str(certs / "gen-2"))
        assert presented_fingerprint(node["url"], trusted_cas(local.data_dir)) == fingerprint(rotated)
    finally:
        local.down(timeout=10, log=lambda *_: None)
