"""StreamExistenceFilter: no false negatives, persistence, .chk never ahead of .dat, rebuild on damage."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import evdb.index.existence as existence_module
from evdb.index.existence import CHK_NAME, DAT_NAME, StreamExistenceFilter


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(names=st.lists(st.text(max_size=30), max_size=60), position=st.integers(0, 2**62))
def test_round_trip_has_no_false_negatives(tmp_path_factory, names, position):
    directory = str(tmp_path_factory.mktemp("sef"))
    f = StreamExistenceFilter.open(directory, capacity=1000)
    for name in names:
        f.add(name)
    f.flush(position)
    f.close()
    g = StreamExistenceFilter.open(directory, capacity=1000)
    assert g.checkpoint == position
    assert all(g.might_exist(name) for name in names)


def test_false_positives_stay_near_the_error_rate(tmp_path):
    f = StreamExistenceFilter.open(str(tmp_path), capacity=20_000, error_rate=0.01)
    for i in range(20_000):
        f.add(f"stream-{i}")
    assert sum(f.might_exist(f"other-{i}") for i in range(20_000)) < 20_000 * 0.02


def test_a_new_filter_and_memdb(tmp_path):
    f = StreamExistenceFilter.open(str(tmp_path / "stream-existence"), capacity=100)
    assert f.checkpoint == -1 and not f.might_exist("anything")
    memory = StreamExistenceFilter.open(None, capacity=100)
    memory.add("a")
    memory.flush(77)
    assert memory.checkpoint == 77 and memory.might_exist("a") and not memory.might_exist("b")


def test_flush_writes_dat_before_chk_so_chk_is_never_ahead(tmp_path, monkeypatch):
    f = StreamExistenceFilter.open(str(tmp_path), capacity=1000)
    f.add("first")
    f.flush(100)
    real = existence_module.write_durably

    def crash_on_chk(path, parts):
        if path.endswith(CHK_NAME):
            raise OSError("power cut")
        real(path, parts)

    monkeypatch.setattr(existence_module, "write_durably", crash_on_chk)
    f.add("second")
    with pytest.raises(OSError, match="power cut"):
        f.flush(200)
    g = StreamExistenceFilter.open(str(tmp_path), capacity=1000)
    assert g.checkpoint == 100  # the names after 100 are added again from the log
    assert g.might_exist("first") and g.might_exist("second")
    assert sorted(os.listdir(tmp_path)) == [CHK_NAME, DAT_NAME]


def test_flush_without_new_names_rewrites_only_the_checkpoint(tmp_path):
    f = StreamExistenceFilter.open(str(tmp_path), capacity=1000)
    f.add("a")
    f.flush(10)
    dat = os.stat(tmp_path / DAT_NAME).st_ino
    f.flush(20)
    assert os.stat(tmp_path / DAT_NAME).st_ino == dat
    assert StreamExistenceFilter.open(str(tmp_path), capacity=1000).checkpoint == 20


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty", "capacity"])
def test_an_unusable_dat_is_rebuilt_with_a_warning(tmp_path, caplog, damage):
    f = StreamExistenceFilter.open(str(tmp_path), capacity=1000)
    f.add("a")
    f.flush(500)
    dat = tmp_path / DAT_NAME
    raw = bytearray(dat.read_bytes())
    capacity = 1000
    if damage == "flip":
        raw[60] ^= 0x01
    elif damage == "truncate":
        del raw[-5:]
    elif damage == "empty":
        raw = bytearray()
    else:
        capacity = 2000  # sized for another capacity: its bits would mean nothing
    dat.write_bytes(bytes(raw))
    g = StreamExistenceFilter.open(str(tmp_path), capacity=capacity)
    assert g.checkpoint == -1 and not g.might_exist("a")
    assert "rebuilding it from the log" in caplog.text and DAT_NAME in caplog.text


def test_a_missing_or_odd_chk_means_from_the_start(tmp_path):
    f = StreamExistenceFilter.open(str(tmp_path), capacity=1000)
    f.add("a")
    f.flush(500)
    (tmp_path / CHK_NAME).write_bytes(b"\1\2\3")
    assert StreamExistenceFilter.open(str(tmp_path), capacity=1000).checkpoint == -1
    os.unlink(tmp_path / CHK_NAME)
    g = StreamExistenceFilter.open(str(tmp_path), capacity=1000)
    assert g.checkpoint == -1 and g.might_exist("a")


def test_temporary_files_are_removed(tmp_path):
    (tmp_path / f"{DAT_NAME}.tmp").write_bytes(b"half")
    (tmp_path / f"{CHK_NAME}.tmp").write_bytes(b"half")
    (tmp_path / "other.tmp").write_bytes(b"not ours")
    StreamExistenceFilter.open(str(tmp_path), capacity=10)
    assert os.listdir(tmp_path) == ["other.tmp"]
