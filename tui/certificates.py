"""Read a node's certificate from its TLS handshake: subject, issuer, expiry, and whether the chain
validates against the CA the dashboard was given; and the outcome of a configuration reload."""

from __future__ import annotations

import asyncio
import ssl
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from tui.state import CertificateState

if TYPE_CHECKING:
    from tui.client import NodeClient

__all__ = ["read_certificate", "reload_outcome"]


async def reload_outcome(client: NodeClient, node_url: str) -> tuple[str | None, str]:
    """The outcome of the reload the node just answered, from evdb's ``lastReload`` of
    ``GET /admin/certificates``: ("Success", ""), ("Failed", why), or (None, why it cannot be known:
    KurrentDB has no such endpoint and only logs the outcome)."""
    import httpx

    try:
        response = await client.certificates(node_url)
        body = response.json() if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError) as exc:
        return None, f"GET /admin/certificates failed ({exc or type(exc).__name__})"
    if body is None:
        return None, f"GET /admin/certificates answered {response.status_code}: only the node's log tells"
    last = body.get("lastReload") if isinstance(body, dict) else None
    if not isinstance(last, dict) or last.get("result") not in ("Success", "Failed"):
        return None, "the node reports no reload yet"
    if last["result"] == "Failed":
        return "Failed", str(last.get("error") or "the node did not say why")
    return "Success", ""


async def _peer_certificate(host: str, port: int, context: ssl.SSLContext, timeout: float) -> bytes:
    _reader, writer = await asyncio.wait_for(
        asyncio.open_connection(host, port, ssl=context, server_hostname=host), timeout
    )
    try:
        ssl_object = writer.get_extra_info("ssl_object")
        der = ssl_object.getpeercert(binary_form=True) if ssl_object else None
        if not der:
            raise ssl.SSLError("the node sent no certificate")
        return der
    finally:
        writer.close()
        try:
            await asyncio.wait_for(writer.wait_closed(), timeout)
        except (OSError, TimeoutError, ssl.SSLError):
            pass


async def read_certificate(
    url: str, ca_file: str | None, now: float, timeout: float = 3.0, trust: ssl.SSLContext | None = None
) -> CertificateState | None:
    """None for plain-HTTP nodes. A failed validation is kept as ``error`` and the certificate is still
    read (without verification) so the operator sees which one the node presents. ``trust``: the
    context the dashboard's own calls verify with (evdb/tls/trust.py ``FollowedTrust``: during a
    rolling certificate update it trusts the old CA and the new one), used instead of ``ca_file`` so
    that the chain column judges as the calls do, not INVALID while every node answers."""
    from cryptography import x509

    parts = urlsplit(url)
    if parts.scheme != "https":
        return None
    host, port = parts.hostname or "localhost", parts.port or 443
    error = None
    verified = False
    try:
        if trust is not None:
            strict = trust
        else:
            strict = ssl.create_default_context(cafile=ca_file) if ca_file else ssl.create_default_context()
        der = await _peer_certificate(host, port, strict, timeout)
        verified = True
    except ssl.SSLCertVerificationError as exc:
        error = exc.verify_message or str(exc)
        loose = ssl.create_default_context()
        loose.check_hostname = False
        loose.verify_mode = ssl.CERT_NONE
        der = await _peer_certificate(host, port, loose, timeout)
    cert = x509.load_der_x509_certificate(der)
    return CertificateState(
        subject=cert.subject.rfc4514_string(),
        issuer=cert.issuer.rfc4514_string(),
        not_after=cert.not_valid_after_utc.timestamp(),
        verified=verified,
        error=error,
        read_at=now,
    )
