"""A follower behind the leader by completed chunks takes them as whole chunk files (the only way to
copy a scavenged chunk, whose removed records cannot be streamed), then streams records again.

In process: two databases, driven with the same pieces the replication stream uses
(``ChunkLogReplication.replication_chunk``, ``chunk_file_header``/``chunk_file_pieces`` on the leader,
``ChunkFileReceiver`` on the follower). Then one real local cluster: a stopped follower comes back
after every running node scavenged."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import signal
import time
import uuid
from pathlib import Path

import pytest
from waiting import wait_until

from evdb.cluster.launcher import LocalCluster
from evdb.cluster.receiving import ChunkFileReceiver
from evdb.cluster.replica import ChunkLogReplication
from evdb.cluster.sending import chunk_file_header, chunk_file_pieces
from evdb.database import Database
from evdb.errors import CorruptedFile, EvdbError, StorageError
from evdb.scavenge.service import ScavengeRequest, ScavengeService
from evdb.storage import log as storage_log
from evdb.storage.chunk import parse_chunk_file_name
from evdb.streams import NewEvent

CHUNK = 16 * 1024


# -- helpers -------------------------------------------------------------------------------------------
class Leader:
    """A database with its scavenge service (as tests/scavenge build them)."""

    def __init__(self, path: Path, clock, merging: bool = False) -> None:
        self.db = Database.open(str(path), clock=clock, chunk_size=CHUNK, max_memtable_entries=64)
        self.service = ScavengeService(
            self.db,
            state_path=ScavengeService.state_path_for(str(path / "index")),
            logger=logging.getLogger("test.chunkcatchup"),
            merging=merging,
            clock=clock,
        )

    def scavenge(self) -> None:
        scavenge_id = self.service.start(ScavengeRequest())
        assert self.service.wait(60)
        assert self.service.last() == (scavenge_id, "Success")

    def close(self) -> None:
        self.service.close()
        self.db.close()


def ev(i: int, size: int = 120) -> NewEvent:
    return NewEvent("E", json.dumps({"i": i, "pad": "x" * size}).encode(), is_json=True)


STREAMS = [f"{kind}-{k}" for k in range(4) for kind in ("keep", "count", "tomb", "soft")]


def fill(db: Database, rounds: int = 4, first: int = 0) -> None:
    """Several chunks of events, about half of them removable by a scavenge (after
    :func:`delete_some`, the soft-deleted streams are recreated and the tombstoned ones left alone)."""
    for k in range(first, first + rounds):
        db.append(f"keep-{k % 4}", [ev(i) for i in range(8)])
        db.append(f"count-{k % 4}", [ev(i) for i in range(10)])
        db.set_stream_metadata(f"count-{k % 4}", {"$maxCount": 3})
        if not db.stream_state(f"tomb-{k % 4}").tombstoned:
            db.append(f"tomb-{k % 4}", [ev(i) for i in range(12)])
        db.append(f"soft-{k % 4}", [ev(i) for i in range(12)])


def delete_some(db: Database) -> None:
    for k in range(4):
        db.delete_stream(f"tomb-{k}", hard=True)
        db.delete_stream(f"soft-{k}")


def complete_chunk(db: Database) -> None:
    db.call_in_writer(lambda ctx: ctx.complete_active_chunk())


def copy_records(leader: Database, follower: Database, until: int) -> int:
    """Stream records (the pre-existing path) until the follower's log reaches ``until``."""
    position = follower.committed_position
    while position < until:
        position, frames, completed = ChunkLogReplication(leader).read_raw(position, 300)
        if completed is not None:
            ChunkLogReplication(follower).complete_replicated_chunk(completed)
            continue
        frames = frames[: until - position] if position + len(frames) > until else frames
        assert frames, "until must be a record boundary"
        ChunkLogReplication(follower).apply_replicated(position, frames)
        position += len(frames)
    return position


