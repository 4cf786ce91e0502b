"""The scrypt cost of the password hashes the suite writes where a test is not about hashing (option
PasswordHashCost, docs/options.md): 2^10, a sixteenth of the production default's CPU (about 2.5 ms a
hash instead of 40 ms). tests/conftest.py gives it to every node the tests start; a store or record a
test makes itself takes it from here. tests/test_auth_hash_cost.py checks the production default."""

from __future__ import annotations

from evdb.auth import HashCost

SUITE_COST = HashCost(10)
