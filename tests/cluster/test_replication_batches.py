"""A follower writes the replicated messages that arrived together under one sync and acknowledges
them once: the batch is the leader's log byte for byte (chunks, epochs, index), a bad message in a
batch keeps the whole messages before it and nothing of itself, and the simulated cluster batches."""

from __future__ import annotations

import uuid

import pytest

from evdb.cluster import sending, sim
from evdb.cluster.receiving import Inbox, records_batch_of
from evdb.cluster.replica import ChunkLogReplication
from evdb.cluster.transport import Message
from evdb.cluster.wire import RECORDS
from evdb.database import Database
from evdb.errors import StorageError
from tests.cluster.test_election_and_replication import events, leader_and_follower, log_content


def leader_messages(leader: Database, max_bytes: int) -> list[tuple[int, bytes] | int]:
    """What the leader's sender sends, in order: ``(position, frames)`` records messages, and the end
    of a completed chunk (an int) where it completes one."""
    out: list[tuple[int, bytes] | int] = []
    position = 0
    while True:
        position, frames, completed = ChunkLogReplication(leader).read_raw(position, max_bytes)
        if completed is not None:
            out.append(completed)
            continue
        if not frames:
            return out
        out.append((position, frames))
        position += len(frames)


def counting_flushes(db: Database) -> list[int]:
    """The log's syncs from now on (a flush with nothing new to make durable syncs nothing)."""
    calls: list[int] = []
    flush = db.log.flush

    def counted() -> None:
        if db.log.end != db.log.committed:
            calls.append(1)
        flush()

    db.log.flush = counted  # type: ignore[method-assign]
    return calls


def test_a_batch_is_written_under_one_sync_and_equals_the_leaders_log(tmp_path):
    with leader_and_follower(tmp_path) as (leader, follower):
        leader.write_epoch(1, uuid.uuid4())
        for i in range(120):
            leader.append(f"s-{i % 5}", events(1 + i % 3))
        leader.write_epoch(2, uuid.uuid4())
        leader.append("after", events(2))
        messages = leader_messages(leader, 300)
        replica = ChunkLogReplication(follower)
        flushes = counting_flushes(follower)
        batch: list[tuple[int, bytes]] = []
        batches = 0
        for message in [*messages, None]:
            if isinstance(message, tuple):
                batch.append(message)
                continue
            if batch:  # what arrived before a chunk's completion (or the end): one write, one sync
                before = len(flushes)
                committed = replica.apply_replicated_batch(batch)
                assert committed == batch[-1][0] + len(batch[-1][1]) == follower.committed_position
                assert len(flushes) - before in (1, 2)  # two when a chunk filled to its last byte
                batches += 1
                batch = []
            if message is not None:
                replica.complete_replicated_chunk(message)
        assert batches > 5 and len(messages) > 3 * batches
        assert len(flushes) < len(messages) // 2
        assert follower.committed_position == leader.committed_position
        assert log_content(follower) == log_content(leader)
        assert [e["epochId"] for e in follower.epochs()] == [e["epochId"] for e in leader.epochs()]
        assert follower.log.checkpoints.epoch.value == leader.log.checkpoints.epoch.value
        for stream in ("s-0", "s-4", "after"):
            theirs = [e.event_id for e in leader.read_stream_forward(stream, 0, 1000).events]
            assert [e.event_id for e in follower.read_stream_forward(stream, 0, 1000).events] == theirs


def test_one_sync_for_a_batch_inside_a_chunk(tmp_path):
    with leader_and_follower(tmp_path, 1 << 20) as (leader, follower):
        for i in range(40):
            leader.append(f"s-{i % 3}", events(1))
        messages = leader_messages(leader, 200)
        assert len(messages) > 10 and all(isinstance(m, tuple) for m in messages)
        flushes = counting_flushes(follower)
        ChunkLogReplication(follower).apply_replicated_batch(messages)  # type: ignore[arg-type]
        assert len(flushes) == 1
        assert log_content(follower) == log_content(leader)


def test_a_bad_message_keeps_the_whole_ones_before_it_and_nothing_of_itself(tmp_path):
    with leader_and_follower(tmp_path, 1 << 20) as (leader, follower):
        for _ in range(12):
            leader.append("s", events(1))
        messages = leader_messages(leader, 200)
        good = messages[:2]
        position, frames = messages[2]  # type: ignore[misc]
        broken = (position, frames[:-3])  # not on a record boundary
        with pytest.raises(StorageError):
            ChunkLogReplication(follower).apply_replicated_batch([*good, broken, messages[3]])  # type: ignore[list-item]
        assert follower.committed_position == position == follower.log.end
        assert log_content(follower) == log_content(leader)[: len(log_content(follower))]
        assert [e.event_number for e in follower.read_stream_forward("s", 0, 100).events] == list(
            range(len(log_content(follower)))
        )
        # the stream goes on from there (the leader sends again from the follower's end)
        ChunkLogReplication(follower).apply_replicated_batch(messages[2:])  # type: ignore[arg-type]
        assert log_content(follower) == log_content(leader)


def records_message(position: int, frames: bytes, commit: int = -1) -> Message:
    return Message(binary=RECORDS.pack(position, commit) + frames)


def test_the_follower_takes_the_records_queued_behind_a_message_and_the_commits_with_them():
    inbox = Inbox()
    queued = [
        records_message(13, b"bb", commit=10),
        records_message(15, b"ccc", commit=12),
        Message(text={"caughtUp": 18, "commit": 15}),  # handled after the write
        records_message(18, b"d", commit=15),
    ]
    inbox.messages.extend(queued)
    pieces, commit = records_batch_of(records_message(10, b"aaa", commit=7).binary, inbox)  # type: ignore[arg-type]
    assert pieces == [(10, b"aaa"), (13, b"bb"), (15, b"ccc")]
    assert commit == 12
    assert list(inbox.messages) == queued[2:]
    # nothing queued: the message alone, with the commit position it carries
    pieces, commit = records_batch_of(records_message(18, b"d", commit=15).binary, Inbox())  # type: ignore[arg-type]
    assert (pieces, commit) == ([(18, b"d")], 15)


def test_simulated_followers_write_what_arrived_together_in_one_batch(monkeypatch):
    sizes: list[int] = []
    apply = sim.SimDatabase.apply_replicated_batch

    def counted(self, pieces):  # type: ignore[no-untyped-def]
        sizes.append(len(pieces))
        return apply(self, pieces)

    monkeypatch.setattr(sim.SimDatabase, "apply_replicated_batch", counted)
    # a leader keeps at most SEND_WINDOW records messages out, so with the default of 2 a follower
    # never finds two queued: open the window to see the follower's own batching
    monkeypatch.setattr(sending, "SEND_WINDOW", 1000)
    for seed in range(8):  # messages that arrive while a follower writes are rare in the simulation
        result = sim.run_seed(seed, seconds=4.0)
        assert result.ok, result.violations
        if sizes and max(sizes) > 1:
            return
    pytest.fail(f"no simulated follower wrote two messages in one batch: {sizes[:50]}")
