from __future__ import annotations

import logging

import pytest

from evdb.database import Database
from evdb.scavenge.service import ScavengeRequest, ScavengeService

CHUNK = 64 * 1024


class Harness:
    """A database plus its scavenge service, with helpers to look at what survived."""

    def __init__(self, path, clock, merging: bool = False) -> None:
        self.path = path
        self.clock = clock
        self.merging = merging
        self.open()

    def open(self) -> None:
        self.db = Database.open(
            str(self.path / "db"),
            clock=self.clock,
            chunk_size=CHUNK,
            max_memtable_entries=64,
            existence_filter_capacity=10_000,
        )
        self.service = ScavengeService(
            self.db,
            state_path=ScavengeService.state_path_for(str(self.path / "db" / "index")),
            logger=logging.getLogger("test.scavenge"),
            merging=self.merging,
            clock=self.clock,
        )

    def close(self) -> None:
        self.service.close()
        self.db.close()

    def reopen(self) -> None:
        self.close()
        self.open()

    def scavenge(self, **kw) -> tuple[str, str]:
        scavenge_id = self.service.start(ScavengeRequest(**kw))
        assert self.service.wait(60)
        last = self.service.last()
        assert last[0] == scavenge_id
        return last

    def complete_chunk(self) -> None:
        self.db.call_in_writer(lambda ctx: ctx.complete_active_chunk())

    def survivors(self) -> list[tuple[str, int]]:
        """(stream, number) of the user streams' records and their metastreams, in $all order."""
        out = []
        for e in self.db.iter_all(0):
            if e.stream.startswith("$$$") or (e.stream.startswith("$") and not e.stream.startswith("$$")):
                continue
            out.append((e.stream, e.event_number))
        return out

    def index_numbers(self, stream: str) -> list[int]:
        from evdb.index.hashing import stream_hash

        return sorted(n for n, _ in self.db.index.iter_forward(stream_hash(stream), 0))


@pytest.fixture
def harness(tmp_path, clock):
    h = Harness(tmp_path, clock)
    yield h
    h.close()


@pytest.fixture
def merging_harness(tmp_path, clock):
    h = Harness(tmp_path, clock, merging=True)
    yield h
    h.close()


@pytest.fixture
def make_harness(clock):
    made = []

    def make(path, merging: bool = False) -> Harness:
        h = Harness(path, clock, merging=merging)
        made.append(h)
        return h

    yield make
    for h in made:
        try:
            h.close()
        except Exception:
            pass
