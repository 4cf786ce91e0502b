"""MemTable against a model: ordered and colliding streams, one-stream batches, bulk copies, filtering."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from index_model import STREAM_HASHES, IndexModel, batches

from evdb.index.memtable import MemTable


def answers(table: MemTable, h: int, n: int | None) -> tuple[list, list, list]:
    forward = list(table.iter_forward(h, 0 if n is None else n) or [])
    backward = list(table.iter_backward(h, n) or [])
    return forward, backward, table.get(h, 0 if n is None else n)


@settings(max_examples=80, deadline=None)
@given(ops=batches, probe=st.one_of(st.none(), st.integers(-1, 12)))
def test_matches_a_model(ops, probe):
    table, model = MemTable(), IndexModel()
    for streams in ops:
        table.add(*model.batch(streams))
    for h in set(STREAM_HASHES) | {1}:
        n = 0 if probe is None else probe
        forward, backward, got = answers(table, h, probe)
        assert forward == model.forward(h, n)
        assert backward == model.backward(h, probe)
        assert got == sorted(model.get(h, n))
    assert len(table) == model.count() and table.last_position == (model.position if ops else -1)


@settings(max_examples=40, deadline=None)
@given(ops=batches, modulus=st.integers(2, 4))
def test_arrays_and_filtered_keep_log_order(ops, modulus):
    table, model = MemTable(), IndexModel()
    for streams in ops:
        table.add(*model.batch(streams))
    positions = table.arrays()[2]
    assert positions.tolist() == sorted(positions.tolist())
    filtered, dropped = table.filtered(lambda h, n, p: (p // 10) % modulus != 0)
    kept = [p for p in positions.tolist() if (p // 10) % modulus != 0]
    assert dropped == len(positions) - len(kept)
    if filtered is None:
        assert not dropped
    else:
        assert filtered.arrays()[2].tolist() == kept and filtered.last_position == table.last_position
        for h in set(STREAM_HASHES):
            assert list(filtered.iter_forward(h, 0) or []) == [e for e in model.forward(h) if e[1] in kept]


def test_one_stream_batches_take_the_fast_path_and_stay_ordered():
    table = MemTable()
    table.add([(5, n, n * 10) for n in range(100)], 1000)
    table.add([(5, n, 1000 + n) for n in range(100, 103)], 2000)
    assert next(table.iter_backward(5, None)) == (102, 1102)
    assert list(table.iter_forward(5, 101) or []) == [(101, 1101), (102, 1102)]
    table.add([(5, 3, 3000)], 3001)  # a colliding stream's event 3: now out of order
    assert list(table.iter_backward(5, 4) or [])[:2] == [(3, 3000), (3, 30)]


def test_a_bad_value_leaves_the_memtable_unchanged():
    table = MemTable()
    table.add([(1, 0, 0)], 1)
    with pytest.raises(OverflowError):
        table.add([(2, 0, 10), (2**64, 1, 20)], 30)
    with pytest.raises(OverflowError):
        table.add([(2, 0, 10), (3, 2**63, 20)], 30)
    assert len(table) == 1 and table.last_position == 1
    assert [a.tolist() for a in table.arrays()] == [[1], [0], [0]]


def test_arrays_do_not_pin_the_live_columns():
    """A reader's numpy copy must not stop the writer's arrays from growing."""
    table = MemTable()
    table.add([(1, 0, 0)], 1)
    hashes, _, _ = table.arrays()
    table.add([(1, n, n) for n in range(1, 10_000)], 10_000)
    assert hashes.tolist() == [1] and len(table) == 10_000
    assert np.array_equal(table.arrays(5, 8)[1], [5, 6, 7])
