"""The mirror in-process between two in-process nodes: replays from any checkpoint change nothing;
a secondary written by someone else stops the mirror; the pieces (plan, checkpoint, lock)."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import uuid

import httpx
import pytest

from evdb.mirror.mirror import (
    Endpoint,
    Mirror,
    MirrorError,
    MirrorSettings,
    is_primary_own_stream,
    plan_actions,
)
from evdb.mirror.state import Checkpoint, CheckpointError, MirrorLock, MirrorPaths
from evdb.node import Node
from evdb.options import load_options

ADMIN = ("admin", "changeit")
EVENTS = {"Content-Type": "application/vnd.kurrent.events+json"}
MAX = 2**63 - 1


def options(folder):
    return load_options(
        [
            "--mem-db",
            "--insecure",
            "--http-port",
            "0",
            "--stats-period-sec",
            "0",
            "--log",
            str(folder / "log"),
        ],
        {},
    )


@pytest.fixture
async def pair(tmp_path):
    async with (
        Node(options(tmp_path / "p"), name="primary") as primary,
        Node(options(tmp_path / "s"), name="secondary") as secondary,
        httpx.AsyncClient(base_url=primary.http_url, auth=ADMIN, timeout=30) as p,
        httpx.AsyncClient(base_url=secondary.http_url, auth=ADMIN, timeout=30) as s,
    ):
        yield primary, secondary, p, s


def events(n: int, **data) -> list[dict]:
    return [{"eventId": str(uuid.uuid4()), "eventType": "E", "data": {"i": i, **data}} for i in range(n)]


async def append(c: httpx.AsyncClient, stream: str, batch: list[dict], expected: int | None = None) -> None:
    headers = dict(EVENTS)
    if expected is not None:
        headers["Kurrent-ExpectedVersion"] = str(expected)
    r = await c.post(f"/streams/{stream}", json=batch, headers=headers)
    assert r.status_code == 201, r.text


async def history(c: httpx.AsyncClient) -> None:
    """Every kind of record a mirror follows."""
    await append(c, "a", events(3))
    await append(c, "b", events(1))
    await append(c, "a", events(2), expected=2)
    assert (await c.post("/streams/a/metadata", json={"$maxCount": 3, "k": "v"})).status_code == 201
    r = await c.post(
        "/streams/bin",
        content=b"\x00\xff\xfe raw",
        headers={
            "Content-Type": "application/octet-stream",
            "Kurrent-EventType": "Raw",
            "Kurrent-EventId": str(uuid.uuid4()),
        },
    )
    assert r.status_code == 201
    await append(c, "soft", events(2))
    assert (await c.delete("/streams/soft")).status_code == 204
    await append(c, "soft", events(1), expected=1)  # recreated: $$soft gets a new $tb
    assert (await c.delete("/streams/soft")).status_code == 204
    await append(c, "gone", events(2))
    assert (await c.delete("/streams/gone", headers={"Kurrent-HardDelete": "true"})).status_code == 204
    await append(c, "b", events(3), expected=0)
    assert (await c.post("/streams/b/metadata", json={"$tb": 2})).status_code == 201
    await append(c, "only-deleted", events(1))
    assert (await c.delete("/streams/only-deleted")).status_code == 204


async def all_events(c: httpx.AsyncClient) -> list[dict]:
    r = await c.get("/streams/%24all/0/forward/4096", params={"embed": "raw"})
    assert r.status_code == 200
    return [e for e in reversed(r.json()["entries"]) if not is_primary_own_stream(e["streamId"])]


def shape(e: dict) -> tuple:
    return (
        e["streamId"],
        e["eventNumber"],
        e["eventType"],
        e["isJson"],
        e["dataBase64"],
        e["metaDataBase64"],
    )


async def run_until_caught_up(mirror: Mirror, head: int) -> None:
    stop = asyncio.Event()
    task = asyncio.create_task(mirror.run(stop))
    try:
        async with asyncio.timeout(20):
            while not (mirror.position >= head and mirror.caught_up):
                if task.done():
                    task.result()
                    raise AssertionError("the mirror stopped")
                await asyncio.sleep(0.01)
    finally:
        stop.set()
        await task


def settings(primary: Node, secondary: Node, tmp_path, **extra) -> MirrorSettings:
    return MirrorSettings(
        source=Endpoint(primary.http_url),
        target=Endpoint(secondary.http_url),
        paths=MirrorPaths.of(tmp_path / "m" / "checkpoint.json"),
        status_line_seconds=0,
        **extra,
    )


async def test_replaying_from_every_earlier_checkpoint_writes_nothing_twice(pair, tmp_path):
    primary, secondary, p, s = pair
    await history(p)
    source = await all_events(p)
    head = source[-1]["position"]
    config = settings(primary, secondary, tmp_path)
    await run_until_caught_up(Mirror(config), head)
    copied = await all_events(s)
    assert [shape(e) for e in copied] == [shape(e) for e in source]
    # every id is the primary's, but the $$soft record the secondary wrote itself when "soft" was recreated
    mismatched = [
        (a["streamId"], a["eventNumber"])
        for a, b in zip(source, copied, strict=True)
        if a["eventId"] != b["eventId"]
    ]
    assert mismatched == [("$$soft", 1), ("gone", MAX)]
    binary = next(e for e in copied if e["streamId"] == "bin")
    assert base64.b64decode(binary["dataBase64"]) == b"\x00\xff\xfe raw" and binary["isJson"] is False
    # a crash can leave the checkpoint at any earlier event: replay from each, nothing changes
    for position in [-1] + [e["position"] for e in source]:
        cp = Checkpoint.load(config.paths.checkpoint)
        cp.position = position
        cp.save(config.paths.checkpoint)
        await run_until_caught_up(Mirror(config), head)
        assert [shape(e) for e in await all_events(s)] == [shape(e) for e in source], position
    assert (await s.get("/streams/soft")).status_code == 404
    assert (await s.get("/streams/gone")).status_code == 410
    assert (await s.get("/streams/a/metadata")).json() == {"$maxCount": 3, "k": "v"}
    page = (await s.get("/streams/b/0/forward/10")).json()
    assert sorted(e["eventNumber"] for e in page["entries"]) == [2, 3]


async def test_a_secondary_written_by_someone_else_stops_the_mirror(pair, tmp_path):
    primary, secondary, p, s = pair
    await append(p, "clash", events(2))
    await append(s, "clash", events(1))  # a foreign event 0
    head = (await all_events(p))[-1]["position"]
    mirror = Mirror(settings(primary, secondary, tmp_path))
    with pytest.raises(MirrorError, match="is at version 0, but the primary's event 0"):
        await run_until_caught_up(mirror, head)
    status = json.loads(mirror.paths.status.read_text())
    assert status["state"] == "failed" and "something other than this mirror" in status["lastError"]
    saved = Checkpoint.load(mirror.paths.checkpoint)  # only the system events before it are behind
    assert saved.events_copied == 0 and saved.position < (await all_events(p))[0]["position"]


async def test_wrong_credentials_on_the_secondary_stop_the_mirror(pair, tmp_path):
    primary, secondary, p, _ = pair
    await append(p, "x", events(1))
    config = settings(primary, secondary, tmp_path)
    config.target = Endpoint(secondary.http_url, "admin", "wrong")
    with pytest.raises(MirrorError, match="refused the credentials"):
        await run_until_caught_up(Mirror(config), 0)


def test_plan_groups_consecutive_events_of_a_stream_and_skips_system_streams():
    def e(stream, number, position):
        return {
            "streamId": stream,
            "eventNumber": number,
            "position": position,
            "dataBase64": "",
            "metaDataBase64": "",
        }

    items = [
        e("$stats-1", 0, 1),
        e("a", 0, 2),
        e("a", 1, 3),
        e("$users", 4, 4),
        e("a", 2, 5),
        e("$$a", 0, 6),
        e("$$$users", 0, 7),
        e("b", 7, 8),
        e("b", MAX, 9),
        e("$epochs", 1, 10),
    ]
    plan = plan_actions(items)
    assert [
        (a.kind, a.stream, [x["eventNumber"] for x in a.events], a.last["position"], a.skipped) for a in plan
    ] == [
        ("skip", "", [], 1, 1),
        ("append", "a", [0, 1, 2], 5, 1),
        ("append", "$$a", [0], 7, 1),
        ("append", "b", [7], 8, 0),
        ("tombstone", "b", [], 9, 0),
        ("skip", "", [], 10, 1),
    ]
    assert is_primary_own_stream("$$$scavenges") and not is_primary_own_stream("$$orders")


def test_checkpoint_round_trip_errors_and_lock(tmp_path):
    paths = MirrorPaths.of(tmp_path / "cp.json")
    assert paths.lock.name == "cp.lock" and paths.status.name == "cp.status.json"
    assert Checkpoint.load(paths.checkpoint) is None
    Checkpoint("http://a", "http://b", 42, 7).save(paths.checkpoint)
    loaded = Checkpoint.load(paths.checkpoint)
    assert (loaded.source, loaded.target, loaded.position, loaded.events_copied) == (
        "http://a",
        "http://b",
        42,
        7,
    )
    assert not list(tmp_path.glob("*.tmp"))
    paths.checkpoint.write_text("{not json")
    with pytest.raises(CheckpointError, match="is not a mirror checkpoint"):
        Checkpoint.load(paths.checkpoint)
    lock = MirrorLock(paths.lock)
    lock.acquire()
    try:
        assert MirrorLock(paths.lock).holder() == os.getpid()
        with pytest.raises(CheckpointError, match=f"another mirror \\(pid {os.getpid()}\\)"):
            MirrorLock(paths.lock).acquire()
    finally:
        lock.release()
    assert MirrorLock(paths.lock).holder() is None


async def test_a_checkpoint_of_another_pair_is_refused(pair, tmp_path):
    primary, secondary, _, _ = pair
    config = settings(primary, secondary, tmp_path)
    Checkpoint("http://elsewhere:1", secondary.http_url, 10).save(config.paths.checkpoint)
    with pytest.raises(CheckpointError, match="belongs to the mirror http://elsewhere:1"):
        await Mirror(config).run(asyncio.Event())


async def test_start_from_copies_the_events_from_that_position_on(pair, tmp_path):
    """A secondary seeded from a backup already holds what precedes the backup's chaser position."""
    primary, secondary, p, s = pair
    await append(p, "before", events(3))
    await append(p, "after", events(2))
    source = await all_events(p)
    first_after = next(e for e in source if e["streamId"] == "after")
    config = settings(primary, secondary, tmp_path, start_from=first_after["position"])
    await run_until_caught_up(Mirror(config), source[-1]["position"])
    copied = await all_events(s)
    assert [(e["streamId"], e["eventNumber"], e["eventId"]) for e in copied] == [
        (e["streamId"], e["eventNumber"], e["eventId"]) for e in source if e["streamId"] == "after"
    ]


