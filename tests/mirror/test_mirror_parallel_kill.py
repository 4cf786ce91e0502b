"""``evdb mirror --parallel 8`` as a real process: kill -9 at random points (mid-catch-up of a backlog
written while it was down, mid-segment, live) under a write load; the secondary must end up with each stream's events exactly as the primary
has them (same numbers, ids, types, data, metadata), none twice."""

from __future__ import annotations

import random
from collections import defaultdict

from mirror_helpers import mirror_until_caught_up, new_events, stop_mirror_after, write_deleted_and_recreated
from test_mirror_processes import MAX, Load, shape, user_events


def per_stream(entries: list[dict]) -> dict[str, list[tuple]]:
    streams: dict[str, list[tuple]] = defaultdict(list)
    for entry in entries:
        streams[entry["streamId"]].append(shape(entry))
    return dict(streams)


def test_parallel_mirror_killed_at_random_points_copies_each_stream_once_in_order(nodes, tmp_path):
    primary = nodes("primary")
    secondary = nodes("secondary")
    write_deleted_and_recreated(primary)

    checkpoint = tmp_path / "mirror" / "checkpoint.json"
    rnd = random.Random(24)
    positions = []
    with Load(primary, seed=24) as load:
        for round_ in range(6):
            for i in range(40):  # a backlog written while the mirror is down
                primary.append(f"bulk-{i % 23}", new_events(40, bulk=round_))
            delay = rnd.uniform(0.0, 0.3)  # a random moment to kill it at
            positions.append(stop_mirror_after(primary, secondary, checkpoint, delay, "--parallel", "8"))
    assert load.error is None, load.error
    assert primary.client.delete("/streams/load-3").status_code == 204
    assert positions == sorted(positions), positions

    mirror_until_caught_up(primary, secondary, checkpoint, "--parallel", "8")

    source = per_stream(user_events(primary.read_all()))
    copied = per_stream(user_events(secondary.read_all()))
    assert load.count > 100
    assert source.keys() == copied.keys()
    for stream, ours in source.items():
        theirs = copied[stream]
        if stream == "$$recreated":  # its new $tb: the secondary wrote it itself, with its own id
            assert [x[:6] for x in ours] == [x[:6] for x in theirs]
            continue
        assert ours == theirs, stream
    ids = [x[-1] for events in copied.values() for x in events if x[1] != MAX]
    assert len(ids) == len(set(ids)), "an event was copied twice"
    assert secondary.client.get("/streams/gone-hard").status_code == 410
    assert secondary.client.get("/streams/load-3").status_code == 404
