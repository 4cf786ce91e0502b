"""Flipped bytes in every kind of file the node keeps: it detects them at start or at read, names
the file, and never serves wrong data.

One database (several chunks, one of them scavenged; index tables on two levels; the existence
filter; the scavenge database) is built once; each case copies it, damages one file, opens it the
way the node does (chunks verified), and reads every stream back. The outcome must be one of:

- ``named at start``: opening fails with an error that names the damaged file;
- ``named at read``: opening works, reading the damaged part fails naming the file, and every
  other read returns exactly what was written;
- ``rebuilt``: the file is a cache (bloom filter, existence filter) and is rebuilt; every read is right;
- ``harmless``: the byte is not used (padding); every read is right.

A read that returns an event other than the one written fails the test, whatever the outcome.
Recovery for each is in docs/reliability.md.
"""

from __future__ import annotations

import logging
import os
import shutil
import sqlite3
import uuid

import pytest

from evdb.clock import SystemClock
from evdb.database import Database
from evdb.errors import EvdbError, StreamDeleted, StreamNotFound
from evdb.scavenge.service import ScavengeRequest, ScavengeService
from evdb.storage.chunk import HEADER_SIZE
from evdb.streams import NewEvent

OPTS = {"chunk_size": 64 * 1024, "existence_filter_capacity": 10_000, "max_memtable_entries": 50}
STREAMS = [f"order-{i}" for i in range(8)]


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    """(folder, expected {stream: [(id, data)]}) of a database with every kind of file."""
    root = tmp_path_factory.mktemp("pristine")
    db_dir = str(root / "db")
    expected: dict[str, list[tuple[str, bytes]]] = {s: [] for s in STREAMS}
    with Database.open(db_dir, **OPTS) as db:
        n = 0
        for round_ in range(60):
            for s in STREAMS:
                data = f'{{"n":{n},"round":{round_}}}'.encode() + b" " * 200
                eid = uuid.UUID(int=n + 1)
                db.append(s, [NewEvent("Placed", data, event_id=eid, is_json=True)])
                expected[s].append((str(eid), data))
                n += 1
        db.append("gone", [NewEvent("G", b"x" * 500) for _ in range(20)])
        db.delete_stream("gone", hard=True)
        service = ScavengeService(
            db,
            clock=SystemClock(),
            state_path=ScavengeService.state_path_for(os.path.join(db_dir, "index")),
            logger=logging.getLogger("test.corruption"),
        )
        service.start(ScavengeRequest())
        assert service.wait(60)
        assert service.last()[1] == "Success"
        service.close()
        for s in STREAMS[:2]:  # a few events after the scavenge: in the active chunk
            eid = uuid.UUID(int=10_000 + len(expected[s]))
            db.append(s, [NewEvent("Late", b"late-event", event_id=eid)])
            expected[s].append((str(eid), b"late-event"))
        db.index.wait_idle()
    return db_dir, expected


def _files(db_dir: str) -> dict[str, str]:
    """kind -> path of one file of each kind in the pristine folder."""
    index = os.path.join(db_dir, "index")
    chunks = sorted(n for n in os.listdir(db_dir) if n.startswith("chunk-"))
    tables = sorted(n for n in os.listdir(index) if len(n) == 36 and "." not in n)  # uuid-named PTables
    scavenged = [n for n in chunks if not n.endswith(".000000")]
    blooms = sorted(n for n in os.listdir(index) if n.endswith(".bloomfilter"))
    out = {
        "completed chunk": os.path.join(db_dir, chunks[0] if chunks[0] not in scavenged else chunks[1]),
        "active chunk": os.path.join(db_dir, chunks[-1]),
        "ptable": os.path.join(index, tables[0]),
        "indexmap": os.path.join(index, "indexmap"),
        "bloom filter": os.path.join(index, blooms[0]),
        "scavenging.db": os.path.join(index, "scavenging", "scavenging.db"),
    }
    if scavenged:
        out["scavenged chunk"] = os.path.join(db_dir, scavenged[0])
    for chk in ("writer", "chaser", "epoch", "truncate"):
        out[f"{chk}.chk"] = os.path.join(db_dir, f"{chk}.chk")
    return out


def test_the_pristine_database_has_every_kind_of_file(pristine):
    db_dir, _ = pristine
    kinds = _files(db_dir)
    assert "scavenged chunk" in kinds, os.listdir(db_dir)
    for kind, path in kinds.items():
        assert os.path.getsize(path) > 0, kind


