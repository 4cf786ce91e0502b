"""The follower's side of replication streams: the I/O shell that subscribes to the leader, finds the
common point, truncates when told, writes the records (several messages under one sync), receives and
installs whole chunk files, takes commit positions and lease grants as they arrive and asks for
leases. The decisions are the stream machine's (evdb/cluster/following.py) and the catch-up
functions' (evdb/cluster/catchup.py); ``ClusterService`` (evdb/cluster/service.py) owns one
:class:`ReplicationSink`.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

from evdb.archive import (
    catchup as archive_catchup,  # a module: evdb.archive.catchup imports evdb.cluster.replica
)
from evdb.archive.archiver import backoff_seconds
from evdb.cluster.catchup import shared_end
from evdb.cluster.following import (
    ChunkTransfer,
    FollowerStream,
    catch_up_verdict,
    records_batch,
    subscription,
)
from evdb.cluster.gossip import Peer
from evdb.cluster.replica import ChunkLogReplication, ReplicationLog
from evdb.cluster.shell import ClusterShell, ShellPart
from evdb.cluster.transport import Channel, Message, PeerError
from evdb.cluster.wire import COMMIT, POSITION, REPLICATION_PROTOCOL
from evdb.errors import ArchiveError, ArchiveUnavailable, CorruptedFile, EvdbError, NotLeader

if TYPE_CHECKING:
    from evdb.database import Database

__all__ = ["ChunkFileReceiver", "ReplicationSink", "records_batch_of"]


class ChunkFileReceiver:
    """The follower's side of one chunk file transfer: the pieces go to a temporary file in the
    database folder (or memory, for an in-memory database) until all have come."""

    def __init__(self, db: Database, header: dict, replica: ReplicationLog | None = None) -> None:
        self.transfer = transfer = ChunkTransfer(header, db.config.chunk_size)
        self.file_name, self.size, self.checksum = transfer.file_name, transfer.size, transfer.checksum
        self.start_number, self.end_number = transfer.start_number, transfer.end_number
        self.db = db
        self.replica: ReplicationLog = replica if replica is not None else ChunkLogReplication(db)
        self.path: str | None = None
        self._file = None
        self._memory = bytearray()
        if db.config.db_dir is not None:
            self.path = os.path.join(db.config.db_dir, f"{uuid.uuid4().hex}.replica.tmp")
            self._file = open(self.path, "xb")  # noqa: SIM115 - closed by install/abort

    @property
    def received(self) -> int:
        return self.transfer.received

    @property
    def done(self) -> bool:
        return self.transfer.done

    def add(self, message: bytes) -> None:
        (offset,) = POSITION.unpack_from(message)
        data = memoryview(message)[POSITION.size :]
        self.transfer.piece(offset, len(data))
        if self._file is not None:
            self._file.write(data)
        else:
            self._memory += data

    def install(self) -> int:
        """Make the file durable, then verify and install it; returns the new committed end."""
        self.transfer.must_be_done()
        source: str | bytes
        if self._file is not None:
            file, self._file = self._file, None
            try:
                file.flush()
                os.fsync(file.fileno())
            finally:
                file.close()
            assert self.path is not None
            source = self.path
        else:
            source = bytes(self._memory)
        return self.replica.install_replicated_chunk(
            source, start_number=self.start_number, end_number=self.end_number, checksum=self.checksum
        )

    def abort(self) -> None:
        file, self._file = self._file, None
        if file is not None:
            with contextlib.suppress(OSError):
                file.close()
        if self.path is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)


class Inbox:
    """The messages of a replication stream that arrived and are not yet handled, in order; None once
    the stream is over. Filled by its own task (:meth:`fill`) so that what arrives while the follower
    writes is there to be taken in one go (:func:`records_batch_of`)."""

    def __init__(
        self,
        on_commit: Callable[[int], None] | None = None,
        on_grant: Callable[[dict], None] | None = None,
    ) -> None:
        self.messages: collections.deque[Message | None] = collections.deque()
        self.error: Exception | None = None  # why the stream broke, when it did not just end
        self._arrived = asyncio.Event()
        #: takes each commit message as it arrives (never queued behind a records write in progress)
        self._on_commit = on_commit
        #: takes each lease grant as it arrives (evdb/cluster/lease.py)
        self._on_grant = on_grant

    async def fill(self, channel: Channel) -> None:
        on_commit = self._on_commit
        try:
            while (message := await channel.receive()) is not None:
                binary = message.binary
                if on_commit is not None and binary is not None and len(binary) == COMMIT.size:
                    on_commit(COMMIT.unpack(binary)[0])
                    continue
                text = message.text
                if self._on_grant is not None and isinstance(text, dict) and "grant" in text:
                    self._on_grant(text)
                    continue
                self.messages.append(message)
                self._arrived.set()
        except Exception as exc:  # the stream broke: handled as its end, and raised by the follower
            self.error = exc
        finally:
            self.messages.append(None)
            self._arrived.set()

    async def get(self) -> Message | None:
        while not self.messages:
            self._arrived.clear()
            await self._arrived.wait()
        return self.messages.popleft()


def records_batch_of(first: bytes, inbox: Inbox) -> tuple[list[tuple[int, bytes]], int]:
    """The records messages to write under one sync: ``first`` and those queued right behind it
    (evdb/cluster/following.py ``records_batch``). (Commit messages never queue: the inbox's reader
    takes them as they arrive.)"""
    return records_batch(first, inbox.messages)


class ReplicationSink(ShellPart):
    """A follower's replication from its leader: one session after another while it follows."""

    def __init__(self, service: ClusterShell) -> None:
        super().__init__(service)
        self._receiver: ChunkFileReceiver | None = None  # a chunk file being received from the leader

    async def _find_common_point(self, channel: Channel, verify: dict) -> int | None:
        """The follower's side: the end of the newest record both logs hold at the same position (the
        leader's records are listed newest first); None when none is found back to the shared epoch."""
        chunk_ends = {int(a): int(b) for a, b in verify.get("chunkEnds") or []}
        while True:
            found = await self._blocking(
                shared_end,
                verify,
                self.service.replica.has_record,
                self.service.replica.chunk_end_after,
                chunk_ends,
            )
            if found is not None:
                return found
            if verify.get("last") or not verify.get("records"):
                return None
            await channel.send_json({"more": True})
            reply = await channel.receive(timeout=30)
            body = reply.text if reply is not None else None
            if not isinstance(body, dict) or "verify" not in body:
                raise EvdbError("the leader stopped while the common point was being found")
            verify = body["verify"]

    async def send_to_leader(self, body: dict) -> dict:
        """A client's write on this member goes to its leader (evdb/cluster/forwarding.py RemoteWriter)."""
        peer = self.service.leader_peer()
        if peer is None or peer.replication_endpoint is None:
            raise NotLeader()
        try:
            return await self.service.transport.write(peer.replication_endpoint, body, 30)
        except PeerError as exc:
            raise NotLeader() from exc

    async def _replicate_from(self, leader: Peer) -> None:
        backoff = 0.2
        archive_failures = 0  # in a row: a catch-up from the archive waits 1 s, doubling to 60 s
        while True:
            endpoint = leader.replication_endpoint
            try:
                if endpoint is None:
                    raise PeerError("the leader advertises no replication endpoint")
                await self._replication_session(endpoint)
                backoff = 0.2
                archive_failures = 0
            except asyncio.CancelledError:
                raise
            except ArchiveError as exc:
                archive_failures += 1
                wait = backoff_seconds(archive_failures)
                self.logger.log(
                    logging.WARNING if isinstance(exc, ArchiveUnavailable) else logging.ERROR,
                    "Catching up from the archive failed (attempt %d, next in %.0f s): %s",
                    archive_failures,
                    wait,
                    exc,
                )
                await asyncio.sleep(wait)
                continue
            except PeerError as exc:
                leader.last_error = str(exc)
                if not exc.certificate:  # a certificate failure is logged by the peer client
                    self.logger.warning("Replication from the leader stopped: %s", exc)
            except (TimeoutError, OSError, EvdbError, ValueError, KeyError, TypeError) as exc:
                self.logger.warning("Replication from the leader stopped: %s", exc or type(exc).__name__)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 2.0)

    def _hello(self) -> dict:
        return {
            "instanceId": str(self.service.node.instance_id),
            "protocol": REPLICATION_PROTOCOL,
            "voting": not self.service.read_only,
            # it can take what its leader keeps in the archive only from the archive itself
            "archive": self.service.replica.reads_archive(),
            "writer": self.service.db.committed_position,
            "epochs": [
                {
                    "epochId": e["epochId"],
                    "position": e["position"],
                    "epochNumber": e["epochNumber"],
                    "previousEpochPosition": e.get("previousEpochPosition", -1),
                }
                for e in self.service.db.epochs(64)
            ],
        }

    async def _replication_session(self, endpoint: tuple[str, int]) -> None:
        heartbeat = max(self.service.gossip_timeout, 1.0)
        async with self.service.transport.replicate(endpoint, heartbeat) as channel:
            # the epochs may be read from chunks in the archive only: then off the event loop (else
            # inline, as ever: the simulator's random sequence, and so its seeds, stay as they were)
            archived = self.service.replica.local_start()
            await channel.send_json(await self._blocking(self._hello) if archived else self._hello())
            first = await channel.receive(timeout=10)
            body = first.text if first is not None else None
            if isinstance(body, dict) and "verify" in body:
                common = await self._find_common_point(channel, body["verify"])
                end = self.service.db.committed_position
                verdict = catch_up_verdict(
                    common, end, self.service.commit_position, self.service.replica.local_start()
                )
                if verdict == "unrelated":
                    self.logger.error(
                        "This node's log (ending at %d) shares no record with the leader's back to their "
                        "common epoch at %d: it is not replicating, and it will not take this leader's "
                        "records until an operator restores it from a backup or another node",
                        end,
                        int(body["verify"].get("floor", -1)),
                    )
                    await channel.close()
                    raise EvdbError("no common record with the leader's log")
                if verdict == "diverged":
                    await channel.close()
                    # never cut what the cluster committed: something is wrong, say so and wait
                    self.logger.error(
                        "The leader's log and this node's differ at %d, below the commit position %d "
                        "this node knows: not truncating; it takes nothing from this leader",
                        common,
                        self.service.commit_position,
                    )
                    raise EvdbError("the logs differ below the commit position")
                if verdict == "truncate":
                    assert common is not None
                    await channel.close()
                    # shielded: a cancelled follower still finishes reopening its database (else the
                    # node would be left without one); _stop_following waits for it
                    self.service._reopening = asyncio.ensure_future(
                        self.service.node.truncate_and_reopen(common)
                    )
                    await asyncio.shield(self.service._reopening)
                    return
                await channel.send_json({"from": end})
                first = await channel.receive(timeout=10)
                body = first.text if first is not None else None
            if isinstance(body, dict) and "behindArchive" in body:
                await channel.close()
                await self._catch_up_from_archive(body)
                return  # subscribes again: the log now ends where the leader's local chunks start
            accepted = subscription(body, REPLICATION_PROTOCOL, endpoint)
            if accepted.refused is not None:
                if accepted.protocol:
                    await channel.close()
                raise EvdbError(accepted.refused)
            stream = FollowerStream(
                leader_epoch=accepted.epoch,
                read_only=self.service.read_only,
                resets_at=self._now() + self.service.reset_interval,
            )
            try:
                await self._receive_log(channel, stream)
            finally:
                receiver = self._receiver
                self._receiver = None
                if receiver is not None:
                    await self._blocking(receiver.abort)

    async def _catch_up_from_archive(self, body: dict) -> None:
        """The leader keeps what this node lacks in the archive only: take it from the archive, one
        chunk a step (evdb/archive/catchup.py); ArchiveError when it cannot (then it tries again)."""
        facts = archive_catchup.LeaderArchive.from_message(body)
        catch_up = await self._blocking(archive_catchup.ArchiveCatchUp, self.service.db, facts, self.logger)
        self.logger.info(
            "This node's log ends at %d, before the leader's local chunks (from %d): catching up from the "
            "archive %s",
            facts.follower_end,
            facts.local_start,
            catch_up.store.description,
        )
        while await self._blocking(catch_up.step):
            pass

    async def _receive_chunk_piece(self, channel: Channel, stream: FollowerStream, data: bytes) -> None:
        receiver = self._receiver
        assert receiver is not None
        await self._blocking(receiver.add, data)
        if not receiver.done:
            return
        self._receiver = None
        stream.receiving = None
        try:
            committed = await self._blocking(receiver.install)
        except (EvdbError, ValueError, OSError) as exc:
            reason = exc.reason if isinstance(exc, CorruptedFile) else str(exc)
            self.logger.error(
                "Refused chunk file %s (chunks %d-%d) from the leader: %s",
                receiver.file_name,
                receiver.start_number,
                receiver.end_number,
                reason,
            )
            await self._blocking(receiver.abort)
            raise
        self.logger.info(
            "Installed chunk file %s (chunks %d-%d, %d bytes) from the leader; the log now ends at %d",
            receiver.file_name,
            receiver.start_number,
            receiver.end_number,
            receiver.size,
            committed,
        )
        await channel.send_json({"ack": committed})

    async def _receive_log(self, channel: Channel, stream: FollowerStream) -> None:
        """Take the leader's messages in order. The stream is read by its own task into an inbox, so
        the records messages that arrive while this node writes and syncs the previous ones are written
        next together: one writer call and one fdatasync for all of them, acknowledged once with the
        highest durable position. The leader's commit messages are taken as they arrive, ahead of
        the records queued or being written (read your writes on followers: the rule in evdb/cluster/service.py)."""

        def take_commit(commit: int) -> None:
            if not stream.past_leader(self.service.term):  # else _apply_log stops the stream
                self.service._take_commit(stream, commit)

        first_grant = asyncio.Event()

        def take_grant(grant: dict) -> None:
            if not stream.past_leader(self.service.term):
                self.service.lease.granted(grant)
                self.service._wake_senders()  # sign-ins waiting for it go on (wait_sign_in)
                if self.service.lease.held >= 0:
                    first_grant.set()

        self.service.lease.new_stream()
        inbox = Inbox(take_commit, take_grant)
        reader = asyncio.create_task(inbox.fill(channel))
        asker = asyncio.create_task(self._ask_leases(channel, stream, first_grant))
        try:
            await self._apply_log(channel, inbox, stream)
        finally:
            reader.cancel()
            asker.cancel()
            await asyncio.wait((reader, asker))  # the caller's own cancellation still propagates
        if inbox.error is not None and not inbox.messages:
            raise inbox.error

    async def _ask_leases(self, channel: Channel, stream: FollowerStream, first_grant: asyncio.Event) -> None:
        """Ask the leader for a sign-in lease every quarter of one, while this node follows it (a voter
        in a newer term asks no more: see evdb/cluster/lease.py).

        The stream's second request goes as soon as its first grant arrives: a request naming a grant
        is what proves to the leader that this member follows it, and a leader that has just taken
        office signs nobody in before a majority has proved it; waiting a quarter of a lease for it
        kept a new leader from answering anyone for that long (0.5-0.8 s measured after a resign)."""
        with contextlib.suppress(PeerError):
            while not channel.closed:
                if not stream.past_leader(self.service.term):
                    await channel.send_json(self.service.lease.ask(self._now()))
                if first_grant.is_set():
                    await asyncio.sleep(self.service.lease.interval)
                    continue
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(first_grant.wait(), self.service.lease.interval)

    async def _apply_log(self, channel: Channel, inbox: Inbox, stream: FollowerStream) -> None:
        """Do what the stream's machine (evdb/cluster/following.py) says with each message."""
        while True:
            message = await inbox.get()
            if message is None:
                break
            route = stream.route(message.binary is not None, message.text, self.service.term)
            if route == "past leader":
                self.logger.warning(
                    "This node is in term %d, newer than the leader's epoch %d: "
                    "no longer replicating from it",
                    self.service.term,
                    stream.leader_epoch,
                )
                await channel.close()
                return
            if route == "piece":
                assert message.binary is not None
                await self._receive_chunk_piece(channel, stream, message.binary)
            elif route == "records":
                assert message.binary is not None
                pieces, commit = records_batch_of(message.binary, inbox)
                committed = await self.service.replica.write_replicated_batch(pieces)
                channel.post_bytes(POSITION.pack(committed))  # the acknowledgement: 8 bytes
                # what the leader's majority holds: reads here go no further (nor past this log)
                self.service._take_commit(stream, commit)
            elif route == "text":
                body = message.text
                assert isinstance(body, dict)
                if "handOver" in body:  # the leader resigned (evdb/cluster/service.py _step_down)
                    self.service.look_again_soon()
                    continue
                step = stream.text(body)
                if step.behind_archive is not None:
                    await channel.close()
                    await self._catch_up_from_archive(step.behind_archive)
                    return
                if step.chunk_file is not None:
                    self._receiver = await self._blocking(
                        ChunkFileReceiver, self.service.db, body, self.service.replica
                    )
                    stream.receiving = self._receiver.file_name
                elif step.complete is not None:
                    await self._blocking(self.service.replica.complete_replicated_chunk, step.complete)
                    await channel.send_json({"ack": self.service.db.committed_position})
                readable, caught_up = stream.settled(
                    body, self.service.db.committed_position, self.service.state
                )
                if readable is not None:
                    # what the leader's majority holds: reads here go no further (nor past this log)
                    self.service._advance_commit(readable)
                if caught_up is not None:
                    self.service.state = caught_up
                    self.logger.info(
                        "Caught up with the leader at position %d: now %s",
                        body["caughtUp"],
                        self.service.state,
                    )
            else:
                break
            # records this node made durable since the leader's commit position arrived (a chunk
            # file installed, a chunk completed): readers see them now, not at the next commit
            db = self.service.node.db
            readable = (
                None
                if db is None
                else stream.after_message(self.service.commit_position, db.committed_position)
            )
            if readable is not None:
                self.service._advance_commit(readable)
            if stream.resets(self._now()):
                self.logger.info("Resetting the replication connection (ConnectionResetInterval)")
                await channel.close()
                await self.service.transport.reset()
                return
