"""The leader's side of replication streams: the I/O shell that serves each subscribed follower (the
handshake and the common point's record checks, the records, commit positions and whole chunk files
it sends, the acknowledgements and lease requests it takes). The decisions are the leadership machine's
(evdb/cluster/leadership.py) and the catch-up functions' (evdb/cluster/catchup.py); ``ClusterService``
(evdb/cluster/service.py) owns one :class:`ReplicationSource`.

Whole chunk files (a follower behind by a completed chunk): the leader sends ``{"chunkFile": {...}}``
then the file's exact bytes in binary messages of ``int64 offset in the file | bytes``; the follower
writes them to a temporary file and installs it once all ``size`` bytes are there and verified
(evdb/cluster/receiving.py ``ChunkFileReceiver``).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from evdb.archive import (
    catchup as archive_catchup,  # a module: evdb.archive.catchup imports evdb.cluster.replica
)
from evdb.cluster.catchup import common_point, shared_end
from evdb.cluster.following import catch_up_verdict
from evdb.cluster.forwarding import decode_write, encode_error, encode_result
from evdb.cluster.leadership import Progress, unacked_window
from evdb.cluster.replica import ChunkLogReplication
from evdb.cluster.shell import ShellPart
from evdb.cluster.transport import Channel, PeerError
from evdb.cluster.wire import (
    CHECKS_PER_MESSAGE,
    CHUNK_PIECE,
    MAX_SEND,
    POSITION,
    RECORDS,
    REPLICATION_PROTOCOL,
)
from evdb.errors import EvdbError
from evdb.storage.chunk import Chunk

if TYPE_CHECKING:
    from evdb.database import Database

__all__ = [
    "SEND_WINDOW",
    "FollowerLink",
    "ReplicationSource",
    "chunk_file_header",
    "chunk_file_pieces",
    "resolve_common_point",
]

#: records messages a leader has out to a follower unacknowledged: one being synced there, one waiting
#: behind it. What the leader writes meanwhile goes in the next message, when an acknowledgement comes
#: (the follower would have written it under one sync anyway: one message instead of one per group).
SEND_WINDOW = 2


def chunk_file_header(chunk: Chunk) -> dict:
    """The JSON message announcing a completed chunk file to a follower."""
    assert chunk.footer is not None
    return {
        "chunkFile": {
            "fileName": chunk.file_name,
            "startNumber": chunk.start_number,
            "endNumber": chunk.end_number,
            "size": chunk.file_size,
            "checksum": chunk.footer.checksum.hex(),  # xxh3-128 of the file before its last 16 bytes
            "endPosition": chunk.end_position,
        }
    }


def chunk_file_pieces(chunk: Chunk, piece_size: int = CHUNK_PIECE) -> Iterator[bytes]:
    """The binary messages carrying a completed chunk file's exact bytes."""
    size = chunk.file_size
    view = memoryview(chunk.buffer)
    for offset in range(0, size, piece_size):
        yield POSITION.pack(offset) + bytes(view[offset : min(offset + piece_size, size)])


def _common_point(db: Database, follower_epochs: list[dict], follower_end: int) -> tuple[str, int, int]:
    """Where a follower's log may stop agreeing with ours, from the epochs alone
    (evdb/cluster/catchup.py common_point)."""
    return common_point(db.epochs(64), db.committed_position, follower_epochs, follower_end)


def resolve_common_point(leader: Database, follower: Database) -> tuple[str, int]:
    """The whole handshake between two databases in one process (tests and tools; the cluster runs the
    same steps over its transport): ``("ok", end)`` when the follower's log is a prefix of the
    leader's, ``("truncate", position)`` when it must be cut there first, ``("refuse", 0)``."""
    hello = [
        {k: e.get(k, -1) for k in ("epochId", "position", "epochNumber", "previousEpochPosition")}
        for e in follower.epochs(64)
    ]
    verdict, point, floor = _common_point(leader, hello, follower.committed_position)
    if verdict == "refuse":
        return "refuse", 0
    before = point
    sender, receiver = ChunkLogReplication(leader), ChunkLogReplication(follower)
    chunk_ends = dict(sender.completed_chunk_ends(floor, point))
    while True:
        checks = sender.record_checks(before, floor, CHECKS_PER_MESSAGE)
        page = {"point": point, "floor": floor, "records": checks}
        found = shared_end(page, receiver.has_record, receiver.chunk_end_after, chunk_ends)
        if found is not None:
            end = follower.committed_position
            verdict = catch_up_verdict(found, end, 0, receiver.local_start())
            if verdict == "diverged":
                return "refuse", 0
            return ("truncate", found) if verdict == "truncate" else ("ok", end)
        if len(checks) < CHECKS_PER_MESSAGE:
            return "refuse", 0
        before = checks[-1][0]


