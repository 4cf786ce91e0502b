"""Licences: signed keys that enable auto-scavenge and redaction, the issuer keys a node trusts,
and the start-up check (:func:`load_license`).

The package's surface: the trusted issuers and the start-up check named here, and the whole of
:mod:`evdb.licensing.token` (keys, entitlements, the :class:`LicenseError` family) as that module's
``__all__`` declares it."""

from __future__ import annotations

from evdb.licensing import token
from evdb.licensing.issuers import DEMO_ISSUER, DEMO_PUBLIC_KEY, demo_private_key, trusted_issuer_keys
from evdb.licensing.loading import LicenseCheck, check_license, load_license
from evdb.licensing.token import *  # noqa: F403 (token.__all__, added to this package's below)

__all__ = [
    "DEMO_ISSUER",
    "DEMO_PUBLIC_KEY",
    "LicenseCheck",
    "check_license",
    "demo_private_key",
    "load_license",
    "trusted_issuer_keys",
]
__all__ += token.__all__