def send_file(leader_chunk, follower: Database, tamper=None, header_change=None) -> int:
    """One chunk file over the replication protocol's messages (pieces smaller than the file)."""
    header = json.loads(json.dumps(chunk_file_header(leader_chunk)))  # as it goes over the wire
    if header_change:
        header["chunkFile"].update(header_change)
    receiver = ChunkFileReceiver(follower, header)
    try:
        for piece in chunk_file_pieces(leader_chunk, piece_size=5000):
            receiver.add(tamper(piece) if tamper else piece)
        return receiver.install()
    finally:
        receiver.abort()


def catch_up(leader: Database, follower: Database) -> list[tuple[int, int, bool, int]]:
    """What the replication stream does: whole files for completed chunks the leader chooses, records
    otherwise. Returns (start number, end number, scavenged, follower position) of each file sent."""
    files = []
    position = follower.committed_position
    while True:
        chunk = ChunkLogReplication(leader).replication_chunk(position)
        if chunk is not None:
            files.append((chunk.start_number, chunk.end_number, chunk.is_scavenged, position))
            position = send_file(chunk, follower)
            assert position == chunk.end_position == follower.committed_position
            continue
        position, frames, completed = ChunkLogReplication(leader).read_raw(position, 700)
        if completed is not None:
            ChunkLogReplication(follower).complete_replicated_chunk(completed)
            continue
        if not frames:
            assert position == leader.committed_position == follower.committed_position
            return files
        ChunkLogReplication(follower).apply_replicated(position, frames)
        position += len(frames)


def outcome(call):
    try:
        slice_ = call()
    except EvdbError as exc:
        return type(exc).__name__
    events = getattr(slice_, "events", None)
    if events is None:
        return slice_
    return [(e.stream, e.event_number, e.log_position, e.event_id, e.data, e.metadata) for e in events], {
        k: v for k, v in vars_of(slice_).items() if k != "events"
    }


def vars_of(obj) -> dict:
    return {name: getattr(obj, name) for name in obj.__slots__} if hasattr(obj, "__slots__") else vars(obj)


def reads(db: Database) -> dict:
    """Everything a client can read: $all both ways, and every stream (and metastream) both ways."""
    out: dict = {
        "$all": outcome(lambda: db.read_all_forward(0, 100_000)),
        "$all-back": outcome(lambda: db.read_all_backward(db.committed_position, 100_000)),
    }
    names = set(STREAMS) | {e.stream for e in db.iter_all(0)}
    for name in sorted(names):
        out[name] = outcome(lambda n=name: db.read_stream_forward(n, 0, 10_000))
        out[name + " back"] = outcome(lambda n=name: db.read_stream_backward(n, None, 10_000))
        out[name + " last"] = outcome(lambda n=name: db.read_event(n, -1))
    return out


def chunk_files(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.iterdir()) if parse_chunk_file_name(p.name)}


def completed_chunk_bytes(db: Database) -> list[tuple[int, int, bytes]]:
    return [
        (c.start_number, c.end_number, bytes(c.buffer[: c.file_size]))
        for c in db.log.distinct_chunks()
        if c.is_completed
    ]


