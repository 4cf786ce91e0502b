"""Loading a node's certificates: everything is read and checked before anything is returned, so a
node that fails to load new certificates keeps its current ones in full."""

from __future__ import annotations

import datetime
import hashlib
import ssl
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import NameOID

from evdb.errors import EvdbError

__all__ = ["CertificateError", "NodeTls", "check_peer_common_name", "load_node_tls"]


class CertificateError(EvdbError):
    """A certificate, key or trusted root cannot be used; the message names the file."""


def _read(path: str | None, what: str) -> bytes:
    if not path:
        raise CertificateError(f"No {what} is configured.")
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise CertificateError(f"{path}: the {what} file does not exist.") from None
    except OSError as exc:
        raise CertificateError(f"{path}: the {what} file cannot be read: {exc.strerror}.") from None


def _roots(path: str | None) -> tuple[list[x509.Certificate], bytes]:
    """Trusted roots from one PEM file or a folder of them (symlinks followed)."""
    if not path:
        raise CertificateError("No trusted root certificates are configured (TrustedRootCertificatesPath).")
    p = Path(path)
    files = sorted(f for f in p.iterdir() if f.is_file()) if p.is_dir() else [p]
    certs: list[x509.Certificate] = []
    pem = b""
    for f in files:
        data = _read(str(f), "trusted root certificate")
        try:
            found = x509.load_pem_x509_certificates(data)
        except ValueError:
            if p.is_dir():
                continue  # not a certificate: other files may live in the folder
            raise CertificateError(f"{f}: not a PEM certificate.") from None
        certs += found
        pem += data if data.endswith(b"\n") else data + b"\n"
    if not certs:
        raise CertificateError(f"{path}: no trusted root certificate found.")
    return certs, pem


@dataclass(frozen=True)
class NodeTls:
    certificate_file: str
    private_key_file: str
    trusted_root_path: str
    certificate: x509.Certificate = field(repr=False)
    roots_pem: bytes = field(repr=False)

    @property
    def subject(self) -> str:
        return self.certificate.subject.rfc4514_string()

    @property
    def issuer(self) -> str:
        return self.certificate.issuer.rfc4514_string()

    @property
    def common_name(self) -> str:
        names = self.certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
        return str(names[0].value) if names else ""

    @property
    def not_after(self) -> datetime.datetime:
        return self.certificate.not_valid_after_utc

    @property
    def fingerprint_sha256(self) -> str:
        return hashlib.sha256(self.certificate.public_bytes(serialization.Encoding.DER)).hexdigest()

    def _sans(self) -> x509.SubjectAlternativeName | None:
        try:
            return self.certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        except x509.ExtensionNotFound:
            return None

    @property
    def san_ip_addresses(self) -> list[str]:
        sans = self._sans()
        return [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] if sans else []

    @property
    def san_dns_names(self) -> list[str]:
        sans = self._sans()
        return list(sans.get_values_for_type(x509.DNSName)) if sans else []

    def describe(self) -> dict:
        return {
            "subject": self.subject,
            "issuer": self.issuer,
            "commonName": self.common_name,
            "notAfter": self.not_after.isoformat(),
            "fingerprintSha256": self.fingerprint_sha256,
            "ipAddresses": self.san_ip_addresses,
            "dnsNames": self.san_dns_names,
            "certificateFile": self.certificate_file,
        }

    def server_context(self, *, require_client_cert: bool = False) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(self.certificate_file, self.private_key_file)
        ctx.load_verify_locations(cadata=self.roots_pem.decode())
        ctx.verify_mode = ssl.CERT_REQUIRED if require_client_cert else ssl.CERT_OPTIONAL
        return ctx

    def client_context(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(self.certificate_file, self.private_key_file)
        ctx.load_verify_locations(cadata=self.roots_pem.decode())
        return ctx


def load_node_tls(
    certificate_file: str | None, private_key_file: str | None, trusted_root_path: str | None
) -> NodeTls:
    cert_pem = _read(certificate_file, "node certificate")
    key_pem = _read(private_key_file, "node private key")
    try:
        certificate = x509.load_pem_x509_certificate(cert_pem)
    except ValueError:
        raise CertificateError(f"{certificate_file}: not a PEM certificate.") from None
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError):
        raise CertificateError(f"{private_key_file}: not an unencrypted PEM private key.") from None
    public = serialization.PublicFormat.SubjectPublicKeyInfo
    if key.public_key().public_bytes(
        serialization.Encoding.DER, public
    ) != certificate.public_key().public_bytes(serialization.Encoding.DER, public):
        raise CertificateError(
            f"{private_key_file}: this key does not belong to the certificate {certificate_file}."
        )
    roots, roots_pem = _roots(trusted_root_path)
    if not any(_issued_by(certificate, root) for root in roots):
        raise CertificateError(
            f"{certificate_file}: certificate chain validation failed: it is not signed by any trusted root in {trusted_root_path}."
        )
    now = datetime.datetime.now(datetime.UTC)
    if certificate.not_valid_after_utc < now:
        raise CertificateError(
            f"{certificate_file}: the certificate expired on {certificate.not_valid_after_utc:%Y-%m-%d}."
        )
    tls = NodeTls(
        str(certificate_file), str(private_key_file), str(trusted_root_path), certificate, roots_pem
    )
    try:  # let OpenSSL check the pair too, exactly as the server will load it
        tls.server_context()
    except ssl.SSLError as exc:
        raise CertificateError(f"{certificate_file}: OpenSSL refuses the certificate or key: {exc}") from None
    return tls


def _issued_by(certificate: x509.Certificate, root: x509.Certificate) -> bool:
    try:
        certificate.verify_directly_issued_by(root)
        return True
    except (ValueError, TypeError, InvalidSignature):
        return False


def check_peer_common_name(peer_cert_der: bytes, reserved_common_name: str) -> None:
    """Raise unless a peer node's certificate carries the reserved node common name (exactly, or
    as a host under a ``*.`` wildcard name)."""
    cert = x509.load_der_x509_certificate(peer_cert_der)
    names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    cn = str(names[0].value) if names else ""
    if cn == reserved_common_name:
        return
    if (
        reserved_common_name.startswith("*.")
        and cn.endswith(reserved_common_name[1:])
        and "." not in cn[: -len(reserved_common_name) + 1]
    ):
        return
    raise CertificateError(
        f"The peer's certificate common name '{cn}' does not match CertificateReservedNodeCommonName '{reserved_common_name}'."
    )
