"""Issuer keys: evdb's built-in demo issuer and the keys a node is configured to trust.

The demo issuer lets a local cluster (``evdb cluster up``) and a developer's node show every
licensed feature. Its private key ships with evdb, so anyone can make demo licences: a node trusts
it only when asked to (:func:`node_trusted_issuers`): ``LicenseTrustedIssuers`` names ``demo`` (the
local cluster launcher writes that into each node.yaml), or the node runs in dev mode. By default
(``LicenseTrustedIssuers`` empty) a node trusts no issuer; a production node lists its vendor's key(s).
"""

from __future__ import annotations

import base64
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from evdb.errors import InvalidOption
from evdb.licensing.token import decode_public_key

__all__ = [
    "DEMO_ISSUER",
    "DEMO_PUBLIC_KEY",
    "demo_private_key",
    "demo_public_key",
    "issue_demo_license",
    "names_demo_issuer",
    "node_trusted_issuers",
    "trusted_issuer_keys",
]

#: The word in LicenseTrustedIssuers that stands for the demo issuer.
DEMO_ISSUER = "demo"

#: Base64 of the demo issuer's raw Ed25519 public key.
DEMO_PUBLIC_KEY = "IIGLeMzHBXWIMAtPGqbHAuRQlWSlRvBAFDD6neQR4LU="

# Used only by ``evdb license issue --demo`` and the local cluster launcher.
_DEMO_PRIVATE_KEY = "r6pfm3rGttN0NQlKVzNVoex154JxmXaoqMzKcJGuV2M="


def demo_private_key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.from_private_bytes(base64.b64decode(_DEMO_PRIVATE_KEY))


def demo_public_key() -> Ed25519PublicKey:
    return decode_public_key(DEMO_PUBLIC_KEY)


def names_demo_issuer(value: str) -> bool:
    """Whether a LicenseTrustedIssuers value names the demo issuer."""
    return any(part.strip().lower() == DEMO_ISSUER for part in value.split(","))


def node_trusted_issuers(options: Any) -> tuple[str, str | None]:
    """The issuers a node trusts, as LicenseTrustedIssuers takes them, and why the demo issuer is among
    them (None when it is not): named in ``LicenseTrustedIssuers``, or added in dev mode."""
    value = (getattr(options, "license_trusted_issuers", "") or "").strip()
    if names_demo_issuer(value):
        return value, "LicenseTrustedIssuers includes demo"
    if getattr(options, "dev", False):
        return ",".join(part for part in (value, DEMO_ISSUER) if part), "dev mode"
    return value, None


def trusted_issuer_keys(value: str) -> list[Ed25519PublicKey]:
    """Parse the LicenseTrustedIssuers option: comma-separated base64 keys and/or ``demo``."""
    keys: list[Ed25519PublicKey] = []
    for item in (part.strip() for part in value.split(",")):
        if not item:
            continue
        if item.lower() == DEMO_ISSUER:
            keys.append(demo_public_key())
            continue
        try:
            keys.append(decode_public_key(item))
        except ValueError as exc:
            raise InvalidOption(
                f"LicenseTrustedIssuers: {exc}. Give base64 Ed25519 public keys (as `evdb license keygen` "
                "prints them) and/or the word demo, separated by commas."
            ) from None
    return keys


def issue_demo_license(
    now: float, *, licensee: str = "evdb demo", days: int = 30, entitlements: tuple[str, ...] | None = None
) -> str:
    """A demo licence granting every entitlement (for ``evdb cluster up`` and local trials)."""
    from evdb.licensing.token import Entitlement, issue_license

    return issue_license(
        demo_private_key(),
        licensee=licensee,
        issued_at=int(now),
        expires_at=int(now) + days * 86400,
        entitlements=list(entitlements or [e.value for e in Entitlement]),
    )
