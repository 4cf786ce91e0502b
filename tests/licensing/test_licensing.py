from __future__ import annotations

import base64
import json
import logging
import os
import stat

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from evdb.cli import main as evdb_main
from evdb.errors import InvalidOption
from evdb.licensing import (
    DEMO_PUBLIC_KEY,
    Entitlement,
    LicenseExpired,
    LicenseMalformed,
    LicenseMissing,
    LicenseMissingEntitlement,
    LicenseTampered,
    LicenseWrongIssuer,
    check_license,
    demo_private_key,
    issue_license,
    load_license,
    read_unverified,
    trusted_issuer_keys,
    verify_license,
)
from evdb.licensing.issuers import demo_public_key, issue_demo_license
from evdb.licensing.token import encode_public_key, key_id
from evdb.options import load_options

NOW = 1_800_000_000


def _token(key=None, *, days=10, entitlements=("AUTO_SCAVENGE", "REDACTION"), licensee="Acme Ltd"):
    return issue_license(
        key or demo_private_key(),
        licensee=licensee,
        issued_at=NOW,
        expires_at=NOW + days * 86400,
        entitlements=list(entitlements),
    )


def _retamper(token: str, **changes) -> str:
    prefix, payload, sig = token.split(".")
    data = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    data.update(changes)
    raw = base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()
    return f"{prefix}.{raw}.{sig}"


def test_demo_key_pair_matches():
    assert encode_public_key(demo_private_key().public_key()) == DEMO_PUBLIC_KEY


def test_valid_license_round_trip():
    lic = verify_license(_token(), [demo_public_key()], NOW + 5)
    assert lic.licensee == "Acme Ltd"
    assert lic.entitlements == {"AUTO_SCAVENGE", "REDACTION"}
    assert lic.allows(Entitlement.REDACTION, NOW)
    assert not lic.allows(Entitlement.REDACTION, NOW + 10 * 86400)
    assert lic.issuer == key_id(demo_public_key())


def test_expired():
    with pytest.raises(LicenseExpired, match="expired at"):
        verify_license(_token(days=1), [demo_public_key()], NOW + 86400)


def test_missing_and_malformed():
    with pytest.raises(LicenseMissing):
        verify_license("  ", [demo_public_key()], NOW)
    with pytest.raises(LicenseMalformed):
        verify_license("hello", [demo_public_key()], NOW)
    with pytest.raises(LicenseTampered):
        verify_license("evdb1.!!!.abc", [demo_public_key()], NOW)


def test_tampered_payload_and_signature():
    token = _token()
    with pytest.raises(LicenseTampered):
        verify_license(_retamper(token, expiresAt=NOW + 10**9), [demo_public_key()], NOW)
    with pytest.raises(LicenseTampered):
        verify_license(
            _retamper(token, entitlements=["REDACTION", "AUTO_SCAVENGE", "X"]), [demo_public_key()], NOW
        )
    prefix, payload, sig = token.split(".")
    flipped = sig[:5] + ("A" if sig[5] != "A" else "B") + sig[6:]
    with pytest.raises(LicenseTampered):
        verify_license(f"{prefix}.{payload}.{flipped}", [demo_public_key()], NOW)


def test_issuer_field_altered_names_the_claimed_issuer():
    with pytest.raises(LicenseWrongIssuer, match="0000000000000000"):
        verify_license(_retamper(_token(), issuer="0000000000000000"), [demo_public_key()], NOW)


def test_wrong_issuer():
    other = Ed25519PrivateKey.generate()
    with pytest.raises(LicenseWrongIssuer, match="does not trust"):
        verify_license(_token(other), [demo_public_key()], NOW)
    # trusted once its key is configured; the demo key no longer is
    trusted = trusted_issuer_keys(encode_public_key(other.public_key()))
    assert verify_license(_token(other), trusted, NOW).licensee == "Acme Ltd"
    with pytest.raises(LicenseWrongIssuer):
        verify_license(_token(), trusted, NOW)


def test_entitlement_required():
    lic = verify_license(_token(entitlements=("AUTO_SCAVENGE",)), [demo_public_key()], NOW)
    with pytest.raises(LicenseMissingEntitlement, match="REDACTION"):
        lic.require(Entitlement.REDACTION, NOW)
    lic.require(Entitlement.AUTO_SCAVENGE, NOW)


def test_issue_refuses_bad_input():
    with pytest.raises(LicenseMalformed):
        _token(entitlements=("NOPE",))
    with pytest.raises(LicenseMalformed):
        _token(days=0)
    with pytest.raises(LicenseMalformed):
        _token(licensee=" ")


def test_trusted_issuers_option_parsing():
    assert len(trusted_issuer_keys("demo")) == 1
    assert trusted_issuer_keys("") == []
    with pytest.raises(InvalidOption, match="LicenseTrustedIssuers"):
        trusted_issuer_keys("demo,notakey")


def _options(tmp_path, *extra):
    """A node that trusts the demo issuer (which signs the tokens here), unless ``extra`` says otherwise."""
    return load_options(["--db", str(tmp_path / "db"), "--license-trusted-issuers", "demo", *extra], {})


