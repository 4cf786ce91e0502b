"""Licence keys: Ed25519-signed tokens naming a licensee, an expiry and entitlements.

A key is one line of text::

    evdb1.<payload>.<signature>

``payload`` is the base64url (unpadded) of a compact JSON object, ``signature`` the base64url of the
Ed25519 signature of the ASCII bytes ``evdb1.<payload>``. The payload fields::

    {"v": 1, "id": "<uuid>", "licensee": "Acme Ltd", "issuedAt": 1735689600,
     "expiresAt": 1767225600, "entitlements": ["AUTO_SCAVENGE", "REDACTION"], "issuer": "<key id>"}

Times are Unix seconds (UTC). ``issuer`` is the key id of the issuer public key (see
:func:`key_id`); it lets a node name the issuer it does not trust, but verification never relies on
it alone: the signature must verify with a trusted key.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from evdb.errors import EvdbError

__all__ = [
    "TOKEN_PREFIX",
    "Entitlement",
    "License",
    "LicenseError",
    "LicenseExpired",
    "LicenseMalformed",
    "LicenseMissing",
    "LicenseMissingEntitlement",
    "LicenseTampered",
    "LicenseWrongIssuer",
    "decode_public_key",
    "encode_public_key",
    "issue_license",
    "key_id",
    "licensed_features",
    "read_unverified",
    "verify_license",
]

TOKEN_PREFIX = "evdb1"
PAYLOAD_VERSION = 1


class Entitlement(StrEnum):
    """The features a licence can enable."""

    AUTO_SCAVENGE = "AUTO_SCAVENGE"
    REDACTION = "REDACTION"
    LOGS_ENDPOINT = "LOGS_ENDPOINT"  # KurrentDB's /admin/logs
    USER_CERTIFICATES = "USER_CERTIFICATES"  # X.509 user certificates (UserCertificatesEnabled)
    ARCHIVE = "ARCHIVE"  # archive to object storage (Archive: Enabled; evdb/archive)

    @property
    def feature(self) -> str:
        """What it enables, as the node's logs name it."""
        return _FEATURES[self]


_FEATURES = {
    Entitlement.AUTO_SCAVENGE: "auto-scavenge",
    Entitlement.REDACTION: "redaction",
    Entitlement.LOGS_ENDPOINT: "/admin/logs",
    Entitlement.USER_CERTIFICATES: "user certificates",
    Entitlement.ARCHIVE: "the archive",
}


def licensed_features() -> str:
    """Every feature a licence enables, in words: "a, b and c"."""
    names = [e.feature for e in Entitlement]
    return ", ".join(names[:-1]) + " and " + names[-1]


class LicenseError(EvdbError):
    """A licence key cannot be used. ``reason`` is one word for logs and answers."""

    reason = "invalid"


class LicenseMissing(LicenseError):
    reason = "missing"


class LicenseMalformed(LicenseError):
    reason = "malformed"


class LicenseTampered(LicenseError):
    reason = "tampered"


class LicenseWrongIssuer(LicenseError):
    reason = "wrong issuer"


class LicenseExpired(LicenseError):
    reason = "expired"


class LicenseMissingEntitlement(LicenseError):
    reason = "not entitled"


@dataclass(frozen=True)
class License:
    """A licence whose signature verified with a trusted issuer key."""

    license_id: str
    licensee: str
    issued_at: int
    expires_at: int
    entitlements: frozenset[str]
    issuer: str
    token: str = field(repr=False, default="")

    def is_expired(self, now: float) -> bool:
        return now >= self.expires_at

    def allows(self, entitlement: Entitlement | str, now: float) -> bool:
        """Whether the licence is in force at ``now`` and grants ``entitlement``."""
        return not self.is_expired(now) and str(entitlement) in self.entitlements

    def require(self, entitlement: Entitlement | str, now: float) -> None:
        """Raise LicenseExpired or LicenseMissingEntitlement unless :meth:`allows`."""
        if self.is_expired(now):
            raise LicenseExpired(f"The licence for {self.licensee} expired at {_iso(self.expires_at)}.")
        if str(entitlement) not in self.entitlements:
            have = ", ".join(sorted(self.entitlements)) or "none"
            raise LicenseMissingEntitlement(
                f"The licence for {self.licensee} does not include {entitlement} (it grants: {have})."
            )

    def describe(self) -> dict:
        return {
            "id": self.license_id,
            "licensee": self.licensee,
            "issuedAt": _iso(self.issued_at),
            "expiresAt": _iso(self.expires_at),
            "entitlements": sorted(self.entitlements),
            "issuer": self.issuer,
        }


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")


