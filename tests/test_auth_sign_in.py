"""Signing in from the event loop (issue 24): cached credentials are answered on the loop, only a miss
(the user record read and the scrypt hash) goes to a worker thread; every change of a user drops what
was cached of it, also when the change lands while a sign-in reads the record."""

from __future__ import annotations

import asyncio
import threading

import pytest

from evdb import auth
from evdb.auth import UserStore
from evdb.database import Database


class CountingStore(UserStore):
    """The real store, counting record reads and noting the thread each ran on."""

    def __init__(self, db: Database) -> None:
        super().__init__(db)
        self.reads: list[int] = []  # thread ids
        self.during_read = None

    def _record(self, login: str) -> dict | None:
        self.reads.append(threading.get_ident())
        record = super()._record(login)
        if self.during_read is not None:  # a change that lands just after this read
            action, self.during_read = self.during_read, None
            action()
        return record


@pytest.fixture
def users():
    db = Database.open(None)
    store = CountingStore(db)
    store.ensure_defaults()
    store.create("alice", "Alice", ["readers"], "alice-password")
    store.reads.clear()
    yield store
    db.close()


@pytest.fixture
def thread_hops(monkeypatch):
    """How many times evdb.auth went to a worker thread."""
    hops: list[str] = []
    real = asyncio.to_thread

    async def counting(func, /, *args, **kwargs):
        hops.append(getattr(func, "__name__", repr(func)))
        return await real(func, *args, **kwargs)

    monkeypatch.setattr(auth.asyncio, "to_thread", counting)
    return hops


async def test_a_miss_goes_to_a_thread_and_a_cached_sign_in_stays_on_the_loop(users, thread_hops):
    loop_thread = threading.get_ident()
    first = await users.sign_in("alice", "alice-password")
    assert first is not None and first.name == "alice" and "readers" in first.roles
    assert thread_hops == ["authenticate"]
    assert users.reads and all(t != loop_thread for t in users.reads)  # the read ran off the loop

    users.reads.clear()
    again = await users.sign_in("alice", "alice-password")
    assert again == first
    assert thread_hops == ["authenticate"]  # no second hop
    assert users.reads == []  # nothing read, nothing hashed


async def test_wrong_or_unknown_credentials_are_never_cached(users, thread_hops):
    assert await users.sign_in("alice", "wrong") is None
    assert await users.sign_in("alice", "wrong") is None
    assert await users.sign_in("nobody", "alice-password") is None
    assert thread_hops == ["authenticate"] * 3
    assert users.cached("alice", "wrong") is None


async def test_a_change_of_the_user_drops_the_cached_sign_in(users, thread_hops):
    assert await users.sign_in("alice", "alice-password") is not None
    await asyncio.to_thread(users.reset_password, "alice", "new-password")
    assert users.cached("alice", "alice-password") is None
    assert await users.sign_in("alice", "alice-password") is None
    assert await users.sign_in("alice", "new-password") is not None

    await asyncio.to_thread(users.set_disabled, "alice", True)
    assert await users.sign_in("alice", "new-password") is None


def test_a_change_while_a_sign_in_reads_the_record_is_not_cached(users):
    """The sign-in that read the record before a password reset answers with what it read, but does not
    keep it: the next sign-in with the old password reads the new record and is refused."""
    users.during_read = lambda: users.reset_password("alice", "new-password")
    assert users.authenticate("alice", "alice-password") is not None  # it read the old record
    assert users.cached("alice", "alice-password") is None
    assert users.authenticate("alice", "alice-password") is None
    assert users.authenticate("alice", "new-password") is not None
    assert users.cached("alice", "new-password") is not None


def test_the_cache_keeps_the_most_recent_sign_ins(users):
    small = CountingStore(users._db)
    small._cache_size = 1
    assert small.authenticate("alice", "alice-password") is not None
    assert small.authenticate("admin", "changeit") is not None
    assert small.cached("alice", "alice-password") is None  # the oldest was dropped
    assert small.cached("admin", "changeit") is not None