# -- in process ----------------------------------------------------------------------------------------
def test_a_fresh_follower_catches_up_through_scavenged_chunk_files(tmp_path, clock):
    leader = Leader(tmp_path / "leader", clock)
    follower = Database.open(str(tmp_path / "follower"), clock=clock, chunk_size=CHUNK)
    try:
        leader.db.write_epoch(1, uuid.uuid4())
        fill(leader.db, rounds=8)
        delete_some(leader.db)
        leader.scavenge()
        leader.db.write_epoch(2, uuid.uuid4())
        fill(leader.db, rounds=2, first=8)  # the active chunk: streamed as records
        assert any(c.is_scavenged for c in leader.db.log.distinct_chunks())
        with pytest.raises(StorageError, match="was scavenged"):
            ChunkLogReplication(leader.db).read_raw(0, 1000)  # why the whole files are needed

        files = catch_up(leader.db, follower)
        completed = [c for c in leader.db.log.distinct_chunks() if c.is_completed]
        assert [(s, e) for s, e, _, _ in files] == [(c.start_number, c.end_number) for c in completed]
        assert any(scavenged for _, _, scavenged, _ in files)
        assert reads(follower) == reads(leader.db)
        # the follower's completed chunks are the leader's files, byte for byte
        assert completed_chunk_bytes(follower) == completed_chunk_bytes(leader.db)
        assert follower.log.checkpoints.writer.value == follower.committed_position
        assert follower.log.checkpoints.chaser.value == follower.committed_position
        assert [e["epochId"] for e in follower.epochs()] == [e["epochId"] for e in leader.db.epochs()]
        assert not [p for p in os.listdir(tmp_path / "follower") if p.endswith(".tmp")]

        # in the middle of a completed chunk that was not scavenged: the rest comes as records
        fill(leader.db, rounds=3, first=10)
        assert leader.db.log.chunk_for(follower.committed_position).is_completed
        assert catch_up(leader.db, follower) == []
        # at the start of one: the whole file
        complete_chunk(leader.db)
        catch_up(leader.db, follower)
        start = follower.committed_position
        fill(leader.db, rounds=3, first=13)
        number = start // CHUNK
        assert catch_up(leader.db, follower) == [(number, number, False, start)]
        assert reads(follower) == reads(leader.db)
        theirs, ours = leader.db.log.chunk_by_number(number), follower.log.chunk_by_number(number)
        assert bytes(ours.buffer[: ours.file_size]) == bytes(theirs.buffer[: theirs.file_size])
        # and everything is still there after a restart
        follower.close()
        follower = Database.open(str(tmp_path / "follower"), clock=clock, chunk_size=CHUNK)
        assert reads(follower) == reads(leader.db)
        assert follower.log.checkpoints.epoch.value == leader.db.log.checkpoints.epoch.value
    finally:
        leader.close()
        follower.close()


def test_a_merged_chunk_replaces_a_followers_older_and_partial_copies(tmp_path, clock):
    """The follower has chunks 0.. (its own, unscavenged) and part of the next; the leader merged
    them into one file covering several chunk numbers: the follower takes that file instead."""
    leader = Leader(tmp_path / "leader", clock, merging=True)
    follower = Database.open(str(tmp_path / "follower"), clock=clock, chunk_size=CHUNK)
    try:
        leader.db.write_epoch(1, uuid.uuid4())
        fill(leader.db, rounds=6)
        # the follower gets two whole chunks and part of the third, record by record
        third = leader.db.log.chunk_by_number(2)
        assert third is not None
        middle = next(
            r.log_position for r in third.iter_records() if r.log_position > third.start_position + 4000
        )
        copy_records(leader.db, follower, middle)
        assert [c.is_completed for c in follower.log.distinct_chunks()] == [True, True, False]
        fill(leader.db, rounds=6, first=6)
        delete_some(leader.db)
        leader.scavenge()
        merged = leader.db.log.chunk_for(middle)
        assert merged.is_completed and merged.is_scavenged
        assert merged.start_number == 0 and merged.end_number >= 3  # one file for several chunks

        files = catch_up(leader.db, follower)
        assert files[0] == (0, merged.end_number, True, middle)
        assert reads(follower) == reads(leader.db)
        assert completed_chunk_bytes(follower) == completed_chunk_bytes(leader.db)
        # the follower's own versions of chunks 0..2 are gone from its folder
        names = chunk_files(tmp_path / "follower")
        assert not [n for n in names if parse_chunk_file_name(n)[0] in range(1, merged.end_number + 1)]
        installed = next(n for n in names if parse_chunk_file_name(n)[0] == 0)
        assert names[installed] == bytes(merged.buffer[: merged.file_size])
        follower.close()
        follower = Database.open(str(tmp_path / "follower"), clock=clock, chunk_size=CHUNK)
        assert reads(follower) == reads(leader.db)
    finally:
        leader.close()
        follower.close()


