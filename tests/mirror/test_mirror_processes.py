"""``evdb mirror`` as a real process between two real nodes: kill -9 at random points under load.

The secondary must end up holding exactly the primary's events (user streams and their metadata
streams), in ``$all`` order, with the same event ids, types, data and metadata bytes, none twice,
including a soft-deleted stream, a recreated one, a tombstone and metadata.
"""

from __future__ import annotations

import difflib
import json
import random
import threading
import uuid

import httpx
from mirror_helpers import (
    MirrorProcess,
    mirror_until_caught_up,
    new_events,
    stop_mirror_after,
    wait_until,
    write_deleted_and_recreated,
)

from evdb.mirror.state import Checkpoint, MirrorPaths, read_status

MAX = 2**63 - 1


def user_events(entries: list[dict]) -> list[dict]:
    """The events a mirror copies: user streams and their metastreams."""
    out = []
    for e in entries:
        stream = e["streamId"]
        original = stream[2:] if stream.startswith("$$") else stream
        if not original.startswith("$"):
            out.append(e)
    return out


def shape(e: dict) -> tuple:
    tombstone = e["eventNumber"] == MAX  # a tombstone's id is the node's own
    return (
        e["streamId"],
        e["eventNumber"],
        e["eventType"],
        e["isJson"],
        e["dataBase64"],
        e["metaDataBase64"],
        None if tombstone else e["eventId"],
    )


class Load:
    """Appends from a thread until stopped: many streams, batches, metadata, deletes, a tombstone."""

    def __init__(self, node, seed: int) -> None:
        self.node = node
        self.random = random.Random(seed)
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.count = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        rnd = self.random
        try:
            with httpx.Client(base_url=self.node.url, auth=("admin", "changeit"), timeout=30) as c:
                step = 0
                while not self.stop.wait(0.004):  # paced: a steady load, not a flood
                    step += 1
                    stream = f"load-{rnd.randrange(12)}"
                    events = new_events(rnd.choice((1, 1, 1, 2, 3)), step=step)
                    if rnd.random() < 0.1:  # a non-JSON event with binary data
                        c.post(
                            f"/streams/{stream}",
                            content=bytes(rnd.randrange(256) for _ in range(16)),
                            headers={
                                "Content-Type": "application/octet-stream",
                                "Kurrent-EventType": "Binary",
                                "Kurrent-EventId": str(uuid.uuid4()),
                            },
                        ).raise_for_status()
                        self.count += 1
                    r = c.post(
                        f"/streams/{stream}",
                        json=events,
                        headers={"Content-Type": "application/vnd.kurrent.events+json"},
                    )
                    assert r.status_code == 201, r.text
                    self.count += len(events)
                    if step % 40 == 0:
                        meta = {"$maxCount": 1000 + step, "owner": f"team-{step}"}
                        assert c.post(f"/streams/{stream}/metadata", json=meta).status_code == 201
        except BaseException as exc:  # reported by the test
            self.error = exc

    def __enter__(self) -> Load:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(30)


