"""What a node does with its licence key at start: verify it and log the outcome in one line."""

from __future__ import annotations

import logging
from typing import Any

from evdb.errors import InvalidOption
from evdb.licensing.token import License, LicenseError, LicenseMissing, verify_license

__all__ = ["LicenseCheck", "check_license", "load_license"]


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


def check_license(options: Any, now: float) -> LicenseCheck:
    """Verify ``options.license_key`` against ``options.license_trusted_issuers`` at ``now``."""
    from evdb.licensing.issuers import trusted_issuer_keys

    token = getattr(options, "license_key", "") or ""
    try:
        trusted = trusted_issuer_keys(getattr(options, "license_trusted_issuers", "demo") or "")
    except InvalidOption as exc:
        return LicenseCheck(None, LicenseError(str(exc)))
    try:
        return LicenseCheck(verify_license(token, trusted, now), None)
    except LicenseError as exc:
        return LicenseCheck(None, exc)


def load_license(options: Any, logger: logging.Logger, now: float) -> License | None:
    """Check the node's licence key and log one line saying what was found.

    Valid: ``Licence ... accepted``. Missing: an info line (the licensed features stay off).
    Expired, tampered, malformed or from an untrusted issuer: an error line that says which, starting
    with ``Licence key rejected (<reason>)``. Returns the licence or None.
    """
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
        logger.info("No licence key is set (LicenseKey): auto-scavenge and redaction are not available.")
    else:
        logger.error(
            "Licence key rejected (%s): %s Auto-scavenge and redaction are not available.",
            error.reason,
            error,
        )
    return None
