"""The scrypt cost of password hashes: each user record names the cost its hash was made with
(``"scrypt": {"n", "r", "p"}``), so the cost of new hashes (option PasswordHashCost) can change and
every record still verifies; a record without it was made at the original cost (2^14, 8, 1). The
production default stays 2^14 (the suite runs its nodes at 2^10: tests/conftest.py).

About 12 hashes at 2^14 (0.5 s of CPU) and a few at 2^10."""

from __future__ import annotations

import base64
import hashlib
import json
import logging

import pytest

from evdb.auth import DEFAULT_HASH_COST, MAX_HASH_COST, MIN_HASH_COST, HashCost, UserStore, hash_password
from evdb.database import Database
from evdb.errors import InvalidOption
from evdb.options import load_options
from evdb.options.model import BY_NAME
from evdb.streams import NewEvent


@pytest.fixture
def db():
    database = Database.open(None)
    yield database
    database.close()


def _last_record(db: Database, login: str) -> dict:
    return json.loads(db.read_stream_backward(f"$user-{login}", None, 1).events[0].data)


def test_the_production_default_is_scrypt_2_14_8_1():
    assert DEFAULT_HASH_COST == 14
    option = BY_NAME["PasswordHashCost"]
    assert option.default == DEFAULT_HASH_COST
    assert (option.minimum, option.maximum) == (MIN_HASH_COST, MAX_HASH_COST)
    assert HashCost().to_record() == {"n": 2**14, "r": 8, "p": 1}


def test_a_default_store_writes_and_names_the_production_cost(db: Database):
    users = UserStore(db)
    users.ensure_defaults()
    record = _last_record(db, "admin")
    assert record["scrypt"] == {"n": 2**14, "r": 8, "p": 1}
    expected = hashlib.scrypt(b"changeit", salt=base64.b64decode(record["salt"]), n=2**14, r=8, p=1, dklen=32)
    assert base64.b64decode(record["hash"]) == expected
    users.reset_password("ops", "new-ops-password")
    assert _last_record(db, "ops")["scrypt"] == {"n": 2**14, "r": 8, "p": 1}


def test_records_made_at_one_cost_verify_at_another(db: Database):
    cheap = UserStore(db, hash_cost=HashCost(10))
    cheap.ensure_defaults()
    cheap.create("carol", "Carol", [], "carol-password")
    assert _last_record(db, "carol")["scrypt"] == {"n": 2**10, "r": 8, "p": 1}
    dear = UserStore(db)  # the node restarted with the default cost
    assert dear.authenticate("carol", "carol-password") is not None
    assert dear.authenticate("carol", "wrong") is None
    dear.reset_password("carol", "carol-new")
    assert _last_record(db, "carol")["scrypt"] == {"n": 2**14, "r": 8, "p": 1}
    assert cheap.authenticate("carol", "carol-new") is not None
    assert cheap.authenticate("carol", "carol-password") is None


def test_a_record_written_before_costs_were_recorded_verifies_at_the_original_cost(db: Database):
    users = UserStore(db, hash_cost=HashCost(10))
    users.ensure_defaults()
    salt, digest = hash_password("legacy-password")  # the original cost, and no "scrypt" key
    data = {"loginName": "old", "fullName": "", "groups": [], "salt": salt, "hash": digest, "disabled": False}
    db.append("$user-old", [NewEvent("$UserCreated", json.dumps(data).encode(), is_json=True)])
    assert users.authenticate("old", "legacy-password") is not None
    assert users.authenticate("old", "changeit") is None


@pytest.mark.parametrize(
    "named",
    [
        {"n": 2**40, "r": 8, "p": 1},  # never computed: it would take terabytes
        {"n": 3000, "r": 8, "p": 1},
        {"n": 2**14, "r": 64, "p": 1},
        {"n": 2**14, "r": 8, "p": 16},
        {"n": 2**9, "r": 8, "p": 1},
        {"n": "16384", "r": 8, "p": 1},
        "scrypt",
    ],
)
def test_a_record_naming_an_unsupported_cost_is_refused_and_logged(db: Database, caplog, named):
    users = UserStore(db, hash_cost=HashCost(10))
    users.ensure_defaults()
    salt, digest = hash_password("pw-of-mallory", cost=HashCost(10))
    data = {"loginName": "mallory", "groups": [], "salt": salt, "hash": digest, "scrypt": named}
    db.append("$user-mallory", [NewEvent("$UserCreated", json.dumps(data).encode(), is_json=True)])
    with caplog.at_level(logging.ERROR, logger="evdb"):
        assert users.authenticate("mallory", "pw-of-mallory") is None
    assert "$user-mallory" in caplog.text


@pytest.mark.parametrize("log2_n", [MIN_HASH_COST - 1, MAX_HASH_COST + 1])
def test_password_hash_cost_outside_its_range_is_refused(log2_n: int):
    with pytest.raises(InvalidOption, match=r"PasswordHashCost|password-hash-cost"):
        load_options(["--password-hash-cost", str(log2_n)], {})
    with pytest.raises(ValueError):
        HashCost(log2_n)


def test_the_option_sets_the_cost_of_a_nodes_new_hashes():
    assert load_options(["--password-hash-cost", "12"], {}).password_hash_cost == 12
    assert load_options([], {"SERVICE_PASSWORD_HASH_COST": "11"}).password_hash_cost == 11