def _read_all(db: Database, expected) -> list[str]:
    """Read every stream; returns the named errors met; fails on any wrong event."""
    errors = []
    for stream, events in expected.items():
        try:
            got = db.read_stream_forward(stream, 0, 10_000).events
        except (StreamNotFound, StreamDeleted) as exc:
            raise AssertionError(f"{stream} vanished: {exc}") from None
        except EvdbError as exc:
            errors.append(str(exc))
            continue
        pairs = [(str(e.id), bytes(e.data)) for e in got]
        assert pairs == events, (
            f"{stream}: wrong data served ({len(pairs)} events read, {len(events)} written)"
        )
        for number, (eid, data) in enumerate(events):
            try:
                record = db.read_event(stream, number)
            except EvdbError as exc:
                errors.append(str(exc))
                continue
            assert (str(record.id), bytes(record.data)) == (eid, data), f"{number}@{stream}: wrong event"
    try:
        list(db.iter_all(0))
    except EvdbError as exc:
        errors.append(str(exc))
    return errors


def _flip(path: str, offset: int, xor: int = 0xFF) -> None:
    size = os.path.getsize(path)
    offset = offset % size
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([byte ^ xor]))


def _damage_at(kind: str, path: str, where: str) -> None:
    size = os.path.getsize(path)
    if where == "truncate":
        with open(path, "r+b") as f:
            f.truncate(max(1, size // 2) if not kind.endswith(".chk") else 5)
        return
    offsets = {
        "head": 3,
        "middle": size // 2,
        "end": size - 2,
        "high": 7,  # a checkpoint's most significant byte: a huge or negative value
        "low": 0,  # a checkpoint's least significant byte: a small shift
        "record": HEADER_SIZE + 10,  # inside the first record after a chunk's header
    }
    _flip(path, offsets[where])


CASES = [
    ("completed chunk", "head"),
    ("completed chunk", "middle"),
    ("completed chunk", "end"),
    ("completed chunk", "truncate"),
    ("scavenged chunk", "head"),
    ("scavenged chunk", "middle"),
    ("scavenged chunk", "end"),
    ("active chunk", "head"),
    ("active chunk", "record"),  # the first record of the active chunk
    ("ptable", "head"),
    ("ptable", "middle"),
    ("ptable", "end"),
    ("ptable", "truncate"),
    ("indexmap", "head"),
    ("indexmap", "middle"),
    ("indexmap", "truncate"),
    ("bloom filter", "middle"),
    ("bloom filter", "truncate"),
    ("writer.chk", "high"),
    ("writer.chk", "low"),
    ("writer.chk", "truncate"),
    ("chaser.chk", "high"),
    ("chaser.chk", "low"),
    ("chaser.chk", "truncate"),
    ("epoch.chk", "high"),
    ("truncate.chk", "high"),
    ("truncate.chk", "low"),
    ("scavenging.db", "head"),
    ("scavenging.db", "middle"),
    ("scavenging.db", "truncate"),
]

#: outcomes seen, reported by the last test of the module (and copied to docs/reliability.md)
OUTCOMES: dict[tuple[str, str], str] = {}


def _open_and_read(db_dir: str, expected, damaged: str, *, verify: bool = True) -> str:
    name = os.path.basename(damaged)
    try:
        db = Database.open(db_dir, verify=verify, **OPTS)
    except EvdbError as exc:
        assert name in str(exc), f"the error does not name {name}: {exc}"
        return "named at start"
    try:
        errors = _read_all(db, expected)
        if errors:
            assert all(name in e for e in errors), f"errors that do not name {name}: {errors}"
            return "named at read"
        return "read right"
    finally:
        db.close()


def _scavenge_state(db_dir: str, damaged: str) -> str:
    """The scavenge database: checked when the service opens it or when a scavenge runs."""
    with Database.open(db_dir, **OPTS) as db:
        try:
            service = ScavengeService(
                db,
                clock=SystemClock(),
                state_path=ScavengeService.state_path_for(os.path.join(db_dir, "index")),
                logger=logging.getLogger("test.corruption"),
            )
        except (EvdbError, sqlite3.DatabaseError) as exc:
            assert "scavenging.db" in str(exc), f"the error does not name scavenging.db: {exc!r}"
            return "named at start"
        try:
            service.start(ScavengeRequest())
            assert service.wait(60)
            result = service.last()[1]
            progress = service.last_progress()
        finally:
            service.close()
        if result == "Success":
            return "read right"
        assert result == "Errored"
        assert "scavenging.db" in (progress.error or ""), (
            f"the scavenge error does not name the file: {progress.error}"
        )
        return "named at scavenge"


PARAMS = [pytest.param(k, w, id=f"{k}-{w}") for k, w in CASES]


@pytest.mark.parametrize(("kind", "where"), PARAMS)
def test_damage_is_named_and_no_wrong_data_is_served(pristine, tmp_path, kind, where):
    db_dir, expected = pristine
    copy = str(tmp_path / "db")
    shutil.copytree(db_dir, copy)
    damaged = _files(copy)[kind]
    _damage_at(kind, damaged, where)
    if kind == "scavenging.db":
        outcome = _scavenge_state(copy, damaged)
    else:
        outcome = _open_and_read(copy, expected, damaged)
        if outcome == "read right" and kind in ("bloom filter",):
            outcome = "rebuilt"
    OUTCOMES[(kind, where)] = outcome


@pytest.mark.parametrize("kind", ["completed chunk", "scavenged chunk"])
def test_with_chunk_verification_off_damage_is_named_at_read(pristine, tmp_path, kind):
    """SkipDbVerify: a damaged record is still never served; the read names the chunk."""
    db_dir, expected = pristine
    copy = str(tmp_path / "db")
    shutil.copytree(db_dir, copy)
    damaged = _files(copy)[kind]
    _flip(damaged, os.path.getsize(damaged) // 3)
    outcome = _open_and_read(copy, expected, damaged, verify=False)
    assert outcome in ("named at read", "read right")
    OUTCOMES[(kind, "middle, SkipDbVerify")] = outcome


def test_outcomes_table(pristine):
    """Runs last: prints the outcome of each case (the table in docs/reliability.md)."""
    for (kind, where), outcome in sorted(OUTCOMES.items()):
        print(f"| {kind} | {where} | {outcome} |")
    assert all(o in ("named at start", "named at read", "rebuilt", "read right", "named at scavenge")
               for o in OUTCOMES.values())  # fmt: skip


# -- recovery, as docs/reliability.md describes it ----------------------------------------------------
def _remove_index_files(db_dir: str) -> None:
    """Index rebuild: indexmap, tables and their sidecars go (the scavenge state stays)."""
    index = os.path.join(db_dir, "index")
    for name in os.listdir(index):
        if name != "scavenging":
            path = os.path.join(index, name)
            shutil.rmtree(path) if os.path.isdir(path) else os.unlink(path)


RECOVERIES = [
    ("completed chunk", "middle", "restore the backup"),
    ("scavenged chunk", "head", "restore the backup"),
    ("active chunk", "record", "restore the backup"),
    ("ptable", "middle", "rebuild the index"),
    ("indexmap", "head", "rebuild the index"),
    ("writer.chk", "truncate", "delete the checkpoint"),
    ("chaser.chk", "truncate", "delete the checkpoint"),
    ("truncate.chk", "high", "delete the checkpoint"),
    ("scavenging.db", "head", "reset the scavenge state"),
]


@pytest.mark.parametrize(
    ("kind", "where", "recovery"), RECOVERIES, ids=[f"{k}-{r}" for k, _, r in RECOVERIES]
)
def test_the_documented_recovery_gives_back_every_event(pristine, tmp_path, kind, where, recovery):
    from evdb.backup import restore_backup, run_backup

    db_dir, expected = pristine
    backup = str(tmp_path / "backup")
    run_backup(db_dir, os.path.join(db_dir, "index"), backup)
    copy = str(tmp_path / "db")
    shutil.copytree(db_dir, copy)
    damaged = _files(copy)[kind]
    _damage_at(kind, damaged, where)
    if recovery == "restore the backup":
        restore_backup(backup, copy, overwrite=True)
    elif recovery == "rebuild the index":
        _remove_index_files(copy)
    elif recovery == "delete the checkpoint":
        os.unlink(damaged)
    else:
        shutil.rmtree(os.path.dirname(damaged))
    with Database.open(copy, **OPTS) as db:
        assert _read_all(db, expected) == []
    if recovery == "reset the scavenge state":
        assert _scavenge_state(copy, damaged) == "read right"  # a scavenge runs from scratch
