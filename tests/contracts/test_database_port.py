"""The cluster's database port (evdb/cluster/ports.py ClusterDatabase, with evdb/cluster/replica.py's
ReplicationLog): one contract, inherited by a test class for the real evdb.database.Database (on a
temporary folder, replicated through ChunkLogReplication) and one for the simulator's SimDatabase, so
the fake the simulation checks the cluster against cannot drift from the database a node runs.

The meta-test at the end fails when the fake lacks a member of the port that the real one has, or
takes other parameters for it."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from port_members import drift, port_members

from evdb.cluster import sim
from evdb.cluster.ports import ClusterDatabase
from evdb.cluster.replica import ChunkLogReplication, ReplicationLog
from evdb.cluster.service import ChunkFileReceiver, chunk_file_header, chunk_file_pieces
from evdb.database import Database
from evdb.errors import NotLeader, StorageError, WrongExpectedVersion
from evdb.streams import AppendResult, NewEvent

LEADER = uuid.UUID(int=7)


def _event(n: int) -> NewEvent:
    return NewEvent("E", b"{}", b"", uuid.UUID(int=1000 + n), True)


class Harness:
    """One database of the implementation under test, its ReplicationLog, and a way to wait for the
    answer of an asynchronous write."""

    db: Any
    replica: ReplicationLog

    def settle(self, future: Any) -> Any:
        raise NotImplementedError

    def settle_briefly(self, future: Any) -> Any:
        """As settle, but TimeoutError unless answered within 0.2 s (simulated, for the simulator)."""
        raise NotImplementedError

    def append(self, stream: str, count: int = 1, first: int = 0, expected: int = -2) -> AppendResult:
        events = [_event(first + i) for i in range(count)]
        return self.settle(self.db.append_async(stream, events, expected))

    def run(self, coroutine: Any) -> Any:
        """Run ``coroutine`` on the implementation's event loop (a follower's stream runs there)."""
        raise NotImplementedError


class DatabasePortContract:
    """What ClusterService relies on of a member's database. Subclasses give ``open()``: a fresh,
    empty database (the test closes nothing: the fixture does)."""

    def open(self) -> Harness:
        raise NotImplementedError

    # -- epochs and terms
    def test_a_new_log_is_empty(self) -> None:
        h = self.open()
        assert h.db.committed_position == 0 and h.db.readable_position == 0
        assert h.db.epochs() == []

    def test_epochs_are_listed_newest_first_each_naming_the_one_before(self) -> None:
        db = self.open().db
        first = db.write_epoch(1, LEADER)
        second = db.write_epoch(2, LEADER)
        epochs = db.epochs()
        assert [e["epochNumber"] for e in epochs] == [2, 1]
        assert [e["position"] for e in epochs] == [second, first]
        assert epochs[0]["previousEpochPosition"] == first and epochs[1]["previousEpochPosition"] == -1
        assert {e["leaderInstanceId"] for e in epochs} == {str(LEADER)}
        assert epochs[0]["epochId"] != epochs[1]["epochId"]
        assert db.epochs(1) == epochs[:1]
        assert db.committed_position > second  # written and synced in the one call
        assert db.log.checkpoints.proposal.value >= 2

    def test_the_proposal_checkpoint_holds_a_vote(self) -> None:
        db = self.open().db
        db.log.checkpoints.proposal.write(5)
        assert db.log.checkpoints.proposal.value == 5

    # -- appends
    def test_an_append_is_answered_durable_at_its_position(self) -> None:
        h = self.open()
        h.db.write_epoch(1, LEADER)
        seen: list[int] = []
        h.db.add_commit_listener(seen.append)
        one = h.append("s", 1)
        two = h.append("s", 2, first=1)
        assert (one.first_event_number, one.next_expected_version) == (0, 0)
        assert (two.first_event_number, two.next_expected_version) == (1, 2)
        assert one.position < two.position < h.db.committed_position
        newest = h.replica.record_checks(h.db.committed_position, 0, 2)
        assert two.position == newest[0][0] and one.position < newest[1][0]  # its last record's
        assert seen and seen[-1] == h.db.readable_position == h.db.committed_position
        h.db.remove_commit_listener(seen.append)
        h.append("s", 1, first=3)
        assert seen[-1] < h.db.committed_position

    def test_a_retried_append_is_answered_as_the_first_without_a_second_copy(self) -> None:
        h = self.open()
        h.db.write_epoch(1, LEADER)
        first = h.append("s", 1)
        end = h.db.committed_position
        again = h.append("s", 1)
        assert again.position == first.position and again.next_expected_version == 0
        assert h.db.committed_position == end
        pair = h.append("s", 2, first=1)
        assert h.append("s", 2, first=1).position == pair.position  # a pair's answer: its last record

    def test_an_append_at_another_version_is_refused(self) -> None:
        h = self.open()
        h.db.write_epoch(1, LEADER)
        h.append("s", 1)
        with pytest.raises(WrongExpectedVersion):
            h.append("s", 1, first=5, expected=3)

    def test_the_write_permit_refuses_appends(self) -> None:
        h = self.open()
        h.db.write_epoch(1, LEADER)
        end = h.db.committed_position
        h.db.write_permit = lambda: False
        with pytest.raises(NotLeader):
            h.append("s", 1)
        assert h.db.committed_position == end
        h.db.write_permit = lambda: True
        h.append("s", 1)

    def test_the_replication_gate_holds_answers_until_it_releases_them(self) -> None:
        h = self.open()
        h.db.write_epoch(1, LEADER)
        held: list[tuple[int, list]] = []
        h.db.replication_gate = lambda end, answers: held.append((end, answers))
        future = h.db.append_async("s", [_event(0)], -2)
        with pytest.raises(TimeoutError):
            h.settle_briefly(future)
        assert held and held[-1][0] == h.db.committed_position
        for answer_future, result in held[-1][1]:
            answer_future.set_result(result)
        assert future.result().first_event_number == 0

    def test_the_read_limit_bounds_what_readers_see(self) -> None:
        h = self.open()
        epoch = h.db.write_epoch(1, LEADER)
        h.append("s", 3)
        h.db.set_read_limit(epoch)
        assert h.db.readable_position == epoch < h.db.committed_position
        assert h.db.commit_limit_at_open() >= epoch
        h.db.set_read_limit(h.db.committed_position + 10_000)
        assert h.db.readable_position == h.db.committed_position

    # -- replication
    def _leader_with_records(self, events: int = 5) -> Harness:
        leader = self.open()
        leader.db.write_epoch(1, LEADER)
        for i in range(events):
            leader.append(f"s-{i % 2}", 1, first=i)
        return leader

    @staticmethod
    def _ship(leader: Harness, follower: Harness) -> None:
        """What a leader streams, the follower applies, piece by piece."""
        position = follower.db.committed_position
        while position < leader.db.committed_position:
            at, frames, chunk_end = leader.replica.read_raw(position, 1 << 20)
            if frames:
                position = follower.replica.apply_replicated(at, frames)
            elif chunk_end is not None:
                follower.replica.complete_replicated_chunk(chunk_end)
                position = chunk_end
            else:
                break

    def test_a_follower_takes_the_leaders_records_as_framed(self) -> None:
        leader, follower = self._leader_with_records(), self.open()
        self._ship(leader, follower)
        assert follower.db.committed_position == leader.db.committed_position
        assert follower.db.epochs() == leader.db.epochs()
        assert follower.db.log.checkpoints.proposal.value >= 1
        checks = leader.replica.record_checks(leader.db.committed_position, 0, 100)
        assert len(checks) >= 6  # the epoch and five events, newest first
        assert [c[0] for c in checks] == sorted((c[0] for c in checks), reverse=True)
        for position, size, fingerprint in checks:
            assert follower.replica.has_record(position, size, fingerprint)
            assert not follower.replica.has_record(position, size, fingerprint ^ 1)
        assert not follower.replica.has_record(checks[0][0] + 1, checks[0][1], checks[0][2])

    def test_a_follower_writes_a_batch_of_messages_from_its_event_loop(self) -> None:
        leader, follower = self._leader_with_records(), self.open()
        checks = leader.replica.record_checks(leader.db.committed_position, 0, 100)
        middle = checks[len(checks) // 2][0]  # a record boundary: two messages, as a stream sends them
        first_at, first, _ = leader.replica.read_raw(0, 1 << 20, None)
        head = first[:middle]
        rest_at, rest, _ = leader.replica.read_raw(middle, 1 << 20, None)
        committed = follower.run(follower.replica.write_replicated_batch([(first_at, head), (rest_at, rest)]))
        assert committed == follower.db.committed_position == leader.db.committed_position
        assert follower.db.epochs() == leader.db.epochs()
        for check in checks:
            assert follower.replica.has_record(*check)
        with pytest.raises(StorageError):  # where the log ends, as apply_replicated_batch
            follower.run(follower.replica.write_replicated_batch([(rest_at, rest)]))
        assert follower.db.committed_position == committed

    def test_replicated_records_must_start_where_the_log_ends(self) -> None:
        leader, follower = self._leader_with_records(), self.open()
        at, frames, _ = leader.replica.read_raw(0, 1 << 20)
        with pytest.raises(StorageError):
            follower.replica.apply_replicated(at + 1, frames)
        assert follower.db.committed_position == 0

    def _leader_past_one_chunk(self) -> Harness:
        leader = self.open()
        leader.db.write_epoch(1, LEADER)
        n = 0
        while leader.db.committed_position <= leader.db.config.chunk_size:
            leader.append("s", 1, first=n)
            n += 1
        return leader

    def test_a_completed_chunk_goes_whole_as_a_file(self) -> None:
        leader, follower = self._leader_past_one_chunk(), self.open()
        assert leader.replica.replication_chunk(1) is None  # not a chunk's start
        chunk = leader.replica.replication_chunk(0)
        assert chunk is not None and chunk.start_number == chunk.end_number == 0
        assert chunk.end_position == leader.db.config.chunk_size
        receiver = ChunkFileReceiver(follower.db, chunk_file_header(chunk), follower.replica)
        for piece in chunk_file_pieces(chunk, 1000):
            receiver.add(piece)
        assert receiver.install() == chunk.end_position == follower.db.committed_position
        assert follower.db.epochs() == leader.db.epochs()
        for check in leader.replica.record_checks(chunk.end_position, 0, 1000):
            assert follower.replica.has_record(*check)
        # the completed chunk's end is known on both, and the rest streams on from there
        ends = leader.replica.completed_chunk_ends(0, leader.db.committed_position)
        assert follower.replica.completed_chunk_ends(0, chunk.end_position) == ends
        self._ship(leader, follower)
        assert follower.db.committed_position == leader.db.committed_position

    def test_a_damaged_chunk_file_is_refused_and_changes_nothing(self) -> None:
        leader, follower = self._leader_past_one_chunk(), self.open()
        chunk = leader.replica.replication_chunk(0)
        assert chunk is not None
        receiver = ChunkFileReceiver(follower.db, chunk_file_header(chunk), follower.replica)
        pieces = list(chunk_file_pieces(chunk, 1000))
        damaged = bytearray(pieces[0])
        damaged[-1] ^= 0xFF
        for piece in [bytes(damaged), *pieces[1:]]:
            receiver.add(piece)
        with pytest.raises(StorageError):
            receiver.install()
        assert follower.db.committed_position == 0 and follower.db.epochs() == []


# -- the real database --------------------------------------------------------------------------------
class _RealHarness(Harness):
    def __init__(self, db: Database) -> None:
        self.db = db
        self.replica = ChunkLogReplication(db)

    def settle(self, future: Any) -> Any:
        return future.result(timeout=30)

    def settle_briefly(self, future: Any) -> Any:
        return future.result(timeout=0.2)

    def run(self, coroutine: Any) -> Any:
        return asyncio.run(coroutine)


class TestRealDatabase(DatabasePortContract):
    @pytest.fixture(autouse=True)
    def _folder(self, tmp_path, clock) -> Iterator[None]:
        self._opened: list[Database] = []
        self._path, self._clock = tmp_path, clock
        yield
        for db in self._opened:
            db.close()

    def open(self) -> Harness:
        db = Database.open(
            str(self._path / f"db{len(self._opened)}"),
            clock=self._clock,
            chunk_size=4096,
            existence_filter_capacity=1000,
            max_memtable_entries=64,
        )
        self._opened.append(db)
        return _RealHarness(db)

    def test_a_followers_batch_goes_to_the_writer_thread_not_the_loops_pool(self) -> None:
        """The real log hands a follower's batch to the database's writer thread, answered with one
        wake-up of the loop: no thread of the loop's pool (and its concurrent future) in between."""
        leader, follower = self._leader_with_records(), self.open()
        at, frames, _ = leader.replica.read_raw(0, 1 << 20, None)
        threads: list[str] = []
        follower.db.add_commit_listener(lambda _: threads.append(threading.current_thread().name))

        class NoPool(concurrent.futures.ThreadPoolExecutor):
            def submit(self, *args: Any, **kwargs: Any) -> Any:
                raise AssertionError("the loop's thread pool was used")

        async def write() -> int:
            asyncio.get_running_loop().set_default_executor(NoPool(max_workers=1))
            return await follower.replica.write_replicated_batch([(at, frames)])

        assert asyncio.run(write()) == leader.db.committed_position
        assert threads and set(threads) == {"evdb-writer"}, threads


