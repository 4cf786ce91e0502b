"""``evdb mirror --parallel N``: the plan of segments, appends N streams at a time, a failure or a stop
never moving the position past a step not done, and replays from any checkpoint changing nothing."""

from __future__ import annotations

import asyncio
from collections import defaultdict

import pytest
from test_mirror_replay import (  # noqa: F401 - pair is a fixture
    MAX,
    all_events,
    history,
    pair,
    run_until_caught_up,
    settings,
    shape,
)

from evdb.mirror.mirror import Endpoint, Mirror, MirrorError, MirrorSettings, plan_actions, plan_segments
from evdb.mirror.state import Checkpoint, MirrorPaths


def e(stream: str, number: int, position: int) -> dict:
    return {"streamId": stream, "eventNumber": number, "position": position, "eventId": f"{stream}/{number}"}


def per_stream(entries: list[dict]) -> dict[str, list[tuple]]:
    """Each stream's events in order: what --parallel keeps (not the order across streams)."""
    streams: dict[str, list[tuple]] = defaultdict(list)
    for entry in entries:
        streams[entry["streamId"]].append(shape(entry))
    return dict(streams)


def test_segments_regroup_streams_between_barriers_and_end_at_the_last_event():
    items = [
        e("a", 0, 10),
        e("b", 0, 20),
        e("$stats-x", 0, 25),  # skipped
        e("a", 1, 30),
        e("b", 1, 40),
        e("$$a", 0, 50),  # metadata: a barrier
        e("a", 2, 60),
        e("c", 0, 70),
        e("c", MAX, 80),  # tombstone: a barrier
        e("$users", 3, 90),  # skipped, after the tombstone
    ]
    segments = plan_segments(plan_actions(items))
    described = [
        [(s.kind, s.stream, [x["eventNumber"] for x in s.events], s.last["position"]) for s in g]
        for g in segments
    ]
    assert described == [
        [("append", "a", [0, 1], 30), ("append", "b", [0, 1], 40), ("skip", "", [], 40)],
        [("append", "$$a", [0], 50)],
        [("append", "a", [2], 60), ("append", "c", [0], 70), ("skip", "", [], 70)],
        [("tombstone", "c", [], 80)],
        [("skip", "", [], 90)],
    ]
    assert [sum(s.skipped for s in g) for g in segments] == [1, 0, 0, 0, 1]
    # a stream's events of a segment are split where batch_bytes says, still in order
    small = plan_segments(plan_actions([e("a", n, n) for n in range(4)]), batch_bytes=150)
    assert [[x["eventNumber"] for x in s.events] for s in small[0][:-1]] == [[0, 1], [2, 3]]


def config(tmp_path, parallel: int) -> MirrorSettings:
    return MirrorSettings(
        Endpoint("http://p"), Endpoint("http://s"), MirrorPaths.of(tmp_path / "cp.json"), parallel=parallel
    )


