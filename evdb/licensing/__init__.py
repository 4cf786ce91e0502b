"""Licences: signed keys that enable auto-scavenge and redaction, the issuer keys a node trusts,
and the start-up check (:func:`load_license`)."""

from __future__ import annotations

from evdb.licensing.issuers import DEMO_ISSUER, DEMO_PUBLIC_KEY, demo_private_key, trusted_issuer_keys
from evdb.licensing.loading import LicenseCheck, check_license, load_license
from evdb.licensing.token import (
    Entitlement,
    License,
    LicenseError,
    LicenseExpired,
    LicenseMalformed,
    LicenseMissing,
    LicenseMissingEntitlement,
    LicenseTampered,
    LicenseWrongIssuer,
    issue_license,
    read_unverified,
    verify_license,
)

__all__ = [
    "DEMO_ISSUER",
    "DEMO_PUBLIC_KEY",
    "Entitlement",
    "License",
    "LicenseCheck",
    "LicenseError",
    "LicenseExpired",
    "LicenseMalformed",
    "LicenseMissing",
    "LicenseMissingEntitlement",
    "LicenseTampered",
    "LicenseWrongIssuer",
    "check_license",
    "demo_private_key",
    "issue_license",
    "load_license",
    "read_unverified",
    "trusted_issuer_keys",
    "verify_license",
]
