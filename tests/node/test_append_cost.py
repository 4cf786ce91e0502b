"""What an HTTP append costs the node, kept from coming back (issue 24, "HTTP appends: the node's cost
per append"): a write awaited on the event loop makes no concurrent future (and its lock and condition)
that nobody waits on, and the append's answer keeps its exact shape with its headers built once."""

from __future__ import annotations

import concurrent.futures
import json
import queue
import uuid
from collections.abc import Iterator

import pytest

from evdb.database import Database
from evdb.database.answers import LoopAnswer
from evdb.errors import DatabaseClosed
from evdb.streams import NewEvent


def event() -> NewEvent:
    return NewEvent("Happened", b"{}", b"", uuid.uuid4(), True)


@pytest.fixture
def db() -> Iterator[Database]:
    with Database.open(None) as database:
        yield database


class RecordedQueue:
    """The writer's queue, recording what is put in it (the writer keeps reading the queue itself)."""

    def __init__(self, inner: queue.SimpleQueue) -> None:
        self.inner = inner
        self.requests: list = []

    def put(self, request: object) -> None:
        self.requests.append(request)
        self.inner.put(request)

    def empty(self) -> bool:
        return self.inner.empty()


class CountedFutures:
    """Counts the concurrent futures made while it is active."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.made = 0
        original = concurrent.futures.Future.__init__

        def counted(future: concurrent.futures.Future) -> None:
            self.made += 1
            original(future)

        monkeypatch.setattr(concurrent.futures.Future, "__init__", counted)


async def test_a_loop_append_makes_no_concurrent_future(db: Database, monkeypatch) -> None:
    writer = db._writer
    assert writer is not None
    queued = RecordedQueue(writer._queue)
    monkeypatch.setattr(writer, "_queue", queued)
    counter = CountedFutures(monkeypatch)
    future = db.append_on_loop("cost", [event()])
    deletion = db.delete_stream_on_loop("other", hard=True)
    made = counter.made  # counted before anything else runs on the loop
    monkeypatch.undo()
    assert made == 0
    assert [type(r.future) for r in queued.requests] == [LoopAnswer, LoopAnswer]
    assert (await future).first_event_number == 0
    assert (await deletion).position >= 0


async def test_the_sync_and_async_paths_still_answer_with_concurrent_futures(db: Database) -> None:
    assert db.append("s", [event()]).first_event_number == 0
    pending = db.append_async("s", [event()])
    assert isinstance(pending, concurrent.futures.Future)
    assert pending.result(timeout=10).first_event_number == 1


async def test_a_closed_database_refuses_a_loop_append_before_queueing_it(monkeypatch) -> None:
    database = Database.open(None)
    database.close()
    with pytest.raises(DatabaseClosed):
        database.append_on_loop("s", [event()])


async def test_the_append_answer_keeps_its_shape(client) -> None:
    response = await client.post(
        "/streams/shape-1",
        content=b'{"a": 1}',
        headers={"Content-Type": "application/json", "ES-EventType": "T", "ES-EventId": str(uuid.uuid4())},
    )
    assert response.status_code == 201
    assert response.headers["Content-Type"] == "application/json; charset=utf-8"
    assert response.headers["Location"].endswith("/streams/shape-1/0")
    assert (
        response.content
        == b'{"nextExpectedVersion": 0, "position": '
        + str(json.loads(response.content)["position"]).encode()
        + b"}"
    )
    again = await client.post(
        "/streams/shape-1",
        content=b"[1, 2]",
        headers={
            "Content-Type": "application/json",
            "Kurrent-EventType": "T",
            "Kurrent-EventId": str(uuid.uuid4()),
        },
    )
    assert again.status_code == 201
    assert json.loads(again.content)["nextExpectedVersion"] == 1
    assert again.headers["Location"].endswith("/streams/shape-1/1")


async def test_a_refused_append_writes_nothing(client, anon) -> None:
    denied = await anon.post(
        "/streams/$system-ish",
        content=b"{}",
        headers={"Content-Type": "application/json", "ES-EventType": "T"},
    )
    assert denied.status_code == 401
    bad = await client.post(
        "/streams/shape-2",
        content=b"{not json",  # an events array that is not JSON (a single event's body is stored as is)
        headers={"Content-Type": "application/vnd.eventstore.events+json"},
    )
    assert bad.status_code == 400
    read = await client.get("/streams/shape-2", headers={"Accept": "application/json"})
    assert read.status_code == 404