# -- the simulator's --------------------------------------------------------------------------------
class _SimHarness(Harness):
    def __init__(self, simulation: sim.Simulation, node: sim.SimNode) -> None:
        self.sim = simulation
        self.db = node.db = sim.SimDatabase(simulation, node, node.durable)
        self.replica = self.db

    def settle(self, future: Any) -> Any:
        return self.sim.loop.run_until_complete(asyncio.wrap_future(future, loop=self.sim.loop))

    def settle_briefly(self, future: Any) -> Any:
        self.sim.loop.run_until_complete(asyncio.sleep(0.2))
        if not future.done():
            raise TimeoutError
        return future.result()

    def run(self, coroutine: Any) -> Any:
        return self.sim.loop.run_until_complete(coroutine)


class TestSimDatabase(DatabasePortContract):
    @pytest.fixture(autouse=True)
    def _simulation(self) -> Iterator[None]:
        self._sim = sim.Simulation(1, nodes=5)
        self._used = 0
        yield
        self._sim.loop.close()

    def open(self) -> Harness:
        node = self._sim.nodes[self._used]
        self._used += 1
        return _SimHarness(self._sim, node)


# -- the meta-test ----------------------------------------------------------------------------------
PORTS = [
    (ClusterDatabase, Database, sim.SimDatabase),
    (ReplicationLog, ChunkLogReplication, sim.SimDatabase),
]


@pytest.mark.parametrize(("port", "real", "fake"), PORTS, ids=["ClusterDatabase", "ReplicationLog"])
def test_the_fake_has_every_member_of_the_port_that_the_real_one_has(port, real, fake):
    assert port_members(port)
    assert not drift(port, real, fake)


def test_the_meta_test_sees_a_missing_or_different_member():
    members = dict(vars(sim.SimDatabase))
    del members["install_replicated_chunk"]
    lacking = type("Lacking", (), members)
    assert drift(ReplicationLog, ChunkLogReplication, lacking) == [
        "Lacking lacks ReplicationLog.install_replicated_chunk"
    ]

    def epochs(self, count: int = 64) -> list[dict]:
        return []

    other = type("Other", (sim.SimDatabase,), {"epochs": epochs})
    assert drift(ClusterDatabase, Database, other) == [
        "Other.epochs takes [('self', <_ParameterKind.POSITIONAL_OR_KEYWORD: 1>), "
        "('count', <_ParameterKind.POSITIONAL_OR_KEYWORD: 1>)]"
    ]
