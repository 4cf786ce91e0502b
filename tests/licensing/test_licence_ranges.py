"""A licence's numeric fields are checked for type and range (issue 33, point 6): a token signed by a
trusted issuer with ``expiresAt`` 2^70 stopped the node at start (OverflowError printing the date)
and made ``evdb license inspect`` fail the same way. It is refused as malformed; the node starts."""

from __future__ import annotations

import base64
import json
import logging

import pytest

from evdb.cli import main as evdb_main
from evdb.licensing import LicenseMalformed, issue_license, load_license, read_unverified, verify_license
from evdb.licensing.issuers import demo_private_key, demo_public_key
from evdb.licensing.token import TOKEN_PREFIX, key_id
from evdb.logs import node_log_files, read_log_lines
from evdb.node import Node
from evdb.options import load_options

NOW = 1_800_000_000


def _signed(**fields) -> str:
    """A demo-signed token whose payload has ``fields`` over a valid one (what issue_license refuses)."""
    key = demo_private_key()
    payload = {
        "v": 1,
        "id": "00000000-0000-0000-0000-000000000001",
        "licensee": "Hostile",
        "issuedAt": NOW,
        "expiresAt": NOW + 86400,
        "entitlements": ["AUTO_SCAVENGE", "REDACTION"],
        "issuer": key_id(key.public_key()),
        **fields,
    }
    raw = base64.urlsafe_b64encode(json.dumps(payload).encode()).rstrip(b"=").decode()
    body = f"{TOKEN_PREFIX}.{raw}"
    signature = base64.urlsafe_b64encode(key.sign(body.encode())).rstrip(b"=").decode()
    return f"{body}.{signature}"


BAD = [
    {"expiresAt": 2**70},
    {"expiresAt": 2**63},
    {"expiresAt": 253_402_300_800},  # one second past 9999-12-31T23:59:59Z
    {"issuedAt": -1},
    {"issuedAt": -(2**70)},
    {"expiresAt": 1.8e9},
    {"expiresAt": 1e308},
    {"expiresAt": "1900000000"},
    {"expiresAt": True},
    {"issuedAt": None},
    {"v": True},
    {"v": 1.0},
]


@pytest.mark.parametrize("fields", BAD, ids=[json.dumps(f) for f in BAD])
def test_out_of_range_or_mistyped_numbers_are_malformed(fields):
    token = _signed(**fields)
    with pytest.raises(LicenseMalformed):
        verify_license(token, [demo_public_key()], NOW + 1)
    with pytest.raises(LicenseMalformed):
        read_unverified(token)


def test_the_last_printable_second_is_accepted():
    lic = verify_license(_signed(expiresAt=253_402_300_799), [demo_public_key()], NOW + 1)
    assert lic.describe()["expiresAt"] == "9999-12-31T23:59:59Z"


def test_issue_refuses_an_unprintable_expiry():
    with pytest.raises(LicenseMalformed, match="expiresAt"):
        issue_license(
            demo_private_key(), licensee="x", issued_at=NOW, expires_at=2**70, entitlements=["REDACTION"]
        )


def test_inspect_answers_malformed(capsys):
    assert evdb_main(["license", "inspect", _signed(expiresAt=2**70), "--trust", "demo"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["valid"] is False and out["reason"] == "malformed" and "expiresAt" in out["message"]


def test_load_license_logs_malformed(tmp_path, caplog):
    options = load_options(
        ["--db", str(tmp_path / "db"), "--dev", "--license-key", _signed(expiresAt=2**70)], {}
    )
    logger = logging.getLogger("test.licence.range")
    with caplog.at_level(logging.INFO, logger="test.licence.range"):
        assert load_license(options, logger, NOW) is None
    assert "Licence key rejected (malformed)" in caplog.text and "expiresAt" in caplog.text


async def test_a_dev_node_starts_and_refuses_it(tmp_path, clock):
    options = load_options(
        [
            "--db", str(tmp_path / "db"), "--log", str(tmp_path / "log"), "--insecure", "--dev",
            "--http-port", "0", "--stats-period-sec", "0", "--license-key", _signed(expiresAt=2**70),
        ],
        {},
    )  # fmt: skip
    async with Node(options, clock=clock, name="range") as node:
        assert node.license is None
        lines = [x for p in node_log_files(node.options.log, node.name) for x in read_log_lines(p)]
    assert any(line["@m"].startswith("Licence key rejected (malformed)") for line in lines)
