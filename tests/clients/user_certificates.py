"""User certificates (KurrentDB's X.509 user authentication) signed by a test CA: the tests of
tests/clients/test_user_certificates.py and the Node.js suite's launcher (its ``certs/user-admin``)."""

from __future__ import annotations

import datetime
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from evdb.tls.certs import LEAF_KEY_USAGE

#: a user certificate's extended key usage (a node's has server authentication too)
CLIENT_USAGE = [ExtendedKeyUsageOID.CLIENT_AUTH]


def make_user_certificate(
    ca_dir: Path,
    out: Path,
    name: str,
    usages: list[x509.ObjectIdentifier] | None,
    *,
    not_after: datetime.datetime | None = None,
    stem: str = "",
) -> tuple[Path, Path, bytes]:
    """A certificate whose subject's common name is ``name``, signed by the CA in ``ca_dir`` (``ca.crt``,
    ``ca.key``), written as ``out/<stem>.crt`` and ``.key`` (``stem`` defaults to ``name``, es-gencert-cli
    writes ``user-<name>``): (cert file, key file, DER)."""
    now = datetime.datetime.now(datetime.UTC)
    ca_cert = x509.load_pem_x509_certificate((ca_dir / "ca.crt").read_bytes())
    ca_key = serialization.load_pem_private_key((ca_dir / "ca.key").read_bytes(), password=None)
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(not_after or now + datetime.timedelta(days=1))
        .add_extension(LEAF_KEY_USAGE, critical=True)
    )
    if usages is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
    out.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = out / f"{stem or name}.crt", out / f"{stem or name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_path, key_path, cert.public_bytes(serialization.Encoding.DER)
