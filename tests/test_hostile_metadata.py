"""Stream metadata validation (evdb.streams.StreamMetadata, used by HTTP, gRPC and the database):
the numeric well-known keys are KurrentDB's signed 64-bit integers with their minimums, and ``$acl``
role lists are strings or lists of strings. Refused metadata writes nothing."""

from __future__ import annotations

import json

import pytest

from evdb.errors import InvalidInput
from evdb.streams import NewEvent, StreamMetadata
from tests.hash_cost import SUITE_COST

INT64_MAX = 2**63 - 1

REFUSED = [
    ("$maxAge", 2**63),
    ("$maxAge", 2**64),
    ("$maxAge", 10**100),
    ("$maxAge", 0),
    ("$maxCount", 2**63),
    ("$maxCount", 0),
    ("$tb", 2**63),
    ("$tb", -1),
    ("$cacheControl", 2**63),
    ("$cacheControl", 0),
    ("$maxAge", 1.5),
    ("$tb", "5"),
    ("$maxCount", True),
]


@pytest.mark.parametrize(("key", "value"), REFUSED)
def test_out_of_range_numbers_are_refused_naming_the_key(key, value):
    with pytest.raises(InvalidInput) as raised:
        StreamMetadata.from_dict({key: value})
    assert key in str(raised.value)
    assert str(INT64_MAX) in str(raised.value)


@pytest.mark.parametrize(
    ("key", "value"), [("$maxAge", INT64_MAX), ("$maxCount", INT64_MAX), ("$tb", INT64_MAX), ("$tb", 0)]
)
def test_the_largest_64_bit_values_are_accepted(key, value):
    assert StreamMetadata.from_dict({key: value}).raw == {key: value}


@pytest.mark.parametrize(
    "acl",
    [
        {"$r": ["$all", 5]},
        {"$w": 5},
        {"$mw": {"role": "x"}},
        {"$d": [None]},
        {"$mr": [["$admins"]]},
    ],
)
def test_acl_role_lists_must_be_strings(acl):
    with pytest.raises(InvalidInput) as raised:
        StreamMetadata.from_dict({"$acl": acl})
    assert next(iter(acl)) in str(raised.value)


def test_acl_roles_as_strings_lists_or_null_are_accepted():
    acl = {"$r": "$all", "$w": ["alice", "$ops"], "$d": [], "$mr": None, "$mw": "$admins", "custom": 5}
    assert StreamMetadata.from_dict({"$acl": acl}).acl == acl


def test_reading_stays_tolerant():
    """What is already in a log is read as it is (numbers kept, wrong types ignored), never refused."""
    metadata = StreamMetadata.from_bytes(json.dumps({"$tb": 2**64, "$acl": {"$r": ["a", 5]}}).encode())
    assert metadata.truncate_before == 2**64


def test_metadata_events_appended_to_a_metastream_are_validated():
    from evdb.streams import check_metadata_events

    good = NewEvent("$metadata", json.dumps({"$maxCount": 3}).encode(), is_json=True)
    bad = NewEvent("$metadata", json.dumps({"$tb": 2**63}).encode(), is_json=True)
    other = NewEvent("note", json.dumps({"$tb": 2**63}).encode(), is_json=True)
    check_metadata_events("$$s", [good, other])
    check_metadata_events("s", [bad])  # not a metastream: ordinary data
    with pytest.raises(InvalidInput, match=r"\$tb"):
        check_metadata_events("$$s", [good, bad])


def test_database_refuses_out_of_range_metadata_and_writes_nothing(db):
    before = db.committed_position
    with pytest.raises(InvalidInput, match=r"\$maxAge"):
        db.set_stream_metadata("s", {"$maxAge": 2**63})
    with pytest.raises(InvalidInput, match=r"\$r"):
        db.set_stream_metadata("s", {"$acl": {"$r": ["$all", 5]}})
    assert db.committed_position == before


def test_metadata_nested_too_deep_to_parse_reads_as_empty():
    deep = b'{"a":' * 3000 + b"1" + b"}" * 3000
    assert StreamMetadata.from_bytes(deep) == StreamMetadata()


def test_the_database_itself_refuses_out_of_range_metadata_appended_to_a_metastream(tmp_path):
    """Every surface goes through Database.append: metadata appended to $$stream directly is checked too."""
    import json as _json

    from evdb.database import Database
    from evdb.errors import InvalidInput
    from evdb.streams import NewEvent

    db = Database.open(str(tmp_path / "db"), chunk_size=1 << 16)
    try:
        bad = NewEvent("$metadata", _json.dumps({"$maxAge": 2**63}).encode(), is_json=True)
        with pytest.raises(InvalidInput):
            db.append("$$orders", [bad])
        assert db.read_all_forward(0, 10).events == []
        db.append("$$orders", [NewEvent("$metadata", b'{"$maxAge": 60}', is_json=True)])
    finally:
        db.close()


def test_an_unreadable_user_record_refuses_that_login_and_nothing_else(tmp_path):
    """A user record that was redacted (or damaged) before redaction refused system streams: that login
    is refused, every other login works, and taking office does not fail on it."""
    from evdb.auth import UserStore
    from evdb.database import Database
    from evdb.streams import NewEvent

    db = Database.open(str(tmp_path / "db"), chunk_size=1 << 16)
    try:
        users = UserStore(db, hash_cost=SUITE_COST)
        users.ensure_defaults()
        assert users.authenticate("admin", "changeit") is not None
        db.append(
            "$user-ops", [NewEvent("$UserUpdated", b"\xff" * 40, is_json=True)]
        )  # what redaction leaves
        users = UserStore(db, hash_cost=SUITE_COST)
        assert users.authenticate("ops", "changeit") is None
        assert users.authenticate("admin", "changeit") is not None
        users.ensure_defaults()  # no attempt to recreate ops over its unreadable record
        assert {u.login_name for u in users.list()} >= {"admin"}
    finally:
        db.close()


def test_one_table_gives_each_error_its_http_and_grpc_status():
    """HTTP and gRPC answer an error from the same table (evdb/errors.py STATUSES)."""
    from evdb import errors

    assert errors.status_of(errors.StreamDeleted("s")) == (410, "FAILED_PRECONDITION")
    assert errors.status_of(errors.EventTooLarge("big")) == (400, "INVALID_ARGUMENT")
    assert errors.status_of(errors.NotLeader()) == (503, "UNAVAILABLE")
    assert errors.status_of(errors.EvdbError("?")) is None
    import inspect

    from evdb.grpc import errors as grpc_errors
    from evdb.http import answers as http_answers
    from evdb.http import app as http_app

    # both HTTP paths (aiohttp's error middleware and the lean append path) answer through error_answer
    assert "error_answer" in inspect.getsource(http_app.error_middleware)
    assert "status_of" in inspect.getsource(http_answers.error_answer)
    assert "status_of" in inspect.getsource(grpc_errors.grpc_error)
