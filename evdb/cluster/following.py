"""A follower's side of one replication stream, as a pure machine: what to do with each message its
leader sends (records to write, a chunk file's header and pieces, a completed chunk, commit positions,
the caught-up mark), when to stop taking from that leader, when to reset the connection, and the
decisions of the handshake (truncate, refuse, subscribe). It takes messages, facts and the time and
returns what to do; it writes, sends and awaits nothing. ``ClusterService`` (evdb/cluster/service.py)
runs it over its transport and database port, in a real node and in the simulator alike.

The rules (docs/cluster.md, "Replication", "The common point", "Catching up with whole chunk files"):

- A voting member in a term newer than the epoch of the leader it streams from takes nothing more from
  it (a read-only replica follows whoever leads): :meth:`FollowerStream.past_leader`.
- Reads on a follower see up to its leader's commit position, as far as this log holds it durably
  (evdb/cluster/commit.py ``follower_readable``); a commit position beyond the durable end is kept and
  applies when the write of those records ends.
- A follower whose log differs from its leader's is cut back to the common point, never below what it
  knows the cluster committed (then it refuses the leader and says so); a log that shares no record
  with the leader's is not replicated into.
- A chunk file's pieces come in order, each at the offset the previous ones reached, until all
  ``size`` bytes are there; then it is installed. Anything else in the middle of a file is an error.
"""

from __future__ import annotations

import collections
import struct
from dataclasses import dataclass
from typing import Any

from evdb.cluster.commit import follower_readable
from evdb.storage.chunk import FOOTER_SIZE, HEADER_SIZE

__all__ = [
    "CAUGHT_UP_STATES",
    "ChunkTransfer",
    "FollowerStream",
    "Subscription",
    "TextStep",
    "catch_up_verdict",
    "records_batch",
    "subscription",
]

#: a records message: ``int64 position | int64 the leader's commit position | framed records``
RECORDS = struct.Struct("<qq")
#: bytes of records messages a follower writes under one sync
MAX_BATCH = 16 << 20
#: the states a follower leaves once it has every record of its leader: what it becomes
CAUGHT_UP_STATES = {"CatchingUp": "Follower", "PreReadOnlyReplica": "ReadOnlyReplica"}


def catch_up_verdict(common: int | None, end: int, commit_position: int, local_start: int = 0) -> str:
    """What a follower does once it found the common point ``common`` with its leader (None: no record
    in common), its log ending at ``end`` and knowing the cluster committed up to ``commit_position``:
    ``"unrelated"`` (shares no history: replicates nothing), ``"diverged"`` (the logs differ below what
    the cluster committed: never cut, refuse), ``"truncate"`` (cut back to ``common``, then subscribe
    again) or ``"subscribe"`` (from ``end``).

    ``local_start``: where this log's local chunks start (the chunks before are the cluster's archive,
    committed). A log that ends there is the archive's wholly: it agrees with the leader's to its end
    (the record found may end before the last chunk's end); a cut inside the archive's chunks is never
    made (they are committed): refused as diverged."""
    if common is None:
        return "unrelated"
    if common < end:
        if end == local_start:
            return "subscribe"
        return "diverged" if common < max(commit_position, local_start) else "truncate"
    return "subscribe"


@dataclass(frozen=True)
class Subscription:
    """The leader's answer to a subscription: ``epoch`` when it accepted, else why not (``protocol``:
    it speaks another replication protocol, and the stream is closed)."""

    epoch: int = -1
    refused: str | None = None
    protocol: bool = False


def subscription(body: Any, protocol: int, endpoint: tuple[str, int]) -> Subscription:
    """Judge the leader's answer ``body`` to this follower's subscription."""
    if not isinstance(body, dict) or "ok" not in body:
        return Subscription(refused=f"the leader refused to replicate: {body}")
    if body.get("protocol") != protocol:
        return Subscription(
            refused=f"the leader at {endpoint[0]}:{endpoint[1]} speaks replication protocol "
            f"{body.get('protocol', 1)}, this node {protocol}: run one evdb version in a cluster",
            protocol=True,
        )
    return Subscription(epoch=int(body.get("epoch", -1)))


def records_batch(first: bytes, queued: collections.deque) -> tuple[list[tuple[int, bytes]], int]:
    """The leader's records message ``first`` and the records messages queued right behind it (taken
    off ``queued``), as ``(position, frames)`` pieces for one durable write, with the highest commit
    position the leader sent with them. Stops at anything else (a chunk's completion, a caught-up mark,
    the end of the stream: ``None``): those are handled in their order after the write."""
    position, commit = RECORDS.unpack_from(first)
    pieces = [(position, bytes(memoryview(first)[RECORDS.size :]))]
    size = len(first)
    while queued and size < MAX_BATCH:
        message = queued[0]
        if message is None or message.binary is None:
            break
        position, sent_commit = RECORDS.unpack_from(message.binary)
        pieces.append((position, bytes(memoryview(message.binary)[RECORDS.size :])))
        commit = max(commit, sent_commit)
        size += len(message.binary)
        queued.popleft()
    return pieces, commit


