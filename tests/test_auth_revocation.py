"""Revoking a user (issue 33, point 1): every committed record of a user stream, whoever wrote it (the
user API, a raw append or delete of ``$user-<login>``, its metadata, a leader's record replicated to a
follower), empties the caches of that login before readers can see the record, and nothing is cached
again until they do: no cached sign-in outlives the record that revoked it.

Here on one database; tests/test_auth_revocation_cluster.py runs the same changes through a cluster
in this process and tests/cluster/test_user_revocation.py through a real one."""

from __future__ import annotations

import json

import pytest

from evdb.auth import UserStore, hash_password
from evdb.clock import ManualClock
from evdb.database import Database
from evdb.streams import NewEvent
from tests.hash_cost import SUITE_COST


@pytest.fixture
def db():
    database = Database.open(None)
    yield database
    database.close()


@pytest.fixture
def users(db: Database) -> UserStore:
    store = UserStore(db, hash_cost=SUITE_COST)
    store.ensure_defaults()
    store.create("eve", "Eve", ["$admins"], "eve-password")
    assert store.authenticate("eve", "eve-password") is not None
    assert store.cached("eve", "eve-password") is not None
    return store


def _record(login: str, password: str, **changes: object) -> NewEvent:
    salt, digest = hash_password(password, cost=SUITE_COST)
    data = {"loginName": login, "fullName": "", "groups": [], "salt": salt, "hash": digest, "disabled": False}
    data["scrypt"] = SUITE_COST.to_record()
    data.update(changes)
    return NewEvent("$UserUpdated", json.dumps(data).encode(), is_json=True)


def test_a_hard_delete_of_the_user_stream_revokes_at_once(db: Database, users: UserStore):
    header = "Basic ZXZlOmV2ZS1wYXNzd29yZA=="  # eve:eve-password
    assert users.principal_now(header) is not None  # remembered under the header too
    db.delete_stream("$user-eve", hard=True)  # not through the user API
    assert users.cached("eve", "eve-password") is None
    assert users.principal_now(header) is None
    assert users.authenticate("eve", "eve-password") is None


def test_a_raw_append_to_the_user_stream_revokes_the_old_password(db: Database, users: UserStore):
    db.append("$user-eve", [_record("eve", "new-password", groups=[])])
    assert users.cached("eve", "eve-password") is None
    assert users.authenticate("eve", "eve-password") is None
    principal = users.authenticate("eve", "new-password")
    assert principal is not None and not principal.is_admin  # the groups of the new record


def test_metadata_hiding_the_user_record_revokes(db: Database, users: UserStore):
    db.set_stream_metadata("$user-eve", {"$tb": 1})  # the only record is now truncated away
    assert users.cached("eve", "eve-password") is None
    assert users.authenticate("eve", "eve-password") is None


def test_other_users_stay_cached(db: Database, users: UserStore):
    assert users.authenticate("admin", "changeit") is not None
    users.set_disabled("eve", True)
    assert users.cached("admin", "changeit") is not None
    assert users.cached("eve", "eve-password") is None


def test_a_change_committed_but_not_yet_visible(db: Database, users: UserStore):
    """A cluster member commits a record before readers see it (its read limit is the cluster's commit
    position): the cached sign-in is gone as the record commits, and while readers still see the old
    record a sign-in that reads it answers but is not cached; once the read limit passes the record,
    the old password is refused."""
    assert users.authenticate("admin", "changeit") is not None  # another user, cached
    db.set_read_limit(db.committed_position)  # readers see only what is committed so far
    db.append("$user-eve", [_record("eve", "new-password")])  # committed here, not readable
    assert users.cached("eve", "eve-password") is None
    assert users.authenticate("eve", "eve-password") is not None  # the record readers still see
    assert users.cached("eve", "eve-password") is None  # ... but not kept
    header = "Basic YWRtaW46Y2hhbmdlaXQ="  # admin:changeit: still cached, not remembered meanwhile
    assert users.principal_now(header) is not None and users.by_header(header) is None

    db.set_read_limit(db.committed_position)  # the cluster committed it: readers see it
    assert users.authenticate("eve", "eve-password") is None
    assert users.authenticate("eve", "new-password") is not None
    assert users.cached("eve", "new-password") is not None  # cached again once visible
    assert users.principal_now(header) is not None and users.by_header(header) is not None


def test_a_change_never_made_visible_does_not_stop_caching_after_close(db: Database, users: UserStore):
    db.set_read_limit(db.committed_position)
    db.append("$user-eve", [_record("eve", "new-password")])
    assert users._changing == 1
    db.close()  # the database a truncation reopens: its readers never see the record
    assert users._changing == 0


def test_a_user_record_that_expires_with_time_is_never_cached():
    """``$maxAge`` on ``$user-eve`` hides her record once it is old enough, with no record written to
    say so: her sign-ins are judged each time, and refused once it expired."""
    clock = ManualClock()
    database = Database.open(None, clock=clock)
    try:
        users = UserStore(database, hash_cost=SUITE_COST)
        users.ensure_defaults()
        users.create("eve", "Eve", [], "eve-password")
        database.set_stream_metadata("$user-eve", {"$maxAge": 60})
        assert users.authenticate("eve", "eve-password") is not None
        assert users.cached("eve", "eve-password") is None
        clock.advance(61)
        assert users.authenticate("eve", "eve-password") is None
    finally:
        database.close()