def test_mirror_killed_at_random_points_copies_every_event_once_in_order(nodes, tmp_path):
    primary = nodes("primary")
    secondary = nodes("secondary")
    # history before the mirror starts: metadata, a soft delete, a recreate, a tombstone, binary data
    primary.append("orders-1", new_events(5))
    primary.client.post("/streams/orders-1/metadata", json={"$maxAge": 86400, "tenant": "acme"})
    primary.append("gone-soft", new_events(3))
    assert primary.client.delete("/streams/gone-soft").status_code == 204
    write_deleted_and_recreated(primary)
    for i in range(20):
        primary.append(f"bulk-{i % 7}", new_events(50, bulk=i))

    checkpoint = tmp_path / "mirror" / "checkpoint.json"
    paths = MirrorPaths.of(checkpoint)
    rnd = random.Random(15)
    positions = []
    with Load(primary, seed=15) as load:
        for round_ in range(6):
            delay = rnd.uniform(0.05, 0.8)  # a random moment to kill it at
            graceful = round_ == 3  # a graceful stop saves the checkpoint
            positions.append(
                stop_mirror_after(
                    primary, secondary, checkpoint, delay, graceful=graceful, wait_for_status=True
                )
            )
    assert load.error is None, load.error
    # more deletes and metadata while the mirror is down, then let it finish
    assert primary.client.delete("/streams/load-3").status_code == 204
    assert primary.client.post("/streams/load-4/metadata", json={"$tb": 2, "note": "cut"}).status_code == 201
    r = primary.client.delete("/streams/load-5", headers={"Kurrent-HardDelete": "true"})
    assert r.status_code == 204
    assert positions == sorted(positions), positions
    assert positions[-1] > 0

    head = mirror_until_caught_up(primary, secondary, checkpoint)

    source = user_events(primary.read_all())
    copied = user_events(secondary.read_all())
    assert load.count > 100
    ours = [shape(e) for e in source]
    theirs = [shape(e) for e in copied]
    # the one event the secondary wrote itself: $$recreated's new $tb, when the append recreated it
    if len(ours) != len(theirs):
        matcher = difflib.SequenceMatcher(a=ours, b=theirs, autojunk=False)
        changes = [
            (op, ours[i1:i2], theirs[j1:j2]) for op, i1, i2, j1, j2 in matcher.get_opcodes() if op != "equal"
        ]
        raise AssertionError(f"{len(ours)} events on the primary, {len(theirs)} on the secondary: {changes}")
    differ = [i for i, (a, b) in enumerate(zip(ours, theirs, strict=True)) if a != b]
    assert [ours[i][0] for i in differ] == ["$$recreated"], [(ours[i], theirs[i]) for i in differ]
    assert ours[differ[0]][:6] == theirs[differ[0]][:6]  # same number, type and data; its own id
    ids = [e["eventId"] for e in copied if e["eventNumber"] != MAX]
    assert len(ids) == len(set(ids)), "an event was copied twice"
    # the secondary answers reads like the primary: deleted, tombstoned, metadata
    assert secondary.client.get("/streams/gone-soft").status_code == 404
    assert secondary.client.get("/streams/gone-hard").status_code == 410
    assert secondary.client.get("/streams/load-5").status_code == 410
    assert secondary.client.get("/streams/load-3").status_code == 404
    meta = secondary.client.get("/streams/orders-1/metadata").json()
    assert meta == {"$maxAge": 86400, "tenant": "acme"}
    assert secondary.client.get("/streams/load-4/metadata").json() == {"$tb": 2, "note": "cut"}
    recreated = secondary.client.get("/streams/recreated/0/forward/10", params={"embed": "raw"}).json()
    assert [e["eventNumber"] for e in reversed(recreated["entries"])] == [2, 3]
    final = Checkpoint.load(paths.checkpoint)
    assert final is not None and final.position >= head


def test_failover_stops_the_mirror_records_the_position_and_refuses_a_restart(nodes, tmp_path):
    primary = nodes("primary")
    secondary = nodes("secondary")
    primary.append("accounts", new_events(20))
    checkpoint = tmp_path / "fo" / "checkpoint.json"
    paths = MirrorPaths.of(checkpoint)
    mirror = MirrorProcess(primary.url, secondary.url, checkpoint, "--metrics-port", "0")
    try:
        status = wait_until(
            lambda: (s := read_status(paths.status)) and s["caughtUp"] and s["metricsUrl"] and s,
            20,
            "the mirror to catch up",
        )
        metrics = httpx.get(status["metricsUrl"] + "/metrics").text
        assert "evdb_mirror_lag_bytes 0.0" in metrics
        assert "evdb_mirror_events_copied_total 20.0" in metrics
        assert httpx.get(status["metricsUrl"] + "/status").json()["eventsCopied"] == 20
        import subprocess
        import sys

        result = subprocess.run(
            [sys.executable, "-m", "evdb.cli", "mirror", "failover", "--checkpoint", str(checkpoint)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, result.stderr
        assert mirror.proc.wait(10) == 0  # stopped by failover (SIGTERM), cleanly
    finally:
        mirror.close()
    assert f"Stopping the mirror (pid {mirror.proc.pid})" in result.stdout
    assert "everything it holds was copied" in result.stdout
    assert f"Repoint every client from {primary.url} to {secondary.url}" in result.stdout
    saved = json.loads(checkpoint.read_text())
    assert saved["failover"]["position"] == saved["position"] == status["position"]
    assert read_status(paths.status)["state"] == "failed-over"
    again = MirrorProcess(primary.url, secondary.url, checkpoint)
    try:
        assert again.proc.wait(30) == 1
    finally:
        again.close()
    assert "was failed over" in again.output()