async def test_raw_bytes_round_trip_over_http_and_bad_base64_is_a_400(pair):
    _, _, p, _ = pair
    raw = bytes(range(256))
    item = {
        "eventId": str(uuid.uuid4()),
        "eventType": "Raw",
        "dataBase64": base64.b64encode(raw).decode(),
        "metadataBase64": base64.b64encode(b'{ "m" : 1 }').decode(),
        "isJson": False,
    }
    await append(p, "raw", [item])
    entry = (await p.get("/streams/raw/0/forward/1", params={"embed": "raw"})).json()["entries"][0]
    assert base64.b64decode(entry["dataBase64"]) == raw
    assert base64.b64decode(entry["metaDataBase64"]) == b'{ "m" : 1 }'  # not re-serialised
    assert entry["isJson"] is False and "data" not in entry
    bad = {**item, "eventId": str(uuid.uuid4()), "dataBase64": "not base64!"}
    r = await p.post("/streams/raw", json=[bad], headers=EVENTS)
    assert r.status_code == 400 and "'dataBase64' must be base64 text" in r.text


async def test_once_stopped_no_later_step_runs_so_the_position_never_skips_one(tmp_path):
    """A stop between two batches (say at a caught-up mark) must not let the second batch run:
    its position would pass the first batch's steps that were not done."""
    config = MirrorSettings(Endpoint("http://p"), Endpoint("http://s"), MirrorPaths.of(tmp_path / "cp.json"))
    mirror = Mirror(config)
    done = []
    stop = asyncio.Event()

    async def fake_append(target, stream, batch):
        done.append((stream, [e["eventNumber"] for e in batch]))
        stop.set()  # SIGTERM arrives during the first append

    mirror.secondary.append = fake_append

    def e(stream, number, position):
        return {"streamId": stream, "eventNumber": number, "position": position, "eventId": "x"}

    await mirror._apply(None, [e("a", 0, 10), e("b", 0, 20)], stop)
    await mirror._apply(None, [e("c", 0, 30)], stop)
    assert done == [("a", [0])] and mirror.position == 10
