"""What a node does with its licence key at start: verify it and log the outcome in one line."""

from __future__ import annotations

import logging
from typing import Any

from evdb.errors import InvalidOption
from evdb.licensing.token import (
    License,
    LicenseError,
    LicenseMissing,
    LicenseWrongIssuer,
    licensed_features,
    verify_license,
)

__all__ = ["DEMO_TRUSTED_WARNING", "LicenseCheck", "check_license", "explain_wrong_issuer", "load_license"]


class LicenseCheck:
    """The outcome of the start-up check: the licence, or why there is none (for refusals)."""

    def __init__(self, license: License | None, error: LicenseError | None) -> None:
        self.license = license
        self.error = error

    def require(self, entitlement: str, now: float) -> License:
        """The licence if it grants ``entitlement`` at ``now``; else the LicenseError saying why not."""
        if self.license is None:
            assert self.error is not None
            raise type(self.error)(str(self.error))
        self.license.require(entitlement, now)
        return self.license


#: The warning a node logs at start when it trusts the demo issuer (its private key ships with evdb).
DEMO_TRUSTED_WARNING = (
    "Licences signed by evdb's demo issuer are trusted ({why}): anyone can sign one; "
    "use only for development."
)


def check_license(options: Any, now: float) -> LicenseCheck:
    """Verify ``options.license_key`` against the issuers the node trusts at ``now``
    (``LicenseTrustedIssuers``, plus the demo issuer in dev mode: see issuers.node_trusted_issuers)."""
    from evdb.licensing.issuers import node_trusted_issuers, trusted_issuer_keys

    token = getattr(options, "license_key", "") or ""
    issuers, _ = node_trusted_issuers(options)
    try:
        trusted = trusted_issuer_keys(issuers)
    except InvalidOption as exc:
        return LicenseCheck(None, LicenseError(str(exc)))
    try:
        return LicenseCheck(verify_license(token, trusted, now), None)
    except LicenseWrongIssuer as exc:
        return LicenseCheck(None, explain_wrong_issuer(token, exc))
    except LicenseError as exc:
        return LicenseCheck(None, exc)


def explain_wrong_issuer(token: str, error: LicenseWrongIssuer) -> LicenseWrongIssuer:
    """A demo licence on a node that does not trust the demo issuer: say so, and how to trust it."""
    from evdb.licensing.issuers import demo_public_key
    from evdb.licensing.token import key_id, read_unverified

    try:
        claimed = read_unverified(token).issuer
    except LicenseError:
        return error
    if claimed != key_id(demo_public_key()):
        return error
    return LicenseWrongIssuer(
        f"{error} It is signed by evdb's demo issuer, whose private key ships with evdb, so a node trusts "
        "it only when LicenseTrustedIssuers includes demo or in dev mode (for development only)."
    )


def load_license(options: Any, logger: logging.Logger, now: float) -> License | None:
    """Check the node's licence key and log one line saying what was found.

    Valid: ``Licence ... accepted``. Missing: an info line (the licensed features stay off).
    Expired, tampered, malformed or from an untrusted issuer: an error line that says which, starting
    with ``Licence key rejected (<reason>)``. Before it, a warning when the node trusts the demo issuer
    (:data:`DEMO_TRUSTED_WARNING`). Returns the licence or None.
    """
    from evdb.licensing.issuers import node_trusted_issuers

    _, demo_reason = node_trusted_issuers(options)
    if demo_reason is not None:
        logger.warning(DEMO_TRUSTED_WARNING.format(why=demo_reason))
    check = check_license(options, now)
    return log_license_check(check, logger)


def log_license_check(check: LicenseCheck, logger: logging.Logger) -> License | None:
    lic, error = check.license, check.error
    if lic is not None:
        logger.info(
            "Licence %s accepted: licensee %s, expires %s, entitlements %s (issuer %s)",
            lic.license_id,
            lic.licensee,
            lic.describe()["expiresAt"],
            ", ".join(sorted(lic.entitlements)) or "none",
            lic.issuer,
        )
        return lic
    assert error is not None
    if isinstance(error, LicenseMissing):
        logger.info("No licence key is set (LicenseKey): %s are not available.", licensed_features())
    else:
        logger.error(
            "Licence key rejected (%s): %s Not available: %s.", error.reason, error, licensed_features()
        )
    return None
