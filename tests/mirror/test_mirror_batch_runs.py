"""While catching up, the mirror does not split a stream's run of events between two batches: the
run at a batch's end waits for the next batch (the reader's next chunk may hold the rest of it)."""

from __future__ import annotations

import asyncio

from evdb.mirror.mirror import Endpoint, Mirror, MirrorSettings
from evdb.mirror.state import MirrorPaths


def e(stream: str, number: int, position: int) -> dict:
    return {"streamId": stream, "eventNumber": number, "position": position, "eventId": f"{stream}/{number}"}


def recording_mirror(tmp_path) -> tuple[Mirror, list[tuple[str, list[int]]]]:
    """A mirror whose appends are recorded as (stream, event numbers) instead of sent."""
    mirror = Mirror(
        MirrorSettings(Endpoint("http://p"), Endpoint("http://s"), MirrorPaths.of(tmp_path / "cp.json"))
    )
    appended: list[tuple[str, list[int]]] = []

    async def fake_append(target, stream, batch):
        appended.append((stream, [x["eventNumber"] for x in batch]))

    mirror.secondary.append = fake_append  # type: ignore[method-assign]
    return mirror, appended


async def test_while_catching_up_a_batch_trailing_run_waits_for_the_rest_of_it(tmp_path):
    mirror, appended = recording_mirror(tmp_path)
    stop = asyncio.Event()
    await mirror._take(None, [e("a", 0, 10), e("b", 0, 20), e("b", 1, 30)], stop)
    assert appended == [("a", [0])] and mirror.position == 10  # b's run is held back, not passed
    await mirror._take(None, [e("b", 2, 40), 40], stop)  # the rest of b's run, then caught up
    assert appended == [("a", [0]), ("b", [0, 1, 2])] and mirror.position == 40 and mirror.caught_up
    await mirror._take(None, [e("c", 0, 50), e("c", 1, 60)], stop)  # live: copied at once
    assert appended[-1] == ("c", [0, 1]) and mirror.position == 60


async def test_a_batch_of_one_run_or_of_skipped_events_is_not_held_back(tmp_path):
    mirror, appended = recording_mirror(tmp_path)
    await mirror._take(None, [e("a", 0, 10), e("a", 1, 20)], asyncio.Event())
    assert appended == [("a", [0, 1])] and mirror.position == 20
    await mirror._take(None, [e("a", 2, 30), e("$stats-x", 0, 40)], asyncio.Event())
    assert mirror.position == 40 and mirror.events_skipped == 1