async def test_appends_run_parallel_streams_at_a_time_each_stream_in_order(tmp_path):
    mirror = Mirror(config(tmp_path, 4))
    in_flight, most, done = 0, 0, defaultdict(list)

    async def fake_append(target, stream, batch):
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        for _ in range(3):
            await asyncio.sleep(0)
        done[stream].extend(x["eventNumber"] for x in batch)
        in_flight -= 1

    mirror.secondary.append = fake_append
    items = [e(f"s{n % 10}", n // 10, n) for n in range(100)]
    await mirror._apply(None, items, asyncio.Event())
    await mirror._drain()
    assert most == 4
    assert done == {f"s{k}": list(range(10)) for k in range(10)}
    assert mirror.position == 99 and mirror.events_copied == 100 and mirror.appends == 10


async def test_a_failed_append_leaves_the_position_before_its_segment_and_stops_the_others(tmp_path):
    mirror = Mirror(config(tmp_path, 4))

    async def fake_append(target, stream, batch):
        if stream == "bad":
            raise MirrorError("refused")
        await asyncio.sleep(0)

    mirror.secondary.append = fake_append
    items = [e("a", 0, 10), e("$$a", 0, 20), e("b", 0, 30), e("bad", 0, 40), e("c", 0, 50)]
    await mirror._apply(None, items, asyncio.Event())  # started: the failure is seen as they end
    with pytest.raises(MirrorError, match="refused"):
        await mirror._drain()
    assert not mirror._segments and not mirror._tails  # every other append of the segment stopped
    assert mirror.position == 20  # the metadata barrier was done, nothing of the failed segment counts
    assert mirror.events_copied == 2


async def test_once_stopped_the_segment_in_progress_ends_and_no_later_one_runs(tmp_path):
    mirror = Mirror(config(tmp_path, 4))
    stop = asyncio.Event()
    done = []

    async def fake_append(target, stream, batch):
        done.append(stream)
        stop.set()  # SIGTERM during the first segment

    mirror.secondary.append = fake_append
    await mirror._apply(None, [e("a", 0, 10), e("b", 0, 20), e("$$a", 0, 30), e("c", 0, 40)], stop)
    await mirror._apply(None, [e("d", 0, 50)], stop)
    assert sorted(done) == ["a", "b"] and mirror.position == 20


async def test_parallel_replays_from_every_earlier_checkpoint_write_nothing_twice(pair, tmp_path):  # noqa: F811
    primary, secondary, p, s = pair
    await history(p)
    source = await all_events(p)
    head = source[-1]["position"]
    cfg = settings(primary, secondary, tmp_path, parallel=4)
    await run_until_caught_up(Mirror(cfg), head)
    expected = per_stream(source)
    assert per_stream(await all_events(s)) == expected
    for position in [-1] + [x["position"] for x in source]:
        cp = Checkpoint.load(cfg.paths.checkpoint)
        assert cp is not None
        cp.position = position
        cp.save(cfg.paths.checkpoint)
        await run_until_caught_up(Mirror(cfg), head)
        assert per_stream(await all_events(s)) == expected, position
    assert (await s.get("/streams/soft")).status_code == 404
    assert (await s.get("/streams/gone")).status_code == 410
    assert (await s.get("/streams/a/metadata")).json() == {"$maxCount": 3, "k": "v"}


async def test_later_segments_go_ahead_but_a_stream_waits_for_its_own_earlier_append(tmp_path):
    mirror = Mirror(config(tmp_path, 4))
    release = asyncio.Event()
    log = []

    async def fake_append(target, stream, batch):
        number = batch[0]["eventNumber"]
        log.append(("start", stream, number))
        if (stream, number) == ("a", 0):
            await release.wait()
        log.append(("end", stream, number))

    mirror.secondary.append = fake_append
    await mirror._apply(None, [e("a", 0, 10), e("b", 0, 20)], asyncio.Event())
    await mirror._apply(None, [e("a", 1, 30), e("c", 0, 40)], asyncio.Event())
    for _ in range(10):
        await asyncio.sleep(0)
    await mirror._settle()
    assert ("end", "c", 0) in log and ("end", "b", 0) in log  # not held up by a's slow append
    assert ("start", "a", 1) not in log  # a's order is kept
    assert mirror.position == -1  # and the position waits for it: nothing before it may be missing
    release.set()
    await mirror._drain()
    assert log.index(("end", "a", 0)) < log.index(("start", "a", 1))
    assert mirror.position == 40 and mirror.events_copied == 4


async def test_a_batch_of_skipped_events_moves_the_position_at_once(tmp_path):
    mirror = Mirror(config(tmp_path, 4))
    await mirror._apply(None, [e("$stats-x", 0, 10), e("$users", 1, 20)], asyncio.Event())
    assert mirror.position == 20 and mirror.events_skipped == 2 and not mirror._segments
    await mirror._drain()  # nothing under way: returns at once


async def test_a_primary_with_only_its_own_system_events_is_caught_up(pair, tmp_path):  # noqa: F811
    primary, secondary, p, _ = pair
    r = await p.get("/streams/%24all/head/backward/1", headers={"Accept": "application/json"})
    head = r.json()["entries"][0]["position"]
    mirror = Mirror(settings(primary, secondary, tmp_path, parallel=8))
    await run_until_caught_up(mirror, head)
    assert mirror.events_copied == 0 and mirror.events_skipped > 0