@dataclass
class FollowerLink(Progress):
    """A subscribed follower: its progress (the leadership machine's) and its stream."""

    #: set at each acknowledgement: wakes a sender whose SEND_WINDOW is full
    ack_arrived: asyncio.Event = field(default_factory=asyncio.Event)
    #: the stream, once the follower was told it is subscribed (commit messages go to it from then on)
    channel: Channel | None = None


class ReplicationSource(ShellPart):
    """A leader's replication streams, one session per subscribed follower."""

    def open_streams(self) -> list[Channel]:
        """The subscribed followers' streams now."""
        links = self.service.leadership.followers.values()
        return [link.channel for link in links if isinstance(link, FollowerLink) and link.channel is not None]

    async def announce_hand_over(self, streams: list[Channel], successor: str) -> None:
        """Tell each follower on its stream that this resigned leader hands over to ``successor``: they
        ask for gossip at once, not at their next round (the successor reads the hand-over in it, the
        others find the new leader as soon as it takes office)."""
        for channel in streams:
            if not channel.closed:
                with contextlib.suppress(PeerError):
                    await channel.send_json({"handOver": successor})

    async def _verify_common_point(self, channel: Channel, point: int, floor: int) -> int | None:
        """The leader's side: send the follower our records' checks, newest first from ``point`` down to
        ``floor``, a page at a time, until it answers where it goes on from. None when it went away."""
        before = point
        chunk_ends = await self._blocking(self.service.replica.completed_chunk_ends, floor, point)
        while True:
            checks = await self._blocking(
                self.service.replica.record_checks, before, floor, CHECKS_PER_MESSAGE
            )
            await channel.send_json(
                {
                    "verify": {
                        "point": point,
                        "floor": floor,
                        "records": checks,
                        "last": len(checks) < CHECKS_PER_MESSAGE,
                        "chunkEnds": chunk_ends,
                    }
                }
            )
            chunk_ends = []  # sent once
            reply = await channel.receive(timeout=30)
            body = reply.text if reply is not None else None
            if not isinstance(body, dict):
                return None
            if "more" in body and checks:
                before = int(checks[-1][0])
                continue
            if "from" in body:
                position = int(body["from"])
                if not 0 <= position <= point:
                    raise EvdbError(
                        f"the follower answered position {position}, beyond the common point {point}"
                    )
                return position
            return None

    async def handle_replication(self, channel: Channel) -> None:
        """``/internal/replicate``: a follower subscribes to this leader's log."""
        try:
            await self._serve_follower(channel)
        except PeerError as exc:  # the follower went away mid-handshake: it connects again
            self.logger.info("A replication stream ended early: %s", exc)
        except (EvdbError, TimeoutError, ValueError, TypeError, KeyError) as exc:
            self.logger.warning("A replication stream from a follower failed: %s", exc)

    async def _serve_follower(self, channel: Channel) -> None:
        hello_message = await channel.receive(timeout=10)
        hello = hello_message.text if hello_message is not None else None
        if not isinstance(hello, dict):
            return
        follower = str(hello.get("instanceId"))
        if hello.get("protocol") != REPLICATION_PROTOCOL:
            self.logger.warning(
                "Follower %s speaks replication protocol %s, this leader %d: refused (run one evdb version "
                "in a cluster; a rolling upgrade goes node by node within one protocol)",
                follower,
                hello.get("protocol", 1),
                REPLICATION_PROTOCOL,
            )
            await channel.send_json(
                {
                    "error": f"replication protocol {hello.get('protocol', 1)}; this leader speaks {REPLICATION_PROTOCOL}"
                }
            )
            return
        if not self.service.is_leader:
            await channel.send_json({"error": "not the leader"})
            return
        try:
            args = (self.service.db, hello.get("epochs") or [], int(hello.get("writer", 0)))
            # the epochs may be read from chunks in the archive only: then off the event loop (else
            # inline, as ever: the simulator's random sequence, and so its seeds, stay as they were)
            if self.service.replica.local_start():
                verdict, point, floor = await self._blocking(_common_point, *args)
            else:
                verdict, point, floor = _common_point(*args)
        except (TypeError, ValueError) as exc:
            await channel.send_json({"error": f"bad hello: {exc}"})
            return
        epoch = self.service.standing().epoch_number
        if verdict == "refuse":
            self.logger.warning(
                "Follower %s: its database shares no history with this cluster; refused", follower
            )
            await channel.send_json({"refuse": 0})
            return
        position = await self._verify_common_point(channel, point, floor)
        if position is None:
            return
        if (
            not self.service.is_leader or self.service.standing().epoch_number != epoch
        ):  # no longer the same leader
            await channel.send_json({"error": "not the leader"})
            return
        if position < self.service.replica.local_start():
            await self._behind_archive(channel, follower, position, bool(hello.get("archive")))
            return
        self.logger.info("Follower %s subscribed from position %d", follower, position)
        link = FollowerLink(bool(hello.get("voting")), position, name=follower)
        self.service.leadership.subscribed(link)
        await channel.send_json(
            {
                "ok": True,
                "from": position,
                "epoch": self.service.standing().epoch_number,
                "protocol": REPLICATION_PROTOCOL,
            }
        )
        link.channel = channel  # every commit position from now on goes to it (_post_commit)
        self.service._post_commit(self.service.commit_position)
        sender = asyncio.create_task(
            self._send_log(channel, position, follower, link, bool(hello.get("archive")))
        )
        acks = asyncio.create_task(self._receive_acks(channel, link))
        try:
            # whichever ends first ends the session: a follower that went away, or a send that failed
            await asyncio.wait((sender, acks), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (sender, acks):
                task.cancel()
            # asyncio.wait, not await task: a cancellation of this handler itself must go on upwards
            await asyncio.wait((sender, acks))
            for task in (sender, acks):
                if not task.cancelled() and task.exception() is not None:
                    self.logger.warning("Replication to follower %s failed: %s", follower, task.exception())
            await channel.close()
            self.service.leadership.gone(link)
            self.logger.info("Follower %s disconnected", follower)

    async def _behind_archive(
        self, channel: Channel, follower: str, position: int, has_archive: bool
    ) -> None:
        """A follower whose log ends before this leader's local chunks: they are in the archive only, and
        this leader cannot stream them. It is told where they start and which archive holds them, and
        takes them from the archive itself (evdb/archive/catchup.py); then it subscribes again."""
        facts = await self._blocking(archive_catchup.leader_archive, self.service.db, position)
        if not has_archive:
            self.logger.warning(
                "Follower %s cannot catch up: %s", follower, archive_catchup.no_archive_message(facts)
            )
        else:
            self.logger.info(
                "Follower %s is at position %d, before this leader's local chunks (from %d): it takes chunks "
                "%d-%d from the archive %s itself%s",
                follower,
                position,
                facts.local_start,
                position // self.service.db.config.chunk_size,
                facts.local_start // self.service.db.config.chunk_size - 1,
                facts.archive,
                f" (this leader could not read the archive: {facts.error})" if facts.error else "",
            )
        await channel.send_json(facts.message())
        await channel.close()

    async def _receive_acks(self, channel: Channel, link: FollowerLink) -> None:
        while True:
            message = await channel.receive()
            if message is None:
                return
            binary = message.binary
            if binary is not None and len(binary) == POSITION.size:  # a records write's acknowledgement
                acked = POSITION.unpack(binary)[0]
            elif isinstance(message.text, dict) and "ack" in message.text:
                acked = int(message.text["ack"])
            elif isinstance(message.text, dict):
                if "lease" in message.text:
                    await self._grant_lease(channel, link, message.text)
                continue
            else:
                return
            self.service.leadership.acknowledged(link, acked)
            link.ack_arrived.set()
            self.service._release_gate()

    async def _grant_lease(self, channel: Channel, link: FollowerLink, request: dict) -> None:
        """A member asks for a sign-in lease (evdb/cluster/lease.py): granted while this node leads and
        holds one itself, and the member holds every security write whose answer waits for it."""
        if self.service.state not in ("Leader", "ResigningLeader"):
            return
        await channel.send_json(self.service.leadership.grant_lease(link, request, self._now()))

    async def _send_log(
        self, channel: Channel, position: int, follower: str, link: FollowerLink, has_archive: bool
    ) -> None:
        caught_up_sent = False
        unacked: collections.deque[int] = collections.deque()  # ends of the records messages out
        leadership = self.service.leadership
        while not channel.closed and leadership.may_write(self.service._leading):
            waiter = self.service._committed
            if unacked_window(unacked, link.acked, SEND_WINDOW):
                # the follower has enough to write: what comes meanwhile goes in one message at its
                # next acknowledgement (after a second without one, it goes anyway)
                link.ack_arrived.clear()
                try:
                    async with asyncio.timeout(1.0):
                        await link.ack_arrived.wait()
                except TimeoutError:
                    unacked.clear()
                continue
            if position < self.service.replica.local_start():
                # this leader's retention left what the follower needs next to the archive meanwhile
                await self._behind_archive(channel, follower, position, has_archive)
                break
            chunk = self.service.replica.replication_chunk(position)
            if chunk is not None:
                await self._send_chunk_file(channel, chunk, follower, position)
                position = chunk.end_position
                continue
            # what the writer has written and is syncing goes too (see _before_sync)
            failures, upto = leadership.sync_failures, leadership.ship_limit(self.service.node.db)
            start, frames, completed = self.service.replica.read_raw(position, MAX_SEND, upto)
            if leadership.sync_failures != failures:
                break  # a sync failed while the records were read: they may be being rolled back
            if completed is not None:
                await channel.send_json({"complete": completed})
                position = start
            elif frames:
                # the records of every commit group since the last send, in one message that also
                # carries the commit position
                await channel.send_bytes(RECORDS.pack(start, self.service.commit_position) + frames)
                position = start + len(frames)
                unacked.append(position)
            else:
                if not caught_up_sent:
                    # the follower has every record: once per stream it is told so (it stops
                    # CatchingUp); each later commit position goes by _post_commit
                    await channel.send_json({"caughtUp": position, "commit": self.service.commit_position})
                    caught_up_sent = True
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(1.0):
                        await waiter.wait()
        await channel.close()

    async def _send_chunk_file(self, channel: Channel, chunk: Chunk, follower: str, position: int) -> None:
        """A follower behind by a completed chunk gets the whole file (see ChunkLogReplication.replication_chunk)."""
        self.logger.info(
            "Sending chunk file %s to follower %s (chunks %d-%d, %d bytes%s; the follower is at %d)",
            chunk.file_name,
            follower,
            chunk.start_number,
            chunk.end_number,
            chunk.file_size,
            ", scavenged" if chunk.is_scavenged else "",
            position,
        )
        await channel.send_json(chunk_file_header(chunk))
        for piece in chunk_file_pieces(chunk):
            await channel.send_bytes(piece)

    async def handle_write(self, body: dict) -> dict:
        """``/internal/write``: a follower forwards a client's write to this leader."""
        if not self.service.is_leader:
            return {"error": "NotLeader", "message": "This node is not the leader."}
        try:
            op, args = decode_write(body)
            if op == "append":
                result = await asyncio.wrap_future(self.service.db.append_async(**args))
            elif op == "delete":
                result = await asyncio.wrap_future(self.service.db.delete_stream_async(**args))
            else:
                from evdb.scavenge.point import write_point

                point = await self._blocking(write_point, self.service.db, args["threshold"])
                return {"position": point.position}
        except EvdbError as exc:
            return encode_error(exc)
        except (ValueError, KeyError, TypeError) as exc:
            return {"error": "InvalidInput", "message": f"Bad forwarded write: {exc}"}
        return encode_result(result)