def _b64e(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _b64d(text: str) -> bytes:
    if not text or any(c not in _B64URL for c in text):
        raise ValueError("not base64url")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


_B64URL = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def encode_public_key(key: Ed25519PublicKey) -> str:
    """The form the LicenseTrustedIssuers option takes: standard base64 of the 32 raw bytes."""
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return base64.b64encode(raw).decode("ascii")


def decode_public_key(text: str) -> Ed25519PublicKey:
    """Parse a base64 (standard or url-safe) Ed25519 public key; ValueError when it is not one."""
    text = text.strip()
    try:
        raw = base64.b64decode(
            text.replace("-", "+").replace("_", "/") + "=" * (-len(text) % 4), validate=True
        )
    except (binascii.Error, ValueError):
        raise ValueError(f"{text!r} is not base64") from None
    if len(raw) != 32:
        raise ValueError(f"{text!r} is not an Ed25519 public key (32 bytes expected, got {len(raw)})")
    return Ed25519PublicKey.from_public_bytes(raw)


def key_id(key: Ed25519PublicKey) -> str:
    """A short, stable name for an issuer key: the first 16 hex digits of SHA-256 of its raw bytes."""
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


def issue_license(
    private_key: Ed25519PrivateKey,
    *,
    licensee: str,
    expires_at: int,
    entitlements: list[str] | tuple[str, ...],
    issued_at: int,
    license_id: str | None = None,
) -> str:
    """Make and sign a licence key."""
    if not licensee.strip():
        raise LicenseMalformed("A licence needs a licensee name.")
    unknown = [e for e in entitlements if e not in Entitlement.__members__]
    if unknown:
        known = ", ".join(Entitlement.__members__)
        raise LicenseMalformed(f"Unknown entitlement(s) {', '.join(unknown)}; known: {known}.")
    issued_at = _checked_time("issuedAt", int(issued_at))
    expires_at = _checked_time("expiresAt", int(expires_at))
    if expires_at <= issued_at:
        raise LicenseMalformed("A licence must expire after it is issued.")
    payload = {
        "v": PAYLOAD_VERSION,
        "id": license_id or str(uuid.uuid4()),
        "licensee": licensee,
        "issuedAt": issued_at,
        "expiresAt": expires_at,
        "entitlements": sorted(set(entitlements)),
        "issuer": key_id(private_key.public_key()),
    }
    body = f"{TOKEN_PREFIX}.{_b64e(json.dumps(payload, separators=(',', ':')).encode())}"
    return f"{body}.{_b64e(private_key.sign(body.encode('ascii')))}"


def _split(token: str) -> tuple[str, dict, bytes]:
    """(signed part, payload, signature) of a token; LicenseMissing / LicenseMalformed."""
    token = token.strip()
    if not token:
        raise LicenseMissing("No licence key is set (option LicenseKey).")
    parts = token.split(".")
    if len(parts) != 3 or parts[0] != TOKEN_PREFIX:
        raise LicenseMalformed(
            f"The licence key is not an evdb licence key (expected '{TOKEN_PREFIX}.<payload>.<signature>')."
        )
    try:
        payload = json.loads(_b64d(parts[1]))
        signature = _b64d(parts[2])
    except (ValueError, UnicodeDecodeError):
        # a damaged payload cannot carry a valid signature either: the key was altered
        raise LicenseTampered(
            "The licence key is damaged: its payload or signature does not decode."
        ) from None
    if not isinstance(payload, dict):
        raise LicenseTampered("The licence key is damaged: its payload is not an object.")
    return f"{parts[0]}.{parts[1]}", payload, signature


#: The range of a licence's times (Unix seconds): 1970-01-01 up to 9999-12-31T23:59:59Z, the last
#: moment a date can show; a time past it could not be printed, compared as a date or logged.
TIME_RANGE = (0, 253_402_300_799)


def _checked_time(name: str, value: object) -> int:
    """A licence time: an integer (not a bool, float or string) within TIME_RANGE; else LicenseMalformed."""
    if type(value) is not int:
        raise LicenseMalformed(f"The licence key's {name} is not a whole number of seconds: {value!r:.40}.")
    low, high = TIME_RANGE
    if not low <= value <= high:
        raise LicenseMalformed(
            f"The licence key's {name} ({str(value)[:40]}) is out of range: a time from {_iso(low)} "
            f"to {_iso(high)} is expected."
        )
    return value


def _license_from_payload(payload: dict, token: str) -> License:
    version = payload.get("v")
    if type(version) is not int or version != PAYLOAD_VERSION:
        raise LicenseMalformed(f"Unsupported licence payload version {version!r:.40}.")
    try:
        ents = payload["entitlements"]
        if not isinstance(ents, list) or not all(isinstance(e, str) for e in ents):
            raise TypeError
        issued_at = _checked_time("issuedAt", payload["issuedAt"])
        expires_at = _checked_time("expiresAt", payload["expiresAt"])
        return License(
            license_id=str(payload["id"]),
            licensee=str(payload["licensee"]),
            issued_at=issued_at,
            expires_at=expires_at,
            entitlements=frozenset(ents),
            issuer=str(payload.get("issuer", "")),
            token=token,
        )
    except (KeyError, TypeError, ValueError):
        raise LicenseMalformed(
            "The licence key's payload lacks a field or has one of the wrong type."
        ) from None


def read_unverified(token: str) -> License:
    """The licence a token claims, without checking its signature (for ``evdb license inspect``)."""
    _, payload, _ = _split(token)
    return _license_from_payload(payload, token.strip())


def verify_license(token: str, trusted: list[Ed25519PublicKey], now: float) -> License:
    """Check a licence key against the trusted issuer keys and the time ``now`` (Unix seconds).

    Raises, in this order of checks: LicenseMissing (empty), LicenseMalformed (not a licence key),
    LicenseTampered (does not decode, or a trusted issuer's signature does not verify),
    LicenseWrongIssuer (signed by a key this node does not trust), LicenseExpired.
    """
    signed, payload, signature = _split(token)
    claimed = str(payload.get("issuer", ""))
    by_id = {key_id(k): k for k in trusted}
    key = by_id.get(claimed)
    if key is None:
        # an altered issuer field also lands here: the payload no longer matches any signature
        names = ", ".join(sorted(by_id)) or "none"
        raise LicenseWrongIssuer(
            f"The licence key was issued by issuer {claimed or '(unnamed)'}, which this node does not trust "
            f"(trusted issuers: {names}; option LicenseTrustedIssuers)."
        )
    if not _verifies(key, signature, signed):
        raise LicenseTampered(
            "The licence key was altered or damaged: its signature does not verify with its issuer's key."
        )
    lic = _license_from_payload(payload, token.strip())
    if lic.is_expired(now):
        raise LicenseExpired(f"The licence key for {lic.licensee} expired at {_iso(lic.expires_at)}.")
    return lic


def _verifies(key: Ed25519PublicKey, signature: bytes, signed: str) -> bool:
    try:
        key.verify(signature, signed.encode("ascii"))
    except InvalidSignature:
        return False
    return True
