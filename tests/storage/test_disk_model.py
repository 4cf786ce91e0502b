"""The power-loss disk model itself: synced data always survives, unsynced data may not, folder
changes survive only once their folder is synced, and one seed gives one result."""

from __future__ import annotations

import hashlib
import os
import random

import pytest

from evdb.storage.disk import OsDisk, current, use_disk
from evdb.storage.disk_model import SECTOR_SIZE, DiskModel, PowerCut


def _read(path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _folder_digest(folder) -> dict[str, str]:
    return {n: hashlib.sha256(_read(os.path.join(folder, n))).hexdigest() for n in sorted(os.listdir(folder))}


def _work(model: DiskModel, folder: str) -> None:
    """A little of everything: synced and unsynced writes, a truncation, a durable and a pending rename."""
    a = model.open(os.path.join(folder, "a"), os.O_RDWR | os.O_CREAT, 0o644)
    model.pwrite(a, b"A" * 3000, 0)
    model.fsync(a)
    model.fsync_dir(folder)
    model.pwrite(a, b"B" * 1500, 700)  # unsynced, spans 4 sectors
    model.ftruncate(a, 2500)
    b = model.open(os.path.join(folder, "b.tmp"), os.O_RDWR | os.O_CREAT, 0o644)
    model.pwrite(b, b"C" * 100, 0)
    model.fsync(b)
    model.rename(os.path.join(folder, "b.tmp"), os.path.join(folder, "b"))
    os.close(a)
    os.close(b)


def test_the_same_seed_gives_the_same_files(tmp_path):
    digests = []
    for run in range(2):
        folder = tmp_path / f"run{run}"
        folder.mkdir()
        model = DiskModel(str(tmp_path / f"scratch{run}"))
        _work(model, str(folder))
        model.power_loss(random.Random(42))
        digests.append(_folder_digest(folder))
    assert digests[0] == digests[1]


def test_synced_data_survives_and_unsynced_data_is_kept_dropped_or_torn(tmp_path):
    outcomes = set()
    for seed in range(60):
        folder = tmp_path / f"s{seed}"
        folder.mkdir()
        path = folder / "f"
        model = DiskModel(str(tmp_path / f"scratch{seed}"))
        fd = model.open(str(path), os.O_RDWR | os.O_CREAT, 0o644)
        model.pwrite(fd, b"o" * 4 * SECTOR_SIZE, 0)
        model.fsync(fd)
        model.fsync_dir(str(folder))
        model.pwrite(fd, b"n" * 3 * SECTOR_SIZE, 100)  # touches sectors 0-3 of the file
        os.close(fd)
        model.power_loss(random.Random(seed))
        data = _read(path)
        assert len(data) == 4 * SECTOR_SIZE
        new = data[100 : 100 + 3 * SECTOR_SIZE]
        # the new bytes that survived are a prefix ending on a sector boundary of the file
        kept = len(new) - len(new.lstrip(b"n"))
        assert new[kept:] == b"o" * (len(new) - kept)
        assert kept in (0, len(new)) or (100 + kept) % SECTOR_SIZE == 0
        assert data[:100] == b"o" * 100 and data[100 + 3 * SECTOR_SIZE :] == b"o" * (SECTOR_SIZE - 100)
        outcomes.add("kept" if kept == len(new) else "dropped" if kept == 0 else "torn")
    assert outcomes == {"kept", "dropped", "torn"}


def test_folder_changes_survive_only_once_the_folder_is_synced(tmp_path):
    seen = set()
    for seed in range(40):
        folder = tmp_path / f"s{seed}"
        folder.mkdir()
        model = DiskModel(str(tmp_path / f"scratch{seed}"))
        old = model.open(str(folder / "target"), os.O_RDWR | os.O_CREAT, 0o644)
        model.pwrite(old, b"old", 0)
        model.fsync(old)
        gone = model.open(str(folder / "gone"), os.O_RDWR | os.O_CREAT, 0o644)
        model.pwrite(gone, b"still here", 0)
        model.fsync(gone)
        model.fsync_dir(str(folder))  # durable: target = "old", gone = "still here"
        new = model.open(str(folder / "new.tmp"), os.O_RDWR | os.O_CREAT, 0o644)
        model.pwrite(new, b"new", 0)
        model.fsync(new)
        model.rename(str(folder / "new.tmp"), str(folder / "target"))
        model.unlink(str(folder / "gone"))
        for fd in (old, gone, new):
            os.close(fd)
        model.power_loss(random.Random(seed))
        state = {n: _read(folder / n) for n in sorted(os.listdir(folder))}
        # the pending changes survive as a prefix of their order: create, rename, unlink
        assert state in (
            {"gone": b"still here", "target": b"old"},
            {"gone": b"still here", "new.tmp": b"new", "target": b"old"},
            {"gone": b"still here", "target": b"new"},
            {"target": b"new"},
        ), state
        seen.add(tuple(sorted(state.items())))
        assert os.listdir(tmp_path / f"scratch{seed}") == []  # no stashed copy is left behind
    assert len(seen) == 4


def test_a_cut_fails_that_call_and_every_later_one_then_power_loss_switches_the_disk_off(tmp_path):
    model = DiskModel(str(tmp_path / "scratch"))
    fd = model.open(str(tmp_path / "f"), os.O_RDWR | os.O_CREAT, 0o644)  # call 1 (a create)
    model.cut_after(2)
    model.pwrite(fd, b"x", 0)  # call 2 of the model, 1 after arming
    with pytest.raises(PowerCut):
        model.fdatasync(fd)
    with pytest.raises(PowerCut):
        model.pwrite(fd, b"y", 1)
    with pytest.raises(OSError):  # an OSError: the storage code treats it as an I/O error
        model.fsync_dir(str(tmp_path))
    model.power_loss(random.Random(1))
    assert model.pwrite(fd, b"zzz", 0) == 3  # off: dropped silently
    model.fsync(fd)
    with pytest.raises(PowerCut):
        model.open(str(tmp_path / "other"), os.O_RDWR | os.O_CREAT, 0o644)
    os.close(fd)
    # the create was never made durable by a folder sync: the file may be gone; if not, "x" or nothing
    assert not os.path.exists(tmp_path / "f") or _read(tmp_path / "f") in (b"", b"x")
    assert not os.path.exists(tmp_path / "other")


def test_use_disk_swaps_the_process_disk_and_puts_it_back(tmp_path):
    from evdb.storage import disk

    model = DiskModel(str(tmp_path / "scratch"))
    assert isinstance(current, OsDisk)
    with use_disk(model):
        assert disk.current is model
    assert isinstance(disk.current, OsDisk)
