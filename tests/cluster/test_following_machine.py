"""A follower's side of a replication stream as a pure machine (evdb/cluster/following.py), driven with
plain values: no event loop, no database, no transport."""

from __future__ import annotations

import collections
import struct

import pytest

from evdb.cluster.following import (
    ChunkTransfer,
    FollowerStream,
    catch_up_verdict,
    records_batch,
    subscription,
)
from evdb.cluster.transport import Message
from evdb.storage.chunk import FOOTER_SIZE, HEADER_SIZE

LEADER = ("127.0.0.1", 1112)


def stream(*, epoch: int = 3, read_only: bool = False) -> FollowerStream:
    return FollowerStream(leader_epoch=epoch, read_only=read_only, resets_at=100.0)


@pytest.mark.parametrize(
    ("common", "end", "commit", "verdict"),
    [
        (None, 50, 0, "unrelated"),  # no record in common: replicate nothing
        (30, 50, 20, "truncate"),  # cut the tail no majority confirmed
        (30, 50, 40, "diverged"),  # never below what the cluster committed
        (30, 50, 30, "truncate"),  # exactly at the commit position: nothing committed is cut
        (50, 50, 50, "subscribe"),
    ],
)
def test_the_handshake_decides_from_the_common_point(common, end, commit, verdict):
    assert catch_up_verdict(common, end, commit) == verdict


@pytest.mark.parametrize(
    ("common", "end", "local_start", "verdict"),
    [
        (60, 64, 64, "subscribe"),  # the log is the archive's to its end: the last chunk's padding agrees
        (30, 70, 64, "diverged"),  # a cut inside the chunks in the archive only: never
        (66, 70, 64, "truncate"),  # a cut of local records after them
    ],
)
def test_the_handshake_never_cuts_into_the_archived_chunks(common, end, local_start, verdict):
    assert catch_up_verdict(common, end, 0, local_start) == verdict


def test_the_leaders_answer_to_a_subscription():
    assert subscription({"ok": True, "epoch": 7, "protocol": 4}, 4, LEADER).epoch == 7
    refused = subscription({"error": "not the leader"}, 4, LEADER)
    assert refused.refused == "the leader refused to replicate: {'error': 'not the leader'}"
    assert not refused.protocol
    other = subscription({"ok": True, "protocol": 3}, 4, LEADER)
    assert other.protocol and "127.0.0.1:1112 speaks replication protocol 3, this node 4" in str(
        other.refused
    )


def test_a_voter_in_a_newer_term_takes_nothing_more_from_its_leader():
    follower, replica = stream(epoch=3), stream(epoch=3, read_only=True)
    assert follower.route(True, None, term=3) == "records"
    assert follower.route(True, None, term=4) == "past leader"
    assert replica.route(True, None, term=4) == "records"  # a replica follows whoever leads


def test_messages_are_routed_by_kind_and_by_a_chunk_file_under_way():
    follower = stream()
    assert follower.route(False, {"caughtUp": 1}, term=3) == "text"
    assert follower.route(False, "not json", term=3) == "end"
    follower.receiving = "chunk-000002.000000"
    assert follower.route(True, None, term=3) == "piece"
    with pytest.raises(ValueError, match=r"in the middle of chunk file chunk-000002\.000000"):
        follower.text({"complete": 9})


def test_reads_follow_the_leaders_commit_as_far_as_this_log_is_durable():
    follower = stream()
    assert follower.commit(80, durable_end=50) == 50  # kept: applies when the write ends
    assert follower.commit(60, durable_end=90) == 80  # an older commit never moves it back
    assert follower.after_message(commit_position=50, durable_end=90) == 80
    assert follower.after_message(commit_position=80, durable_end=90) is None


def test_a_chunk_completion_and_a_chunk_file_header():
    follower = stream()
    assert follower.text({"complete": 4096}).complete == 4096
    header = {"chunkFile": {"fileName": "x"}}
    assert follower.text(header).chunk_file is header
    assert follower.text({"caughtUp": 10, "commit": 5}).chunk_file is None


@pytest.mark.parametrize(
    ("state", "durable_end", "becomes"),
    [
        ("CatchingUp", 100, "Follower"),
        ("PreReadOnlyReplica", 100, "ReadOnlyReplica"),
        ("CatchingUp", 99, None),  # not all of it yet
        ("Follower", 100, None),  # told again after a reconnect: already a follower
    ],
)
def test_the_caught_up_mark(state, durable_end, becomes):
    follower = stream()
    readable, caught_up = follower.settled({"caughtUp": 100, "commit": 90}, durable_end, state)
    assert (readable, caught_up) == (90, becomes)


def test_records_queued_behind_each_other_are_written_in_one_batch_up_to_anything_else():
    def records(position: int, frames: bytes, commit: int) -> Message:
        return Message(binary=struct.pack("<qq", position, commit) + frames)

    first = records(0, b"aa", 0)
    queued = collections.deque(
        [records(2, b"bbb", 2), records(5, b"c", 1), Message(text={"complete": 9}), None]
    )
    assert first.binary is not None
    pieces, commit = records_batch(first.binary, queued)
    assert pieces == [(0, b"aa"), (2, b"bbb"), (5, b"c")] and commit == 2
    assert list(queued) == [Message(text={"complete": 9}), None]


def chunk_header(size: int, **changes: object) -> dict:
    info = {
        "fileName": "chunk-000001.000000",
        "startNumber": 1,
        "endNumber": 1,
        "size": size,
        "checksum": "00ff",
    }
    info.update(changes)
    return {"chunkFile": info}


def test_a_chunk_file_arrives_in_order_and_is_installed_once_whole():
    size = HEADER_SIZE + FOOTER_SIZE + 10
    transfer = ChunkTransfer(chunk_header(size), chunk_size=4096)
    transfer.piece(0, size - 10)
    with pytest.raises(ValueError, match="does not follow"):
        transfer.piece(0, 10)  # a piece again
    with pytest.raises(ValueError, match="does not follow"):
        transfer.piece(size - 10, 11)  # past the announced size
    with pytest.raises(ValueError, match=f"{size - 10} of {size} bytes"):
        transfer.must_be_done()
    transfer.piece(size - 10, 10)
    assert transfer.done
    transfer.must_be_done()


@pytest.mark.parametrize(
    "header",
    [
        {"nothing": 1},
        chunk_header(10),  # smaller than a header and a footer
        chunk_header(HEADER_SIZE + FOOTER_SIZE + 3 * 4096),  # more than one chunk's data and map
        chunk_header(HEADER_SIZE + FOOTER_SIZE, startNumber=2, endNumber=1),
        chunk_header(HEADER_SIZE + FOOTER_SIZE, checksum="not hex"),
    ],
)
def test_a_bad_chunk_file_header_is_refused(header):
    with pytest.raises(ValueError, match="bad chunk file header from the leader"):
        ChunkTransfer(header, chunk_size=4096)


def test_the_stream_resets_after_the_connection_reset_interval():
    follower = stream()
    assert not follower.resets(100.0) and follower.resets(100.5)


def test_the_leaders_behind_archive_message_mid_stream_sends_the_follower_to_the_archive():
    """A leader whose retention left what a lagging follower needs next to the archive says so in the
    stream (evdb/cluster/sending.py): the follower catches up from the archive (evdb/archive/catchup.py)."""
    body = {"behindArchive": {"from": 10, "localStart": 64, "archive": "s3://b", "log": "x", "error": None}}
    assert stream().text(body).behind_archive == body
    assert stream().text({"complete": 64}).behind_archive is None