def test_a_follower_in_the_middle_of_a_chunk_the_leader_scavenged_takes_the_whole_file(tmp_path, clock):
    leader = Leader(tmp_path / "leader", clock)
    follower = Database.open(str(tmp_path / "follower"), clock=clock, chunk_size=CHUNK)
    try:
        leader.db.write_epoch(1, uuid.uuid4())
        fill(leader.db, rounds=1)
        middle = leader.db.committed_position
        copy_records(leader.db, follower, middle)  # part of chunk 0, still active on the follower
        assert follower.log.active_chunk.start_number == 0
        fill(leader.db, rounds=6, first=1)
        delete_some(leader.db)
        leader.scavenge()
        first = leader.db.log.chunk_by_number(0)
        assert first.is_scavenged and first.start_position < middle < first.data_end_position
        before = reads(follower)

        files = catch_up(leader.db, follower)
        assert files[0] == (0, 0, True, middle)
        assert reads(follower) == reads(leader.db) != before
        assert follower.log.chunk_by_number(0).is_scavenged
        names = chunk_files(tmp_path / "follower")
        assert "chunk-000000.000000" not in names  # the partial copy is gone
        assert names[f"chunk-000000.{first.version:06d}"] == bytes(first.buffer[: first.file_size])
    finally:
        leader.close()
        follower.close()


def merge(db: Database, first: int, last: int) -> None:
    """Merge completed chunks ``first``..``last`` into one file, as the scavenge's merge step does."""
    log = db.log
    builder = log.new_chunk_builder(first, last, temp_suffix=".merge.scavenge.tmp")
    for chunk in log.distinct_chunks()[first : last + 1]:
        builder.copy_from(chunk)
    new = builder.finish()
    with log.chunk_lock:
        log.switch_chunk(new)


def test_a_followers_own_merged_chunk_reaching_into_the_file_is_cut(tmp_path, clock):
    """The follower merged chunks 0-1 itself; the leader merged 1-2 and the follower is in chunk 2:
    the follower keeps chunk 0 (a new version of its merged file, cut at chunk 1) and takes 1-2."""
    leader = Leader(tmp_path / "leader", clock)
    follower = Database.open(str(tmp_path / "follower"), clock=clock, chunk_size=CHUNK)
    try:
        leader.db.write_epoch(1, uuid.uuid4())
        fill(leader.db, rounds=7)
        third = leader.db.log.chunk_by_number(2)
        middle = next(
            r.log_position for r in third.iter_records() if r.log_position > third.start_position + 4000
        )
        copy_records(leader.db, follower, middle)
        merge(follower, 0, 1)
        fill(leader.db, rounds=3, first=7)
        merge(leader.db, 1, 2)
        assert ChunkLogReplication(leader.db).replication_chunk(middle).start_number == 1
        before = reads(follower)

        files = catch_up(leader.db, follower)
        assert files[0] == (1, 2, True, middle)
        assert reads(follower) == reads(leader.db)
        first = follower.log.chunk_by_number(0)
        assert (first.start_number, first.end_number, first.file_version) == (0, 0, 2)
        assert sorted(chunk_files(tmp_path / "follower"))[:2] == [
            "chunk-000000.000002",
            "chunk-000001.000001",
        ]
        follower.close()
        follower = Database.open(str(tmp_path / "follower"), clock=clock, chunk_size=CHUNK)
        assert reads(follower) == reads(leader.db) != before
    finally:
        leader.close()
        follower.close()


