"""Read your writes on followers (the rule at the top of evdb/cluster/service.py): once the leader has
answered a write, every follower that held a durable copy of it when the leader answered shows it to
any read that reaches it after the leader's commit message does. The leader writes the commit message
in the loop step that releases the answers, ahead of them; a follower applies it the moment its
stream's reader takes it, never behind a records write in progress.

The simulator checks the rule at every write a leader answers (Simulation.check_read_your_writes): the
commit message covering the write was already sent to each follower holding it, and that follower shows
the write the instant the message arrives. Here: the check runs and passes under seeds, a seed replays
exactly, the checker sees a leader that answers before sending and a follower that applies commit
messages late, and the follower's reader takes commit messages ahead of the queued records."""

from __future__ import annotations

import asyncio
import math
import struct
from typing import Any

import pytest

from evdb.cluster import receiving, sim
from evdb.cluster import service as cluster_service
from evdb.cluster.following import FollowerStream
from evdb.cluster.transport import Message

SECONDS = 4.0
SEEDS = range(6)


def _counting_checks(monkeypatch) -> list[int]:
    calls = [0]
    shown = sim.Simulation._check_shown

    def counted(self, *args):  # type: ignore[no-untyped-def]
        calls[0] += 1
        shown(self, *args)

    monkeypatch.setattr(sim.Simulation, "_check_shown", counted)
    return calls


def test_followers_show_an_answered_write_when_the_commit_message_arrives(monkeypatch):
    calls = _counting_checks(monkeypatch)
    for seed in SEEDS:
        result = sim.run_seed(seed, seconds=SECONDS)
        assert result.ok, (seed, result.violations)
    assert calls[0] > 200, calls  # the rule was checked at hundreds of answers (each follower holding it)


def test_a_seed_replays_exactly_with_commit_messages():
    a = sim.run_seed(31, seconds=SECONDS)
    b = sim.run_seed(31, seconds=SECONDS)
    assert a.ok, a.violations
    assert a.replay_key == b.replay_key


def _violations(seeds: range) -> list[str]:
    return [v for seed in seeds for v in sim.run_seed(seed, seconds=SECONDS).violations]


def test_the_checker_sees_a_leader_that_answers_before_sending_the_commit(monkeypatch):
    post = cluster_service.ClusterService._post_commit

    def late(self, position):  # type: ignore[no-untyped-def]
        self._loop.call_later(0.001, post, self, position)  # a millisecond after the answers

    monkeypatch.setattr(cluster_service.ClusterService, "_post_commit", late)
    violations = _violations(range(3))
    assert any("before sending" in v for v in violations), violations[:5]


def test_the_checker_sees_a_follower_that_applies_commit_messages_late(monkeypatch):
    take = cluster_service.ClusterService._take_commit

    def late(self, stream, commit):  # type: ignore[no-untyped-def]
        if self.state in ("Leader", "ResigningLeader"):
            take(self, stream, commit)
        else:  # as behind a records write in progress (a simulated sync takes up to 3 ms)
            self._loop.call_later(0.002, take, self, stream, commit)

    monkeypatch.setattr(cluster_service.ClusterService, "_take_commit", late)
    violations = _violations(range(3))
    assert any("did not show" in v for v in violations), violations[:5]


class _Stream:
    """A replication stream's far end: the messages the leader sent, in order."""

    def __init__(self, *messages: Message) -> None:
        self.messages = list(messages)

    async def receive(self, timeout: float | None = None) -> Message | None:
        await asyncio.sleep(0)
        return self.messages.pop(0) if self.messages else None


def _records(position: int, frames: bytes, commit: int) -> Message:
    return Message(binary=struct.pack("<qq", position, commit) + frames)


def test_the_follower_takes_commit_messages_as_they_arrive_and_queues_the_rest():
    taken: list[int] = []
    inbox = receiving.Inbox(taken.append)
    stream = _Stream(
        _records(0, b"aa", commit=-1),
        Message(binary=struct.pack("<q", 2)),
        _records(2, b"bbb", commit=2),
        Message(text={"complete": 9}),
        Message(binary=struct.pack("<q", 5)),
    )

    async def run() -> list[Any]:
        await inbox.fill(stream)  # type: ignore[arg-type]
        return list(inbox.messages)

    queued = asyncio.run(run())
    assert taken == [2, 5]  # not queued behind the records (a write may be in progress)
    assert queued[:3] == [_records(0, b"aa", -1), _records(2, b"bbb", 2), Message(text={"complete": 9})]
    assert queued[3] is None  # the end of the stream


@pytest.mark.parametrize("durable_end", [10, 4])
def test_a_follower_shows_up_to_the_commit_it_knows_as_far_as_its_log_is_durable(durable_end):
    """The leader's commit position beyond this log's durable end is kept, and applies when the
    follower's write of those records ends."""
    limits: list[int] = []

    class Db:
        committed_position = durable_end

        def set_read_limit(self, position: int) -> None:
            limits.append(position)

    class Node:
        db = Db()

    service: Any = cluster_service.ClusterService.__new__(cluster_service.ClusterService)
    service.node, service.cluster_size, service.state = Node(), 3, "Follower"
    service.commit_position = -1
    stream = FollowerStream(leader_epoch=1, read_only=False, resets_at=math.inf)
    service._take_commit(stream, 8)
    assert limits == [min(8, durable_end)]
    Node.db.committed_position = 12  # the follower's write of the rest ended
    service._take_commit(stream, 6)  # an older commit position, carried by the records it just wrote
    assert limits[-1] == 8 and stream.leader_commit == 8


def test_a_posted_message_is_written_at_once_and_in_order_over_a_real_websocket():
    """The real channel (aiohttp): post_bytes writes the frame before it returns, in order with the
    messages sent around it, on both the client's and the server's end; on a closed stream it says so."""
    import aiohttp
    from aiohttp import web

    from evdb.cluster.transport import PeerError, _WebSocketChannel

    async def run() -> tuple[list[Any], list[Any]]:
        received: list[Any] = []
        server_got = asyncio.Event()

        async def handler(request: web.Request) -> web.WebSocketResponse:
            ws = web.WebSocketResponse()
            await ws.prepare(request)
            channel = _WebSocketChannel(ws)
            while (message := await channel.receive()) is not None:
                received.append(message.binary if message.binary is not None else message.text)
                if message.text == "done":
                    channel.post_bytes(struct.pack("<q", 7))  # answered from the server's end too
                    await channel.send_json("bye")
                    server_got.set()
            return ws

        app = web.Application()
        app.router.add_get("/ws", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        back: list[Any] = []
        try:
            async with aiohttp.ClientSession() as session:
                ws = await session.ws_connect(f"http://127.0.0.1:{port}/ws")
                channel = _WebSocketChannel(ws)
                await channel.send_json("first")
                channel.post_bytes(struct.pack("<q", 5))
                await channel.send_bytes(b"x" * 20)
                channel.post_bytes(struct.pack("<q", 6))
                await channel.send_json("done")
                await server_got.wait()
                for _ in range(2):
                    message = await channel.receive(timeout=5)
                    assert message is not None
                    back.append(message.binary if message.binary is not None else message.text)
                await channel.close()
                with pytest.raises(PeerError):
                    channel.post_bytes(struct.pack("<q", 8))
        finally:
            await runner.cleanup()
        return received, back

    received, back = asyncio.run(run())
    assert received == ["first", struct.pack("<q", 5), b"x" * 20, struct.pack("<q", 6), "done"]
    assert back == [struct.pack("<q", 7), "bye"]