class ChunkTransfer:
    """One chunk file coming from the leader: its header, judged, and the bytes received so far."""

    def __init__(self, header: dict, chunk_size: int) -> None:
        try:
            info = header["chunkFile"]
            self.file_name = str(info["fileName"])
            self.start_number = int(info["startNumber"])
            self.end_number = int(info["endNumber"])
            self.size = int(info["size"])
            self.checksum = bytes.fromhex(info["checksum"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"bad chunk file header from the leader: {header}") from exc
        chunks = self.end_number - self.start_number + 1
        # data plus a position map of 16 bytes per record (a record takes more than 16 bytes)
        largest = HEADER_SIZE + 2 * chunks * chunk_size + FOOTER_SIZE
        if self.start_number < 0 or chunks < 1 or not HEADER_SIZE + FOOTER_SIZE <= self.size <= largest:
            raise ValueError(f"bad chunk file header from the leader: {header}")
        self.received = 0

    @property
    def done(self) -> bool:
        """All the file's bytes are here: it is installed now."""
        return self.received == self.size

    def piece(self, offset: int, length: int) -> None:
        """A piece of ``length`` bytes at ``offset`` arrived: it must follow the bytes received."""
        if offset != self.received or self.received + length > self.size:
            raise ValueError(
                f"chunk file {self.file_name}: piece at offset {offset} with {length} bytes does not "
                f"follow the {self.received} of {self.size} bytes received"
            )
        self.received += length

    def must_be_done(self) -> None:
        if not self.done:
            raise ValueError(f"chunk file {self.file_name}: {self.received} of {self.size} bytes received")


@dataclass
class TextStep:
    """What a follower does with one JSON message of its leader (a chunk file's header or a completed
    chunk), before :meth:`FollowerStream.settled` judges the rest of it."""

    chunk_file: dict | None = None  # a chunk file starts: receive its pieces
    complete: int | None = None  # complete the chunk ending there, then acknowledge the log's end
    #: the leader cannot stream what comes next (it is in its archive only): catch up from the archive
    behind_archive: dict | None = None


class FollowerStream:
    """The follower's decisions over one replication stream from a leader in ``leader_epoch``."""

    def __init__(self, *, leader_epoch: int, read_only: bool, resets_at: float) -> None:
        self.leader_epoch = leader_epoch
        self.read_only = read_only
        #: when this stream is closed and the connections reset (ConnectionResetInterval)
        self.resets_at = resets_at
        #: the highest commit position the leader sent in this stream
        self.leader_commit = -1
        #: the name of the chunk file being received, or None
        self.receiving: str | None = None

    def past_leader(self, term: int) -> bool:
        """A voting member in a term newer than its leader's epoch takes nothing more from it."""
        return not self.read_only and term > self.leader_epoch

    def commit(self, commit: int, durable_end: int) -> int:
        """The leader's commit position ``commit`` arrived: what readers see now."""
        if commit > self.leader_commit:
            self.leader_commit = commit
        return follower_readable(self.leader_commit, durable_end)

    def route(self, binary: bool, text: Any, term: int) -> str:
        """Where a message goes: ``"past leader"`` (stop: this node is in a newer term), ``"piece"`` (of
        the chunk file being received), ``"records"``, ``"text"`` (see :meth:`text`) or ``"end"``."""
        if self.past_leader(term):
            return "past leader"
        if binary:
            return "piece" if self.receiving is not None else "records"
        return "text" if isinstance(text, dict) else "end"

    def text(self, body: dict) -> TextStep:
        """A JSON message of the leader: a chunk file's header, a completed chunk (then
        :meth:`settled`, once the shell did what this says)."""
        if self.receiving is not None:
            raise ValueError(
                f"the leader sent {str(body)[:100]!r} in the middle of chunk file {self.receiving}"
            )
        if "chunkFile" in body:
            return TextStep(chunk_file=body)
        if "complete" in body:
            return TextStep(complete=int(body["complete"]))
        if "behindArchive" in body:
            return TextStep(behind_archive=body)
        return TextStep()

    def settled(self, body: dict, durable_end: int, state: str) -> tuple[int | None, str | None]:
        """The rest of a JSON message, with this log's durable end now: what readers see now (or None),
        and the state this follower takes, now that it has every record of its leader (or None)."""
        readable = self.commit(int(body["commit"]), durable_end) if "commit" in body else None
        caught_up = None
        if "caughtUp" in body and durable_end >= int(body["caughtUp"]) and state in CAUGHT_UP_STATES:
            caught_up = CAUGHT_UP_STATES[state]
        return readable, caught_up

    def after_message(self, commit_position: int, durable_end: int) -> int | None:
        """After each message: records this node made durable since the leader's commit position
        arrived (a chunk file installed, a chunk completed) are shown now, not at the next commit."""
        if self.leader_commit > commit_position:
            return self.commit(self.leader_commit, durable_end)
        return None

    def resets(self, now: float) -> bool:
        return now > self.resets_at