@pytest.mark.parametrize(
    ("make", "reason", "level"),
    [
        (lambda: "", "No licence key is set", logging.INFO),
        (lambda: _token(days=1), "Licence key rejected (expired)", logging.ERROR),
        (lambda: _retamper(_token(), licensee="Evil"), "Licence key rejected (tampered)", logging.ERROR),
        (lambda: _token(Ed25519PrivateKey.generate()), "Licence key rejected (wrong issuer)", logging.ERROR),
        (lambda: "garbage", "Licence key rejected (malformed)", logging.ERROR),
    ],
)
def test_load_license_logs_which_failure(tmp_path, caplog, make, reason, level):
    options = _options(tmp_path, "--license-key", make())
    logger = logging.getLogger("test.licence")
    with caplog.at_level(logging.INFO, logger="test.licence"):
        assert load_license(options, logger, NOW + 2 * 86400) is None
    line = next(
        (r.getMessage() for r in caplog.records if r.levelno == level and r.getMessage().startswith(reason)),
        "",
    )
    assert line, caplog.text
    # every feature the licence would enable is named (the archive's was missing)
    assert "auto-scavenge, redaction, /admin/logs, user certificates and the archive" in line, line


def test_load_license_accepts_and_logs(tmp_path, caplog):
    options = _options(tmp_path, "--license-key", _token())
    logger = logging.getLogger("test.licence.ok")
    with caplog.at_level(logging.INFO, logger="test.licence.ok"):
        lic = load_license(options, logger, NOW)
    assert lic is not None and lic.licensee == "Acme Ltd"
    assert "accepted: licensee Acme Ltd" in caplog.text


def test_option_without_demo_rejects_demo_licences(tmp_path):
    other = Ed25519PrivateKey.generate()
    options = _options(
        tmp_path,
        "--license-key",
        _token(),
        "--license-trusted-issuers",
        encode_public_key(other.public_key()),
    )
    check = check_license(options, NOW)
    assert check.license is None and isinstance(check.error, LicenseWrongIssuer)
    with pytest.raises(LicenseWrongIssuer):
        check.require("REDACTION", NOW)


def test_demo_license_helper():
    lic = verify_license(issue_demo_license(NOW), [demo_public_key()], NOW + 1)
    assert lic.entitlements == {e.value for e in Entitlement}


# -- the command line -----------------------------------------------------------------------------------
def test_cli_keygen_issue_inspect(tmp_path, capsys):
    assert evdb_main(["license", "keygen", "--out", str(tmp_path / "issuer")]) == 0
    public = capsys.readouterr().out.strip().splitlines()[-1]
    key_file = tmp_path / "issuer" / "issuer.key"
    assert stat.S_IMODE(os.stat(key_file).st_mode) == 0o600
    assert (tmp_path / "issuer" / "issuer.pub").read_text().strip() == public
    assert evdb_main(["license", "keygen", "--out", str(tmp_path / "issuer")]) == 2  # exists, no --force

    out = tmp_path / "licence.key"
    assert evdb_main(
        [
            "license", "issue", "--licensee", "Acme", "--issuer-key", str(key_file),
            "--entitlements", "redaction", "--out", str(out),
        ]
    ) == 0  # fmt: skip
    capsys.readouterr()
    assert evdb_main(["license", "inspect", "--file", str(out), "--trust", public]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["valid"] and shown["entitlements"] == ["REDACTION"] and shown["licensee"] == "Acme"
    # the default trust (a node's default: no issuer) does not know this issuer
    assert evdb_main(["license", "inspect", "--file", str(out)]) == 1
    shown = json.loads(capsys.readouterr().out)
    assert shown["reason"] == "wrong issuer" and shown["claims"]["licensee"] == "Acme"


def test_cli_issue_demo_and_errors(tmp_path, capsys):
    assert evdb_main(["license", "issue", "--demo", "--licensee", "Dev", "--days", "3"]) == 0
    token = capsys.readouterr().out.strip()
    assert read_unverified(token).licensee == "Dev"
    assert evdb_main(["license", "inspect", token, "--trust", "demo"]) == 0
    capsys.readouterr()
    # as a node on defaults sees it: the demo issuer is not trusted, and the answer says why
    assert evdb_main(["license", "inspect", token]) == 1
    shown = json.loads(capsys.readouterr().out)
    assert shown["reason"] == "wrong issuer" and "demo issuer" in shown["message"]
    assert evdb_main(["license", "inspect", token[:-3] + "AAA", "--trust", "demo"]) == 1
    assert json.loads(capsys.readouterr().out)["reason"] == "tampered"
    assert evdb_main(["license", "issue", "--licensee", "x", "--issuer-key", str(tmp_path / "none")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert evdb_main(["license", "issue", "--demo", "--licensee", "x", "--expires", "2001-01-01"]) == 2
    assert "past" in capsys.readouterr().err
    assert evdb_main(["license", "inspect"]) == 2
