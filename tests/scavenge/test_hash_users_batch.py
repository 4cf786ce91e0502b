"""HashUsers.observe_all (one look-up query and one insert per chunk) gives what observing each
(hash, stream) in turn gave: the same table, collisions, changed streams and cache counts, with
repeated names, two names of one hash in one batch, and a cache small enough to evict within it."""

from __future__ import annotations

import random

import pytest

from evdb.scavenge.state import HashUsers, ScavengeState, StreamRow


def _state(tmp_path, name: str) -> ScavengeState:
    state = ScavengeState(str(tmp_path / name / "scavenging.db"))
    for stream in ("a", "b", "c", "d"):  # rows whose dirty flag a collision sets
        state.save_row(StreamRow(stream), dirty=False)
    return state


def _content(state: ScavengeState) -> tuple:
    return (
        sorted(state.execute("SELECT hash, stream FROM hash_users").fetchall()),
        sorted(state.execute("SELECT stream, hash FROM collisions").fetchall()),
        sorted(state.execute("SELECT stream, dirty FROM streams").fetchall()),
    )


@pytest.mark.parametrize("capacity", [2, 5, 100_000])
def test_observe_all_is_observe_one_at_a_time(tmp_path, capacity):
    rng = random.Random(capacity)
    # hashes shared by two names (collisions) and repeated names, within and across batches
    names = {1: "a", 2: "b", 3: "c", 4: "d", 5: "e", 6: "f"}
    batches = []
    for _ in range(6):
        batch = []
        for _ in range(rng.randint(1, 12)):
            h = rng.randint(1, 6)
            stream = names[h] if rng.random() < 0.8 else names[(h % 4) + 1]
            batch.append(((1 << 63) + h if h % 2 else h, stream))  # unsigned hashes above 2^63 too
        batches.append(batch)
    one, many = _state(tmp_path, "one"), _state(tmp_path, "many")
    try:
        singly, batched = HashUsers(one, capacity), HashUsers(many, capacity)
        for batch in batches:
            for h, stream in batch:
                singly.observe(h, stream)
            batched.observe_all(batch)
            assert _content(one) == _content(many)
        assert (singly.hits, singly.misses, singly.collisions) == (
            batched.hits,
            batched.misses,
            batched.collisions,
        )
        assert singly.collisions > 0
    finally:
        one.close()
        many.close()