def test_an_installed_file_is_named_above_the_followers_own_versions(tmp_path, clock):
    """The follower rewrote chunk 0 itself (version 1); the leader's merged file has version 1 in its
    header too: it is installed, exact bytes, as chunk-000000.000002, which wins at the next open."""
    leader = Leader(tmp_path / "leader", clock)
    follower = Database.open(str(tmp_path / "follower"), clock=clock, chunk_size=CHUNK)
    try:
        fill(leader.db, rounds=4)
        second = leader.db.log.chunk_by_number(1)
        middle = next(
            r.log_position for r in second.iter_records() if r.log_position > second.start_position + 4000
        )
        copy_records(leader.db, follower, middle)
        merge(follower, 0, 0)  # chunk-000000.000001 on the follower
        fill(leader.db, rounds=2, first=4)
        merge(leader.db, 0, 1)
        theirs = leader.db.log.chunk_by_number(0)
        assert theirs.version == 1

        assert catch_up(leader.db, follower)[0] == (0, 1, True, middle)
        names = chunk_files(tmp_path / "follower")
        assert names["chunk-000000.000002"] == bytes(theirs.buffer[: theirs.file_size])
        assert "chunk-000000.000001" not in names and "chunk-000001.000000" not in names
        ours = follower.log.chunk_by_number(0)
        assert (ours.version, ours.file_version) == (1, 2)
        assert reads(follower) == reads(leader.db)
        follower.close()
        follower = Database.open(str(tmp_path / "follower"), clock=clock, chunk_size=CHUNK)
        assert follower.log.chunk_by_number(1).file_name == "chunk-000000.000002"
        assert reads(follower) == reads(leader.db)
        builder = follower.log.new_chunk_builder(0, 1)
        builder.abort()
        assert builder.header.version == 3  # a later rewrite goes above both
    finally:
        leader.close()
        follower.close()


