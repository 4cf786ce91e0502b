"""KurrentDB's X.509 user certificates: which user a TLS client's certificate names, if any.

The rules of KurrentDB's user-certificates plugin: the certificate (already verified by the TLS
handshake against the node's trusted roots) has the Digital Signature and Key Encipherment or Key
Agreement key usages and the Client Authentication extended key usage; it is not a server (node)
certificate, which has Server Authentication too or no extended key usages at all; it is valid at
``now``; the user is its subject's common name. Whether that user exists and is enabled is the
user store's part (:meth:`evdb.auth.UserStore.principal_of_certificate`)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

if TYPE_CHECKING:
    from evdb.auth import Principal, UserStore
    from evdb.clock import Clock
    from evdb.licensing import License
    from evdb.tls.reload import ReloadableSettings

__all__ = ["certificate_principal", "certificate_user", "peer_certificate"]


def _key_usages_fit(cert: x509.Certificate) -> bool:
    try:
        usage = cert.extensions.get_extension_for_class(x509.KeyUsage).value
    except x509.ExtensionNotFound:
        return False
    return usage.digital_signature and (usage.key_encipherment or usage.key_agreement)


def _extended_usages(cert: x509.Certificate) -> list[x509.ObjectIdentifier] | None:
    try:
        return list(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)
    except x509.ExtensionNotFound:
        return None


def certificate_user(der: bytes, now: float) -> str | None:
    """The user a client certificate (DER) authenticates at ``now`` (seconds since the epoch), or None."""
    try:
        cert = x509.load_der_x509_certificate(der)
        if not _key_usages_fit(cert):
            return None
        extended = _extended_usages(cert)
    except ValueError:  # a certificate or extension cryptography cannot read: not a user certificate
        return None
    if extended is None or ExtendedKeyUsageOID.CLIENT_AUTH not in extended:
        return None
    if ExtendedKeyUsageOID.SERVER_AUTH in extended:  # a node certificate
        return None
    moment = datetime.fromtimestamp(now, UTC)
    if not cert.not_valid_before_utc <= moment <= cert.not_valid_after_utc:
        return None
    names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    if not names:
        return None
    name = names[0].value
    return name if isinstance(name, str) and name else None


def peer_certificate(transport: Any) -> bytes | None:
    """The DER client certificate of a TLS connection (an asyncio transport), if it sent one."""
    ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
    if ssl_object is None:
        return None
    der = ssl_object.getpeercert(binary_form=True)
    return der if isinstance(der, bytes) else None


async def certificate_principal(
    transport: Any, *, settings: ReloadableSettings, license: License | None, clock: Clock, users: UserStore
) -> Principal | None:
    """The user a request's TLS client certificate authenticates, when the node has user certificates
    enabled (UserCertificatesEnabled, in the settings in effect) and licensed (USER_CERTIFICATES); None
    otherwise (the request goes on as it would without the certificate, as KurrentDB's plugin falls
    through)."""
    if not settings.options.user_certificates_enabled:
        return None
    if license is None or not license.allows("USER_CERTIFICATES", clock.time()):
        return None
    der = peer_certificate(transport)
    if der is None:
        return None
    login = certificate_user(der, clock.time())
    if login is None:
        return None
    return await asyncio.to_thread(users.principal_of_certificate, login)
