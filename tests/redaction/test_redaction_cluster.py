"""Redaction across a real local cluster (issue 20): after an event is redacted on every node, no file
of any node holds its plaintext, and a node that catches up afterwards receives only redacted bytes.

Three node processes started by the launcher (its demo licence, ``LicenseTrustedIssuers: demo``, plus
``EnableUnixSocket: true``); the event is redacted on each node by the ``evdb-redact`` command through
that node's own unix socket; then one follower's database folder is wiped and the follower catches up
from the leader again."""

from __future__ import annotations

import base64
import json
import os
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from waiting import wait_until

from evdb.cluster.launcher import LocalCluster
from evdb.storage.chunk import parse_chunk_file_name

pytestmark = pytest.mark.slow

STREAM = "customer-secret"
FILLERS = 160  # ~1 KiB each: the marker's event ends up in a completed 64 KiB chunk
EVENTS_JSON = "application/vnd.eventstore.events+json"
REDACT = str(Path(sys.executable).with_name("evdb-redact"))


def chunk_versions(db: str) -> dict[int, int]:
    """Chunk number -> version of the chunk files in a database folder."""
    return dict(filter(None, map(parse_chunk_file_name, os.listdir(db))))


def files_holding(folder: Path, needle: bytes) -> list[str]:
    """Every regular file under ``folder`` (read whole, as bytes) that contains ``needle``."""
    found = []
    for root, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            try:
                if not stat.S_ISREG(os.lstat(path).st_mode):
                    continue  # the redaction socket, symlinks
                with open(path, "rb") as f:
                    data = f.read()
            except FileNotFoundError:  # a temporary file the node removed meanwhile
                continue
            if needle in data:
                found.append(path)
    return found


def test_a_redacted_event_leaves_no_plaintext_on_any_node_nor_on_one_catching_up(tmp_path):
    marker = secrets.token_hex(16).encode()  # 32 characters found nowhere else
    local = LocalCluster(tmp_path / "c")  # short: the socket path stays well under the unix limit
    try:
        local.up(
            nodes=3,
            insecure=True,
            chunk_size="64KiB",
            extra={"EnableUnixSocket": True},
            timeout=60,
            log=lambda *_: None,
        )
        nodes = {n["name"]: n for n in local.info()["nodes"]}

        def status() -> dict[str, dict]:
            return {r["name"]: r for r in local.status()}

        def client(name: str):
            return local.client(nodes[name]["url"], timeout=30)

        leader_url = local.wait_for_leader(30)
        leader = next(name for name, n in nodes.items() if n["url"] == leader_url)

        # the marker's event first, then fillers so that its chunk is completed on every node
        with client(leader) as c:
            r = c.post(
                f"/streams/{STREAM}",
                content=json.dumps(
                    [
                        {
                            "eventId": str(uuid.uuid4()),
                            "eventType": "Card",
                            "data": {"number": marker.decode()},
                        },
                        {"eventId": str(uuid.uuid4()), "eventType": "Card", "data": {"number": "public"}},
                    ]
                ),
                headers={"Content-Type": EVENTS_JSON},
            )
            assert r.status_code == 201, r.text
            fillers = [
                {"eventId": str(uuid.uuid4()), "eventType": "Filler", "data": {"i": i, "pad": "x" * 1000}}
                for i in range(FILLERS)
            ]
            for batch in range(0, FILLERS, 20):  # an append must fit in one chunk
                r = c.post(
                    "/streams/filler",
                    content=json.dumps(fillers[batch : batch + 20]),
                    headers={"Content-Type": EVENTS_JSON},
                )
                assert r.status_code == 201, r.text
            original = c.get(f"/streams/{STREAM}/0", headers={"Accept": "application/octet-stream"})
            assert original.status_code == 200 and marker in original.content
            original_data = original.content

        def in_step() -> int | None:
            rows = status().values()
            writers = {r.get("writer") for r in rows}
            return writers.pop() if len(writers) == 1 and all(r["state"] != "Down" for r in rows) else None

        wait_until(in_step, 30, "every node at the leader's writer checkpoint")
        for name in nodes:  # every node holds the plaintext event before the redaction
            with client(name) as c:
                raw = c.get(f"/streams/{STREAM}/0", headers={"Accept": "application/octet-stream"})
                assert raw.status_code == 200 and raw.content == original_data, name
            assert files_holding(Path(nodes[name]["db"]), marker), name

        # redact it on every node, each through its own socket; its chunk gets a new version there
        versions_before = {name: chunk_versions(node["db"]) for name, node in nodes.items()}
        for name, node in nodes.items():
            done = subprocess.run(
                [REDACT, "--db", node["db"], "--events", f"0@{STREAM}"],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert done.returncode == 0, (name, done.stdout, done.stderr)
            assert f"Redacted 0@{STREAM}" in done.stdout, (name, done.stdout)
            assert chunk_versions(node["db"])[0] > versions_before[name][0], name

        def assert_redacted_over_http(name: str) -> None:
            with client(name) as c:
                entry = c.get(f"/streams/{STREAM}/0?embed=body", headers={"Accept": "application/json"})
                assert entry.status_code == 200, (name, entry.text)
                body = entry.json()
                assert body["isRedacted"] is True, (name, body)
                assert base64.b64decode(body["data"]) == b"\xff" * len(original_data), name
                raw = c.get(f"/streams/{STREAM}/0", headers={"Accept": "application/octet-stream"})
                assert raw.content == b"\xff" * len(original_data), name
                neighbour = c.get(f"/streams/{STREAM}/1?embed=body", headers={"Accept": "application/json"})
                assert neighbour.json()["isRedacted"] is False and neighbour.json()["data"] == {
                    "number": "public"
                }, name

        # no file of any node (database, index, checkpoints, logs, configuration) holds the plaintext
        for name in nodes:
            assert_redacted_over_http(name)
        for name, node in nodes.items():
            assert files_holding(Path(node["config"]).parent, marker) == [], name

        # a follower loses its whole database folder and catches up from the leader again
        follower = next(name for name, row in status().items() if row["state"] == "Follower")
        os.kill(nodes[follower]["pid"], signal.SIGTERM)
        wait_until(lambda: status()[follower]["state"] == "Down", 30, f"{follower} to stop")
        shutil.rmtree(nodes[follower]["db"])
        local.start_node(follower)
        wait_until(
            lambda: (
                (rows := status())[follower]["state"] == "Follower"
                and rows[follower]["writer"] == rows[leader]["writer"]
            ),
            40,
            f"{follower} to catch up with {leader}'s writer checkpoint",
        )
        with client(follower) as c:  # it did take the log: every filler is there
            r = c.get(f"/streams/filler/{FILLERS - 1}", headers={"Accept": "application/json"})
            assert r.status_code == 200, r.text
        # it took the leader's redacted version of the chunk (the file the redaction switched in)
        assert chunk_versions(nodes[follower]["db"])[0] == chunk_versions(nodes[leader]["db"])[0] > 0
        assert_redacted_over_http(follower)
        assert files_holding(Path(nodes[follower]["config"]).parent, marker) == []
    finally:
        if local.exists():  # every node started, even when the start-up itself failed
            local.down(timeout=10, log=lambda *_: None)