def test_a_corrupted_transfer_is_refused_then_the_retry_is_installed(tmp_path, clock):
    leader = Leader(tmp_path / "leader", clock)
    follower = Database.open(str(tmp_path / "follower"), clock=clock, chunk_size=CHUNK)
    try:
        fill(leader.db, rounds=4)
        delete_some(leader.db)
        leader.scavenge()
        chunk = ChunkLogReplication(leader.db).replication_chunk(0)
        assert chunk is not None and chunk.is_scavenged
        before_files = chunk_files(tmp_path / "follower")
        before_reads = reads(follower)

        def flip(offset_in_file):
            def tamper(piece: bytes) -> bytes:
                start = int.from_bytes(piece[:8], "little")
                if start <= offset_in_file < start + len(piece) - 8:
                    i = 8 + offset_in_file - start
                    return piece[:i] + bytes([piece[i] ^ 0x40]) + piece[i + 1 :]
                return piece

            return tamper

        # a flipped byte in the header, the records, and the footer's checksum
        for where in (30, chunk.file_size // 2, chunk.file_size - 3):
            with pytest.raises(CorruptedFile):
                send_file(chunk, follower, tamper=flip(where))
            assert follower.committed_position == 0
            assert chunk_files(tmp_path / "follower") == before_files  # nothing installed
            assert not [p for p in os.listdir(tmp_path / "follower") if p.endswith(".tmp")]
        # announced as other chunk numbers, or with another checksum
        with pytest.raises(CorruptedFile, match="announced"):
            send_file(chunk, follower, header_change={"endNumber": chunk.end_number + 1})
        with pytest.raises(CorruptedFile, match="announced"):
            send_file(chunk, follower, header_change={"checksum": "00" * 16})
        with pytest.raises(ValueError, match="does not follow"):
            send_file(chunk, follower, tamper=lambda p: p[:8] + p[9:])  # a piece lost a byte
        assert reads(follower) == before_reads
        assert follower.committed_position == 0

        # the retry (what the follower's next replication session gets) is installed
        assert send_file(chunk, follower) == chunk.end_position
        catch_up(leader.db, follower)
        assert reads(follower) == reads(leader.db)
    finally:
        leader.close()
        follower.close()


def test_a_crash_at_any_step_of_an_install_leaves_a_log_that_opens(tmp_path, clock, monkeypatch):
    """The follower's folder is copied at each step of the install (what a kill -9 there leaves):
    every copy opens, holding either the log from before the install or the one after it."""
    leader = Leader(tmp_path / "leader", clock, merging=True)
    follower_dir = tmp_path / "follower"
    follower = Database.open(str(follower_dir), clock=clock, chunk_size=CHUNK)
    try:
        leader.db.write_epoch(1, uuid.uuid4())
        fill(leader.db, rounds=3)
        middle = leader.db.committed_position
        copy_records(leader.db, follower, middle)
        fill(leader.db, rounds=6, first=3)
        delete_some(leader.db)
        leader.db.write_epoch(2, uuid.uuid4())  # an epoch inside the installed chunk
        leader.scavenge()
        chunk = ChunkLogReplication(leader.db).replication_chunk(middle)
        assert chunk is not None and chunk.is_scavenged and chunk.start_position < middle
        old_reads = reads(follower)

        snapshots: list[Path] = []

        def snapshot() -> None:
            target = tmp_path / f"crash-{len(snapshots)}"
            shutil.copytree(follower_dir, target)
            snapshots.append(target)

        real_fsync_dir = storage_log.fsync_dir

        def fsync_dir_then_crash(directory: str) -> None:
            real_fsync_dir(directory)
            snapshot()

        real_write = type(follower.log.checkpoints.writer).write

        def write_then_crash(self, value, *, flush=True):
            real_write(self, value, flush=flush)
            if self.path and self.path.startswith(str(follower_dir)):
                snapshot()

        monkeypatch.setattr(storage_log, "fsync_dir", fsync_dir_then_crash)
        monkeypatch.setattr(type(follower.log.checkpoints.writer), "write", write_then_crash)
        real_install = follower.log.install_chunk

        def install_after_snapshot(new, temp_path=None):
            snapshot()  # the received file is complete and fsynced under its temporary name
            return real_install(new, temp_path)

        monkeypatch.setattr(follower.log, "install_chunk", install_after_snapshot)
        end = send_file(chunk, follower)
        monkeypatch.undo()
        assert len(snapshots) >= 4
        new_reads = reads(follower)
        expected_epochs = [e["epochId"] for e in follower.epochs()]

        outcomes = []
        for path in snapshots:
            with Database.open(str(path), clock=clock, chunk_size=CHUNK) as db:
                outcomes.append(db.committed_position)
                assert db.committed_position in (middle, end), path.name
                if db.committed_position == middle:
                    assert reads(db) == old_reads, path.name
                else:
                    assert reads(db) == new_reads, path.name
                    assert [e["epochId"] for e in db.epochs()] == expected_epochs, path.name
                    assert db.log.checkpoints.epoch.value == follower.log.checkpoints.epoch.value
                assert not [p for p in os.listdir(path) if p.endswith(".tmp")]
        # before the rename the old log, from the rename on the new one
        assert outcomes[0] == middle and set(outcomes[1:]) == {end}, outcomes
        catch_up(leader.db, follower)
        assert reads(follower) == reads(leader.db)
    finally:
        leader.close()
        follower.close()


def test_an_in_memory_follower_takes_chunk_files_too(tmp_path, clock):
    leader = Leader(tmp_path / "leader", clock)
    follower = Database.open(None, clock=clock, chunk_size=CHUNK)
    try:
        fill(leader.db, rounds=5)
        delete_some(leader.db)
        leader.scavenge()
        files = catch_up(leader.db, follower)
        assert any(scavenged for _, _, scavenged, _ in files)
        assert reads(follower) == reads(leader.db)
    finally:
        leader.close()
        follower.close()


# -- two in-process nodes: the replication stream itself ---------------------------------------------------
def node_options(path: Path, *extra: str):
    from evdb.options import load_options

    return load_options(
        [
            "--db", str(path / "db"), "--log", str(path / "log"), "--insecure", "--http-port", "0",
            "--chunk-size", "65536", "--max-mem-table-size", "64", "--stats-period-sec", "0",
            "--gossip-interval-ms", "100", *extra,
        ],
        {},
    )  # fmt: skip


async def test_a_replica_refuses_a_corrupted_chunk_file_and_takes_it_again(tmp_path, clock, monkeypatch):
    """Over the real WebSocket: the first chunk file the leader sends arrives with a flipped byte; the
    replica refuses it (nothing installed), reconnects, takes the file again and serves the same reads."""
    import asyncio

    import evdb.cluster.sending as sending
    from evdb.cluster.wire import CHUNK_PIECE
    from evdb.node import Node

    real_pieces = sending.chunk_file_pieces
    corrupted: list[str] = []

    def pieces_with_one_flipped_byte(chunk, piece_size=CHUNK_PIECE):
        for i, piece in enumerate(real_pieces(chunk, piece_size)):
            if not corrupted and i == 0:
                corrupted.append(chunk.file_name)
                piece = piece[:500] + bytes([piece[500] ^ 1]) + piece[501:]
            yield piece

    monkeypatch.setattr(sending, "chunk_file_pieces", pieces_with_one_flipped_byte)
    async with Node(node_options(tmp_path / "leader"), clock=clock, name="leader") as leader:
        db = leader.db
        await asyncio.to_thread(fill, db, 20)
        await asyncio.to_thread(delete_some, db)
        await asyncio.to_thread(fill, db, 2, 20)
        scavenge_id = await asyncio.to_thread(leader.scavenge.start, ScavengeRequest())
        assert await asyncio.to_thread(leader.scavenge.wait, 60)
        assert leader.scavenge.last() == (scavenge_id, "Success")
        assert db.log.chunk_by_number(0).is_scavenged
        seed = f"127.0.0.1:{leader.port}"
        options = node_options(tmp_path / "replica", "--read-only-replica", "--gossip-seed", seed)
        async with Node(options, clock=clock, name="replica") as replica:
            deadline = time.monotonic() + 20
            while not (
                replica.cluster.state == "ReadOnlyReplica"
                and replica.db.committed_position == db.committed_position
            ):
                assert time.monotonic() < deadline, f"the replica is {replica.cluster.state}"
                await asyncio.sleep(0.05)
            assert corrupted == [db.log.chunk_by_number(0).file_name]
            assert reads(replica.db) == reads(db)
            theirs, ours = db.log.chunk_by_number(0), replica.db.log.chunk_by_number(0)
            assert bytes(ours.buffer[: ours.file_size]) == bytes(theirs.buffer[: theirs.file_size])
        text = node_log({"log_dir": str(tmp_path / "replica" / "log")})
        refused = text.index(f"Refused chunk file {corrupted[0]} (chunks 0-")
        assert "chunk checksum mismatch" in text[refused : refused + 400]
        assert text.index(f"Installed chunk file {corrupted[0]} (chunks 0-") > refused
        assert not [p for p in os.listdir(tmp_path / "replica" / "db") if p.endswith(".tmp")]


# -- a real cluster ------------------------------------------------------------------------------------
def read_stream(client, stream: str) -> tuple[int, list[str]]:
    """(status, event ids in event-number order) of a stream read through HTTP."""
    r = client.get(f"/streams/{stream}/0/forward/4096", headers={"Accept": "application/json"})
    if r.status_code != 200:
        return r.status_code, []
    entries = sorted(r.json()["entries"], key=lambda e: e["eventNumber"])
    return 200, [e["eventId"] for e in entries]


def read_all(client) -> list[tuple]:
    r = client.get("/streams/$all/head/backward/4096", headers={"Accept": "application/json"})
    r.raise_for_status()
    return [
        (e["eventId"], e["eventNumber"], e["streamId"], e.get("positionStreamId"))
        for e in r.json()["entries"]
    ]


def node_log(node: dict) -> str:
    return "".join(f.read_text() for f in sorted(Path(node["log_dir"]).rglob("log-*.json")))


@pytest.mark.slow
def test_a_stopped_follower_catches_up_after_every_running_node_scavenged(tmp_path):
    local = LocalCluster(tmp_path / "cluster")
    local.up(nodes=3, replicas=0, insecure=True, chunk_size="64KiB", timeout=60, log=lambda *_: None)
    try:
        nodes = {n["name"]: n for n in local.info()["nodes"]}

        def states() -> dict[str, str]:
            return {r["name"]: r["state"] for r in local.status()}

        def client(name: str):
            return local.client(nodes[name]["url"], timeout=30)

        leader = wait_until(
            lambda: next((n for n, s in states().items() if s == "Leader"), None), 30, "a leader"
        )
        follower = wait_until(
            lambda: next((n for n, s in states().items() if s == "Follower"), None), 30, "a follower"
        )
        os.kill(nodes[follower]["pid"], signal.SIGTERM)
        wait_until(lambda: states()[follower] == "Down", 30, "the follower to stop")

        # several chunks of events while it is down; half of the streams deleted, then scavenged
        streams = [f"{'gone' if k % 2 else 'keep'}-{k}" for k in range(12)]
        with client(leader) as c:
            for stream in streams:
                body = [
                    {"eventId": str(uuid.uuid4()), "eventType": "Filled", "data": {"i": i, "pad": "x" * 400}}
                    for i in range(50)
                ]
                r = c.post(
                    f"/streams/{stream}",
                    content=json.dumps(body),
                    headers={"Content-Type": "application/vnd.eventstore.events+json"},
                )
                assert r.status_code == 201, r.text
            for stream in streams[1::2]:
                r = c.delete(f"/streams/{stream}", headers={"Kurrent-HardDelete": "true"})
                assert r.status_code == 204, r.text
        for name in [n for n, s in states().items() if s != "Down"]:  # one node at a time
            with client(name) as c:
                r = c.post("/admin/scavenge", headers={"Accept": "application/json"})
                assert r.status_code == 200, r.text
                scavenge_id = r.json()["scavengeId"]

                def finished(c=c, scavenge_id=scavenge_id):
                    last = c.get("/admin/scavenge/last", headers={"Accept": "application/json"}).json()
                    return (
                        last["scavengeId"] == scavenge_id and last["scavengeResult"] != "InProgress" and last
                    )

                assert wait_until(finished, 30, f"the scavenge of {name}")["scavengeResult"] == "Success"

        local.start_node(follower)
        wait_until(lambda: states()[follower] == "Follower", 30, "the follower to catch up")
        with client(leader) as lc, client(follower) as fc:
            wait_until(lambda: read_all(fc) == read_all(lc), 30, "the same $all on both")
            for stream in streams:
                theirs, ours = read_stream(lc, stream), read_stream(fc, stream)
                assert ours == theirs, stream
                assert ours == ((410, []) if stream.startswith("gone") else (200, ours[1])) and (
                    stream.startswith("gone") or len(ours[1]) == 50
                )
        # the follower was in the middle of chunk 0, which the leader scavenged: it took whole files
        follower_log, leader_log = node_log(nodes[follower]), node_log(nodes[leader])
        assert re.search(
            r"Sending chunk file chunk-000000\.\d{6} to follower \S+ \(chunks 0-\d+, \d+ bytes, scavenged",
            leader_log,
        )
        assert re.search(
            r"Installed chunk file chunk-000000\.\d{6} \(chunks 0-\d+, \d+ bytes\) from the leader",
            follower_log,
        )
    finally:
        local.down(timeout=10, log=lambda *_: None)
